//! The Raft path on one node: entries tagged by group on disk, a group that restarts as
//! its own leader, compaction that keeps every group's vote and membership.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::store::storage::test_support::{counters, next, scratch};
use crate::store::storage::{Recovery, StorageOptions};

fn open(directory: &PathBuf) -> (RaftLog, Recovery) {
    let (storage, recovery) = LogStorage::open(StorageOptions::new(directory)).expect("opens");
    let log = RaftLog::new(storage, &recovery.groups, ClusterConfig::default()).expect("runs");
    (log, recovery)
}

async fn close(log: RaftLog) {
    log.shutdown().await;
    log.storage().close();
}

#[test]
fn a_subscription_is_in_its_topics_group() {
    assert_eq!(group_of("orders"), "orders");
    assert_eq!(group_of("events/subscriptions/audit"), "events");
    assert_eq!(group_of("events"), "events");
}

/// A topic's publish is one entry of the topic's group; the log's records are tagged with
/// the group, its leader's term and node, and an index; a restart continues the same
/// group as its leader (no second membership entry, indexes go on).
#[tokio::test]
async fn a_groups_entries_are_tagged_and_its_leader_comes_back_after_a_restart() {
    let directory = scratch("restart");
    let (log, recovery) = open(&directory);
    assert!(recovery.groups.is_empty());
    log.append(vec![
        ("events".into(), vec![next(1)]),
        ("events/subscriptions/a".into(), vec![next(2)]),
    ])
    .await
    .expect("committed");
    log.append(vec![("orders".into(), vec![next(5)])])
        .await
        .expect("committed");
    let first = log.storage().group_log("events");
    close(log).await;

    let (log, recovery) = open(&directory);
    assert_eq!(counters(&recovery.entities["events"]), vec![1]);
    assert_eq!(
        counters(&recovery.entities["events/subscriptions/a"]),
        vec![2]
    );
    assert_eq!(counters(&recovery.entities["orders"]), vec![5]);
    let events = &recovery.groups["events"];
    assert_eq!(events, &first, "recovery reads back what was written");
    let vote = events.vote.expect("the group voted");
    assert_eq!((vote.node, vote.committed), (1, true));
    let (at, membership) = events.membership.clone().expect("a membership entry");
    assert_eq!((at.index, membership.configs.clone()), (0, vec![vec![1]]));
    // Index 0: membership, 1: the leader's blank entry, 2: the publish.
    assert_eq!(events.last.map(|last| last.index), Some(2));
    assert!(recovery.groups.contains_key("orders"));
    assert!(!recovery.groups.contains_key("events/subscriptions/a"));
    log.append(vec![("events".into(), vec![next(3)])])
        .await
        .expect("committed after the restart");
    let after = log.storage().group_log("events");
    assert_eq!(after.last.map(|last| last.index), Some(3));
    assert_eq!(
        after.vote, events.vote,
        "the same leadership: no new election"
    );
    assert_eq!(after.membership, events.membership);
    close(log).await;
    let (log, recovery) = open(&directory);
    assert_eq!(counters(&recovery.entities["events"]), vec![1, 3]);
    close(log).await;
    let _ = std::fs::remove_dir_all(&directory);
}

/// A compaction round writes every group's state before it deletes older segments: after
/// it, the groups' entries start past their purge point, and the groups still know their
/// vote and membership (they restart as leaders).
#[tokio::test]
async fn compaction_keeps_every_groups_vote_and_membership() {
    let directory = scratch("compaction");
    let (log, _) = open(&directory);
    log.register("a");
    log.register("t/subscriptions/s");
    log.append(vec![("a".into(), vec![next(1)])])
        .await
        .expect("committed");
    log.append(vec![("t/subscriptions/s".into(), vec![next(2)])])
        .await
        .expect("committed");
    log.storage().compact().await.expect("a round starts");
    let epoch = *log.epochs().borrow();
    log.checkpoint("a", epoch, vec![next(1)])
        .await
        .expect("committed");
    log.checkpoint("t/subscriptions/s", epoch, vec![next(2)])
        .await
        .expect("committed");
    // The round completes once the states are durable and the segments deleted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while log.storage().compactions() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the round completes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The deletion runs on the log's writer; a later write is ordered after it.
    log.append(vec![("a".into(), vec![next(9)])])
        .await
        .expect("committed");
    assert!(!directory.join(crate::store::segment::file_name(0)).exists());
    close(log).await;

    let (log, recovery) = open(&directory);
    assert_eq!(counters(&recovery.entities["a"]), vec![1, 9]);
    assert_eq!(counters(&recovery.entities["t/subscriptions/s"]), vec![2]);
    for group in ["a", "t"] {
        let state = &recovery.groups[group];
        assert!(
            state.purged.is_some(),
            "{group}: purged past the old segment"
        );
        assert!(
            state.vote.is_some_and(|vote| vote.committed),
            "{group}: vote kept"
        );
        assert!(state.membership.is_some(), "{group}: membership kept");
    }
    log.append(vec![("t".into(), vec![next(4)])])
        .await
        .expect("the topic's group restarts as its own leader");
    close(log).await;
    let _ = std::fs::remove_dir_all(&directory);
}

/// A data directory written by node 1 is refused by node 2: its groups' members are not
/// this node, and running them would wait for an election that cannot happen.
#[tokio::test]
async fn a_directory_of_another_node_is_refused_with_its_members_named() {
    let directory = scratch("other-node");
    let (log, _) = open(&directory);
    log.append(vec![("q".into(), vec![next(1)])])
        .await
        .expect("committed");
    close(log).await;
    let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
    let settings = ClusterConfig {
        node_id: 2,
        ..ClusterConfig::default()
    };
    let error = RaftLog::new(storage.clone(), &recovery.groups, settings).expect_err("refused");
    assert!(error.contains("group 'q' has members [[1]]"), "{error}");
    assert!(error.contains("node's id is 2"), "{error}");
    storage.close();
    let _ = std::fs::remove_dir_all(&directory);
}

