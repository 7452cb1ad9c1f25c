//! A group's state machine. The group's entities apply their own turns before proposing
//! them (the actor's turn is the commit point: its replies wait for the entry to be
//! committed and applied), and recovery replays the log into them; so on a one-member group
//! applying an entry records how far the group has applied and its membership, and lets
//! the log store forget the entry. Followers' replicas (`MessageLog::apply` into a copy
//! without indexes or timers) and snapshots streamed to them belong to the multi-node
//! cluster; a one-member group takes neither: its snapshots are the store's checkpoints.

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};

use super::convert;
use super::log_store::Pending;
use super::types::TypeConfig;
use crate::store::storage::GroupLog;

/// A group's applied state.
pub(super) struct GroupMachine {
    applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    pending: Arc<Mutex<Pending>>,
}

impl GroupMachine {
    /// The state after recovery: on a single node every entry in the group's log was
    /// replayed into its entities, so all of it counts as applied. A cluster member applies
    /// nothing in memory (its leader replays the log when it takes over), and its log may
    /// end with entries that were never committed and that a new leader replaces; so it
    /// starts with nothing applied and applies again what the group has committed.
    pub(super) fn recovered(
        log: &GroupLog,
        pending: Arc<Mutex<Pending>>,
        member_of_cluster: bool,
    ) -> GroupMachine {
        if member_of_cluster && log.purged.is_none() {
            return GroupMachine {
                applied: None,
                membership: StoredMembership::default(),
                pending,
            };
        }
        let membership = match &log.membership {
            Some((at, membership)) => StoredMembership::new(
                Some(convert::log_id_from(*at)),
                convert::membership_from(membership),
            ),
            None => StoredMembership::default(),
        };
        GroupMachine {
            applied: log.last.map(convert::log_id_from),
            membership,
            pending,
        }
    }
}

fn unsupported(what: &str) -> StorageError<u64> {
    StorageError::IO {
        source: StorageIOError::read_snapshot(
            None,
            AnyError::error(format!(
                "{what}: a one-member group has no snapshots (its compaction is the log's checkpoints)"
            )),
        ),
    }
}

/// A one-member group's snapshot: what it describes (how far the group applied, its
/// membership) is in the store's checkpoints, so it carries no bytes of its own; openraft
/// asks for one when the log was compacted. Nothing installs it (no member needs it).
pub(super) struct Checkpoints {
    applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
}

impl RaftSnapshotBuilder<TypeConfig> for Checkpoints {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let snapshot_id = match &self.applied {
            Some(id) => format!("checkpoints-{}-{}", id.leader_id.term, id.index),
            None => "checkpoints-none".to_string(),
        };
        Ok(Snapshot {
            meta: SnapshotMeta {
                last_log_id: self.applied,
                last_membership: self.membership.clone(),
                snapshot_id,
            },
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}

impl RaftStateMachine<TypeConfig> for GroupMachine {
    type SnapshotBuilder = Checkpoints;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<u64>>,
            StoredMembership<u64, openraft::BasicNode>,
        ),
        StorageError<u64>,
    > {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut applied = 0;
        for entry in entries {
            if let EntryPayload::Membership(membership) = &entry.payload {
                self.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
            }
            self.applied = Some(entry.log_id);
            applied += 1;
        }
        if let Some(last) = self.applied {
            self.pending
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .applied(last.index);
        }
        Ok(vec![(); applied])
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        Checkpoints {
            applied: self.applied,
            membership: self.membership.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Err(unsupported("receiving a snapshot"))
    }

    async fn install_snapshot(
        &mut self,
        _meta: &SnapshotMeta<u64, openraft::BasicNode>,
        _snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        Err(unsupported("installing a snapshot"))
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        Ok(None)
    }
}
