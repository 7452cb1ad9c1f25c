//! openraft's log storage for one placement group, on the node's write-ahead log: entries,
//! votes, truncations and purges are the store's Raft records tagged by group
//! (`crate::store::storage::LogStorage::append_entries` and friends), so every group on the
//! node shares the log's group commit. Entries waiting to be applied stay in memory; once
//! applied they live on disk (a one-member group never reads them again, and recovery
//! replays them into the entities' state; in a cluster a leader reads them back for members
//! that lack them, from where the store noted each entry).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, StorageError,
    StorageIOError, Vote,
};
use tokio::sync::{mpsc, oneshot};

use super::convert;
use super::types::{Turn, TypeConfig};
use crate::store::codec::Payload;
use crate::store::log::StoreError;
use crate::store::storage::LogStorage;
use crate::store::storage::NewEntry;

/// Entries proposed or received but not yet applied, shared by a group's log store and its
/// state machine (which drops them once applied).
#[derive(Debug, Default)]
pub(super) struct Pending {
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    /// Why the group's log failed, if it did.
    failure: Option<StoreError>,
    /// In a group of several members: what its applied entries are kept for.
    kept: Option<Kept>,
}

/// A multi-member group keeps applied entries in memory until every member has them (as
/// far as its leader knows; a follower keeps them, since it may lead next), up to
/// [`KEPT_MAX`] of them, so a member that lags a little is sent them without a read; those
/// further behind, or behind a leader that restarted, are read back from the log.
#[derive(Debug, Default)]
struct Kept {
    /// The last index applied.
    applied: Option<u64>,
    /// The lowest index some member still lacks (as far as this node knows).
    needed: u64,
}

/// A multi-member group keeps at most this many applied entries for members that lag.
const KEPT_MAX: usize = 4096;

impl Pending {
    /// A group of several members: keeps applied entries that other members lack.
    pub(super) fn keeping() -> Pending {
        Pending {
            kept: Some(Kept::default()),
            ..Pending::default()
        }
    }

    /// Why the group's log failed, if it did.
    pub(super) fn failure(&self) -> Option<StoreError> {
        self.failure.clone()
    }

    /// Forgets entries up to `index` (applied), except those other members lack.
    pub(super) fn applied(&mut self, index: u64) {
        match &mut self.kept {
            None => self.entries = self.entries.split_off(&(index + 1)),
            Some(kept) => {
                kept.applied = Some(index);
                self.trim();
            }
        }
    }

    /// Every member has the entries before `needed` (as far as this node knows).
    pub(super) fn replicated(&mut self, needed: u64) {
        if let Some(kept) = &mut self.kept {
            kept.needed = needed;
            self.trim();
        }
    }

    fn trim(&mut self) {
        let Some(Kept {
            applied: Some(applied),
            needed,
        }) = self.kept
        else {
            return;
        };
        let mut keep_from = needed.min(applied + 1);
        let applied_kept = self.entries.range(..applied + 1).count();
        if applied_kept > KEPT_MAX
            && let Some((&index, _)) = self
                .entries
                .range(..applied + 1)
                .nth(applied_kept - KEPT_MAX)
        {
            keep_from = keep_from.max(index);
        }
        self.entries = self.entries.split_off(&keep_from);
    }
}

type Shared = Arc<Mutex<Pending>>;

/// A flush to report to openraft once the log has it on disk, in submission order.
struct Flush {
    written: oneshot::Receiver<Result<(), StoreError>>,
    callback: LogFlushed<TypeConfig>,
    /// The first index of the flush, rolled back if it fails.
    first: u64,
}

/// One group's log storage (cheap to clone: the reader is a clone).
#[derive(Clone)]
pub(super) struct GroupStore {
    group: Arc<str>,
    storage: LogStorage,
    pending: Shared,
    flushes: mpsc::UnboundedSender<Flush>,
}

impl Debug for GroupStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("GroupStore")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

fn io_error(text: impl ToString) -> io::Error {
    io::Error::other(text.to_string())
}

fn write_error(error: impl ToString) -> StorageError<u64> {
    StorageError::IO {
        source: StorageIOError::write_logs(AnyError::error(error.to_string())),
    }
}

