//! The broker as a real process (what users run): for what only a process shows — its log
//! lines, its memory, its file descriptors, its signals.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BINARY: &str = env!("CARGO_BIN_EXE_ferrobus");

/// A running `ferrobus` process; killed on drop.
pub struct BrokerProcess {
    /// The child process.
    pub child: Child,
    /// Where it listens.
    pub address: SocketAddr,
    /// Every stderr line so far.
    lines: Arc<Mutex<Vec<String>>>,
    /// Its scratch directory.
    directory: std::path::PathBuf,
}

impl BrokerProcess {
    /// Starts the binary with `config` on an ephemeral port, plus `arguments`, through `sh`
    /// so that `shell_prefix` (e.g. `ulimit -n 64;`) applies to it.
    pub fn start_with(config: &str, arguments: &[&str], shell_prefix: &str) -> BrokerProcess {
        let directory = std::env::temp_dir().join(format!(
            "ferrobus-process-{}-{}",
            std::process::id(),
            ferrobus::encoding::ids::unique_u64()
        ));
        std::fs::create_dir_all(&directory).expect("scratch dir");
        let config_path = directory.join("broker.toml");
        std::fs::write(&config_path, config).expect("config");
        // FERROBUS_PROCESS_BIN runs another build (e.g. an older one, to see a test fail).
        let binary = std::env::var("FERROBUS_PROCESS_BIN").unwrap_or_else(|_| BINARY.to_string());
        let mut command_line = format!(
            "{shell_prefix} exec '{binary}' --config '{}' --listen 127.0.0.1:0",
            config_path.display()
        );
        for argument in arguments {
            command_line.push_str(&format!(" '{argument}'"));
        }
        let mut child = Command::new("sh")
            .args(["-c", &command_line])
            .current_dir(&directory)
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        // Lines before the start-up line (warnings) are kept too.
        let mut early = Vec::new();
        let address = loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).unwrap_or(0);
            let address = line
                .split("listening on ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|text| text.parse::<SocketAddr>().ok());
            early.push(line);
            if let Some(address) = address {
                break address;
            }
            if read == 0 || early.len() > 50 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the broker did not start: {early:?}");
            }
        };
        let lines = Arc::new(Mutex::new(early));
        let collected = lines.clone();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                if let Ok(mut lines) = collected.lock() {
                    lines.push(line);
                }
            }
        });
        BrokerProcess {
            child,
            address,
            lines,
            directory,
        }
    }

    /// Starts the binary with `config`.
    pub fn start(config: &str, arguments: &[&str]) -> BrokerProcess {
        BrokerProcess::start_with(config, arguments, "")
    }

    /// The configuration file it was started with (tests rewrite it and reload).
    pub fn config_path(&self) -> std::path::PathBuf {
        self.directory.join("broker.toml")
    }

    /// Sends `signal` (a name `kill` knows: HUP, TERM, …) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// The stderr lines logged so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .map(|lines| lines.clone())
            .unwrap_or_default()
    }

    /// Waits until a logged line contains `text` (at most `within`).
    pub async fn wait_for_line(&self, text: &str, within: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(line) = self.lines().into_iter().find(|line| line.contains(text)) {
                return Some(line);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Resident memory of the process, in KiB.
    pub fn resident_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the process is alive");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.split_whitespace().next())
            .and_then(|value| value.parse().ok())
            .expect("VmRSS")
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}
