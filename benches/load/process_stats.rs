//! CPU time and memory of a process, read from `/proc/<pid>` (Linux only). The broker is
//! measured from outside, so any broker can be measured the same way.

use std::fs;
use std::io;

/// Clock ticks per second of `utime`/`stime` in `/proc/<pid>/stat`: `getconf CLK_TCK`, which
/// is 100 on every Linux architecture the project runs on.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// Which process: a pid, or `self`.
#[derive(Clone, Copy, Debug)]
pub enum Process {
    /// Another process.
    Pid(u32),
    /// The load generator itself.
    Myself,
}

impl Process {
    fn path(self, file: &str) -> String {
        match self {
            Process::Pid(pid) => format!("/proc/{pid}/{file}"),
            Process::Myself => format!("/proc/self/{file}"),
        }
    }

    /// User plus system CPU seconds used so far by all threads, living and exited.
    pub fn cpu_seconds(self) -> io::Result<f64> {
        let stat = fs::read_to_string(self.path("stat"))?;
        // The command name in parentheses may hold spaces: count fields after the last ')'.
        let after_name = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .ok_or_else(|| io::Error::other("malformed stat"))?;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // Field 3 (state) is fields[0]; utime is field 14, stime field 15.
        let ticks = |index: usize| -> io::Result<f64> {
            fields
                .get(index)
                .and_then(|field| field.parse::<f64>().ok())
                .ok_or_else(|| io::Error::other("malformed stat"))
        };
        Ok((ticks(11)? + ticks(12)?) / CLOCK_TICKS_PER_SECOND)
    }

    /// A `kB` line of `/proc/<pid>/status`, e.g. `VmRSS` (resident now) or `VmHWM` (peak).
    pub fn memory_kib(self, key: &str) -> io::Result<u64> {
        let status = fs::read_to_string(self.path("status"))?;
        status
            .lines()
            .find_map(|line| {
                let rest = line.strip_prefix(key)?.strip_prefix(':')?;
                rest.trim().trim_end_matches("kB").trim().parse().ok()
            })
            .ok_or_else(|| io::Error::other(format!("no {key} in status")))
    }
}

/// A reading of one process's counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    /// CPU seconds used so far.
    pub cpu_seconds: f64,
    /// Resident set now, KiB.
    pub resident_kib: u64,
    /// Peak resident set so far, KiB.
    pub peak_resident_kib: u64,
}

impl Snapshot {
    /// Reads all three counters; a process that is gone reads as zeros.
    pub fn take(process: Process) -> Snapshot {
        Snapshot {
            cpu_seconds: process.cpu_seconds().unwrap_or(0.0),
            resident_kib: process.memory_kib("VmRSS").unwrap_or(0),
            peak_resident_kib: process.memory_kib("VmHWM").unwrap_or(0),
        }
    }
}

/// Busy CPU seconds of the whole machine so far (all CPUs, every process), from the first
/// line of `/proc/stat`: what other processes used during a run is this minus the broker's
/// and the generator's share.
pub fn machine_busy_seconds() -> f64 {
    let Ok(stat) = fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().find(|line| line.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …: all but idle and iowait are busy.
    let busy: f64 = ticks
        .iter()
        .enumerate()
        .filter(|(index, _)| !matches!(index, 3 | 4) && *index < 8)
        .map(|(_, value)| value)
        .sum();
    busy / CLOCK_TICKS_PER_SECOND
}
