//! Who leads an entity's placement group, and the seed its lock tokens come from
//! (`docs/scale-out.md` §4 "Locks are leader-local").
//!
//! Locks are not durable: a restart, and in a cluster a leader change, releases every lock,
//! and a settlement with a token from before must fail with lock-lost. A token only counts
//! when it equals the record's current lock, and the current lock's token comes from the
//! leadership's seed, so the seed must differ for every leadership, even when the same node
//! is elected again or the process restarts with the same pid and a clock that went back:
//! it mixes the node id, the term, the entity, a per-process random value (from the
//! operating system's randomness through std's `RandomState`, with the time, the pid and an
//! address) and a per-process spawn count. A single node runs term 1 of node 0; the cluster
//! passes the Raft term.

use std::hash::BuildHasher;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::encoding::ids::mix;

/// A leadership of a placement group: which node leads it, in which term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leadership {
    /// The leading node's id.
    pub node: u64,
    /// The term (Raft's) in which it leads.
    pub term: u64,
}

impl Leadership {
    /// The one leadership of a broker without a cluster.
    pub const SINGLE_NODE: Leadership = Leadership { node: 0, term: 1 };

    /// A fresh seed for the lock tokens of `entity` under this leadership: different for
    /// every call, every leadership and every process.
    pub fn token_seed(&self, entity: &str) -> u64 {
        let spawn = SPAWNS.fetch_add(1, Ordering::Relaxed);
        let entity = process_hasher().hash_one(entity);
        mix(process_random()
            ^ mix(self.node)
            ^ mix(self.term.rotate_left(32) ^ 0x5bd1_e995)
            ^ entity
            ^ spawn.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }
}

/// Seeds handed out in this process.
static SPAWNS: AtomicU64 = AtomicU64::new(0);

/// The process's hasher, keyed from the operating system's randomness once.
fn process_hasher() -> &'static std::collections::hash_map::RandomState {
    static HASHER: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    HASHER.get_or_init(std::collections::hash_map::RandomState::new)
}

/// A random value fixed for the process.
fn process_random() -> u64 {
    static RANDOM: OnceLock<u64> = OnceLock::new();
    *RANDOM.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let here = 0u8;
        process_hasher().hash_one((nanos, std::process::id(), &here as *const u8 as usize))
    })
}

/// A leader's lease in a cluster: how long its view of the log is known to be current.
/// The leader extends it each time a majority acknowledges it (`docs/scale-out.md` §4
/// "Reads"); a leader cut off from the majority sees it run out before the others can elect
/// a new leader, and from then on sends its clients nothing (so a peek or a delivery never
/// answers from state a newer leader has changed). A single node has none.
#[derive(Debug)]
pub struct Lease {
    /// The instant the nanosecond counts below start from.
    base: std::time::Instant,
    /// Nanoseconds after `base` until which the lease holds (0: not held).
    until: AtomicU64,
}

impl Lease {
    /// A lease not held yet.
    pub fn new() -> Lease {
        Lease {
            base: std::time::Instant::now(),
            until: AtomicU64::new(0),
        }
    }

    /// Whether the lease holds now.
    pub fn held(&self) -> bool {
        let now = self.base.elapsed().as_nanos() as u64;
        now < self.until.load(Ordering::Acquire)
    }

    /// Holds the lease until `until` (never shortens it: acknowledgements may be reported
    /// out of order).
    pub fn extend_to(&self, until: std::time::Instant) {
        let nanos = until.saturating_duration_since(self.base).as_nanos() as u64;
        self.until.fetch_max(nanos, Ordering::AcqRel);
    }

    /// Gives the lease up at once (the leadership ended).
    pub fn revoke(&self) {
        self.until.store(0, Ordering::Release);
    }
}

impl Default for Lease {
    fn default() -> Lease {
        Lease::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_leadership_and_every_spawn_gets_its_own_seed() {
        let mut seeds = std::collections::HashSet::new();
        for term in 1..=50 {
            for node in 0..4 {
                let leadership = Leadership { node, term };
                assert!(seeds.insert(leadership.token_seed("q")));
                // The same entity under the same leadership, spawned again (deleted and
                // created again): a new seed.
                assert!(seeds.insert(leadership.token_seed("q")));
                assert!(seeds.insert(leadership.token_seed("other")));
            }
        }
    }

    #[test]
    fn a_lease_holds_until_its_time_and_never_shrinks() {
        let lease = Lease::new();
        assert!(!lease.held(), "not held before a majority acknowledged");
        let now = std::time::Instant::now();
        lease.extend_to(now + std::time::Duration::from_secs(60));
        assert!(lease.held());
        // An older acknowledgement reported late does not shorten it.
        lease.extend_to(now);
        assert!(lease.held());
        lease.revoke();
        assert!(!lease.held());
        lease.extend_to(now);
        assert!(!lease.held(), "a time already past holds nothing");
    }
}
