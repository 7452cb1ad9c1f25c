//! A member's end of the store's compaction round: each group snapshots and purges its log
//! up to the round's start.

use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::BasicNode;

use super::RaftLog;

/// How long a compaction round waits for a group to apply, snapshot and purge its log up to
/// the round's start before it keeps the old segments for the next round.
const COMPACT_WAIT: Duration = Duration::from_secs(60);

impl RaftLog {
    /// A member's end of a compaction round (the store's [`crate::store::storage::Compactor`]):
    /// each group applies up to its last entry before the round, builds a snapshot and
    /// purges its log that far. Answers the snapshots' bytes once every group is purged that
    /// far; `None` when one is not within [`COMPACT_WAIT`] (the round keeps the segments).
    pub(super) async fn compact(
        &self,
        targets: Vec<(String, crate::store::codec::EntryId)>,
    ) -> Option<u64> {
        let mut bytes = 0;
        for (group, target) in targets {
            if self.stopped.load(Ordering::Acquire) {
                return None;
            }
            let running = match self.group(&group).await {
                Ok(running) => running,
                Err(error) => {
                    tracing::warn!(group, %error, "log compaction: the group cannot start");
                    return None;
                }
            };
            let raft = &running.raft;
            let index = target.index;
            let reached =
                |what: &'static str,
                 reached: fn(&openraft::RaftMetrics<u64, BasicNode>, u64) -> bool| {
                    let group = group.clone();
                    async move {
                        let waited = raft
                            .wait(Some(COMPACT_WAIT))
                            .metrics(|metrics| reached(metrics, index), what)
                            .await;
                        if let Err(error) = &waited {
                            tracing::info!(group, index, %error, "log compaction: not {what}");
                        }
                        waited.is_ok()
                    }
                };
            if !reached("applied up to the round's start", |metrics, index| {
                metrics.last_applied.is_some_and(|id| id.index >= index)
            })
            .await
            {
                return None;
            }
            let has_snapshot = |metrics: &openraft::RaftMetrics<u64, BasicNode>, index: u64| {
                metrics.snapshot.is_some_and(|id| id.index >= index)
            };
            if !has_snapshot(&raft.metrics().borrow(), index) {
                if let Err(error) = raft.trigger().snapshot().await {
                    tracing::warn!(group, %error, "log compaction: cannot build a snapshot");
                    return None;
                }
                if !reached("a snapshot past the round's start", has_snapshot).await {
                    return None;
                }
            }
            if let Err(error) = raft.trigger().purge_log(index).await {
                tracing::warn!(group, %error, "log compaction: cannot purge the log");
                return None;
            }
            if !reached(
                "the log purged up to the round's start",
                |metrics, index| metrics.purged.is_some_and(|id| id.index >= index),
            )
            .await
            {
                return None;
            }
            // openraft may report the purge before its command reached the store: the
            // states the round writes before deleting segments must carry it.
            let durable = async {
                loop {
                    let log = self.storage.group_log(&group);
                    if log.purged.is_some_and(|purged| purged.index >= index) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            if tokio::time::timeout(COMPACT_WAIT, durable).await.is_err() {
                return None;
            }
            bytes += self
                .snapshots
                .bytes
                .load(std::sync::atomic::Ordering::Relaxed);
        }
        Some(bytes)
    }
}
