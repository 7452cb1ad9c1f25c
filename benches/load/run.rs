//! The `run` command: receivers attach first (or, with `--preload`, after all is sent), then
//! the senders; a watchdog stops receivers that wait in vain; then the dead-letter queues are
//! drained when messages were dead-lettered. `--send-only` and `--receive-only` split a run
//! in two halves, e.g. around a broker restart. Prints one `result` line.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::histogram::Histogram;
use crate::options::{RunOptions, SettleMode};
use crate::payload;
use crate::process_stats::{self, Process, Snapshot};
use crate::receiver::{self, Group, Policy, ReceiverReport, Shared};
use crate::sender::{self, Progress, SendPlan, SenderReport};
use crate::tally::Tally;

/// Checks the options, builds the runtime and runs.
pub fn main(options: RunOptions) -> ExitCode {
    if options.size < payload::MINIMUM_SIZE {
        eprintln!("load: --size must be at least {}", payload::MINIMUM_SIZE);
        return ExitCode::from(2);
    }
    let settles_individually = options.abandon_percent + options.dead_letter_percent > 0;
    if settles_individually && options.settle == SettleMode::Presettled {
        eprintln!("load: abandon and dead-letter need --settle at-least-once");
        return ExitCode::from(2);
    }
    if options.abandon_percent + options.dead_letter_percent > 100 || options.senders == 0 {
        eprintln!("load: percentages add up to at most 100; at least one sender");
        return ExitCode::from(2);
    }
    let runtime = match build_runtime(options.threads) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("load: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run(Arc::new(options)))
}

/// One thread by default: fe2o3-amqp 0.14 writes a transfer before it records the delivery as
/// unsettled, so on a multi-threaded runtime a fast broker's disposition can arrive in between
/// and be dropped, and the send then waits forever. With one thread that cannot happen.
pub fn build_runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}

/// Everything the watchdog looks after.
struct Watch {
    /// Groups currently receiving.
    groups: Mutex<Vec<Arc<Group>>>,
    /// Senders are done: from now on silence means the rest is lost.
    sending_done: AtomicBool,
    /// The coordinator is finished with the watchdog.
    finished: AtomicBool,
}

