//! Commit latency and throughput of the Raft path (`src/cluster`: every write one entry of
//! its placement group's openraft log) against the direct write-ahead log (`LogStorage`
//! appends), in the same run: interleaved rounds (the order alternates), a fresh data
//! directory per round on the working directory's disk, medians with ranges.
//!
//!   cargo bench --bench commit -- [--rounds N] [--count N] [--writers W] [--groups G]
//!   cargo bench --bench commit -- --started-groups N
//!
//! Scenarios: one writer committing one turn at a time (latency of one commit), and W
//! writers over G groups at once (each with one turn in flight, as entity actors are).
//! A turn is one change of 1 KiB. Defaults: 5 rounds, 2,000 commits, 64 writers, 8 groups.
//! `--started-groups N` instead writes one turn to each of N groups and reports what a
//! started group costs in resident memory (its Raft tasks and state stay while the broker
//! runs) and how long starting one takes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrobus::broker::entity::state::Change;
use ferrobus::broker::storage::DurableLog;
use ferrobus::cluster::RaftLog;
use ferrobus::config::ClusterConfig;
use ferrobus::store::storage::{LogStorage, StorageOptions};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Direct,
    Raft,
}

struct Options {
    started_groups: usize,
    rounds: usize,
    count: usize,
    writers: usize,
    groups: usize,
}

fn options() -> Options {
    let mut options = Options {
        started_groups: 0,
        rounds: 5,
        count: 2000,
        writers: 64,
        groups: 8,
    };
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let mut at = 0;
    while at < arguments.len() {
        let value = || -> usize {
            arguments
                .get(at + 1)
                .and_then(|text| text.parse().ok())
                .unwrap_or_else(|| panic!("{} needs a number", arguments[at]))
        };
        match arguments[at].as_str() {
            "--rounds" => options.rounds = value(),
            "--count" => options.count = value(),
            "--writers" => options.writers = value(),
            "--groups" => options.groups = value(),
            "--started-groups" => options.started_groups = value(),
            // cargo bench passes --bench.
            _ => {
                at += 1;
                continue;
            }
        }
        at += 2;
    }
    options
}

fn turn(writer: usize) -> Vec<Change> {
    vec![Change::SessionState {
        session_id: format!("w{writer}"),
        state: Some(vec![7u8; 1024]),
    }]
}

fn scratch(round: usize, path: Path) -> PathBuf {
    let directory = std::env::current_dir()
        .expect("a working directory")
        .join("target")
        .join(format!(
            "commit-bench-{}-{round}-{path:?}",
            std::process::id()
        ));
    let _ = std::fs::remove_dir_all(&directory);
    directory
}

/// One path's figures over the rounds: p50 and p99 in µs, commits per second.
type Figures = (Path, Vec<f64>, Vec<f64>, Vec<f64>);

