//! The storage interface the entity actors use — the one narrow seam between the broker and
//! its disk: `append` an entity's change records (the answer comes when they are durable),
//! read back each entity's records at start, and take part in compaction by writing a
//! checkpoint when asked. Records are data ([`Change`]) that apply deterministically, so a
//! replicated backend can implement the same interface (see `docs/scale-out.md`).
//!
//! Compaction (when a round starts, how it ends) is in `compaction.rs`.
//!
//! The namespace's run-time changes are a record of the log too ([`LogRecord::Namespace`],
//! the metadata group's state in `crate::cluster`): recovery takes the newest, and each
//! compaction round writes the current text again so that the older segments can go. A
//! data directory from a build that kept them in [`NAMESPACE_FILE`] is read once and moved
//! into the log at start ([`Recovery::namespace_file`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::codec::{self, LogRecord};
use super::log::{LogOptions, StoreError, WriteAheadLog};
use crate::broker::entity::state::Change;
use crate::broker::storage::{Durable, DurableLog, Recovered, StorageError};
pub use groups::{GroupLog, NewEntry};

/// How the storage runs.
#[derive(Debug, Clone)]
pub struct StorageOptions {
    /// The data directory.
    pub directory: PathBuf,
    /// Sends are refused while the data directory's file system has less free space.
    pub min_free_space: u64,
    /// The log on disk may grow to this size before the first compaction.
    pub compaction_min_bytes: u64,
    /// Segment size of the log.
    pub segment_size: u64,
    /// Test hook: the free space to report instead of asking the file system.
    pub free_space_override: Option<Arc<AtomicU64>>,
    /// Test hook: a fault injected into the log's writer.
    pub fault: Option<super::log::Fault>,
    /// Remember where each group entry is on disk, so that [`LogStorage::read_entries`]
    /// can read entries back (a cluster's leader sends them to members that lack them).
    /// Off for a single node, whose groups never read an entry back.
    pub keep_entry_locations: bool,
    /// A cluster member's compaction: a round ends by snapshotting each group and purging
    /// its log through Raft (the [`Compactor`] its groups' runner sets), not by writing
    /// purge points itself; no round starts before a compactor is set.
    pub compact_by_snapshots: bool,
}

/// A cluster member's end of a compaction round (see
/// [`StorageOptions::compact_by_snapshots`]): given each group's last entry before the
/// round's first segment, snapshots the groups and purges their logs at least that far;
/// answers the snapshots' bytes when every group is purged that far (the older segments
/// may go), `None` when one is not.
pub type Compactor = Arc<
    dyn Fn(
            Vec<(String, codec::EntryId)>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<u64>> + Send>>
        + Send
        + Sync,
>;

impl StorageOptions {
    /// Defaults for `directory`: 64 MiB segments, 256 MiB before compaction, 64 MiB free.
    pub fn new(directory: impl Into<PathBuf>) -> StorageOptions {
        StorageOptions {
            directory: directory.into(),
            min_free_space: 64 * 1024 * 1024,
            compaction_min_bytes: 256 * 1024 * 1024,
            segment_size: 64 * 1024 * 1024,
            free_space_override: None,
            fault: None,
            keep_entry_locations: false,
            compact_by_snapshots: false,
        }
    }
}

/// What recovery read back.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Each entity's change records, newest checkpoint first, in order.
    pub entities: HashMap<String, Vec<Change>>,
    /// Log records read.
    pub records: u64,
    /// Bytes of a torn or corrupt tail that were cut off.
    pub truncated_bytes: u64,
    /// How long opening and reading the log took.
    pub elapsed: Duration,
    /// The namespace's run-time changes: the newest the log holds, or the text of a
    /// [`NAMESPACE_FILE`] left by an older build (see `namespace_file`).
    pub namespace: Option<String>,
    /// The [`NAMESPACE_FILE`] an older build kept the run-time changes in, when the data
    /// directory has one: `namespace` is its text (it wins over the log's), which the start
    /// writes to the log before it removes the file.
    pub namespace_file: Option<PathBuf>,
    /// `namespace` was reset ([`Recovery::reset_runtime_changes`]): the start writes the
    /// empty text to the log.
    pub namespace_reset: bool,
    /// Each placement group's Raft log state (votes, purge points, memberships).
    pub groups: HashMap<String, GroupLog>,
}

