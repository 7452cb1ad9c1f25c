//! The records of one sub-queue by sequence number, stored densely (issue 16).
//!
//! A `BTreeMap<SequenceNumber, Record>` filled in ascending order — how every entity is
//! filled — leaves its nodes about half full: 183 bytes per 88-byte record. Here records
//! sit in sorted runs of at most [`RUN`] records, each run a `VecDeque` keyed in a small
//! map by a number no greater than its first record's: appending fills the last run
//! completely before starting the next, completing from the front drains a run in O(1),
//! and an insert in the middle (a dead letter moved out of order, a partition's numbers
//! between another's) splits a run that outgrows [`RUN`]. About 90 bytes per record.
//!
//! The same runs hold a partitioned entity's available index ([`Runs<u64>`], delivery
//! orders): about 8.5 bytes per entry where a `BTreeSet<u64>` took 20 (an unpartitioned
//! one keeps ranges of numbers, `available.rs`).

use std::collections::{BTreeMap, VecDeque};

use super::Record;
use crate::broker::types::SequenceNumber;

/// Most entries in one run (a power of two: a run grown by doubling is full at it).
const RUN: usize = 64;

/// What runs are sorted by.
pub trait Keyed {
    /// The key type.
    type Key: Ord + Copy;
    /// This entry's key.
    fn key(&self) -> Self::Key;
}

impl Keyed for Record {
    type Key = SequenceNumber;
    fn key(&self) -> SequenceNumber {
        self.sequence_number
    }
}

impl Keyed for u64 {
    type Key = u64;
    fn key(&self) -> u64 {
        *self
    }
}

/// Entries sorted by their keys, unique, in dense runs.
#[derive(Debug, Clone)]
pub struct Runs<T: Keyed> {
    /// Runs by a key no greater than their first entry's and greater than every key of the
    /// run before.
    runs: BTreeMap<T::Key, VecDeque<T>>,
    len: usize,
}

impl<T: Keyed> Default for Runs<T> {
    fn default() -> Self {
        Runs {
            runs: BTreeMap::new(),
            len: 0,
        }
    }
}

/// Records by sequence number, in order.
pub type RecordMap = Runs<Record>;

fn position<T: Keyed>(run: &VecDeque<T>, key: T::Key) -> Result<usize, usize> {
    run.binary_search_by_key(&key, Keyed::key)
}

impl<T: Keyed> Runs<T> {
    /// How many records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry with this key.
    pub fn get(&self, number: &T::Key) -> Option<&T> {
        let (_, run) = self.runs.range(..=*number).next_back()?;
        run.get(position(run, *number).ok()?)
    }

    /// The entry with this key, to change (not its key).
    pub fn get_mut(&mut self, number: &T::Key) -> Option<&mut T> {
        let (_, run) = self.runs.range_mut(..=*number).next_back()?;
        let index = position(run, *number).ok()?;
        run.get_mut(index)
    }

    /// Whether an entry has this key.
    pub fn contains_key(&self, number: &T::Key) -> bool {
        self.get(number).is_some()
    }

    /// Adds an entry under its key, returning the one it replaces.
    pub fn insert(&mut self, record: T) -> Option<T> {
        let number = record.key();
        let Some((_, run)) = self.runs.range_mut(..=number).next_back() else {
            // Before every run: the first run takes it and its key.
            let mut run = match self.runs.pop_first() {
                Some((_, run)) if run.len() < RUN => run,
                Some((key, run)) => {
                    self.runs.insert(key, run);
                    VecDeque::new()
                }
                None => VecDeque::new(),
            };
            run.push_front(record);
            self.runs.insert(number, run);
            self.len += 1;
            return None;
        };
        match position(run, number) {
            Ok(index) => return Some(std::mem::replace(&mut run[index], record)),
            Err(index) if index == run.len() && run.len() >= RUN => {
                // Past the end of a full run: a new run (the next run's key is higher).
                self.runs.insert(number, VecDeque::from([record]));
            }
            Err(index) => {
                run.insert(index, record);
                if run.len() > RUN {
                    let right = run.split_off(run.len() / 2);
                    run.shrink_to_fit();
                    self.runs.insert(right[0].key(), right);
                }
            }
        }
        self.len += 1;
        None
    }

    /// Removes the entry with this key.
    pub fn remove(&mut self, number: &T::Key) -> Option<T> {
        let (&key, run) = self.runs.range_mut(..=*number).next_back()?;
        let index = position(run, *number).ok()?;
        let record = run.remove(index)?;
        if run.is_empty() {
            self.runs.remove(&key);
        } else if run.capacity() > 16 && run.len() < run.capacity() / 4 {
            run.shrink_to_fit();
        }
        self.len -= 1;
        Some(record)
    }

    /// The first entry.
    pub fn first(&self) -> Option<&T> {
        self.runs.values().next().and_then(VecDeque::front)
    }

    /// Takes the first entry.
    pub fn pop_first(&mut self) -> Option<T> {
        let mut first = self.runs.first_entry()?;
        let entry = first.get_mut().pop_front();
        if first.get().is_empty() {
            first.remove();
        }
        self.len -= usize::from(entry.is_some());
        entry
    }

