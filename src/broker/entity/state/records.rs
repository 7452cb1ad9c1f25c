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
    /// How many keys `to` lies after `from` when keys count up one by one (`None` when
    /// it lies before): where `to` sits in a run of consecutive keys starting at `from`.
    fn steps(from: Self::Key, to: Self::Key) -> Option<usize>;
}

impl Keyed for Record {
    type Key = SequenceNumber;
    fn key(&self) -> SequenceNumber {
        self.sequence_number
    }
    fn steps(from: SequenceNumber, to: SequenceNumber) -> Option<usize> {
        usize::try_from(to.0.checked_sub(from.0)?).ok()
    }
}

impl Keyed for u64 {
    type Key = u64;
    fn key(&self) -> u64 {
        *self
    }
    fn steps(from: u64, to: u64) -> Option<usize> {
        usize::try_from(to.checked_sub(from)?).ok()
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

/// Where `key` is in `run` (`Ok`), or where it would go (`Err`). A run's keys are usually
/// consecutive (sequence numbers in a row): the slot they would put the key in is tried
/// first, and a key past the last is known to go at the end, before a binary search
/// (issue 16: the search was 2.7 % of the CPU per message).
fn position<T: Keyed>(run: &VecDeque<T>, key: T::Key) -> Result<usize, usize> {
    if let (Some(first), Some(last)) = (run.front(), run.back())
        && let Some(steps) = T::steps(first.key(), key)
    {
        match run.get(steps) {
            Some(entry) if entry.key() == key => return Ok(steps),
            _ if last.key() < key => return Err(run.len()),
            _ => {}
        }
    }
    run.binary_search_by_key(&key, Keyed::key)
}

/// Which run an entry with some key belongs to.
enum Which {
    First,
    Last,
    Between,
}

impl<T: Keyed> Runs<T> {
    /// Which run an entry keyed `number` belongs to; `None` before every run. The first
    /// and the last run — where entries are taken and added — are told apart without a
    /// search of the map (issue 16: the search was 2.7 % of the instructions per message).
    fn which(&self, number: T::Key) -> Option<Which> {
        let (&last, _) = self.runs.last_key_value()?;
        if last <= number {
            return Some(Which::Last);
        }
        let (&first, run) = self.runs.first_key_value()?;
        if number < first {
            return None;
        }
        if run.back().is_some_and(|entry| number <= entry.key()) {
            return Some(Which::First);
        }
        Some(Which::Between)
    }

    /// The run an entry keyed `number` belongs to.
    fn run(&self, number: T::Key) -> Option<&VecDeque<T>> {
        match self.which(number)? {
            Which::Last => self.runs.values().next_back(),
            Which::First => self.runs.values().next(),
            Which::Between => self.runs.range(..=number).next_back().map(|(_, run)| run),
        }
    }

    /// The run an entry keyed `number` belongs to, with its key, to change.
    fn run_mut(&mut self, number: T::Key) -> Option<(T::Key, &mut VecDeque<T>)> {
        match self.which(number)? {
            Which::Last => self
                .runs
                .last_entry()
                .map(|run| (*run.key(), run.into_mut())),
            Which::First => self
                .runs
                .first_entry()
                .map(|run| (*run.key(), run.into_mut())),
            Which::Between => self
                .runs
                .range_mut(..=number)
                .next_back()
                .map(|(key, run)| (*key, run)),
        }
    }

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
        let run = self.run(*number)?;
        run.get(position(run, *number).ok()?)
    }

    /// The entry with this key, to change (not its key).
    pub fn get_mut(&mut self, number: &T::Key) -> Option<&mut T> {
        let (_, run) = self.run_mut(*number)?;
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
        let Some((_, run)) = self.run_mut(number) else {
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
                // Past the end of a full run: a new run (the next run's key is higher),
                // with room for a full run (appends fill it; growing it from one record
                // took five reallocations per run).
                let mut run = VecDeque::with_capacity(RUN);
                run.push_back(record);
                self.runs.insert(number, run);
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
        let (key, run) = self.run_mut(*number)?;
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
    use crate::broker::types::Timestamp;

    fn record(number: i64) -> Record {
        Record::new(
            Message::default(),
            SequenceNumber(number),
            Timestamp(number),
            None,
        )
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
                map.remove(&SequenceNumber(number))
                    .unwrap()
                    .enqueued_time()
                    .0,
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

    #[test]
    fn a_position_is_found_in_runs_with_and_without_gaps() {
        let consecutive: VecDeque<u64> = (10..20).collect();
        let gapped: VecDeque<u64> = [3, 4, 7, 8, 9, 15].into();
        for run in [&consecutive, &gapped] {
            for key in 0..25 {
                assert_eq!(
                    position(run, key),
                    run.binary_search(&key),
                    "key {key} in {run:?}"
                );
            }
        }
        let numbers: VecDeque<Record> = [-5, -4, -1, 2].into_iter().map(record).collect();
        for key in -8..5 {
            assert_eq!(
                position(&numbers, SequenceNumber(key)),
                numbers.binary_search_by_key(&SequenceNumber(key), |record| record.sequence_number),
                "sequence number {key}"
            );
        }
        assert_eq!(position(&VecDeque::<u64>::new(), 3), Err(0));
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
                        added.set_delivery_count(1);
                        prop_assert_eq!(map.insert(added).is_some(), model.insert(next, 1).is_some());
                    }
                    1 => {
                        let mut added = record(number);
                        added.set_delivery_count(2);
                        let replaced = map.insert(added).map(|old| old.delivery_count());
                        prop_assert_eq!(replaced, model.insert(number, 2));
                    }
                    2 => {
                        let removed = map.remove(&SequenceNumber(number)).map(|old| old.delivery_count());
                        prop_assert_eq!(removed, model.remove(&number));
                    }
                    3 => {
                        let first = map.first().map(|record| record.sequence_number.0);
                        prop_assert_eq!(first, model.keys().next().copied());
                        let popped = map.pop_first().map(|record| (record.sequence_number.0, record.delivery_count()));
                        prop_assert_eq!(popped, model.pop_first());
                    }
                    _ => {
                        if let Some(found) = map.get_mut(&SequenceNumber(number)) {
                            found.set_delivery_count(found.delivery_count() + 10);
                        }
                        if let Some(found) = model.get_mut(&number) {
                            *found += 10;
                        }
                    }
                }
                prop_assert_eq!(map.len(), model.len());
            }
            let listed: Vec<(i64, u32)> = map.iter().map(|(number, record)| (number.0, record.delivery_count())).collect();
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