impl GroupStore {
    pub(super) fn new(group: &str, storage: LogStorage, pending: Shared) -> GroupStore {
        let (flushes, queue) = mpsc::unbounded_channel();
        tokio::spawn(report_flushes(
            group.to_string(),
            storage.clone(),
            pending.clone(),
            queue,
        ));
        GroupStore {
            group: group.into(),
            storage,
            pending,
            flushes,
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// Reports each flush to openraft in the order the entries were submitted; after a failed
/// flush every later one fails too (the log may have kept a later batch, which must not
/// count: the group stops, and a restart voids its entries from the first failed index).
async fn report_flushes(
    group: String,
    storage: LogStorage,
    pending: Shared,
    mut queue: mpsc::UnboundedReceiver<Flush>,
) {
    let mut failed: Option<String> = None;
    while let Some(flush) = queue.recv().await {
        let result = match &failed {
            Some(error) => Err(io_error(error)),
            None => {
                let written = flush.written.await.unwrap_or(Err(StoreError::Closed));
                written.map_err(|error| {
                    let text = error.to_string();
                    pending
                        .lock()
                        .unwrap_or_else(|poison| poison.into_inner())
                        .failure = Some(error);
                    io_error(text)
                })
            }
        };
        if let Err(error) = &result
            && failed.is_none()
        {
            tracing::warn!(group, %error, "a group's log write failed: the group stops until it restarts");
            storage.void_from(&group, flush.first);
            failed = Some(error.to_string());
        }
        flush.callback.log_io_completed(result);
    }
}

fn range_of(range: &impl RangeBounds<u64>, last: u64) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(start) => *start,
        Bound::Excluded(start) => start.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(end) => end.saturating_add(1),
        Bound::Excluded(end) => *end,
        Bound::Unbounded => last.saturating_add(1),
    };
    (start, end.min(last.saturating_add(1)))
}

impl RaftLogReader<TypeConfig> for GroupStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        let log = self.storage.group_log(&self.group);
        let Some(last) = log.last else {
            return Ok(Vec::new());
        };
        let (start, end) = range_of(&range, last.index);
        // The entries still in memory; the others are read back from the log.
        let kept: BTreeMap<u64, Entry<TypeConfig>> = self
            .pending()
            .entries
            .range(start..end)
            .map(|(index, entry)| (*index, entry.clone()))
            .collect();
        let mut entries = Vec::with_capacity(end.saturating_sub(start) as usize);
        let mut index = start;
        while index < end {
            if let Some(entry) = kept.get(&index) {
                entries.push(entry.clone());
                index += 1;
                continue;
            }
            let run_end = kept.range(index..).next().map_or(end, |(next, _)| *next);
            if self.storage.keeps_entry_locations() {
                let read = self
                    .storage
                    .read_entries(&self.group, index, run_end)
                    .map_err(|error| StorageError::IO {
                        source: StorageIOError::read_logs(AnyError::error(error.to_string())),
                    })?;
                let complete = read.len() as u64 == run_end - index;
                for (id, payload) in read {
                    entries.push(Entry {
                        log_id: convert::log_id_from(id),
                        payload: match payload {
                            Payload::Blank => EntryPayload::Blank,
                            Payload::Membership(membership) => {
                                EntryPayload::Membership(convert::membership_from(&membership))
                            }
                            Payload::Records(records) => {
                                EntryPayload::Normal(Turn(Arc::new(records)))
                            }
                        },
                    });
                }
                if !complete {
                    // Not on disk (purged, or its write not durable yet): what comes after
                    // it waits for the next read.
                    break;
                }
                index = run_end;
                continue;
            }
            // A one-member group never sends its entries: their identity (and a
            // membership's configuration) is known here, their records were replayed into
            // the entities.
            let Some(id) = log.id_at(index) else {
                break;
            };
            let payload = match &log.membership {
                Some((at, membership)) if at.index == index => {
                    EntryPayload::Membership(convert::membership_from(membership))
                }
                _ => EntryPayload::Blank,
            };
            entries.push(Entry {
                log_id: convert::log_id_from(id),
                payload,
            });
            index += 1;
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for GroupStore {
    type LogReader = GroupStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let log = self.storage.group_log(&self.group);
        Ok(LogState {
            last_purged_log_id: log.purged.map(convert::log_id_from),
            last_log_id: log.last.map(convert::log_id_from),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let written = self.storage.save_vote(&self.group, convert::vote_to(vote));
        match written.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(StorageError::IO {
                source: StorageIOError::write_vote(AnyError::error(error)),
            }),
            Err(_) => Err(StorageError::IO {
                source: StorageIOError::write_vote(AnyError::error(StoreError::Closed)),
            }),
        }
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self
            .storage
            .group_log(&self.group)
            .vote
            .map(convert::vote_from))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let Some(first) = entries.first().map(|entry| entry.log_id.index) else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        // Memberships in the store's terms (they are rare); the records are borrowed.
        let members: Vec<Option<crate::store::codec::Membership>> = entries
            .iter()
            .map(|entry| match &entry.payload {
                EntryPayload::Membership(membership) => Some(convert::membership_to(membership)),
                _ => None,
            })
            .collect();
        let records = entries.iter().zip(&members).map(|(entry, member)| {
            let payload = match (&entry.payload, member) {
                (EntryPayload::Normal(turn), _) => NewEntry::Records(&turn[..]),
                (_, Some(membership)) => NewEntry::Membership(membership),
                _ => NewEntry::Blank,
            };
            (convert::entry_id_to(&entry.log_id), payload)
        });
        let written = self.storage.append_entries(&self.group, records);
        {
            let mut pending = self.pending();
            for entry in entries {
                pending.entries.insert(entry.log_id.index, entry);
            }
        }
        self.flushes
            .send(Flush {
                written,
                callback,
                first,
            })
            .map_err(|_| write_error("the group's flush reporter stopped"))
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        {
            let mut pending = self.pending();
            pending.entries.split_off(&log_id.index);
        }
        match self.storage.truncate(&self.group, log_id.index).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(write_error(error)),
            Err(_) => Err(write_error(StoreError::Closed)),
        }
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.pending().applied(log_id.index);
        match self
            .storage
            .purge(&self.group, convert::entry_id_to(&log_id))
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(write_error(error)),
            Err(_) => Err(write_error(StoreError::Closed)),
        }
    }
}