struct Measured {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

async fn run(path: Path, round: usize, writers: usize, groups: usize, count: usize) -> Measured {
    let directory = scratch(round, path);
    let (storage, recovery) =
        LogStorage::open(StorageOptions::new(&directory)).expect("the data directory opens");
    let log: Arc<dyn DurableLog> = match path {
        Path::Direct => Arc::new(storage.clone()),
        Path::Raft => Arc::new(
            RaftLog::new(storage.clone(), &recovery.groups, ClusterConfig::default())
                .expect("the Raft log starts"),
        ),
    };
    // Each group starts (and elects itself) before the clock runs.
    for group in 0..groups {
        log.append(vec![(format!("g{group}"), turn(0))])
            .await
            .expect("committed");
    }
    let per_writer = count / writers;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let log = log.clone();
        let entity = format!("g{}", writer % groups);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_writer);
            for _ in 0..per_writer {
                let begun = Instant::now();
                log.append(vec![(entity.clone(), turn(writer))])
                    .await
                    .expect("committed");
                latencies.push(begun.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::with_capacity(count);
    for task in tasks {
        latencies.extend(task.await.expect("a writer finishes"));
    }
    let elapsed = started.elapsed();
    drop(log);
    storage.close();
    let _ = std::fs::remove_dir_all(&directory);
    Measured { latencies, elapsed }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn median(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(|a, b| a.total_cmp(b));
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

/// Resident memory of this process, in bytes.
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0)
        * 1024
}

async fn started_groups(count: usize) {
    let directory = scratch(0, Path::Raft);
    let (storage, recovery) =
        LogStorage::open(StorageOptions::new(&directory)).expect("the data directory opens");
    let log = RaftLog::new(storage.clone(), &recovery.groups, ClusterConfig::default())
        .expect("the Raft log starts");
    log.append(vec![("warm".to_string(), turn(0))])
        .await
        .expect("committed");
    let before = resident();
    let started = Instant::now();
    let mut tasks = Vec::new();
    let log = Arc::new(log);
    for chunk in 0..8 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for group in (chunk..count).step_by(8) {
                log.append(vec![(format!("g{group}"), turn(group))])
                    .await
                    .expect("committed");
            }
        }));
    }
    for task in tasks {
        task.await.expect("a writer finishes");
    }
    let elapsed = started.elapsed();
    let after = resident();
    println!(
        "{count} groups started (one 1 KiB write each) in {:.0} ms ({:.0} us a group); resident memory {:.1} MiB -> {:.1} MiB: {:.1} KiB a group",
        elapsed.as_secs_f64() * 1000.0,
        elapsed.as_secs_f64() * 1e6 / count as f64,
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after.saturating_sub(before)) as f64 / 1024.0 / count as f64
    );
    log.shutdown().await;
    storage.close();
    let _ = std::fs::remove_dir_all(&directory);
}

fn main() {
    let options = options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if options.started_groups > 0 {
        runtime.block_on(started_groups(options.started_groups));
        return;
    }
    let scenarios = [
        ("1 writer", 1usize, 1usize, options.count / 4),
        (
            "concurrent",
            options.writers,
            options.groups,
            options.count * 4,
        ),
    ];
    println!(
        "commit bench: {} rounds, 1 KiB turns, data directory under target/ (the working directory's disk)",
        options.rounds
    );
    println!(
        "{:<12} {:<7} {:>18} {:>18} {:>22}",
        "scenario", "path", "p50 µs", "p99 µs", "commits/s"
    );
    for (name, writers, groups, count) in scenarios {
        let mut figures: Vec<Figures> = [Path::Direct, Path::Raft]
            .into_iter()
            .map(|path| (path, Vec::new(), Vec::new(), Vec::new()))
            .collect();
        for round in 0..options.rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let path = figures[which].0;
                let mut measured = runtime.block_on(run(path, round, writers, groups, count));
                measured.latencies.sort();
                let entry = &mut figures[which];
                entry
                    .1
                    .push(percentile(&measured.latencies, 0.5).as_secs_f64() * 1e6);
                entry
                    .2
                    .push(percentile(&measured.latencies, 0.99).as_secs_f64() * 1e6);
                entry
                    .3
                    .push(measured.latencies.len() as f64 / measured.elapsed.as_secs_f64());
            }
        }
        let mut medians = Vec::new();
        for (path, p50, p99, rate) in &mut figures {
            let (p50, p50_low, p50_high) = median(p50);
            let (p99, p99_low, p99_high) = median(p99);
            let (rate, rate_low, rate_high) = median(rate);
            println!(
                "{name:<12} {:<7} {:>18} {:>18} {:>22}",
                format!("{path:?}").to_lowercase(),
                format!("{p50:.0} ({p50_low:.0}–{p50_high:.0})"),
                format!("{p99:.0} ({p99_low:.0}–{p99_high:.0})"),
                format!("{rate:.0} ({rate_low:.0}–{rate_high:.0})"),
            );
            medians.push((p50, p99, rate));
        }
        println!(
            "{name:<12} raft/direct: p50 {:.2}×, p99 {:.2}×, throughput {:.2}×",
            medians[1].0 / medians[0].0,
            medians[1].1 / medians[0].1,
            medians[1].2 / medians[0].2
        );
    }
}
