//! Storage engine comparison for ferrobus issue 11 (S2-like workload): ferrobus's own
//! write-ahead log (group commit, one writer thread) against fjall 2 (LSM) with SyncAll.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrobus::store::log::{LogOptions, WriteAheadLog};
use fjall::{Config, PartitionCreateOptions, PersistMode};

const VALUE: usize = 1100;
const SECONDS: f64 = 3.0;

fn scratch(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("engines-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    path
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p) as usize]
}

struct Outcome {
    puts_per_s: f64,
    syncs_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    disk_mb: f64,
}

fn dir_size(path: &std::path::Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            let meta = entry.metadata().unwrap();
            total += if meta.is_dir() {
                dir_size(&entry.path())
            } else {
                meta.len()
            };
        }
    }
    total
}

async fn wal(producers: usize, batch: usize) -> Outcome {
    let dir = scratch(&format!("wal-{producers}-{batch}"));
    let (log, _) = WriteAheadLog::open(LogOptions::new(&dir)).unwrap();
    let puts = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for producer in 0..producers {
        let log = log.clone();
        let puts = puts.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut key = 0u64;
            while started.elapsed().as_secs_f64() < SECONDS {
                // One turn = one log record: B puts of ~1.1 KB and the removes of the last turn.
                let mut record = Vec::with_capacity(batch * (VALUE + 40));
                for _ in 0..batch {
                    record.extend_from_slice(&(producer as u64).to_be_bytes());
                    record.extend_from_slice(&key.to_be_bytes());
                    record.extend(std::iter::repeat_n(7u8, VALUE));
                    record.extend_from_slice(&[0u8; 40]);
                    key += 1;
                }
                let turn = Instant::now();
                log.append(vec![record]).await.unwrap().unwrap();
                latencies.push(turn.elapsed().as_secs_f64() * 1000.0);
                puts.fetch_add(batch as u64, Ordering::Relaxed);
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let syncs = log.statistics().syncs.load(Ordering::Relaxed);
    log.close();
    let outcome = Outcome {
        puts_per_s: puts.load(Ordering::Relaxed) as f64 / elapsed,
        syncs_per_s: syncs as f64 / elapsed,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        disk_mb: dir_size(&dir) as f64 / 1e6,
    };
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn fjall_run(producers: usize, batch: usize) -> Outcome {
    let dir = scratch(&format!("fjall-{producers}-{batch}"));
    let keyspace = Config::new(&dir).open().unwrap();
    let partition = keyspace
        .open_partition("messages", PartitionCreateOptions::default())
        .unwrap();
    let puts = Arc::new(AtomicU64::new(0));
    let syncs = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut threads = Vec::new();
    for producer in 0..producers {
        let keyspace = keyspace.clone();
        let partition = partition.clone();
        let puts = puts.clone();
        let syncs = syncs.clone();
        threads.push(std::thread::spawn(move || {
            let mut latencies = Vec::new();
            let mut key = 0u64;
            let mut previous: Vec<Vec<u8>> = Vec::new();
            while started.elapsed().as_secs_f64() < SECONDS {
                let mut write = keyspace.batch().durability(Some(PersistMode::SyncAll));
                for old in previous.drain(..) {
                    write.remove(&partition, old);
                }
                for _ in 0..batch {
                    let mut k = (producer as u64).to_be_bytes().to_vec();
                    k.extend_from_slice(&key.to_be_bytes());
                    write.insert(&partition, k.clone(), vec![7u8; VALUE]);
                    previous.push(k);
                    key += 1;
                }
                let turn = Instant::now();
                write.commit().unwrap();
                syncs.fetch_add(1, Ordering::Relaxed);
                latencies.push(turn.elapsed().as_secs_f64() * 1000.0);
                puts.fetch_add(batch as u64, Ordering::Relaxed);
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for thread in threads {
        latencies.extend(thread.join().unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let outcome = Outcome {
        puts_per_s: puts.load(Ordering::Relaxed) as f64 / elapsed,
        syncs_per_s: syncs.load(Ordering::Relaxed) as f64 / elapsed,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        disk_mb: dir_size(&dir) as f64 / 1e6,
    };
    drop(partition);
    drop(keyspace);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn recovery() -> (f64, f64) {
    const COUNT: usize = 1_000_000;
    let dir = scratch("wal-recovery");
    {
        let (log, _) = WriteAheadLog::open(LogOptions::new(&dir)).unwrap();
        for chunk in 0..(COUNT / 1000) {
            let records: Vec<Vec<u8>> = (0..1000)
                .map(|i| {
                    let mut r = ((chunk * 1000 + i) as u64).to_be_bytes().to_vec();
                    r.extend(std::iter::repeat_n(7u8, VALUE));
                    r
                })
                .collect();
            log.append(records).await.unwrap().unwrap();
        }
        log.close();
    }
    let started = Instant::now();
    let (log, recovered) = WriteAheadLog::open(LogOptions::new(&dir)).unwrap();
    assert_eq!(recovered.records.len(), COUNT);
    let wal_s = started.elapsed().as_secs_f64();
    log.close();
    let _ = std::fs::remove_dir_all(&dir);

    let dir = scratch("fjall-recovery");
    {
        let keyspace = Config::new(&dir).open().unwrap();
        let partition = keyspace
            .open_partition("messages", PartitionCreateOptions::default())
            .unwrap();
        for chunk in 0..(COUNT / 1000) {
            let mut write = keyspace.batch().durability(Some(PersistMode::SyncAll));
            for i in 0..1000 {
                write.insert(
                    &partition,
                    ((chunk * 1000 + i) as u64).to_be_bytes().to_vec(),
                    vec![7u8; VALUE],
                );
            }
            write.commit().unwrap();
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let keyspace = Config::new(&dir).open().unwrap();
    let partition = keyspace
        .open_partition("messages", PartitionCreateOptions::default())
        .unwrap();
    let mut count = 0;
    for item in partition.iter() {
        let _ = item.unwrap();
        count += 1;
    }
    assert_eq!(count, COUNT);
    let fjall_s = started.elapsed().as_secs_f64();
    drop(partition);
    drop(keyspace);
    let _ = std::fs::remove_dir_all(&dir);
    (wal_s, fjall_s)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "| engine | producers | records per turn | durable puts/s | syncs/s | turn p50 ms | turn p99 ms | disk MB at end |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for producers in [1, 4, 16, 64] {
        for batch in [1, 16] {
            let a = wal(producers, batch).await;
            println!(
                "| ferrobus WAL | {producers} | {batch} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} |",
                a.puts_per_s, a.syncs_per_s, a.p50_ms, a.p99_ms, a.disk_mb
            );
            let b = tokio::task::spawn_blocking(move || fjall_run(producers, batch))
                .await
                .unwrap();
            println!(
                "| fjall 2 SyncAll | {producers} | {batch} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} |",
                b.puts_per_s, b.syncs_per_s, b.p50_ms, b.p99_ms, b.disk_mb
            );
        }
    }
    let (wal_s, fjall_s) = recovery().await;
    println!(
        "\nrecovery of 1,000,000 records of 1.1 KB: ferrobus WAL {wal_s:.2} s (open + read every record), fjall {fjall_s:.2} s (open + iterate)"
    );
}