/// Replays entity records into each entity's changes: a complete checkpoint replaces what
/// came before it, a drop forgets the entity.
#[derive(Default)]
struct Replay {
    entities: HashMap<String, Vec<Change>>,
    /// The newest namespace record's text.
    namespace: Option<String>,
    /// Checkpoints in progress (first part read, last not yet).
    pending: HashMap<String, Vec<Change>>,
}

impl Replay {
    fn changes(&mut self, entity: String, changes: Vec<Change>) {
        if let Some(checkpoint) = self.pending.get_mut(&entity) {
            checkpoint.extend(changes.iter().cloned());
        }
        self.entities.entry(entity).or_default().extend(changes);
    }

    fn record(&mut self, record: LogRecord) {
        match record {
            LogRecord::Changes { entity, changes } => self.changes(entity, changes),
            LogRecord::Batch { entries } => {
                for (entity, changes) in entries {
                    self.changes(entity, changes);
                }
            }
            LogRecord::Checkpoint {
                entity,
                first,
                last,
                changes,
            } => {
                if first {
                    self.pending.insert(entity.clone(), Vec::new());
                }
                if let Some(checkpoint) = self.pending.get_mut(&entity) {
                    checkpoint.extend(changes);
                }
                if last && let Some(checkpoint) = self.pending.remove(&entity) {
                    self.entities.insert(entity, checkpoint);
                }
            }
            LogRecord::Dropped { entity } => {
                self.pending.remove(&entity);
                self.entities.remove(&entity);
            }
            LogRecord::Namespace { text } => self.namespace = Some(text),
        }
    }
}

#[path = "groups.rs"]
mod groups;

#[path = "compaction.rs"]
mod compaction;
use compaction::Compaction;

/// The file in the data directory where builds before the metadata group kept the
/// namespace's run-time changes; read (and then removed) at start only.
pub const NAMESPACE_FILE: &str = "namespace.toml";

/// Removes a [`NAMESPACE_FILE`] whose text the log holds now, and syncs the directory: a
/// crash after this cannot bring the file (and its older text, which would win) back.
pub fn remove_namespace_file(path: &Path) -> std::io::Result<()> {
    std::fs::remove_file(path)?;
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(directory)?.sync_all()
}

/// The durable store shared by every entity.
#[derive(Clone)]
pub struct LogStorage {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LogStorage {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LogStorage")
            .field("directory", &self.inner.options.directory)
            .finish_non_exhaustive()
    }
}

struct Inner {
    log: WriteAheadLog,
    options: StorageOptions,
    /// Free space was below the minimum at the last check.
    full: AtomicBool,
    /// Milliseconds since `started` of the last free-space check.
    checked_at: AtomicI64,
    started: Instant,
    /// The compaction round entities must checkpoint for (0: none yet).
    epoch: watch::Sender<u64>,
    compaction: Mutex<Compaction>,
    /// Checkpoint bytes written in the last complete round (the live data).
    live_bytes: AtomicU64,
    /// Bytes the log had written when the last round ended.
    written_at_round_end: AtomicU64,
    /// Each placement group's log state; locked while a group's entries are submitted.
    groups: Mutex<HashMap<String, GroupLog>>,
    /// Where each group's entries are on disk, with
    /// [`StorageOptions::keep_entry_locations`].
    locations: Option<groups::EntryLocations>,
    /// The namespace's run-time changes as last written straight to the log (the direct
    /// path, [`DurableLog`] on this type; the broker's path writes them through the
    /// metadata group): written again at the end of each compaction round. Held while a
    /// record of it is submitted, so the newest text is the last one in the log.
    direct_namespace: Mutex<Option<String>>,
    /// How a round ends with [`StorageOptions::compact_by_snapshots`].
    compactor: Mutex<Option<Compactor>>,
    /// Held while a group's snapshot is built or installed: one built from an older entry
    /// never replaces one installed meanwhile.
    snapshots: Mutex<()>,
}

/// Free bytes of the file system holding `path`.
fn free_space(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a valid NUL-terminated path and `stats` a writable statvfs.
    let result = unsafe { libc::statvfs(name.as_ptr(), &mut stats) };
    (result == 0).then(|| stats.f_bavail as u64 * stats.f_frsize as u64)
}

