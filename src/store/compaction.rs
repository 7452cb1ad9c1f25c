//! Compaction: once the log on disk outgrows `max(compaction_min_bytes, 2 × the live data of
//! the last round)`, a round starts: the writer moves to a new segment, every entity writes
//! its whole durable state as a checkpoint into the log, and once all of them are durable
//! the segments before the round are deleted. A checkpoint supersedes everything recorded
//! for its entity before it, so recovery reads the newest complete checkpoint plus what
//! follows it.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::{Compactor, LogStorage};
use crate::store::codec::{self, LogRecord};
use crate::store::log::StoreError;

#[derive(Default)]
pub(super) struct Compaction {
    /// Entities with an actor.
    pub(super) live: HashSet<String>,
    /// A round in progress: the first segment of the round, and who has not checkpointed.
    pub(super) round: Option<Round>,
    /// Rounds completed.
    completed: u64,
    /// With snapshots: a round's compactor is still at work (no round starts meanwhile).
    finishing: bool,
}

/// A finished round's last steps: the groups' states, then the deletion.
pub(super) struct Finish {
    states: Vec<Vec<u8>>,
    first_segment: u64,
    /// With snapshots: each group's last entry before the round (purged by the compactor).
    targets: Vec<(String, codec::EntryId)>,
}

pub(super) struct Round {
    pub(super) epoch: u64,
    first_segment: u64,
    pub(super) pending: HashSet<String>,
    pub(super) bytes: u64,
    /// Every group's state as of the round's start: written before older segments go.
    states: Vec<Vec<u8>>,
    /// With snapshots: each group's last entry before the round.
    targets: Vec<(String, codec::EntryId)>,
}

impl LogStorage {
    /// Compaction rounds completed.
    pub fn compactions(&self) -> u64 {
        self.inner
            .compaction
            .lock()
            .expect("compaction lock")
            .completed
    }

    /// Starts a compaction round now (tests, benchmarks); the answer comes once the round
    /// has started (entities are asked for checkpoints).
    pub async fn compact(&self) -> Result<(), StoreError> {
        {
            let compaction = self.inner.compaction.lock().expect("compaction lock");
            if compaction.round.is_some() {
                return Ok(());
            }
        }
        let snapshots = self.inner.options.compact_by_snapshots;
        if snapshots
            && (self.compactor().is_none()
                || self
                    .inner
                    .compaction
                    .lock()
                    .expect("compaction lock")
                    .finishing)
        {
            return Ok(());
        }
        // The groups' purge points are their last entries before the new segment: taken
        // while no group can submit entries, with the rotation submitted in the same hold.
        // With snapshots they are what each group's log must be purged to instead.
        let (rotated, states, targets) = {
            let groups = self.inner.groups.lock().expect("groups lock");
            let rotated = self.inner.log.rotate();
            if snapshots {
                (rotated, Vec::new(), LogStorage::group_targets(&groups))
            } else {
                (rotated, LogStorage::group_states(&groups), Vec::new())
            }
        };
        let first_segment = rotated.await.unwrap_or(Err(StoreError::Closed))?;
        let mut compaction = self.inner.compaction.lock().expect("compaction lock");
        if compaction.round.is_some() {
            return Ok(());
        }
        let epoch = *self.inner.epoch.borrow() + 1;
        compaction.round = Some(Round {
            epoch,
            first_segment,
            pending: compaction.live.clone(),
            bytes: 0,
            states,
            targets,
        });
        self.inner.epoch.send_replace(epoch);
        let finish = self.finish_round_if_done(&mut compaction);
        drop(compaction);
        self.finish_in_background(finish);
        Ok(())
    }

    /// Starts a round when the log on disk has outgrown the live data.
    /// A round also waits until at least the live data (half the minimum, at least) has
    /// been written since the last round ended: the old segments' deletion lags the round's
    /// end (the groups' states are written first), and a round that started on the bytes
    /// about to go would rewrite the whole live backlog again and again.
    pub(super) fn maybe_compact(&self) {
        let statistics = self.inner.log.statistics();
        let on_disk = statistics.disk_bytes.load(Ordering::Relaxed);
        let live = self.inner.live_bytes.load(Ordering::Relaxed);
        let threshold = self.inner.options.compaction_min_bytes.max(2 * live);
        if on_disk < threshold {
            return;
        }
        let written_since = statistics
            .bytes
            .load(Ordering::Relaxed)
            .saturating_sub(self.inner.written_at_round_end.load(Ordering::Relaxed));
        if written_since < live.max(self.inner.options.compaction_min_bytes / 2) {
            return;
        }
        if self
            .inner
            .compaction
            .lock()
            .expect("compaction lock")
            .round
            .is_some()
        {
            return;
        }
        let storage = self.clone();
        tokio::spawn(async move {
            if let Err(error) = storage.compact().await {
                tracing::warn!(%error, "cannot start a log compaction");
            }
        });
    }

