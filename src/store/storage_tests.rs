//! Tests of the storage interface against real files: recovery of batches and checkpoints,
//! a compaction round, the namespace's text on the direct path.

use super::*;

use super::test_support::{counters, next, scratch};

/// A batch of several entities is one record: each entity recovers its part, in order
/// with its other records, and a checkpoint in progress takes its part too.
#[tokio::test]
async fn a_batch_recovers_each_entity_its_part() {
    let directory = scratch("batch");
    {
        let (storage, _) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
        storage
            .append("t/subscriptions/a", vec![next(1)])
            .await
            .expect("durable");
        storage
            .append_batch(vec![
                ("t".into(), vec![next(7)]),
                ("t/subscriptions/a".into(), vec![next(2)]),
                ("t/subscriptions/b".into(), vec![next(3)]),
            ])
            .await
            .expect("durable");
        assert_eq!(
            storage.log().statistics().records.load(Ordering::Relaxed),
            2
        );
        storage.close();
    }
    let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("reopens");
    storage.close();
    assert_eq!(recovery.records, 2);
    assert_eq!(counters(&recovery.entities["t"]), [7]);
    assert_eq!(counters(&recovery.entities["t/subscriptions/a"]), [1, 2]);
    assert_eq!(counters(&recovery.entities["t/subscriptions/b"]), [3]);
    let _ = std::fs::remove_dir_all(&directory);
}

/// A complete checkpoint replaces what came before it; records after it apply on top;
/// a checkpoint cut off by a crash (first part without the last) is ignored; a dropped
/// entity is forgotten.
#[tokio::test]
async fn recovery_reads_the_newest_complete_checkpoint_and_what_follows() {
    let directory = scratch("checkpoints");
    {
        let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
        assert!(recovery.entities.is_empty());
        storage.register("q");
        storage.append("q", vec![next(2)]).await.expect("durable");
        storage
            .checkpoint("q", 1, vec![next(10)])
            .await
            .expect("durable");
        storage.append("q", vec![next(11)]).await.expect("durable");
        // A checkpoint whose last part never made it to disk.
        let torn = codec::encode(&LogRecord::Checkpoint {
            entity: "q".into(),
            first: true,
            last: false,
            changes: vec![next(99)],
        });
        storage
            .log()
            .append(vec![torn])
            .await
            .expect("answered")
            .expect("durable");
        storage
            .append("gone", vec![next(5)])
            .await
            .expect("durable");
        storage.drop_entity("gone").await.expect("durable");
        storage.close();
    }
    let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("reopens");
    assert_eq!(counters(&recovery.entities["q"]), vec![10, 11]);
    assert!(!recovery.entities.contains_key("gone"));
    storage.close();
    let _ = std::fs::remove_dir_all(&directory);
}

/// A compaction round deletes the segments before it once every registered entity has
/// written its checkpoint, and recovery afterwards still has every entity's state.
#[tokio::test]
async fn a_compaction_round_deletes_old_segments_only_after_every_checkpoint() {
    let directory = scratch("round");
    let (storage, _) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
    storage.register("a");
    storage.register("b");
    storage.append("a", vec![next(3)]).await.expect("durable");
    storage.append("b", vec![next(4)]).await.expect("durable");
    storage.compact().await.expect("round started");
    let epoch = *storage.epochs().borrow();
    storage
        .checkpoint("a", epoch, vec![next(3)])
        .await
        .expect("durable");
    assert_eq!(storage.compactions(), 0, "b has not checkpointed yet");
    assert!(directory.join(super::super::segment::file_name(0)).exists());
    storage
        .checkpoint("b", epoch, vec![next(4)])
        .await
        .expect("durable");
    assert_eq!(storage.compactions(), 1);
    // Deletion happens on the writer thread; a later append is ordered after it.
    storage.append("a", vec![next(7)]).await.expect("durable");
    assert!(!directory.join(super::super::segment::file_name(0)).exists());
    storage.close();
    let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("reopens");
    assert_eq!(counters(&recovery.entities["a"]), vec![3, 7]);
    assert_eq!(counters(&recovery.entities["b"]), vec![4]);
    storage.close();
    let _ = std::fs::remove_dir_all(&directory);
}

/// Waits until `rounds` compaction rounds have completed (the last steps of a round
/// without entities run on a thread of their own).
fn wait_for_rounds(storage: &LogStorage, rounds: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while storage.compactions() < rounds {
        assert!(Instant::now() < deadline, "round {rounds} completes");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// On the direct path the namespace's text is a record of the log: the newest wins at
/// recovery, and a compaction round writes it again before the old segments go.
#[tokio::test]
async fn the_namespace_written_straight_to_the_log_survives_compaction() {
    let directory = scratch("namespace-direct");
    {
        let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
        assert_eq!(recovery.namespace, None);
        storage
            .save_namespace("[[queues]]\nname = \"first\"\n".into())
            .await
            .expect("durable");
        storage
            .save_namespace("[[queues]]\nname = \"second\"\n".into())
            .await
            .expect("durable");
        storage.compact().await.expect("round started");
        wait_for_rounds(&storage, 1);
        storage.append("q", vec![next(1)]).await.expect("durable");
        assert!(!directory.join(super::super::segment::file_name(0)).exists());
        assert!(!directory.join(NAMESPACE_FILE).exists());
        storage.close();
    }
    let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("reopens");
    storage.close();
    assert_eq!(
        recovery.namespace.as_deref(),
        Some("[[queues]]\nname = \"second\"\n")
    );
    assert_eq!(recovery.namespace_file, None);
    let _ = std::fs::remove_dir_all(&directory);
}

/// A `namespace.toml` left by an older build is read at start and wins over the log
/// (a start that moved it into the log and crashed before removing it reads it again);
/// once it is removed the log's text is read.
#[tokio::test]
async fn a_namespace_file_from_an_older_build_wins_until_it_is_removed() {
    let directory = scratch("namespace-file");
    {
        let (storage, _) = LogStorage::open(StorageOptions::new(&directory)).expect("opens");
        storage
            .save_namespace("logged".into())
            .await
            .expect("durable");
        storage.close();
    }
    let file = directory.join(NAMESPACE_FILE);
    std::fs::write(&file, "from the file").expect("written");
    let (storage, mut recovery) =
        LogStorage::open(StorageOptions::new(&directory)).expect("reopens");
    storage.close();
    assert_eq!(recovery.namespace.as_deref(), Some("from the file"));
    assert_eq!(recovery.namespace_file.as_deref(), Some(file.as_path()));
    assert!(!recovery.namespace_reset);
    recovery.reset_runtime_changes();
    assert_eq!(recovery.namespace.as_deref(), Some(""));
    assert!(recovery.namespace_reset);
    remove_namespace_file(&file).expect("removed");
    let (storage, recovery) = LogStorage::open(StorageOptions::new(&directory)).expect("reopens");
    storage.close();
    assert_eq!(recovery.namespace.as_deref(), Some("logged"));
    assert_eq!(recovery.namespace_file, None);
    let _ = std::fs::remove_dir_all(&directory);
}