impl LogStorage {
    /// Opens (or creates) the data directory, recovers every entity's records and starts
    /// the writer.
    pub fn open(options: StorageOptions) -> Result<(LogStorage, Recovery), StoreError> {
        let mut log_options = LogOptions::new(&options.directory);
        log_options.segment_size = options.segment_size;
        log_options.fault = options.fault;
        let (log, recovered) = WriteAheadLog::open(log_options)?;
        let mut recovery = Recovery {
            truncated_bytes: recovered.truncated_bytes,
            ..Recovery::default()
        };
        let mut replay = Replay::default();
        let mut groups = groups::Replaying::default();
        let mut locations = options
            .keep_entry_locations
            .then(HashMap::<String, groups::GroupLocations>::new);
        for (index, bytes) in recovered.records.iter().enumerate() {
            recovery.records += 1;
            let unreadable = |error: codec::DecodeError| {
                StoreError::Recovery(format!(
                    "record {index} of the log in {} cannot be read: {error}",
                    options.directory.display()
                ))
            };
            if codec::is_raft(bytes) {
                let record = codec::decode_raft(bytes).map_err(unreadable)?;
                if let Some(locations) = &mut locations {
                    groups::locate(locations, &record, recovered.locations[index]);
                }
                groups.record(record);
            } else {
                replay.record(codec::decode(bytes).map_err(unreadable)?);
            }
        }
        // Entity records without a group came first (a log written before groups); each
        // group's entries follow in index order.
        recovery.groups = groups.finish(&mut replay);
        recovery.entities = replay.entities;
        let namespace_path = options.directory.join(NAMESPACE_FILE);
        match std::fs::read_to_string(&namespace_path) {
            Ok(text) => {
                recovery.namespace = Some(text);
                recovery.namespace_file = Some(namespace_path);
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                recovery.namespace = replay.namespace;
            }
            Err(error) => {
                return Err(StoreError::Recovery(format!(
                    "cannot read {}: {error}",
                    namespace_path.display()
                )));
            }
        }
        let live_bytes = log.statistics().disk_bytes.load(Ordering::Relaxed);
        let storage = LogStorage {
            inner: Arc::new(Inner {
                log,
                options,
                full: AtomicBool::new(false),
                checked_at: AtomicI64::new(i64::MIN / 2),
                started: Instant::now(),
                epoch: watch::channel(0).0,
                compaction: Mutex::new(Compaction::default()),
                live_bytes: AtomicU64::new(live_bytes / 2),
                written_at_round_end: AtomicU64::new(0),
                locations: locations.map(|locations| {
                    Arc::new(Mutex::new(groups::kept_locations(
                        locations,
                        &recovery.groups,
                    )))
                }),
                groups: Mutex::new(recovery.groups.clone()),
                direct_namespace: Mutex::new(None),
                compactor: Mutex::new(None),
                snapshots: Mutex::new(()),
            }),
        };
        Ok((storage, recovery))
    }

    /// Stores the namespace's run-time changes straight to the log (the direct path; the
    /// broker writes them through the metadata group), replacing what was stored; the answer
    /// comes once they are durable.
    pub async fn save_namespace(&self, text: String) -> Result<(), StoreError> {
        let answer = {
            let mut namespace = self.inner.direct_namespace.lock().expect("namespace lock");
            let bytes = codec::encode(&LogRecord::Namespace { text: text.clone() });
            *namespace = Some(text);
            self.inner.log.append(vec![bytes])
        };
        answer.await.unwrap_or(Err(StoreError::Closed))
    }

    /// The data directory.
    pub fn directory(&self) -> &Path {
        &self.inner.options.directory
    }

    /// The write-ahead log underneath (statistics, benchmarks).
    pub fn log(&self) -> &WriteAheadLog {
        &self.inner.log
    }

    /// Appends one turn of an entity's changes; the answer comes once they are durable.
    pub async fn append(&self, entity: &str, changes: Vec<Change>) -> Result<(), StoreError> {
        self.append_batch(vec![(entity.to_string(), changes)]).await
    }