    /// Ends the round if every entity has checkpointed; what is left to do when the groups'
    /// states must be written first.
    #[must_use]
    pub(super) fn finish_round_if_done(&self, compaction: &mut Compaction) -> Option<Finish> {
        let done = compaction
            .round
            .as_ref()
            .is_some_and(|round| round.pending.is_empty());
        if !done {
            return None;
        }
        let round = compaction.round.take()?;
        self.inner.live_bytes.store(round.bytes, Ordering::Relaxed);
        let written = self.inner.log.statistics().bytes.load(Ordering::Relaxed);
        self.inner
            .written_at_round_end
            .store(written, Ordering::Relaxed);
        tracing::debug!(
            epoch = round.epoch,
            live = round.bytes,
            "log compaction: segments before {} superseded",
            round.first_segment
        );
        let direct_namespace = self
            .inner
            .direct_namespace
            .lock()
            .expect("namespace lock")
            .is_some();
        let snapshots = self.inner.options.compact_by_snapshots;
        // With snapshots the round ends in the compactor's task: no round starts meanwhile.
        compaction.finishing = snapshots;
        if round.states.is_empty() && !snapshots && !direct_namespace {
            compaction.completed += 1;
            self.inner.log.delete_before(round.first_segment);
            return None;
        }
        Some(Finish {
            states: round.states,
            first_segment: round.first_segment,
            targets: round.targets,
        })
    }

    fn compactor(&self) -> Option<Compactor> {
        self.inner.compactor.lock().expect("compactor lock").clone()
    }

    /// Sets how rounds end with
    /// [`StorageOptions::compact_by_snapshots`](super::StorageOptions::compact_by_snapshots)
    /// (rounds start only once it is set).
    pub fn set_compactor(&self, compactor: Compactor) {
        *self.inner.compactor.lock().expect("compactor lock") = Some(compactor);
    }

    /// Ends a round with snapshots, in a task of its own: the compactor snapshots and
    /// purges each group, then the older segments go (or, when a group could not be purged
    /// that far, stay for a later round).
    fn finish_by_snapshots(&self, finish: Finish) {
        let finished = |storage: &LogStorage| {
            let mut compaction = storage.inner.compaction.lock().expect("compaction lock");
            compaction.finishing = false;
        };
        let (Some(compactor), Ok(runtime)) =
            (self.compactor(), tokio::runtime::Handle::try_current())
        else {
            tracing::warn!("cannot finish a log compaction here: old log segments are kept");
            finished(self);
            return;
        };
        let storage = self.clone();
        runtime.spawn(async move {
            match compactor(finish.targets).await {
                Some(bytes) => {
                    storage.inner.live_bytes.store(bytes, Ordering::Relaxed);
                    // Every group's vote, membership and purge point as they are now, after
                    // the older segments' records of them.
                    let written = storage.inner.log.append(storage.current_states()).await;
                    storage.delete_after(
                        written.unwrap_or(Err(StoreError::Closed)),
                        finish.first_segment,
                    );
                }
                None => {
                    tracing::info!(
                        "log compaction: a group was not purged past the round's start; its segments are kept for the next round"
                    );
                    storage
                        .inner
                        .compaction
                        .lock()
                        .expect("compaction lock")
                        .completed += 1;
                }
            }
            finished(&storage);
        });
    }

    /// Writes a finished round's groups' states, and the namespace written on the direct
    /// path (its newest text, after every earlier record of it).
    fn submit_finish(&self, mut states: Vec<Vec<u8>>) -> oneshot::Receiver<Result<(), StoreError>> {
        let namespace = self.inner.direct_namespace.lock().expect("namespace lock");
        if let Some(text) = namespace.as_ref() {
            states.push(codec::encode(&LogRecord::Namespace { text: text.clone() }));
        }
        self.inner.log.append(states)
    }

    /// Ends a finished round whose groups' states (and namespace) must be durable before
    /// older segments go: writes them, then deletes the segments (a later write is ordered
    /// after it).
    pub(super) async fn finish(&self, finish: Finish) {
        if self.inner.options.compact_by_snapshots {
            self.finish_by_snapshots(finish);
            return;
        }
        let written = self.submit_finish(finish.states).await;
        self.delete_after(
            written.unwrap_or(Err(StoreError::Closed)),
            finish.first_segment,
        );
    }

    fn delete_after(&self, written: Result<(), StoreError>, first_segment: u64) {
        match written {
            Ok(()) => self.inner.log.delete_before(first_segment),
            Err(error) => {
                tracing::warn!(%error, "cannot write the groups' states: old log segments are kept");
            }
        }
        self.inner
            .compaction
            .lock()
            .expect("compaction lock")
            .completed += 1;
    }

    /// [`LogStorage::finish`] where the caller cannot wait (an entity stopped).
    pub(super) fn finish_in_background(&self, finish: Option<Finish>) {
        let Some(finish) = finish else { return };
        if self.inner.options.compact_by_snapshots {
            self.finish_by_snapshots(finish);
            return;
        }
        let written = self.submit_finish(finish.states);
        let storage = self.clone();
        let spawned = std::thread::Builder::new()
            .name("ferrobus-compaction".to_string())
            .spawn(move || {
                let written = written.blocking_recv().unwrap_or(Err(StoreError::Closed));
                storage.delete_after(written, finish.first_segment);
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot finish a log compaction: old log segments are kept");
        }
    }
}
