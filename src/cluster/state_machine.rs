//! A group's state machine. The group's entities apply their own turns before proposing
//! them (the actor's turn is the commit point: its replies wait for the entry to be
//! committed and applied), and recovery replays the log into them; so on a one-member group
//! applying an entry records how far the group has applied and its membership, and lets
//! the log store forget the entry. A one-member group's snapshots are the store's
//! checkpoints. A cluster member's are files ([`crate::store::snapshots`]): the group's
//! state as of an applied entry, built from the member's own snapshot before and its log
//! after it, so the log before it can be purged; a member that lacks purged entries is sent
//! the file and installs it.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};

use tokio::sync::watch;

use super::convert;
use super::log_store::Pending;
use super::types::TypeConfig;
use crate::store::codec::LogRecord;
use crate::store::snapshots::SnapshotMeta as FileMeta;
use crate::store::storage::{GroupLog, LogStorage};

/// A group's applied state.
pub(super) struct GroupMachine {
    applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    pending: Arc<Mutex<Pending>>,
    /// A cluster member's snapshot files; `None` on a single node.
    files: Option<Files>,
}

/// Where a cluster member's group keeps its snapshots.
#[derive(Clone)]
pub(super) struct Files {
    /// The group.
    pub(super) group: Arc<str>,
    /// The node's store (the snapshot files are in its data directory).
    pub(super) storage: LogStorage,
    /// Counted for the metrics.
    pub(super) stats: Arc<SnapshotStats>,
    /// The metadata group's only: where the namespace's run-time changes are published as
    /// this member applies them (see [`NamespaceView`]).
    pub(super) namespace: Option<NamespaceView>,
}

/// The namespace's run-time changes (`LogRecord::Namespace`'s text) as of the metadata
/// group's last entry this member applied (or its snapshot): what every member, leader or
/// not, knows of the entities created, changed and deleted at run time. `None`: none yet.
pub(super) type NamespaceView = Arc<watch::Sender<Option<Arc<str>>>>;

/// The newest namespace text among `records`, if they hold one.
fn namespace_in<'a>(records: impl IntoIterator<Item = &'a LogRecord>) -> Option<Arc<str>> {
    records
        .into_iter()
        .fold(None, |newest, record| match record {
            LogRecord::Namespace { text } => Some(Arc::from(text.as_str())),
            _ => newest,
        })
}

impl Files {
    /// Publishes `text` when this is the metadata group's and it changed.
    fn publish_namespace(&self, text: Option<Arc<str>>) {
        if let (Some(view), Some(text)) = (&self.namespace, text) {
            view.send_if_modified(|current| {
                let changed = current.as_deref() != Some(&*text);
                if changed {
                    *current = Some(text);
                }
                changed
            });
        }
    }
}

/// What a node's groups did with snapshots (`ferrobus_cluster_snapshot*` metrics).
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// Snapshots this node built.
    pub built: AtomicU64,
    /// Snapshots this node installed (sent by a leader).
    pub installed: AtomicU64,
    /// The size of the last snapshot built or installed.
    pub bytes: AtomicU64,
    /// Microseconds the last snapshot took to build.
    pub build_micros: AtomicU64,
}

fn snapshot_error(
    what: &str,
    id: Option<&LogId<u64>>,
    error: impl std::fmt::Display,
) -> StorageError<u64> {
    let signature = id.map(|id| {
        SnapshotMeta::<u64, openraft::BasicNode> {
            last_log_id: Some(*id),
            ..SnapshotMeta::default()
        }
        .signature()
    });
    StorageError::IO {
        source: StorageIOError::write_snapshot(
            signature,
            AnyError::error(format!("{what}: {error}")),
        ),
    }
}

/// openraft's description of a snapshot file.
fn openraft_meta(meta: &FileMeta) -> SnapshotMeta<u64, openraft::BasicNode> {
    SnapshotMeta {
        last_log_id: Some(convert::log_id_from(meta.last)),
        last_membership: match &meta.membership {
            Some((at, membership)) => StoredMembership::new(
                Some(convert::log_id_from(*at)),
                convert::membership_from(membership),
            ),
            None => StoredMembership::default(),
        },
        snapshot_id: format!("{}-{}-{}", meta.last.term, meta.last.node, meta.last.index),
    }
}

