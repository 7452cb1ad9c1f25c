//! The `startup` command: spawns ferrobus with `--listen 127.0.0.1:0` several times and times
//! process spawn → port accepting a TCP connection (and, with `--first-delivery-from`, spawn →
//! the first stored message received); then reads the idle broker's RSS. Durable starts also
//! report the broker's own `recovered the data directory in X ms` figure.
//!
//! In memory by default (`--memory`); `--durable` starts every run on a fresh, empty data
//! directory; `--broker-arg --data-dir --broker-arg DIR` starts on an existing one (the
//! recovery scenario). The broker is killed (SIGKILL) after each start.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::options::{ConnectOptions, Sasl, StartupOptions};
use crate::process_stats::{Process, Snapshot};

/// One start: how long it took and the idle RSS afterwards.
struct Start {
    /// Spawn → first accepted TCP connection.
    ready: Duration,
    /// Spawn → first message received, when one was awaited.
    first_delivery: Option<Duration>,
    /// The broker's `recovered the data directory in X ms (N message records)`, if logged.
    recovered: Option<(f64, u64)>,
    /// Resident set after the settle time, KiB.
    resident_kib: u64,
}

/// What the broker's log reader finds.
enum LogLine {
    Listening(SocketAddr),
    Recovered(f64, u64),
}

/// Runs the starts and prints one `result` line.
pub fn main(options: StartupOptions) -> ExitCode {
    let names_storage = options
        .broker_args
        .iter()
        .any(|arg| arg == "--data-dir" || arg.starts_with("--data-dir=") || arg == "--memory");
    if options.durable && names_storage {
        eprintln!("load: --durable makes its own data directories; drop --broker-arg --data-dir");
        return ExitCode::from(2);
    }
    let mut starts = Vec::new();
    for _ in 0..options.runs.max(1) {
        match start_once(&options, names_storage) {
            Ok(start) => starts.push(start),
            Err(error) => {
                eprintln!("load: start-up failed: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    let ready: Vec<f64> = starts.iter().map(|start| millis(start.ready)).collect();
    let resident: Vec<f64> = starts
        .iter()
        .map(|start| start.resident_kib as f64)
        .collect();
    let (ready_median, ready_min, ready_max) = spread(ready);
    let (resident_median, resident_min, resident_max) = spread(resident);
    let mut line = format!(
        "result scenario=startup target=ferrobus runs={} startup_ms_median={ready_median:.2} \
         startup_ms_min={ready_min:.2} startup_ms_max={ready_max:.2} \
         idle_rss_kib_median={resident_median:.0} idle_rss_kib_min={resident_min:.0} \
         idle_rss_kib_max={resident_max:.0}",
        starts.len(),
    );
    let recovered: Vec<(f64, u64)> = starts.iter().filter_map(|start| start.recovered).collect();
    if !recovered.is_empty() {
        let records = recovered
            .iter()
            .map(|(_, records)| *records)
            .max()
            .unwrap_or(0);
        let (median, min, max) = spread(recovered.iter().map(|(ms, _)| *ms).collect());
        line.push_str(&format!(
            " recovered_ms_median={median:.1} recovered_ms_min={min:.1} \
             recovered_ms_max={max:.1} recovered_message_records={records}"
        ));
    }
    let delivered: Vec<f64> = starts
        .iter()
        .filter_map(|start| start.first_delivery.map(millis))
        .collect();
    if !delivered.is_empty() {
        let (median, min, max) = spread(delivered);
        line.push_str(&format!(
            " first_delivery_ms_median={median:.1} first_delivery_ms_min={min:.1} \
             first_delivery_ms_max={max:.1}"
        ));
    }
    println!("{line}");
    ExitCode::SUCCESS
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Median, minimum and maximum of a non-empty list.
fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

fn start_once(options: &StartupOptions, names_storage: bool) -> Result<Start, String> {
    // Durable runs start on an empty data directory of their own.
    let scratch: Option<PathBuf> = options.durable.then(|| {
        std::env::temp_dir().join(format!(
            "ferrobus-startup-{}-{}",
            std::process::id(),
            next_run()
        ))
    });
    let mut args: Vec<OsString> = Vec::new();
    if let Some(directory) = &scratch {
        args.push("--data-dir".into());
        args.push(directory.clone().into());
    } else if !names_storage {
        args.push("--memory".into());
    }
    args.extend(options.broker_args.iter().map(OsString::from));
    let timeout = Duration::from_secs_f64(options.timeout_s.max(0.1));
    let spawned_at = Instant::now();
    let mut child = Command::new(&options.broker)
        .arg("--config")
        .arg(&options.config)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("spawn {}: {error}", options.broker.display()))?;
    let durable = scratch.is_some() || !args.iter().any(|arg| arg == "--memory");
    let result = measure(&mut child, spawned_at, timeout, durable, options);
    let _ = child.kill();
    let _ = child.wait();
    if let Some(directory) = &scratch {
        let _ = std::fs::remove_dir_all(directory);
    }
    result
}

/// Everything timed on one running broker.
fn measure(
    child: &mut Child,
    spawned_at: Instant,
    timeout: Duration,
    durable: bool,
    options: &StartupOptions,
) -> Result<Start, String> {
    let (address, lines) = wait_ready(child, spawned_at, timeout)?;
    let ready = spawned_at.elapsed();
    let first_delivery = match &options.first_delivery_from {
        Some(source) => Some(first_delivery(address, source, spawned_at, timeout)?),
        None => None,
    };
    // The broker logs its recovery right after the `listening on` line.
    let recovered = if durable {
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            match lines.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(LogLine::Recovered(ms, records)) => break Some((ms, records)),
                Ok(LogLine::Listening(_)) => continue,
                Err(_) => break None,
            }
        }
    } else {
        None
    };
    thread::sleep(Duration::from_millis(options.settle_ms));
    Ok(Start {
        ready,
        first_delivery,
        recovered,
        resident_kib: Snapshot::take(Process::Pid(child.id())).resident_kib,
    })
}

/// Reads the `listening on ADDRESS` log line, then connects until the port accepts. Returns
/// the address and the channel that carries the log lines still to come.
fn wait_ready(
    child: &mut Child,
    spawned_at: Instant,
    timeout: Duration,
) -> Result<(SocketAddr, mpsc::Receiver<LogLine>), String> {
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (found, lines) = mpsc::channel::<LogLine>();
    // The reader keeps draining stderr until the broker exits, so logging never blocks it.
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let parsed = listen_address(&line)
                .map(LogLine::Listening)
                .or_else(|| recovered(&line).map(|(ms, records)| LogLine::Recovered(ms, records)));
            if let Some(parsed) = parsed {
                let _ = found.send(parsed);
            }
        }
    });
    let address = loop {
        match lines.recv_timeout(timeout.saturating_sub(spawned_at.elapsed())) {
            Ok(LogLine::Listening(address)) => break address,
            Ok(LogLine::Recovered(..)) => continue,
            Err(_) => {
                return Err(format!(
                    "no 'listening on' line within {:.1} s",
                    timeout.as_secs_f64()
                ));
            }
        }
    };
    loop {
        if TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok() {
            return Ok((address, lines));
        }
        if spawned_at.elapsed() > timeout {
            return Err(format!("{address} did not accept within {timeout:?}"));
        }
        thread::sleep(Duration::from_micros(100));
    }
}