async fn run(options: Arc<RunOptions>) -> ExitCode {
    payload::start_clock();
    let broker = options.connect.broker_pid.map(Process::Pid);
    let broker_before = broker.map(Snapshot::take).unwrap_or_default();
    let myself_before = Snapshot::take(Process::Myself);
    let machine_before = process_stats::machine_busy_seconds();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(options.max_time);
    let addresses = if options.receive_from.is_empty() {
        vec![options.send_to.clone()]
    } else {
        options.receive_from.clone()
    };
    let groups: Vec<Arc<Group>> = if options.send_only {
        Vec::new()
    } else {
        addresses
            .into_iter()
            .map(|address| Arc::new(Group::new(address)))
            .collect()
    };
    let shared = Arc::new(Shared {
        last_progress: AtomicU64::new(payload::nanos_since_origin(Instant::now())),
    });
    let watch = Arc::new(Watch {
        groups: Mutex::new(groups.clone()),
        sending_done: AtomicBool::new(false),
        finished: AtomicBool::new(false),
    });
    let watchdog = tokio::spawn(watchdog(
        watch.clone(),
        shared.clone(),
        Duration::from_secs_f64(options.idle_timeout),
        deadline,
    ));
    let mut errors: Vec<String> = Vec::new();
    let policy = Policy {
        abandon_percent: options.abandon_percent,
        dead_letter_percent: options.dead_letter_percent,
    };

    if options.receive_only {
        // What an earlier `--send-only` run left: from now on silence means it is lost.
        watch.sending_done.store(true, Ordering::Release);
        for group in &groups {
            group.expected.store(options.count, Ordering::Release);
        }
    }
    let mut receiving = Vec::new();
    if !options.preload {
        receiving = start_receivers(&options, &groups, &shared, policy, &mut errors).await;
    }
    let senders = if options.receive_only {
        Vec::new()
    } else {
        send(&options, deadline).await
    };
    let mut sent = Tally::default();
    if options.receive_only {
        for number in 0..options.count {
            sent.insert(u32::try_from(number).unwrap_or(u32::MAX));
        }
    }
    let mut sender_totals = SenderReport::default();
    for report in &senders {
        sent.merge(&report.sent);
        sender_totals.refused += report.refused;
        sender_totals.worst_lag = sender_totals.worst_lag.max(report.worst_lag);
        sender_totals.first_send = earliest(sender_totals.first_send, report.first_send);
        sender_totals.last_outcome = latest(sender_totals.last_outcome, report.last_outcome);
        errors.extend(report.error.clone());
    }
    shared.last_progress.store(
        payload::nanos_since_origin(Instant::now()),
        Ordering::Relaxed,
    );
    watch.sending_done.store(true, Ordering::Release);
    for group in &groups {
        group.expected.store(sent.distinct(), Ordering::Release);
        group.stop_if_complete();
    }
    if options.preload {
        receiving = start_receivers(&options, &groups, &shared, policy, &mut errors).await;
    }
    let receivers = join_receivers(receiving, &groups, deadline).await;

    // Drain each address's dead-letter queue of what was dead-lettered there.
    let mut drained = vec![Tally::default(); groups.len()];
    if options.dead_letter_percent > 0 {
        let mut dead_letter_groups = Vec::new();
        for (index, group) in groups.iter().enumerate() {
            let mut dead_lettered = Tally::default();
            for report in &receivers[index] {
                dead_lettered.merge(&report.dead_lettered);
            }
            let address = options
                .dead_letter_address
                .clone()
                .unwrap_or_else(|| format!("{}/$DeadLetterQueue", group.address));
            let dead_letter_group = Arc::new(Group::new(address));
            dead_letter_group
                .expected
                .store(dead_lettered.distinct(), Ordering::Release);
            dead_letter_group.stop_if_complete();
            dead_letter_groups.push(dead_letter_group);
        }
        shared.last_progress.store(
            payload::nanos_since_origin(Instant::now()),
            Ordering::Relaxed,
        );
        if let Ok(mut watched) = watch.groups.lock() {
            watched.clone_from(&dead_letter_groups);
        }
        let mut drain_options = (*options).clone();
        drain_options.receivers = 1;
        let no_policy = Policy {
            abandon_percent: 0,
            dead_letter_percent: 0,
        };
        let draining = start_receivers(
            &Arc::new(drain_options),
            &dead_letter_groups,
            &shared,
            no_policy,
            &mut errors,
        )
        .await;
        let drain_reports = join_receivers(draining, &dead_letter_groups, deadline).await;
        for (index, reports) in drain_reports.iter().enumerate() {
            for report in reports {
                drained[index].merge(&report.completed);
            }
        }
    }
    watch.finished.store(true, Ordering::Release);
    let _ = watchdog.await;
    let broker_after = broker.map(Snapshot::take).unwrap_or_default();
    let myself_after = Snapshot::take(Process::Myself);
    let machine_busy = process_stats::machine_busy_seconds() - machine_before;

    let mut summary = Summary::new(&sent, &receivers, &drained, &mut errors);
    if options.receive_only {
        // Send times stamped by another process's clock: no latency to report.
        summary.latency = Histogram::default();
    }
    let send_seconds = span(sender_totals.first_send, sender_totals.last_outcome);
    let receive_seconds = span(summary.first_receive, summary.last_receive);
    let broker_cpu = broker_after.cpu_seconds - broker_before.cpu_seconds;
    let loadgen_cpu = myself_after.cpu_seconds - myself_before.cpu_seconds;
    let sent_count = sent.distinct();
    let latency = &summary.latency;
    let micros = |nanos: u64| nanos as f64 / 1000.0;
    println!(
        "result scenario={} target={} transport={} size={} credit={} senders={} receivers={} addresses={} \
         settle={:?} sent={} refused={} received={} sent_per_s={:.0} received_per_s={:.0} \
         p50_us={:.1} p99_us={:.1} p999_us={:.1} max_us={:.1} lost={} duplicates={} \
         abandoned={} dead_lettered={} dead_letter_received={} dead_letter_missing={} \
         broker_cpu_s={:.2} broker_us_per_msg={:.2} broker_us_per_delivery={:.2} \
         broker_peak_rss_kib={} broker_rss_kib={} \
         loadgen_cpu_s={:.2} other_cpu_s={:.2} worst_lag_ms={:.1} first_delivery_ms={:.1} \
         elapsed_s={:.2} errors={}",
        options.connect.scenario,
        options.connect.target,
        options.connect.transport_name(),
        options.size,
        options.credit,
        options.senders,
        options.receivers,
        groups.len(),
        options.settle,
        sent_count,
        sender_totals.refused,
        summary.settled,
        rate(sent_count, send_seconds),
        rate(summary.settled, receive_seconds),
        micros(latency.percentile(50.0)),
        micros(latency.percentile(99.0)),
        micros(latency.percentile(99.9)),
        micros(latency.max()),
        summary.lost,
        summary.duplicates,
        summary.abandoned,
        summary.dead_lettered,
        summary.dead_letter_received,
        summary.dead_letter_missing,
        broker_cpu,
        per_message(broker_cpu, sent_count),
        per_message(broker_cpu, summary.settled),
        broker_after.peak_resident_kib,
        broker_after.resident_kib,
        loadgen_cpu,
        (machine_busy - broker_cpu - loadgen_cpu).max(0.0),
        sender_totals.worst_lag.as_secs_f64() * 1000.0,
        span(Some(started), summary.first_receive) * 1000.0,
        started.elapsed().as_secs_f64(),
        errors.len(),
    );
    for error in errors.iter().take(5) {
        eprintln!("load: {error}");
    }
    if errors.is_empty() && summary.lost == 0 && summary.dead_letter_missing == 0 && sent_count > 0
    {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Starts `receivers` per group and waits until each has attached (or failed).
async fn start_receivers(
    options: &Arc<RunOptions>,
    groups: &[Arc<Group>],
    shared: &Arc<Shared>,
    policy: Policy,
    errors: &mut Vec<String>,
) -> Vec<(usize, JoinHandle<ReceiverReport>)> {
    let (attached, mut attachments) = mpsc::channel(groups.len() * options.receivers + 1);
    let mut tasks = Vec::new();
    for (group_index, group) in groups.iter().enumerate() {
        for index in 0..options.receivers {
            let task = tokio::spawn(receiver::run(
                options.clone(),
                group.clone(),
                shared.clone(),
                index,
                policy,
                attached.clone(),
            ));
            tasks.push((group_index, task));
        }
    }
    drop(attached);
    while let Some(outcome) = attachments.recv().await {
        if let Err(error) = outcome {
            errors.push(error);
        }
    }
    tasks
}

/// Waits for every receiver, giving up (and aborting them) at the deadline.
async fn join_receivers(
    tasks: Vec<(usize, JoinHandle<ReceiverReport>)>,
    groups: &[Arc<Group>],
    deadline: Instant,
) -> Vec<Vec<ReceiverReport>> {
    let mut reports: Vec<Vec<ReceiverReport>> = groups.iter().map(|_| Vec::new()).collect();
    for (group_index, mut task) in tasks {
        match tokio::time::timeout_at(deadline.into(), &mut task).await {
            Ok(Ok(report)) => reports[group_index].push(report),
            Ok(Err(error)) => reports[group_index].push(ReceiverReport {
                error: Some(format!("receiver task: {error}")),
                ..ReceiverReport::default()
            }),
            Err(_) => {
                task.abort();
                reports[group_index].push(ReceiverReport {
                    error: Some(format!(
                        "receiver of {} still running at --max-time; the group had {} messages",
                        groups[group_index].address,
                        groups[group_index].received.load(Ordering::Relaxed)
                    )),
                    ..ReceiverReport::default()
                });
            }
        }
    }
    reports
}

/// Runs the senders to the end (or the deadline).
async fn send(options: &Arc<RunOptions>, deadline: Instant) -> Vec<SenderReport> {
    let start = Instant::now() + Duration::from_millis(10);
    let until = options
        .duration
        .map(|seconds| start + Duration::from_secs_f64(seconds));
    let interval = options
        .rate
        .filter(|rate| *rate > 0.0)
        .map(|rate| Duration::from_secs_f64(options.senders as f64 / rate));
    let mut tasks = Vec::new();
    let mut progress = Vec::new();
    for index in 0..options.senders {
        let counters = Arc::new(Progress::default());
        progress.push(counters.clone());
        let share = options.count / options.senders as u64
            + u64::from((index as u64) < options.count % options.senders as u64);
        let plan = SendPlan {
            index,
            senders: options.senders,
            count: share,
            until,
            interval,
            start,
            progress: counters,
        };
        tasks.push(tokio::spawn(sender::run(options.clone(), plan)));
    }
    let mut reports = Vec::new();
    for (mut task, counters) in tasks.into_iter().zip(progress) {
        match tokio::time::timeout_at(deadline.into(), &mut task).await {
            Ok(Ok(report)) => reports.push(report),
            Ok(Err(error)) => reports.push(SenderReport {
                error: Some(format!("sender task: {error}")),
                ..SenderReport::default()
            }),
            Err(_) => {
                task.abort();
                reports.push(SenderReport {
                    error: Some(format!(
                        "sender still running at --max-time: {} handed to the link, {} settled",
                        counters.handed_over.load(Ordering::Relaxed),
                        counters.settled.load(Ordering::Relaxed)
                    )),
                    ..SenderReport::default()
                });
            }
        }
    }
    reports
}

/// Stops receivers that have waited `idle` since the last delivery after sending ended, and
/// all of them at the deadline.
async fn watchdog(watch: Arc<Watch>, shared: Arc<Shared>, idle: Duration, deadline: Instant) {
    let idle_nanos = u64::try_from(idle.as_nanos()).unwrap_or(u64::MAX);
    while !watch.finished.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = Instant::now();
        let silent = payload::nanos_since_origin(now)
            .saturating_sub(shared.last_progress.load(Ordering::Relaxed));
        let give_up =
            now >= deadline || (watch.sending_done.load(Ordering::Acquire) && silent > idle_nanos);
        if give_up && let Ok(groups) = watch.groups.lock() {
            for group in groups.iter() {
                group.stop.send_replace(true);
            }
        }
    }
}

/// Counts over all receivers.
struct Summary {
    /// Completed plus dead-lettered, over all addresses.
    settled: u64,
    /// Sent numbers some address never settled, summed over addresses.
    lost: u64,
    /// Numbers settled more than once (within or across receivers, completed and
    /// dead-lettered, or drained twice).
    duplicates: u64,
    abandoned: u64,
    dead_lettered: u64,
    dead_letter_received: u64,
    /// Dead-lettered numbers not found on the dead-letter queue.
    dead_letter_missing: u64,
    latency: Histogram,
    first_receive: Option<Instant>,
    last_receive: Option<Instant>,
}

impl Summary {
    fn new(
        sent: &Tally,
        receivers: &[Vec<ReceiverReport>],
        drained: &[Tally],
        errors: &mut Vec<String>,
    ) -> Summary {
        let mut summary = Summary {
            settled: 0,
            lost: 0,
            duplicates: 0,
            abandoned: 0,
            dead_lettered: 0,
            dead_letter_received: 0,
            dead_letter_missing: 0,
            latency: Histogram::default(),
            first_receive: None,
            last_receive: None,
        };
        for (reports, drained) in receivers.iter().zip(drained) {
            let mut completed = Tally::default();
            let mut dead_lettered = Tally::default();
            let mut foreign = 0;
            for report in reports {
                completed.merge(&report.completed);
                dead_lettered.merge(&report.dead_lettered);
                summary.latency.merge(&report.latency);
                summary.abandoned += report.abandoned;
                foreign += report.foreign;
                summary.first_receive = earliest(summary.first_receive, report.first_receive);
                summary.last_receive = latest(summary.last_receive, report.last_receive);
                errors.extend(report.error.clone());
            }
            if foreign > 0 {
                errors.push(format!("{foreign} deliveries were not from this run"));
            }
            summary.duplicates += completed.duplicates()
                + dead_lettered.duplicates()
                + completed.overlap(&dead_lettered)
                + drained.duplicates();
            summary.settled += completed.distinct() + dead_lettered.distinct();
            summary.dead_lettered += dead_lettered.distinct();
            summary.dead_letter_received += drained.distinct();
            summary.dead_letter_missing +=
                dead_lettered.distinct() - dead_lettered.overlap(drained);
            let mut settled = completed;
            settled.merge(&dead_lettered);
            summary.lost += sent.distinct() - sent.overlap(&settled);
        }
        summary
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn latest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn span(from: Option<Instant>, to: Option<Instant>) -> f64 {
    match (from, to) {
        (Some(from), Some(to)) => to.saturating_duration_since(from).as_secs_f64(),
        _ => 0.0,
    }
}

/// Microseconds of `seconds` per message.
fn per_message(seconds: f64, count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        seconds * 1e6 / count as f64
    }
}

fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}