    /// Appends one turn of several entities' changes as one record: all of them durable
    /// together, or (a torn tail, a failed write) none.
    pub async fn append_batch(
        &self,
        mut batch: Vec<(String, Vec<Change>)>,
    ) -> Result<(), StoreError> {
        let record = if batch.len() == 1 {
            let (entity, changes) = batch.remove(0);
            LogRecord::Changes { entity, changes }
        } else {
            LogRecord::Batch { entries: batch }
        };
        let bytes = codec::encode(&record);
        let answer = self.inner.log.append(vec![bytes]);
        let result = answer.await.unwrap_or(Err(StoreError::Closed));
        if result.is_ok() {
            self.maybe_compact();
        }
        result
    }

    /// Records that an entity was deleted: its records are forgotten at recovery.
    pub async fn drop_entity(&self, entity: &str) -> Result<(), StoreError> {
        let bytes = codec::encode(&LogRecord::Dropped {
            entity: entity.to_string(),
        });
        let result = self
            .inner
            .log
            .append(vec![bytes])
            .await
            .unwrap_or(Err(StoreError::Closed));
        self.unregister(entity);
        result
    }

    /// Whether sends are accepted: false while the file system is below the free-space
    /// minimum (checked at most every 250 ms).
    pub fn has_room(&self) -> bool {
        let now = self.inner.started.elapsed().as_millis() as i64;
        let checked = self.inner.checked_at.load(Ordering::Relaxed);
        if now - checked >= 250 {
            self.inner.checked_at.store(now, Ordering::Relaxed);
            let free = match &self.inner.options.free_space_override {
                Some(free) => Some(free.load(Ordering::Relaxed)),
                None => free_space(&self.inner.options.directory),
            };
            let full = free.is_some_and(|free| free < self.inner.options.min_free_space);
            let was = self.inner.full.swap(full, Ordering::Relaxed);
            if full && !was {
                tracing::warn!(directory = %self.inner.options.directory.display(), free = ?free, "the data directory's disk is nearly full: sends are refused until space returns");
            } else if was && !full {
                tracing::info!(directory = %self.inner.options.directory.display(), "disk space is back: sends are accepted again");
            }
        }
        !self.inner.full.load(Ordering::Relaxed)
    }

    /// The error a refused send gets while the disk is full.
    pub fn full_error(&self) -> String {
        format!(
            "The broker's data directory {} has less than {} bytes free: sends are refused until space returns.",
            self.inner.options.directory.display(),
            self.inner.options.min_free_space
        )
    }

    /// An entity actor started: compaction rounds wait for its checkpoints.
    pub fn register(&self, entity: &str) {
        let mut compaction = self.inner.compaction.lock().expect("compaction lock");
        compaction.live.insert(entity.to_string());
    }

    /// An entity actor stopped.
    pub fn unregister(&self, entity: &str) {
        let mut compaction = self.inner.compaction.lock().expect("compaction lock");
        compaction.live.remove(entity);
        if let Some(round) = &mut compaction.round {
            round.pending.remove(entity);
        }
        let finish = self.finish_round_if_done(&mut compaction);
        drop(compaction);
        self.finish_in_background(finish);
    }

    /// Where entities learn that a compaction round wants their checkpoint.
    pub fn epochs(&self) -> watch::Receiver<u64> {
        self.inner.epoch.subscribe()
    }

    /// Writes an entity's checkpoint for `epoch` (its whole durable state, in parts) and
    /// reports it done once durable.
    pub async fn checkpoint(
        &self,
        entity: &str,
        epoch: u64,
        changes: Vec<Change>,
    ) -> Result<(), StoreError> {
        const PART: usize = 1024;
        let records: Vec<Vec<u8>> =
            codec::checkpoint_records(entity, codec::parts_of(changes, PART))
                .iter()
                .map(codec::encode)
                .collect();
        let bytes = records
            .iter()
            .map(|record| record.len() as u64)
            .sum::<u64>();
        // One submission: the parts are written together, in order.
        self.inner
            .log
            .append(records)
            .await
            .unwrap_or(Err(StoreError::Closed))?;
        let mut compaction = self.inner.compaction.lock().expect("compaction lock");
        if let Some(round) = &mut compaction.round
            && round.epoch == epoch
        {
            round.pending.remove(entity);
            round.bytes += bytes;
        }
        let finish = self.finish_round_if_done(&mut compaction);
        drop(compaction);
        self.finish_in_background(finish);
        Ok(())
    }

