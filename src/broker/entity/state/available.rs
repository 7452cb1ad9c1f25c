//! The available index of a sub-queue or a session: the active, unlocked messages a
//! receiver can take next, in delivery order ([`delivery_order`]).
//!
//! A backlog is mostly numbers in a row (a queue's messages are numbered as they arrive and
//! taken from the front), so the numbers are kept as ranges of consecutive numbers: a
//! million-message backlog is one range where a set of numbers took 8.5 bytes per message
//! (issue 16). Numbers of a partition other than the first (partitioned entities, rule PRT-1)
//! interleave in delivery order across partitions; the first such number turns the index
//! into dense runs of delivery orders, which keep any order.

use std::collections::BTreeMap;

use super::log::PARTITION_SHIFT;
use super::records::Runs;
use crate::broker::types::SequenceNumber;

/// The delivery order of a sequence number: within a partition by number, across
/// partitions interleaved by their counts (the partition moves from the top 16 bits to the
/// bottom), so that no partition waits for another to empty (rule PRT-1). For an
/// unpartitioned entity it is the sequence number order.
pub fn delivery_order(sequence_number: SequenceNumber) -> u64 {
    (sequence_number.0 as u64).rotate_left(16)
}

fn number_of(order: u64) -> SequenceNumber {
    SequenceNumber(order.rotate_right(16) as i64)
}

/// Active, unlocked messages in delivery order.
#[derive(Debug, Clone)]
pub struct Available(Index);

#[derive(Debug, Clone)]
enum Index {
    /// Numbers of the first partition only (every number of an unpartitioned entity), whose
    /// delivery order is their order: ranges of consecutive numbers, start → end (exclusive).
    Ranges {
        ranges: BTreeMap<i64, i64>,
        len: usize,
    },
    /// Any numbers: delivery orders in dense runs.
    Orders(Runs<u64>),
}

impl Default for Available {
    fn default() -> Self {
        Available(Index::Ranges {
            ranges: BTreeMap::new(),
            len: 0,
        })
    }
}

/// Whether a number can be kept in ranges: the first partition's, not negative.
fn in_first_partition(number: i64) -> bool {
    (0..1 << PARTITION_SHIFT).contains(&number)
}

impl Available {
    /// Adds a number; false if it was there.
    pub fn insert(&mut self, sequence_number: SequenceNumber) -> bool {
        let number = sequence_number.0;
        if let Index::Ranges { ranges, .. } = &self.0
            && !in_first_partition(number)
        {
            let mut orders = Runs::default();
            for (start, end) in ranges {
                for number in *start..*end {
                    orders.insert(delivery_order(SequenceNumber(number)));
                }
            }
            self.0 = Index::Orders(orders);
        }
        match &mut self.0 {
            Index::Orders(orders) => orders.insert(delivery_order(sequence_number)).is_none(),
            Index::Ranges { ranges, len } => {
                // A number after the last (a message arriving at a queue's back).
                if let Some(mut last) = ranges.last_entry()
                    && *last.get() == number
                {
                    *last.get_mut() = number + 1;
                    *len += 1;
                    return true;
                }
                let before = ranges
                    .range(..=number)
                    .next_back()
                    .map(|(start, end)| (*start, *end));
                if let Some((start, end)) = before {
                    if number < end {
                        return false;
                    }
                    if number == end {
                        // Extends the range before; joins the one after if it starts next.
                        let joined = ranges.remove(&(number + 1)).unwrap_or(number + 1);
                        ranges.insert(start, joined);
                        *len += 1;
                        return true;
                    }
                }
                let end = ranges.remove(&(number + 1)).unwrap_or(number + 1);
                ranges.insert(number, end);
                *len += 1;
                true
            }
        }
    }

    /// Removes a number; false if it was not there.
    pub fn remove(&mut self, sequence_number: &SequenceNumber) -> bool {
        let number = sequence_number.0;
        match &mut self.0 {
            Index::Orders(orders) => orders.remove(&delivery_order(*sequence_number)).is_some(),
            Index::Ranges { ranges, len } => {
                let Some((&start, end)) = ranges.range_mut(..=number).next_back() else {
                    return false;
                };
                if number >= *end {
                    return false;
                }
                let after = *end;
                if start == number {
                    ranges.remove(&start);
                } else {
                    *end = number;
                }
                if number + 1 < after {
                    ranges.insert(number + 1, after);
                }
                *len -= 1;
                true
            }
        }
    }