    /// Every entry in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.runs.values().flat_map(|run| run.iter())
    }
}

impl Runs<Record> {
    /// Every number and record in number order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&SequenceNumber, &Record)> + '_ {
        self.values()
            .map(|record| (&record.sequence_number, record))
    }

    /// Every number and record from `from` on, in number order (peek).
    pub fn range_from(
        &self,
        from: SequenceNumber,
    ) -> impl Iterator<Item = (&SequenceNumber, &Record)> + '_ {
        let first_run = self
            .runs
            .range(..=from)
            .next_back()
            .map_or(from, |(key, _)| *key);
        self.runs
            .range(first_run..)
            .flat_map(|(_, run)| run.iter())
            .skip_while(move |record| record.sequence_number < from)
            .map(|record| (&record.sequence_number, record))
    }
}

impl<'a> IntoIterator for &'a RecordMap {
    type Item = (&'a SequenceNumber, &'a Record);
    type IntoIter = Box<dyn DoubleEndedIterator<Item = Self::Item> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {

    use proptest::prelude::*;

    use super::*;
    use crate::broker::message::Message;
    use crate::broker::types::{MessageState, Timestamp};

    fn record(number: i64) -> Record {
        Record {
            message: Message::default(),
            sequence_number: SequenceNumber(number),
            enqueued_time: Timestamp(number),
            time_to_live: None.into(),
            expires: false,
            delivery_count: 0,
            state: MessageState::Active,
        }
    }

    #[test]
    fn appended_records_fill_their_runs() {
        let mut map = RecordMap::default();
        for number in 1..=10 * RUN as i64 {
            assert!(map.insert(record(number)).is_none());
        }
        assert_eq!(map.runs.len(), 10);
        assert!(map.runs.values().all(|run| run.capacity() == RUN));
        assert_eq!(map.len(), 10 * RUN);
        for number in 1..=RUN as i64 {
            assert_eq!(
                map.remove(&SequenceNumber(number)).unwrap().enqueued_time.0,
                number
            );
        }
        assert_eq!(map.runs.len(), 9, "a drained run is dropped");
    }

    #[test]
    fn an_index_of_numbers_keeps_them_sorted_and_unique() {
        let mut runs = Runs::<u64>::default();
        for value in (0..500u64).rev().chain(250..750) {
            runs.insert(value * 7 % 1000);
        }
        let expected: std::collections::BTreeSet<u64> = (0..500u64)
            .chain(250..750)
            .map(|value| value * 7 % 1000)
            .collect();
        assert_eq!(runs.len(), expected.len());
        assert!(runs.values().copied().eq(expected.iter().copied()));
        assert_eq!(runs.pop_first(), expected.first().copied());
    }

    proptest! {
        /// The map behaves as a `BTreeMap` under any mix of inserts (in order, out of
        /// order, replacing), removals and lookups.
        #[test]
        fn behaves_as_an_ordered_map(operations in prop::collection::vec((0u8..5, 0i64..600), 1..800)) {
            let mut map = RecordMap::default();
            let mut model = std::collections::BTreeMap::new();
            let mut next = 300;
            for (operation, number) in operations {
                match operation {
                    0 => {
                        next += 1;
                        let mut added = record(next);
                        added.delivery_count = 1;
                        prop_assert_eq!(map.insert(added).is_some(), model.insert(next, 1).is_some());
                    }
                    1 => {
                        let mut added = record(number);
                        added.delivery_count = 2;
                        let replaced = map.insert(added).map(|old| old.delivery_count);
                        prop_assert_eq!(replaced, model.insert(number, 2));
                    }
                    2 => {
                        let removed = map.remove(&SequenceNumber(number)).map(|old| old.delivery_count);
                        prop_assert_eq!(removed, model.remove(&number));
                    }
                    3 => {
                        let first = map.first().map(|record| record.sequence_number.0);
                        prop_assert_eq!(first, model.keys().next().copied());
                        let popped = map.pop_first().map(|record| (record.sequence_number.0, record.delivery_count));
                        prop_assert_eq!(popped, model.pop_first());
                    }
                    _ => {
                        if let Some(found) = map.get_mut(&SequenceNumber(number)) {
                            found.delivery_count += 10;
                        }
                        if let Some(found) = model.get_mut(&number) {
                            *found += 10;
                        }
                    }
                }
                prop_assert_eq!(map.len(), model.len());
            }
            let listed: Vec<(i64, u32)> = map.iter().map(|(number, record)| (number.0, record.delivery_count)).collect();
            let expected: Vec<(i64, u32)> = model.iter().map(|(number, count)| (*number, *count)).collect();
            prop_assert_eq!(listed, expected);
            for number in 0..700 {
                prop_assert_eq!(map.contains_key(&SequenceNumber(number)), model.contains_key(&number));
            }
            prop_assert!(map.runs.values().all(|run| !run.is_empty() && run.len() <= RUN));
            for from in [0, 150, 301, 450, 900] {
                let listed: Vec<i64> = map.range_from(SequenceNumber(from)).map(|(number, _)| number.0).collect();
                let expected: Vec<i64> = model.range(from..).map(|(number, _)| *number).collect();
                prop_assert_eq!(listed, expected);
            }
        }
    }
}
