//! Which message numbers were seen: a bitmap per receiver, merged per address afterwards, so
//! lost and duplicated messages are counted exactly without a lock on the hot path.

/// A set of message numbers plus how many arrived more than once.
#[derive(Default, Clone)]
pub struct Tally {
    /// Bit `n` is set once number `n` was seen.
    bits: Vec<u64>,
    /// Numbers seen in all (each once).
    distinct: u64,
    /// Arrivals of a number already seen.
    duplicates: u64,
}

impl Tally {
    /// Marks `number` seen; false if it already was (counted as a duplicate).
    pub fn insert(&mut self, number: u32) -> bool {
        let word = number as usize / 64;
        let bit = 1u64 << (number % 64);
        if word >= self.bits.len() {
            self.bits.resize((word + 1).next_power_of_two(), 0);
        }
        if self.bits[word] & bit != 0 {
            self.duplicates += 1;
            return false;
        }
        self.bits[word] |= bit;
        self.distinct += 1;
        true
    }

    /// Adds another tally; numbers in both count as duplicates.
    pub fn merge(&mut self, other: &Tally) {
        if other.bits.len() > self.bits.len() {
            self.bits.resize(other.bits.len(), 0);
        }
        for (mine, theirs) in self.bits.iter_mut().zip(&other.bits) {
            let both = *mine & theirs;
            self.duplicates += u64::from(both.count_ones());
            self.distinct += u64::from((theirs & !both).count_ones());
            *mine |= theirs;
        }
        self.duplicates += other.duplicates;
    }

    /// Numbers seen.
    pub fn distinct(&self) -> u64 {
        self.distinct
    }

    /// Repeated arrivals.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Numbers seen in both tallies.
    pub fn overlap(&self, other: &Tally) -> u64 {
        self.bits
            .iter()
            .zip(&other.bits)
            .map(|(mine, theirs)| u64::from((mine & theirs).count_ones()))
            .sum()
    }
}