    /// Stops the writer after what was submitted, and releases the directory; logs what
    /// the log did (benchmarks read this line).
    pub fn close(&self) {
        self.inner.log.close();
        let statistics = self.inner.log.statistics();
        let records = statistics.records.load(Ordering::Relaxed);
        let syncs = statistics.syncs.load(Ordering::Relaxed);
        tracing::info!(
            "storage closed: {records} records in {syncs} syncs ({:.1} records per sync), {} bytes written, {} bytes on disk in {} segments, {} compactions",
            records as f64 / syncs.max(1) as f64,
            statistics.bytes.load(Ordering::Relaxed),
            statistics.disk_bytes.load(Ordering::Relaxed),
            statistics.segments.load(Ordering::Relaxed),
            self.compactions()
        );
    }
}

/// The port's errors from the log's: a full disk stays recognisable, the rest is its text.
fn port_error(error: StoreError) -> StorageError {
    match error {
        StoreError::NoSpace(text) => StorageError::NoSpace(text),
        other => StorageError::Failed(other.to_string()),
    }
}

impl DurableLog for LogStorage {
    fn append(&self, batch: Vec<(String, Vec<Change>)>) -> Durable<'_> {
        Box::pin(async move { self.append_batch(batch).await.map_err(port_error) })
    }

    fn drop_entity(&self, entity: &str) -> Durable<'_> {
        let entity = entity.to_string();
        Box::pin(async move {
            LogStorage::drop_entity(self, &entity)
                .await
                .map_err(port_error)
        })
    }

    fn checkpoint(&self, entity: &str, epoch: u64, changes: Vec<Change>) -> Durable<'_> {
        let entity = entity.to_string();
        Box::pin(async move {
            LogStorage::checkpoint(self, &entity, epoch, changes)
                .await
                .map_err(port_error)
        })
    }

    fn save_namespace(&self, text: String) -> Durable<'_> {
        Box::pin(async move {
            LogStorage::save_namespace(self, text)
                .await
                .map_err(port_error)
        })
    }

    fn has_room(&self) -> bool {
        LogStorage::has_room(self)
    }

    fn full_error(&self) -> String {
        LogStorage::full_error(self)
    }

    fn register(&self, entity: &str) {
        LogStorage::register(self, entity)
    }

    fn unregister(&self, entity: &str) {
        LogStorage::unregister(self, entity)
    }

    fn epochs(&self) -> watch::Receiver<u64> {
        LogStorage::epochs(self)
    }
}

impl Recovery {
    /// Drops every run-time change of the namespace (`--reset-runtime-changes`): the
    /// broker starts from the configuration file alone, and the start writes the empty
    /// text to the log (a [`NAMESPACE_FILE`] is removed once it is durable).
    pub fn reset_runtime_changes(&mut self) {
        self.namespace = Some(String::new());
        self.namespace_reset = true;
    }

    /// What the core needs of it: each entity's records and the namespace's changes.
    pub fn into_recovered(self) -> Recovered {
        Recovered {
            entities: self.entities,
            namespace: self.namespace,
        }
    }
}

/// What the log's tests and the cluster's share: a scratch directory, a change with a
/// number in it, and the numbers back.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::PathBuf;

    use crate::broker::entity::state::Change;

    /// A fresh directory under the temporary directory, named after `name`.
    pub(crate) fn scratch(name: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!(
            "ferrobus-storage-{name}-{}-{}",
            std::process::id(),
            crate::encoding::ids::unique_u64()
        ));
        let _ = std::fs::remove_dir_all(&directory);
        directory
    }

    /// A change carrying `value`.
    pub(crate) fn next(value: i64) -> Change {
        Change::NextSequence(value)
    }

    /// The values of the changes made by [`next`], in order.
    pub(crate) fn counters(changes: &[Change]) -> Vec<i64> {
        changes
            .iter()
            .filter_map(|change| match change {
                Change::NextSequence(value) => Some(*value),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "storage_tests.rs"]
mod tests;
