//! Tests of the write-ahead log against real files in a temporary directory.

use std::path::PathBuf;

use super::log::{Fault, LogOptions, StoreError, WriteAheadLog};
use super::segment;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDirectory(PathBuf);

impl TempDirectory {
    fn new(label: &str) -> TempDirectory {
        let path = std::env::temp_dir().join(format!(
            "ferrobus-log-{label}-{}-{}",
            std::process::id(),
            crate::encoding::ids::unique_u64()
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDirectory(path)
    }
}

impl Drop for TempDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn records(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range
        .map(|index| format!("record {index}").into_bytes())
        .collect()
}

fn last_segment(directory: &std::path::Path) -> PathBuf {
    let numbers = segment::list(directory).expect("list");
    directory.join(segment::file_name(*numbers.last().expect("a segment")))
}

#[tokio::test]
async fn appended_records_are_recovered_in_order_after_reopening() {
    let directory = TempDirectory::new("reopen");
    let (log, recovered) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("opens");
    assert!(recovered.records.is_empty());
    log.append(records(0..3))
        .await
        .expect("answered")
        .expect("durable");
    log.append(records(3..5))
        .await
        .expect("answered")
        .expect("durable");
    log.close();
    let (log, recovered) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("reopens");
    assert_eq!(recovered.records, records(0..5));
    assert_eq!(recovered.truncated_bytes, 0);
    log.append(records(5..6))
        .await
        .expect("answered")
        .expect("durable");
    log.close();
    let (_log, recovered) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("reopens");
    assert_eq!(recovered.records, records(0..6));
}

#[tokio::test]
async fn a_second_process_on_the_same_directory_is_refused() {
    let directory = TempDirectory::new("lock");
    let (log, _) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("opens");
    let second = WriteAheadLog::open(LogOptions::new(&directory.0));
    assert!(
        matches!(&second, Err(StoreError::Locked(path)) if path.contains("ferrobus-log-lock")),
        "{:?}",
        second.err()
    );
    log.close();
    WriteAheadLog::open(LogOptions::new(&directory.0)).expect("free again after close");
}

#[tokio::test]
async fn a_torn_tail_is_cut_off_and_writing_continues_after_it() {
    let directory = TempDirectory::new("torn");
    let (log, _) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("opens");
    log.append(records(0..4))
        .await
        .expect("answered")
        .expect("durable");
    log.close();
    // A crash in the middle of the next write: half a record at the end.
    let path = last_segment(&directory.0);
    let mut torn = Vec::new();
    segment::encode_record(&mut torn, b"never acknowledged");
    torn.truncate(torn.len() / 2);
    let mut bytes = std::fs::read(&path).expect("read");
    let whole = bytes.len();
    bytes.extend_from_slice(&torn);
    std::fs::write(&path, &bytes).expect("write");
    let (log, recovered) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("reopens");
    assert_eq!(recovered.records, records(0..4));
    assert_eq!(recovered.truncated_bytes, torn.len() as u64);
    assert_eq!(
        std::fs::metadata(&path).expect("stat").len(),
        whole as u64,
        "the tail is cut off on disk"
    );
    log.append(records(4..5))
        .await
        .expect("answered")
        .expect("durable");
    log.close();
    let (_log, recovered) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("reopens");
    assert_eq!(recovered.records, records(0..5));
}

#[tokio::test]
async fn damage_before_the_last_segment_refuses_to_start() {
    let directory = TempDirectory::new("damage");
    let options = LogOptions {
        segment_size: 20,
        ..LogOptions::new(&directory.0)
    };
    let (log, _) = WriteAheadLog::open(options.clone()).expect("opens");
    for index in 0..4 {
        log.append(records(index..index + 1))
            .await
            .expect("answered")
            .expect("durable");
    }
    log.close();
    let numbers = segment::list(&directory.0).expect("list");
    assert!(numbers.len() >= 3, "small segments rotate: {numbers:?}");
    let first = directory.0.join(segment::file_name(numbers[0]));
    let mut bytes = std::fs::read(&first).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&first, &bytes).expect("write");
    let reopened = WriteAheadLog::open(options);
    assert!(
        matches!(&reopened, Err(StoreError::Recovery(why)) if why.contains("not a torn write")),
        "{:?}",
        reopened.err()
    );
}

#[tokio::test]
async fn segments_rotate_and_recover_across_files() {
    let directory = TempDirectory::new("rotate");
    let options = LogOptions {
        segment_size: 40,
        ..LogOptions::new(&directory.0)
    };
    let (log, _) = WriteAheadLog::open(options.clone()).expect("opens");
    for index in 0..20 {
        log.append(records(index..index + 1))
            .await
            .expect("answered")
            .expect("durable");
    }
    log.close();
    assert!(segment::list(&directory.0).expect("list").len() > 2);
    let (_log, recovered) = WriteAheadLog::open(options).expect("reopens");
    assert_eq!(recovered.records, records(0..20));
}

#[tokio::test]
async fn a_full_disk_refuses_the_batch_keeps_nothing_of_it_and_recovers() {
    let directory = TempDirectory::new("full");
    let options = LogOptions {
        fault: Some(Fault::DiskFullAt(100)),
        ..LogOptions::new(&directory.0)
    };
    let (log, _) = WriteAheadLog::open(options).expect("opens");
    log.append(records(0..2))
        .await
        .expect("answered")
        .expect("fits");
    let refused = log.append(records(2..10)).await.expect("answered");
    assert!(
        matches!(refused, Err(StoreError::NoSpace(_))),
        "{refused:?}"
    );
    // Small enough to fit again: accepted (the log keeps going once there is room).
    log.append(records(2..3))
        .await
        .expect("answered")
        .expect("fits");
    log.close();
    let (_log, recovered) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("reopens");
    assert_eq!(
        recovered.records,
        records(0..3),
        "nothing of the refused batch is on disk"
    );
    assert_eq!(recovered.truncated_bytes, 0);
}

#[tokio::test]
async fn a_failed_sync_stops_acceptance_for_good() {
    let directory = TempDirectory::new("sync");
    let options = LogOptions {
        fault: Some(Fault::SyncFails),
        ..LogOptions::new(&directory.0)
    };
    let (log, _) = WriteAheadLog::open(options).expect("opens");
    let first = log.append(records(0..1)).await.expect("answered");
    assert!(matches!(first, Err(StoreError::SyncFailed(_))), "{first:?}");
    let second = log.append(records(1..2)).await.expect("answered");
    assert!(
        matches!(second, Err(StoreError::SyncFailed(_))),
        "never retry-and-pretend: {second:?}"
    );
}

#[tokio::test]
async fn concurrent_appends_share_syncs() {
    let directory = TempDirectory::new("group");
    let (log, _) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("opens");
    let mut answers = Vec::new();
    for index in 0..2_000 {
        answers.push(log.append(records(index..index + 1)));
    }
    for answer in answers {
        answer.await.expect("answered").expect("durable");
    }
    let statistics = log.statistics();
    let syncs = statistics.syncs.load(std::sync::atomic::Ordering::Relaxed);
    let written = statistics
        .records
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(written, 2_000);
    assert!(
        syncs < 2_000,
        "group commit: 2,000 appends in flight took {syncs} syncs"
    );
    log.close();
    let (_log, recovered) = WriteAheadLog::open(LogOptions::new(&directory.0)).expect("reopens");
    assert_eq!(recovered.records, records(0..2_000));
}

#[tokio::test]
async fn records_through_prepared_segments_are_recovered_and_nothing_prepared_is_left() {
    let directory = TempDirectory::new("prepared");
    let options = LogOptions {
        segment_size: 64 * 1024,
        ..LogOptions::new(&directory.0)
    };
    let (log, _) = WriteAheadLog::open(options.clone()).expect("opens");
    let record = |index: u32| -> Vec<u8> {
        let mut bytes = format!("record {index} ").into_bytes();
        bytes.resize(700 + (index as usize * 31) % 900, b'x');
        bytes
    };
    for index in 0..400 {
        log.append(vec![record(index)])
            .await
            .expect("answered")
            .expect("durable");
    }
    // Prepared segments were written in blocks over zeros: some were taken into use.
    let sizes: Vec<u64> = segment::list(&directory.0)
        .expect("list")
        .into_iter()
        .map(|number| {
            std::fs::metadata(directory.0.join(segment::file_name(number)))
                .expect("stat")
                .len()
        })
        .collect();
    assert!(sizes.len() > 3, "{sizes:?}");
    log.close();
    let leftovers: Vec<_> = std::fs::read_dir(&directory.0)
        .expect("list")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".wal") && name != "LOCK")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let (_log, recovered) = WriteAheadLog::open(options).expect("reopens");
    assert_eq!(recovered.records, (0..400).map(record).collect::<Vec<_>>());
    assert_eq!(recovered.truncated_bytes, 0);
}

/// Two prepared segments are kept ahead: after one request, two are taken without another,
/// and a stop removes what nobody took.
#[test]
fn the_preparer_keeps_two_segments_ahead_and_a_stop_removes_them() {
    use crate::store::active::Preparer;
    let directory = TempDirectory::new("prepare-ahead");
    let mut preparer = Preparer::start(&directory.0, 64 * 1024).expect("starts");
    preparer.request();
    let take = |preparer: &mut Preparer| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(prepared) = preparer.take() {
                return prepared;
            }
            assert!(std::time::Instant::now() < deadline, "no prepared segment");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    };
    let first = take(&mut preparer);
    let second = take(&mut preparer);
    drop((first, second));
    // Each take is followed by a request in the log; here one more, then a stop.
    preparer.request();
    preparer.stop();
    let prepared: Vec<_> = std::fs::read_dir(&directory.0)
        .expect("list")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".prepared"))
        .collect();
    // The two taken were not put into use here, so they stay; the two asked for after
    // them were removed by the stop.
    assert_eq!(prepared.len(), 2, "{prepared:?}");
}