    /// Whether a number is there.
    pub fn contains(&self, sequence_number: &SequenceNumber) -> bool {
        match &self.0 {
            Index::Orders(orders) => orders.contains_key(&delivery_order(*sequence_number)),
            Index::Ranges { ranges, .. } => ranges
                .range(..=sequence_number.0)
                .next_back()
                .is_some_and(|(_, end)| sequence_number.0 < *end),
        }
    }

    /// The next in delivery order.
    pub fn first(&self) -> Option<SequenceNumber> {
        match &self.0 {
            Index::Orders(orders) => orders.first().map(|order| number_of(*order)),
            Index::Ranges { ranges, .. } => ranges
                .first_key_value()
                .map(|(start, _)| SequenceNumber(*start)),
        }
    }

    /// Takes the next in delivery order.
    pub fn pop_first(&mut self) -> Option<SequenceNumber> {
        match &mut self.0 {
            Index::Orders(orders) => orders.pop_first().map(number_of),
            Index::Ranges { ranges, len } => {
                let (start, end) = ranges.pop_first()?;
                if start + 1 < end {
                    ranges.insert(start + 1, end);
                }
                *len -= 1;
                Some(SequenceNumber(start))
            }
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many.
    pub fn len(&self) -> usize {
        match &self.0 {
            Index::Orders(orders) => orders.len(),
            Index::Ranges { len, .. } => *len,
        }
    }

    /// In delivery order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = SequenceNumber> + '_> {
        match &self.0 {
            Index::Orders(orders) => Box::new(orders.values().map(|order| number_of(*order))),
            Index::Ranges { ranges, .. } => Box::new(
                ranges
                    .iter()
                    .flat_map(|(start, end)| (*start..*end).map(SequenceNumber)),
            ),
        }
    }

    /// Ranges kept (tests: a backlog in a row is one).
    #[cfg(test)]
    fn range_count(&self) -> Option<usize> {
        match &self.0 {
            Index::Orders(_) => None,
            Index::Ranges { ranges, .. } => Some(ranges.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The same operations on the index and on a set of delivery orders, from a small
    /// deterministic generator; `partitions` numbers' top bits are drawn from.
    fn compare(seed: u64, partitions: i64) {
        let mut state = seed;
        let mut next = move |bound: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % bound
        };
        let mut index = Available::default();
        let mut model = BTreeSet::new();
        for step in 0..4_000 {
            let partition = next(partitions as u64) as i64;
            let number = SequenceNumber((partition << PARTITION_SHIFT) | (1 + next(300) as i64));
            match next(6) {
                0..=2 => assert_eq!(
                    index.insert(number),
                    model.insert(delivery_order(number)),
                    "insert {number:?} at step {step}"
                ),
                3 => assert_eq!(
                    index.remove(&number),
                    model.remove(&delivery_order(number)),
                    "remove {number:?} at step {step}"
                ),
                4 => assert_eq!(
                    index.pop_first(),
                    model.pop_first().map(number_of),
                    "pop at step {step}"
                ),
                _ => assert_eq!(
                    index.contains(&number),
                    model.contains(&delivery_order(number))
                ),
            }
            assert_eq!(index.len(), model.len());
            assert_eq!(index.is_empty(), model.is_empty());
            assert_eq!(index.first(), model.first().map(|order| number_of(*order)));
        }
        let kept: Vec<_> = index.iter().collect();
        let expected: Vec<_> = model.iter().map(|order| number_of(*order)).collect();
        assert_eq!(kept, expected);
    }

    #[test]
    fn it_keeps_the_same_numbers_in_the_same_order_as_a_set() {
        for seed in 0..20 {
            compare(seed, 1);
        }
    }

    #[test]
    fn partitioned_numbers_keep_their_interleaved_delivery_order() {
        // rule PRT-1
        for seed in 0..20 {
            compare(seed, 4);
        }
    }

    #[test]
    fn a_backlog_in_a_row_is_one_range() {
        let mut index = Available::default();
        for number in 1..=100_000 {
            assert!(index.insert(SequenceNumber(number)));
        }
        assert_eq!(index.range_count(), Some(1));
        assert_eq!(index.pop_first(), Some(SequenceNumber(1)));
        // A receiver abandons one taken earlier: it goes back in front.
        assert!(index.remove(&SequenceNumber(50)));
        assert_eq!(index.range_count(), Some(2));
        assert!(index.insert(SequenceNumber(1)));
        assert_eq!(index.first(), Some(SequenceNumber(1)));
        assert_eq!(index.range_count(), Some(2));
        assert!(index.insert(SequenceNumber(50)));
        assert_eq!(index.range_count(), Some(1));
        assert_eq!(index.len(), 100_000);
    }
}