impl GroupMachine {
    /// The state after recovery: on a single node every entry in the group's log was
    /// replayed into its entities, so all of it counts as applied. A cluster member applies
    /// nothing in memory (its leader replays the log when it takes over), and its log may
    /// end with entries that were never committed and that a new leader replaces; so it
    /// starts with nothing applied and applies again what the group has committed.
    ///
    /// A member with a snapshot starts from it: applied up to its last entry, with its
    /// membership.
    pub(super) fn recovered(
        log: &GroupLog,
        pending: Arc<Mutex<Pending>>,
        files: Option<Files>,
    ) -> Result<GroupMachine, String> {
        if let Some(files) = files {
            let snapshot = files
                .storage
                .group_snapshot(&files.group)
                .map_err(|error| error.to_string())?;
            let (applied, membership) = match snapshot {
                Some(snapshot) => {
                    files.publish_namespace(namespace_in(&snapshot.records));
                    let meta = openraft_meta(&snapshot.meta);
                    (meta.last_log_id, meta.last_membership)
                }
                None => (None, StoredMembership::default()),
            };
            return Ok(GroupMachine {
                applied,
                membership,
                pending,
                files: Some(files),
            });
        }
        let membership = match &log.membership {
            Some((at, membership)) => StoredMembership::new(
                Some(convert::log_id_from(*at)),
                convert::membership_from(membership),
            ),
            None => StoredMembership::default(),
        };
        Ok(GroupMachine {
            applied: log.last.map(convert::log_id_from),
            membership,
            pending,
            files: None,
        })
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

/// A cluster member's snapshot builder: writes the group's snapshot file as of the entry
/// applied when openraft asked for it.
pub(super) struct FileBuilder {
    applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    files: Files,
}

impl RaftSnapshotBuilder<TypeConfig> for FileBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let Some(applied) = self.applied else {
            return Err(snapshot_error(
                "building a snapshot",
                None,
                "the group has applied nothing yet",
            ));
        };
        let membership = self.membership.log_id().map(|at| {
            (
                convert::entry_id_to(&at),
                convert::membership_to(self.membership.membership()),
            )
        });
        let files = self.files.clone();
        let started = std::time::Instant::now();
        let built = tokio::task::spawn_blocking(move || {
            files
                .storage
                .snapshot_group(&files.group, convert::entry_id_to(&applied), membership)
        })
        .await
        .map_err(|error| snapshot_error("building a snapshot", Some(&applied), error))?
        .map_err(|error| snapshot_error("building a snapshot", Some(&applied), error))?;
        let (meta, bytes) = built;
        let stats = &self.files.stats;
        stats.built.fetch_add(1, Ordering::Relaxed);
        stats.bytes.store(bytes.len() as u64, Ordering::Relaxed);
        stats
            .build_micros
            .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        tracing::info!(
            group = %self.files.group,
            index = applied.index,
            bytes = bytes.len(),
            "built a snapshot of the group in {:.1} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );
        Ok(Snapshot {
            meta: openraft_meta(&meta),
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

/// A group's snapshot builder: a member's files, or a single node's checkpoints.
pub(super) enum Builder {
    Files(FileBuilder),
    Checkpoints(Checkpoints),
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        match self {
            Builder::Files(builder) => builder.build_snapshot().await,
            Builder::Checkpoints(builder) => builder.build_snapshot().await,
        }
    }
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
    type SnapshotBuilder = Builder;

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
        let tracks_namespace = self
            .files
            .as_ref()
            .is_some_and(|files| files.namespace.is_some());
        let mut namespace = None;
        for entry in entries {
            match &entry.payload {
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
                }
                EntryPayload::Normal(turn) if tracks_namespace => {
                    namespace = namespace_in(turn.iter()).or(namespace);
                }
                _ => {}
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
        if let Some(files) = &self.files {
            files.publish_namespace(namespace);
        }
        Ok(vec![(); applied])
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        match &self.files {
            Some(files) => Builder::Files(FileBuilder {
                applied: self.applied,
                membership: self.membership.clone(),
                files: files.clone(),
            }),
            None => Builder::Checkpoints(Checkpoints {
                applied: self.applied,
                membership: self.membership.clone(),
            }),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        if self.files.is_none() {
            return Err(unsupported("receiving a snapshot"));
        }
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let Some(files) = self.files.clone() else {
            return Err(unsupported("installing a snapshot"));
        };
        let id = meta.last_log_id;
        let bytes = snapshot.into_inner();
        let size = bytes.len() as u64;
        let group = files.group.clone();
        let storage = files.storage.clone();
        let installed =
            tokio::task::spawn_blocking(move || storage.install_group_snapshot(&group, &bytes))
                .await
                .map_err(|error| snapshot_error("installing a snapshot", id.as_ref(), error))?
                .map_err(|error| snapshot_error("installing a snapshot", id.as_ref(), error))?;
        if Some(convert::log_id_from(installed.last)) != id {
            return Err(snapshot_error(
                "installing a snapshot",
                id.as_ref(),
                format!(
                    "the file ends at entry {} and was announced as ending at {:?}",
                    installed.last.index,
                    id.map(|id| id.index)
                ),
            ));
        }
        self.applied = id;
        self.membership = meta.last_membership.clone();
        if let Some(id) = id {
            self.pending
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .applied(id.index);
        }
        if files.namespace.is_some() {
            // The metadata group's snapshot is small: read its namespace text back.
            let snapshot = files
                .storage
                .group_snapshot(&files.group)
                .map_err(|error| {
                    snapshot_error("reading an installed snapshot", id.as_ref(), error)
                })?;
            files.publish_namespace(snapshot.and_then(|snapshot| namespace_in(&snapshot.records)));
        }
        files.stats.installed.fetch_add(1, Ordering::Relaxed);
        files.stats.bytes.store(size, Ordering::Relaxed);
        tracing::info!(
            group = %files.group,
            index = id.map(|id| id.index),
            bytes = size,
            "installed a snapshot of the group sent by its leader"
        );
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        let Some(files) = &self.files else {
            return Ok(None);
        };
        let read = files
            .storage
            .group_snapshot_bytes(&files.group)
            .map_err(|error| StorageError::IO {
                source: StorageIOError::read_snapshot(None, AnyError::error(error.to_string())),
            })?;
        Ok(read.map(|(meta, bytes)| Snapshot {
            meta: openraft_meta(&meta),
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
