//! The `startup` command: spawns ferrobus with `--listen 127.0.0.1:0` several times and times
//! process spawn → port accepting a TCP connection; then reads the idle broker's RSS.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::options::StartupOptions;
use crate::process_stats::{Process, Snapshot};

/// How long one start may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// One start: how long it took and the idle RSS afterwards.
struct Start {
    /// Spawn → first accepted TCP connection.
    ready: Duration,
    /// Resident set after the settle time, KiB.
    resident_kib: u64,
}

/// Runs the starts and prints one `result` line.
pub fn main(options: StartupOptions) -> ExitCode {
    let mut starts = Vec::new();
    for _ in 0..options.runs.max(1) {
        match start_once(&options) {
            Ok(start) => starts.push(start),
            Err(error) => {
                eprintln!("load: start-up failed: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut ready: Vec<f64> = starts
        .iter()
        .map(|start| start.ready.as_secs_f64() * 1000.0)
        .collect();
    let mut resident: Vec<u64> = starts.iter().map(|start| start.resident_kib).collect();
    ready.sort_by(f64::total_cmp);
    resident.sort_unstable();
    println!(
        "result scenario=startup target=ferrobus runs={} startup_ms_median={:.2} \
         startup_ms_min={:.2} startup_ms_max={:.2} idle_rss_kib_median={} idle_rss_kib_min={} \
         idle_rss_kib_max={}",
        ready.len(),
        ready[ready.len() / 2],
        ready[0],
        ready[ready.len() - 1],
        resident[resident.len() / 2],
        resident[0],
        resident[resident.len() - 1],
    );
    ExitCode::SUCCESS
}

fn start_once(options: &StartupOptions) -> Result<Start, String> {
    // Durable runs start on an empty data directory of their own.
    let data_dir = std::env::temp_dir().join(format!(
        "ferrobus-startup-{}-{}",
        std::process::id(),
        next_run()
    ));
    let storage: Vec<std::ffi::OsString> = if options.durable {
        vec!["--data-dir".into(), data_dir.clone().into()]
    } else {
        vec!["--memory".into()]
    };
    let spawned_at = Instant::now();
    let mut child = Command::new(&options.broker)
        .arg("--config")
        .arg(&options.config)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .args(&storage)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("spawn {}: {error}", options.broker.display()))?;
    let result = wait_ready(&mut child, spawned_at).map(|ready| {
        thread::sleep(Duration::from_millis(options.settle_ms));
        Start {
            ready,
            resident_kib: Snapshot::take(Process::Pid(child.id())).resident_kib,
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data_dir);
    result
}

/// Reads the `listening on ADDRESS` log line, then connects until the port accepts.
fn wait_ready(child: &mut Child, spawned_at: Instant) -> Result<Duration, String> {
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (found, address) = mpsc::channel::<SocketAddr>();
    // The reader keeps draining stderr until the broker exits, so logging never blocks it.
    thread::spawn(move || {
        let mut found = Some(found);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(address) = listen_address(&line)
                && let Some(sender) = found.take()
            {
                let _ = sender.send(address);
            }
        }
    });
    let address = address
        .recv_timeout(START_TIMEOUT)
        .map_err(|_| "no 'listening on' line within 10 s".to_string())?;
    loop {
        if TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok() {
            return Ok(spawned_at.elapsed());
        }
        if spawned_at.elapsed() > START_TIMEOUT {
            return Err(format!("{address} did not accept within 10 s"));
        }
        thread::sleep(Duration::from_micros(100));
    }
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

/// A number that differs between calls, for scratch directory names.
fn next_run() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
