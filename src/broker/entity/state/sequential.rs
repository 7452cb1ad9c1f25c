//! A hash for keys the broker numbers itself in order — sequence numbers, delivery ids —
//! that keeps neighbouring keys in neighbouring slots (issue 16). A queue locks its messages
//! in order and its receivers settle them in nearly the same order; with a scattering hash
//! every lock taken and every lock settled touched a random cache line of the map, which
//! missed the cache once a few queues were busy at once (10 queues × 10 pairs: the lock
//! lookup cost twice what it did on one queue). Here a key's low bits pick its slot as they
//! are, so consecutive keys share cache lines, and the top seven bits (the map's tag of a
//! slot) are mixed from the whole key so that a probe still tells keys apart quickly.
//!
//! Only for keys no client chooses: a client picking keys could crowd them into one run of
//! slots.

use std::hash::{BuildHasherDefault, Hasher};

/// A hash map keyed by numbers the broker hands out in order.
pub type SequenceMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<SequenceHasher>>;

/// See the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct SequenceHasher(u64);

/// The bits of a hash the map takes its slot from (its tag is the top seven).
const SLOT_BITS: u64 = (1 << 57) - 1;

impl Hasher for SequenceHasher {
    fn finish(&self) -> u64 {
        let mixed = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (self.0 & SLOT_BITS) | (mixed & !SLOT_BITS)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    /// A later part of the key (a sequence number after its sub-queue) keeps its low bits;
    /// what came before moves to the top.
    fn write_u64(&mut self, value: u64) {
        self.0 = self.0.rotate_left(56) ^ value;
    }

    fn write_u8(&mut self, value: u8) {
        self.write_u64(u64::from(value));
    }

    fn write_u16(&mut self, value: u16) {
        self.write_u64(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }

    fn write_i64(&mut self, value: i64) {
        self.write_u64(value as u64);
    }

    fn write_isize(&mut self, value: isize) {
        self.write_u64(value as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::types::{SequenceNumber, SubQueue};
    use std::hash::{BuildHasher, Hash};

    fn hash(key: impl Hash) -> u64 {
        BuildHasherDefault::<SequenceHasher>::default().hash_one(key)
    }

    #[test]
    fn consecutive_numbers_take_consecutive_slots() {
        for number in [1_i64, 2, 1_000, 1 << 40] {
            let here = hash((SubQueue::Main, SequenceNumber(number)));
            let next = hash((SubQueue::Main, SequenceNumber(number + 1)));
            assert_eq!((next & 0xffff).wrapping_sub(here & 0xffff) & 0xffff, 1);
        }
        assert_eq!(hash(7_u32) & 0xffff, 7);
        assert_eq!(hash(8_u32) & 0xffff, 8);
    }

    #[test]
    fn keys_differ_in_their_tags_and_sub_queues_apart() {
        let tags: std::collections::HashSet<u64> =
            (0..64_u32).map(|number| hash(number) >> 57).collect();
        assert!(tags.len() > 32, "{} tags for 64 keys", tags.len());
        let main = hash((SubQueue::Main, SequenceNumber(5)));
        let dead = hash((SubQueue::DeadLetter, SequenceNumber(5)));
        assert_ne!(main, dead);
    }

    #[test]
    fn a_map_keeps_what_it_is_given() {
        let mut map: SequenceMap<(SubQueue, SequenceNumber), u64> = SequenceMap::default();
        for number in 0..10_000_i64 {
            let sub_queue = if number % 3 == 0 {
                SubQueue::DeadLetter
            } else {
                SubQueue::Main
            };
            map.insert((sub_queue, SequenceNumber(number)), number as u64);
        }
        for number in (0..10_000_i64).step_by(2) {
            let sub_queue = if number % 3 == 0 {
                SubQueue::DeadLetter
            } else {
                SubQueue::Main
            };
            assert_eq!(
                map.remove(&(sub_queue, SequenceNumber(number))),
                Some(number as u64)
            );
        }
        assert_eq!(map.len(), 5_000);
        assert_eq!(map.get(&(SubQueue::Main, SequenceNumber(1))), Some(&1));
        assert_eq!(map.get(&(SubQueue::DeadLetter, SequenceNumber(1))), None);
    }
}
