//! The storage port: what the core needs from durable storage, declared by the core and
//! implemented outside it — by `crate::store` (the node's write-ahead log) today, by a
//! replicated log later (`docs/scale-out.md`). The core names no implementation: actors,
//! topics and the registry hold a [`Storage`] handle over a [`DurableLog`], and tests of the
//! core use [`MemoryLog`].
//!
//! What the port promises:
//! - [`DurableLog::append`] takes one turn's changes of one or more entities and resolves
//!   once all of them are durable, or fails with none of them kept: a batch is one record.
//! - [`DurableLog::checkpoint`] writes an entity's whole durable state for a compaction round
//!   announced on [`DurableLog::epochs`]; a complete checkpoint replaces what was recorded
//!   for the entity before it.
//! - [`DurableLog::drop_entity`] forgets an entity's records.
//! - What was appended comes back at the next start as [`Recovered`]: each entity's changes
//!   in the order they were appended (after its newest complete checkpoint).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::entity::state::Change;
use super::types::Timestamp;

/// Why a write did not become durable; nothing of it was kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The disk is full.
    #[error("the disk is full: {0}")]
    NoSpace(String),
    /// Anything else (the text says what).
    #[error("{0}")]
    Failed(String),
}

/// The answer to a write: resolves once it is durable.
pub type Durable<'a> = Pin<Box<dyn Future<Output = Result<(), StorageError>> + Send + 'a>>;

/// A durable log of entities' change records (see the module documentation).
pub trait DurableLog: Send + Sync + std::fmt::Debug {
    /// Appends one turn: each entity's changes, all durable together or none.
    fn append(&self, batch: Vec<(String, Vec<Change>)>) -> Durable<'_>;
    /// Forgets an entity's records (it was deleted).
    fn drop_entity(&self, entity: &str) -> Durable<'_>;
    /// Writes an entity's whole durable state for compaction round `epoch`.
    fn checkpoint(&self, entity: &str, epoch: u64, changes: Vec<Change>) -> Durable<'_>;
    /// Stores the namespace's run-time changes (entities created or changed at run time),
    /// replacing what was stored.
    fn save_namespace(&self, text: String) -> Durable<'_>;
    /// Whether sends are accepted (false while the disk is nearly full).
    fn has_room(&self) -> bool;
    /// The error a refused send gets while there is no room.
    fn full_error(&self) -> String;
    /// An entity's actor started: compaction rounds wait for its checkpoints.
    fn register(&self, entity: &str);
    /// An entity's actor stopped.
    fn unregister(&self, entity: &str);
    /// Where entities learn that a compaction round wants their checkpoint.
    fn epochs(&self) -> watch::Receiver<u64>;
    /// The most commands an actor takes into one turn (`None`: all that wait). A cluster's
    /// log bounds it: a turn is one replicated entry, which followers must receive, write
    /// and sync within a heartbeat interval.
    fn commands_per_turn(&self) -> Option<usize> {
        None
    }
}

/// What the log held at start.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Each entity's change records, newest checkpoint first, in order.
    pub entities: HashMap<String, Vec<Change>>,
    /// The namespace's run-time changes as last stored.
    pub namespace: Option<String>,
}

impl Recovered {
    /// The latest broker time any recovered change recorded: the clock starts no earlier
    /// (`Clock::not_before`), so enqueued times never run backwards across a restart.
    pub fn latest_time(&self) -> Option<Timestamp> {
        self.entities
            .values()
            .flatten()
            .filter_map(Change::recorded_time)
            .max()
    }
}

/// The core's handle on its durable log. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Storage(Arc<dyn DurableLog>);

impl Storage {
    /// A handle on `log`.
    pub fn new(log: Arc<dyn DurableLog>) -> Storage {
        Storage(log)
    }

    /// Appends one turn of one entity's changes.
    pub async fn append(&self, entity: &str, changes: Vec<Change>) -> Result<(), StorageError> {
        self.0.append(vec![(entity.to_string(), changes)]).await
    }