/// An idle group stops its Raft (memory goes with it) and the next write starts it again
/// from its log, as leader of the same term, with nothing lost and no new election.
#[tokio::test]
async fn an_idle_group_retires_and_comes_back_on_the_next_write() {
    let directory = scratch("idle");
    let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
    let log = RaftLog::new(storage, &recovery.groups, ClusterConfig::default())
        .expect("runs")
        .with_idle(Duration::from_millis(50));
    log.append(vec![("q".into(), vec![next(1)])])
        .await
        .expect("committed");
    assert_eq!(log.running(), 1);
    let first = log.storage().group_log("q");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while log.running() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle group retires"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    log.append(vec![("q".into(), vec![next(2)])])
        .await
        .expect("committed after the group came back");
    let second = log.storage().group_log("q");
    assert_eq!(second.vote, first.vote, "the same leadership");
    assert_eq!(
        second.last.map(|last| last.index),
        first.last.map(|last| last.index + 1)
    );
    close(log).await;
    let (log, recovery) = open(&directory);
    assert_eq!(counters(&recovery.entities["q"]), vec![1, 2]);
    close(log).await;
    let _ = std::fs::remove_dir_all(&directory);
}

/// Compaction does not run round after round: a round starts only once at least the live
/// data has been written since the last one ended, however long the old segments' deletion
/// takes (it waits for the groups' states), so writing N bytes costs at most about N / live
/// rounds, each rewriting the live data once.
#[tokio::test]
async fn compaction_rounds_follow_what_was_written_not_what_waits_for_deletion() {
    let directory = scratch("no-thrash");
    let mut options = StorageOptions::new(&directory);
    options.compaction_min_bytes = 64 * 1024;
    let (storage, recovery) = LogStorage::open(options).expect("opens");
    let log =
        Arc::new(RaftLog::new(storage, &recovery.groups, ClusterConfig::default()).expect("runs"));
    log.register("q");
    // The entity answers every round with a checkpoint of its live state: 48 KiB.
    let responder = {
        let log = log.clone();
        let mut epochs = log.epochs();
        tokio::spawn(async move {
            while epochs.changed().await.is_ok() {
                let epoch = *epochs.borrow_and_update();
                let state = vec![Change::SessionState {
                    session_id: "s".into(),
                    state: Some(vec![1u8; 48 * 1024]),
                }];
                log.checkpoint("q", epoch, state)
                    .await
                    .expect("checkpointed");
            }
        })
    };
    let written = 1024 * 1024;
    for _ in 0..written / 1024 {
        log.append(vec![(
            "q".into(),
            vec![Change::SessionState {
                session_id: "t".into(),
                state: Some(vec![2u8; 1024]),
            }],
        )])
        .await
        .expect("committed");
    }
    let rounds = log.storage().compactions();
    // 1 MiB written against 48 KiB of live data: at most about 1 MiB / 48 KiB rounds.
    assert!(rounds >= 2, "compaction ran ({rounds} rounds)");
    assert!(
        rounds <= 1 + written / (48 * 1024),
        "{rounds} rounds for {written} bytes written"
    );
    responder.abort();
    log.shutdown().await;
    log.storage().close();
    let _ = std::fs::remove_dir_all(&directory);
}

/// Waits until `rounds` compaction rounds have completed (the metadata group ends its part
/// of a round on its own task).
async fn rounds_completed(log: &RaftLog, rounds: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while log.storage().compactions() < rounds {
        assert!(
            tokio::time::Instant::now() < deadline,
            "compaction round {rounds} completes"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The namespace's run-time changes are the metadata group's state: the newest text is read
/// back at start, a compaction round writes it again (and waits for that) so the segments
/// that held it can go, round after round, and nothing is written outside the log.
#[tokio::test]
async fn the_namespace_lives_in_the_metadata_group_through_compaction() {
    let directory = scratch("metadata");
    let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
    assert_eq!(recovery.namespace, None);
    let log = Arc::new(
        RaftLog::new(storage, &recovery.groups, ClusterConfig::default())
            .expect("runs")
            .with_namespace(recovery.namespace),
    );
    log.keep_metadata();
    log.save_namespace("[[queues]]\nname = \"first\"\n".into())
        .await
        .expect("committed");
    log.save_namespace("[[queues]]\nname = \"second\"\n".into())
        .await
        .expect("committed");
    assert!(log.storage().group_log(METADATA_GROUP).last.is_some());
    for round in 1..=2 {
        log.storage().compact().await.expect("a round starts");
        rounds_completed(&log, round).await;
    }
    // The deletion is ordered before a later write.
    log.append(vec![("q".into(), vec![next(1)])])
        .await
        .expect("committed");
    for segment in 0..2 {
        let name = crate::store::segment::file_name(segment);
        assert!(!directory.join(name).exists(), "segment {segment} deleted");
    }
    assert!(
        !directory
            .join(crate::store::storage::NAMESPACE_FILE)
            .exists()
    );
    log.shutdown().await;
    log.storage().close();
    drop(log);

    let (log, recovery) = open(&directory);
    assert_eq!(
        recovery.namespace.as_deref(),
        Some("[[queues]]\nname = \"second\"\n")
    );
    assert_eq!(recovery.namespace_file, None);
    assert!(recovery.groups.contains_key(METADATA_GROUP));
    assert!(!recovery.entities.contains_key(METADATA_GROUP));
    assert_eq!(counters(&recovery.entities["q"]), vec![1]);
    close(log).await;
    let _ = std::fs::remove_dir_all(&directory);
}
