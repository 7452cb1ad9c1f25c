//! Where a cluster's groups are led: how many Raft groups a member runs ([`GroupLayout`])
//! and which member should lead each group first ([`preferred_leader`]).
//!
//! The preference only picks the member that initializes a new group and stands first for
//! its election; Raft decides from then on (a member that stops loses its groups to the
//! others, and nothing moves them back). It must give every member the same answer, on
//! every build: the hash is written out here (FNV-1a, then a finalizer), never std's
//! `DefaultHasher`, whose algorithm may change between Rust releases.

use super::METADATA_GROUP;
use crate::encoding::ids::mix;

/// How a cluster member maps entities onto Raft groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupLayout {
    /// Every entity's writes go to the metadata group: one leader runs the whole namespace
    /// (how a cluster member runs today).
    One,
    /// Each placement group (a queue, or a topic with its subscriptions) is a Raft group of
    /// its own with its own leader, the leaders spread over the members
    /// ([`preferred_leader`]).
    PerEntity,
}

/// The member that should lead `group` first, among `voters`: the lowest id for the
/// metadata group; for any other group the voter with the highest hash of (group, voter)
/// (rendezvous hashing: groups spread evenly, and removing a voter moves only the groups it
/// was preferred for). `None` when there are no voters.
pub fn preferred_leader(group: &str, voters: impl IntoIterator<Item = u64>) -> Option<u64> {
    let voters = voters.into_iter();
    if group == METADATA_GROUP {
        return voters.min();
    }
    let group_hash = fnv1a(group.as_bytes());
    // Ties (practically impossible) go to the lower id, so the answer does not depend on
    // the voters' order.
    voters.max_by_key(|voter| (mix(group_hash ^ mix(*voter)), std::cmp::Reverse(*voter)))
}

/// FNV-1a (64-bit) of `bytes`: stable across builds, platforms and Rust releases.
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|index| format!("queue-{index}")).collect()
    }

    #[test]
    fn the_hash_is_fixed() {
        // FNV-1a's published test vectors: a change of algorithm fails here.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_metadata_group_prefers_the_lowest_id() {
        assert_eq!(preferred_leader(METADATA_GROUP, [3, 1, 2]), Some(1));
        assert_eq!(preferred_leader(METADATA_GROUP, [7]), Some(7));
        assert_eq!(preferred_leader("orders", []), None);
        assert_eq!(preferred_leader(METADATA_GROUP, []), None);
    }

    #[test]
    fn the_preference_is_deterministic_and_ignores_the_voters_order() {
        for name in names(50) {
            let forward = preferred_leader(&name, [1, 2, 3]);
            assert_eq!(forward, preferred_leader(&name, [3, 2, 1]), "{name}");
            assert_eq!(forward, preferred_leader(&name, vec![2, 3, 1]), "{name}");
            assert!(forward.is_some_and(|leader| (1..=3).contains(&leader)));
        }
        // Fixed answers: a change of hash (or of how voters mix in) fails here, since
        // members built differently would disagree.
        let fixed: Vec<Option<u64>> = ["g0", "g1", "g2", "orders", "invoices"]
            .iter()
            .map(|name| preferred_leader(name, [1, 2, 3]))
            .collect();
        assert_eq!(fixed, FIXED_PREFERENCES);
    }

    /// What `the_preference_is_deterministic_and_ignores_the_voters_order` expects.
    const FIXED_PREFERENCES: [Option<u64>; 5] = [Some(3), Some(2), Some(3), Some(1), Some(2)];

    #[test]
    fn groups_spread_evenly_over_the_voters() {
        let mut counts = [0usize; 3];
        for name in names(300) {
            let leader = preferred_leader(&name, [1, 2, 3]).expect("voters");
            counts[leader as usize - 1] += 1;
        }
        assert!(
            counts.iter().all(|count| (60..=140).contains(count)),
            "{counts:?}"
        );
    }

    #[test]
    fn removing_a_voter_moves_only_its_groups() {
        let mut moved = 0;
        for name in names(300) {
            let before = preferred_leader(&name, [1, 2, 3, 4]).expect("voters");
            let after = preferred_leader(&name, [1, 2, 4]).expect("voters");
            if before == 3 {
                assert_ne!(after, 3, "{name}");
                moved += 1;
            } else {
                assert_eq!(before, after, "{name} moved off a voter that stays");
            }
        }
        assert!(moved > 0, "node 3 was preferred for some groups");
    }
}