    /// [`Storage::append`] as a future of its own, which holds no borrow: an actor keeps
    /// several turns on their way to the log. Turns of one entity become durable in the
    /// order their futures are first polled.
    pub fn append_owned(&self, entity: &str, changes: Vec<Change>) -> Durable<'static> {
        let log = self.0.clone();
        let batch = vec![(entity.to_string(), changes)];
        Box::pin(async move { log.append(batch).await })
    }

    /// Appends one turn of several entities' changes, all durable together or none.
    pub async fn append_batch(
        &self,
        batch: Vec<(String, Vec<Change>)>,
    ) -> Result<(), StorageError> {
        self.0.append(batch).await
    }

    /// See [`DurableLog::drop_entity`].
    pub async fn drop_entity(&self, entity: &str) -> Result<(), StorageError> {
        self.0.drop_entity(entity).await
    }

    /// See [`DurableLog::checkpoint`].
    pub async fn checkpoint(
        &self,
        entity: &str,
        epoch: u64,
        changes: Vec<Change>,
    ) -> Result<(), StorageError> {
        self.0.checkpoint(entity, epoch, changes).await
    }

    /// See [`DurableLog::save_namespace`].
    pub async fn save_namespace(&self, text: String) -> Result<(), StorageError> {
        self.0.save_namespace(text).await
    }

    /// See [`DurableLog::has_room`].
    pub fn has_room(&self) -> bool {
        self.0.has_room()
    }

    /// See [`DurableLog::full_error`].
    pub fn full_error(&self) -> String {
        self.0.full_error()
    }

    /// See [`DurableLog::register`].
    pub fn register(&self, entity: &str) {
        self.0.register(entity)
    }

    /// See [`DurableLog::unregister`].
    pub fn unregister(&self, entity: &str) {
        self.0.unregister(entity)
    }

    /// See [`DurableLog::commands_per_turn`].
    pub fn commands_per_turn(&self) -> Option<usize> {
        self.0.commands_per_turn()
    }

    /// See [`DurableLog::epochs`].
    pub fn epochs(&self) -> watch::Receiver<u64> {
        self.0.epochs()
    }
}

/// A [`DurableLog`] in memory: what a restart would recover, kept for tests of the core
/// (appends are durable at once; checkpoints replace an entity's records; nothing asks for
/// compaction unless a test does).
#[derive(Debug)]
pub struct MemoryLog {
    /// Every entity's records, in order.
    records: Mutex<MemoryRecords>,
    /// Compaction rounds announced by the test.
    epoch: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct MemoryRecords {
    entities: HashMap<String, Vec<Change>>,
    namespace: Option<String>,
    /// Each append, as the batch it was (tests check what went together).
    appends: Vec<Vec<String>>,
}

impl Default for MemoryLog {
    fn default() -> Self {
        MemoryLog {
            records: Mutex::default(),
            epoch: watch::channel(0).0,
        }
    }
}

impl MemoryLog {
    /// What a restart would read back.
    pub fn recovered(&self) -> Recovered {
        let records = self
            .records
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        Recovered {
            entities: records.entities.clone(),
            namespace: records.namespace.clone(),
        }
    }

    /// The entities of each append so far, in order (one list per append).
    pub fn appends(&self) -> Vec<Vec<String>> {
        let records = self
            .records
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        records.appends.clone()
    }

    /// Announces compaction round `epoch`.
    pub fn start_round(&self, epoch: u64) {
        self.epoch.send_replace(epoch);
    }

    fn with_records<T>(&self, change: impl FnOnce(&mut MemoryRecords) -> T) -> T {
        let mut records = self
            .records
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        change(&mut records)
    }
}

impl DurableLog for MemoryLog {
    fn append(&self, batch: Vec<(String, Vec<Change>)>) -> Durable<'_> {
        self.with_records(|records| {
            records
                .appends
                .push(batch.iter().map(|(entity, _)| entity.clone()).collect());
            for (entity, changes) in batch {
                records.entities.entry(entity).or_default().extend(changes);
            }
        });
        Box::pin(async { Ok(()) })
    }

    fn drop_entity(&self, entity: &str) -> Durable<'_> {
        self.with_records(|records| records.entities.remove(entity));
        Box::pin(async { Ok(()) })
    }

    fn checkpoint(&self, entity: &str, _epoch: u64, changes: Vec<Change>) -> Durable<'_> {
        self.with_records(|records| records.entities.insert(entity.to_string(), changes));
        Box::pin(async { Ok(()) })
    }

    fn save_namespace(&self, text: String) -> Durable<'_> {
        self.with_records(|records| records.namespace = Some(text));
        Box::pin(async { Ok(()) })
    }

    fn has_room(&self) -> bool {
        true
    }

    fn full_error(&self) -> String {
        String::new()
    }

    fn register(&self, _entity: &str) {}

    fn unregister(&self, _entity: &str) {}

    fn epochs(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }
}