/// Spawn → the first message received from `source` on a fresh AMQP connection.
fn first_delivery(
    address: SocketAddr,
    source: &str,
    spawned_at: Instant,
    timeout: Duration,
) -> Result<Duration, String> {
    use fe2o3_amqp::Receiver;
    use fe2o3_amqp::link::receiver::CreditMode;
    use fe2o3_amqp::types::messaging::Body;
    use fe2o3_amqp::types::primitives::Value;

    let runtime = crate::run::build_runtime(1).map_err(|error| error.to_string())?;
    let connect = ConnectOptions {
        url: format!("amqp://{address}"),
        transport: None,
        ca: None,
        sasl: Sasl::Anonymous,
        user: String::new(),
        password: String::new(),
        broker_pid: None,
        scenario: "startup".to_string(),
        target: "ferrobus".to_string(),
    };
    runtime.block_on(async {
        let remaining = timeout.saturating_sub(spawned_at.elapsed());
        let attempt = async {
            let mut endpoint = crate::connect::open(&connect, "load-startup")
                .await
                .map_err(|error| error.to_string())?;
            let mut receiver = Receiver::builder()
                .name("load-startup-receiver")
                .source(source)
                .credit_mode(CreditMode::Auto(1))
                .attach(&mut endpoint.session)
                .await
                .map_err(|error| format!("attach receiver to {source}: {error}"))?;
            let delivery = receiver
                .recv::<Body<Value>>()
                .await
                .map_err(|error| format!("receive from {source}: {error}"));
            let at = spawned_at.elapsed();
            // Left unsettled: the broker is killed next, the message stays stored.
            drop(delivery?);
            Ok::<Duration, String>(at)
        };
        tokio::time::timeout(remaining, attempt)
            .await
            .map_err(|_| format!("no message from {source} within {timeout:?} of the spawn"))?
    })
}

/// The address in a `… listening on 127.0.0.1:PORT …` line.
pub fn listen_address(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on ").nth(1)?;
    let token: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
        .collect();
    token.parse().ok()
}

/// Milliseconds and message records in a `recovered the data directory in X ms (N message
/// records)` line.
fn recovered(line: &str) -> Option<(f64, u64)> {
    let rest = line.split("recovered the data directory in ").nth(1)?;
    let (ms, rest) = rest.split_once(" ms")?;
    let records = rest
        .trim_start()
        .strip_prefix('(')
        .and_then(|inner| inner.split_whitespace().next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    Some((ms.trim().parse().ok()?, records))
}

/// A number that differs between calls, for scratch directory names.
fn next_run() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
