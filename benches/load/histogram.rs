//! A log-linear latency histogram in the style of HdrHistogram: every value below 2,048 has
//! its own bucket, and above that each power of two is split into 1,024 buckets, so a
//! recorded value is kept to within 0.1 % of itself. It stores nanoseconds and covers the
//! whole `u64` range in 56,320 counters (440 KiB); histograms of several receivers merge by
//! adding their counters.
//!
//! Written here rather than taken from a crate so that the benchmark adds nothing to the
//! project's lock file.

/// Values below this have a bucket each.
const LINEAR_BUCKETS: usize = 2048;
/// Buckets per power of two above [`LINEAR_BUCKETS`].
const BUCKETS_PER_OCTAVE: usize = LINEAR_BUCKETS / 2;
/// log2 of [`LINEAR_BUCKETS`].
const LINEAR_BITS: u32 = 11;
/// Octaves above the linear range: bit positions 11 to 63.
const OCTAVES: usize = 64 - LINEAR_BITS as usize;

/// Counts of recorded values, one per bucket.
pub struct Histogram {
    /// How many values fell into each bucket.
    counts: Vec<u64>,
    /// How many values were recorded in all.
    total: u64,
    /// The largest value recorded, exactly.
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; LINEAR_BUCKETS + OCTAVES * BUCKETS_PER_OCTAVE],
            total: 0,
            max: 0,
        }
    }
}

/// The bucket a value falls into.
fn bucket_of(value: u64) -> usize {
    if value < LINEAR_BUCKETS as u64 {
        return value as usize;
    }
    let top_bit = 63 - value.leading_zeros();
    let shift = top_bit - (LINEAR_BITS - 1);
    // The value shifted right keeps its top 11 bits: 1,024 ..= 2,047.
    let mantissa = (value >> shift) as usize;
    LINEAR_BUCKETS + (shift as usize - 1) * BUCKETS_PER_OCTAVE + (mantissa - BUCKETS_PER_OCTAVE)
}

/// The largest value that falls into a bucket.
fn highest_in(bucket: usize) -> u64 {
    if bucket < LINEAR_BUCKETS {
        return bucket as u64;
    }
    let above = bucket - LINEAR_BUCKETS;
    let shift = (above / BUCKETS_PER_OCTAVE + 1) as u32;
    let mantissa = (above % BUCKETS_PER_OCTAVE + BUCKETS_PER_OCTAVE) as u64;
    let top = (u128::from(mantissa + 1) << shift) - 1;
    u64::try_from(top).unwrap_or(u64::MAX)
}

impl Histogram {
    /// Records one value.
    pub fn record(&mut self, value: u64) {
        self.counts[bucket_of(value)] += 1;
        self.total += 1;
        self.max = self.max.max(value);
    }

    /// Adds another histogram's values to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// The largest value recorded.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at or below which `percent` of the recorded values lie (the top of its bucket,
    /// never above the maximum); 0 when nothing was recorded.
    pub fn percentile(&self, percent: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let wanted = ((percent / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= wanted {
                return highest_in(bucket).min(self.max);
            }
        }
        self.max
    }
}
