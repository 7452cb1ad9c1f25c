//! The broker-wide memory budget (issue 10, item 10): what every entity stores is also
//! charged to one shared counter, and a send that would take it past the limit is refused
//! with the quota error, whatever mix of entities fills the memory — so the broker refuses
//! work before the host runs out. Entity actors charge and release it; the pure core never
//! sees it (admission is the shell's decision, like the reply channel).

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes all entities together may store, and how many they do.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
}

impl Default for MemoryBudget {
    fn default() -> MemoryBudget {
        MemoryBudget::new(u64::MAX)
    }
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether `bytes` more fit; `Err(used)` when they do not.
    pub fn admit(&self, bytes: u64) -> Result<(), u64> {
        let used = self.used();
        if used.saturating_add(bytes) > self.limit {
            Err(used)
        } else {
            Ok(())
        }
    }

    /// Moves one entity's charge from `before` to `after` bytes.
    pub fn recharge(&self, before: u64, after: u64) {
        if after > before {
            self.used.fetch_add(after - before, Ordering::Relaxed);
        } else if before > after {
            self.used.fetch_sub(before - after, Ordering::Relaxed);
        }
    }
}

/// The default budget: half of the machine's memory (from `/proc/meminfo`), at least
/// 256 MiB; 4 GiB where the machine's memory cannot be read.
pub fn default_limit() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map(|kib| kib * 1024);
    match total {
        Some(bytes) => (bytes / 2).max(256 * 1024 * 1024),
        None => 4 * 1024 * 1024 * 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_and_charges_add_up() {
        let budget = MemoryBudget::new(1000);
        assert_eq!(budget.admit(1000), Ok(()));
        budget.recharge(0, 600);
        assert_eq!(budget.admit(500), Err(600));
        budget.recharge(600, 100);
        assert_eq!(budget.used(), 100);
        assert_eq!(budget.admit(900), Ok(()));
    }

    #[test]
    fn the_default_is_half_the_machine() {
        let limit = default_limit();
        assert!(limit >= 256 * 1024 * 1024);
    }
}
