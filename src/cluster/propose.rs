//! A group's proposer: the writes handed to a group while one entry is being committed go
//! into the next entry together, bounded in writes (and, in a cluster, in bytes), and every
//! write of an entry gets the entry's outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{OnceCell, mpsc, oneshot};

use super::log_store::Pending;
use super::types::{self, GroupRaft};
use super::{Group, port_error, remove_if_current};
use crate::broker::entity::state::Change;
use crate::broker::storage::StorageError;
use crate::store::codec::LogRecord;

/// A write waiting for its group's proposer.
pub(super) struct Write {
    pub(super) records: Vec<LogRecord>,
    pub(super) done: oneshot::Sender<Proposed>,
}

/// How a proposal ended.
pub(super) enum Proposed {
    /// Committed and applied.
    Done,
    /// Refused before it was proposed (this node does not lead the group).
    Refused(StorageError),
    /// The group stopped (its log failed): nothing of it was acknowledged.
    Stopped(StorageError),
    /// Not proposed: the group's Raft was retiring (idle); start it again and resend these.
    Retry(Vec<LogRecord>),
}

impl Proposed {
    /// The same outcome for another write of the entry.
    fn again(&self) -> Proposed {
        match self {
            Proposed::Done => Proposed::Done,
            Proposed::Refused(error) => Proposed::Refused(error.clone()),
            Proposed::Stopped(error) => Proposed::Stopped(error.clone()),
            Proposed::Retry(_) => Proposed::Retry(Vec::new()),
        }
    }
}

/// At most this many writes share one entry.
const MAX_WRITES_PER_ENTRY: usize = 256;

/// In a cluster, writes stop joining an entry once it holds about this many bytes: an entry
/// travels to each follower in an AppendEntries request, which openraft gives one heartbeat
/// interval (100 ms) to be sent, written and synced; entries of megabytes (a sender going
/// flat out) missed it again and again and replication stalled.
pub(super) const MAX_ENTRY_BYTES_IN_CLUSTER: usize = 256 * 1024;

/// In a cluster, an actor takes at most this many commands into one turn (one entry): a
/// connection hands its sends over in commands of up to a read's worth (64 KiB), so an
/// entry stays within about `MAX_ENTRY_BYTES_IN_CLUSTER`.
pub(super) const COMMANDS_PER_TURN_IN_CLUSTER: usize = 4;

/// In a cluster, at most this many entries travel in one AppendEntries request (openraft's
/// default is 300), for the same reason.
pub(super) const MAX_ENTRIES_PER_REQUEST: u64 = 4;

/// About how many bytes a change takes in the log.
fn change_bytes(change: &Change) -> usize {
    match change {
        Change::Put { record, .. } | Change::Outbox { record, .. } => record.message.size() + 64,
        _ => 64,
    }
}

/// A checkpoint's changes cut into parts of about `max_bytes` each (at least one change a
/// part; one empty part for an entity without changes), in order.
pub(super) fn checkpoint_parts(changes: Vec<Change>, max_bytes: usize) -> Vec<Vec<Change>> {
    let mut parts = vec![Vec::new()];
    let mut bytes = 0;
    for change in changes {
        let size = change_bytes(&change);
        let current = parts.last_mut().expect("a part");
        if !current.is_empty() && bytes + size > max_bytes {
            parts.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        parts.last_mut().expect("a part").push(change);
    }
    parts
}

/// About how many bytes `records` take in the log (messages by their size, other changes
/// a fixed amount): enough to bound an entry, not an exact encoding.
fn approximate_bytes(records: &[LogRecord]) -> usize {
    let change = change_bytes;
    records
        .iter()
        .map(|record| match record {
            LogRecord::Changes { changes, .. } | LogRecord::Checkpoint { changes, .. } => {
                changes.iter().map(change).sum::<usize>()
            }
            LogRecord::Batch { entries } => entries
                .iter()
                .flat_map(|(_, changes)| changes.iter())
                .map(change)
                .sum(),
            LogRecord::Namespace { text } => text.len(),
            _ => 64,
        })
        .sum()
}

/// Proposes a group's writes: the writes that arrive while one entry is being committed
/// go into the next entry together (openraft 0.9 waits for each append's flush before it
/// takes the next, so one entry per write would cost each write a whole sync). Every write
/// of an entry gets the entry's outcome.
///
/// A group idle for `idle` retires: its Raft stops (a started group holds tens of KiB) and
/// the next write starts it again from its log, as leader of the same term.
pub(super) async fn propose(
    group: String,
    raft: GroupRaft,
    pending: Arc<Mutex<Pending>>,
    mut writes: mpsc::UnboundedReceiver<Write>,
    idle: Duration,
    groups: std::sync::Weak<Mutex<HashMap<String, Arc<OnceCell<Group>>>>>,
    max_entry_bytes: usize,
) {
    loop {
        let first = match tokio::time::timeout(idle, writes.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) => return,
            Err(_) => {
                if let Some(groups) = groups.upgrade() {
                    remove_if_current(&groups, &group, &pending);
                }
                writes.close();
                while let Ok(write) = writes.try_recv() {
                    let _ = write.done.send(Proposed::Retry(write.records));
                }
                let _ = raft.shutdown().await;
                return;
            }
        };
        let mut records = first.records;
        let mut bytes = if max_entry_bytes == usize::MAX {
            0
        } else {
            approximate_bytes(&records)
        };
        let mut waiting = vec![first.done];
        while waiting.len() < MAX_WRITES_PER_ENTRY && bytes < max_entry_bytes {
            match writes.try_recv() {
                Ok(write) => {
                    if max_entry_bytes != usize::MAX {
                        bytes += approximate_bytes(&write.records);
                    }
                    records.extend(write.records);
                    waiting.push(write.done);
                }
                Err(_) => break,
            }
        }
        let outcome = match raft.client_write(types::Turn(Arc::new(records))).await {
            Ok(_) => Proposed::Done,
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                Proposed::Refused(StorageError::Failed(format!(
                    "this node does not lead the group '{group}' (leader: {:?})",
                    forward.leader_id
                )))
            }
            Err(error) => {
                let failure = pending
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .failure();
                Proposed::Stopped(match failure {
                    Some(failure) => port_error(failure),
                    None => {
                        StorageError::Failed(format!("the Raft group '{group}' stopped: {error}"))
                    }
                })
            }
        };
        let stopped = matches!(outcome, Proposed::Stopped(_));
        for done in waiting {
            let _ = done.send(outcome.again());
        }
        if stopped {
            // What is still queued finds the channel closed: the group restarts.
            return;
        }
    }
}
