//! A record's time to live, delivery count, state and whether it expires, in eight bytes:
//! what a record keeps whole, beside its enqueued time, when its values do not fit a
//! compact stamp (`stamp.rs`; issue 16 made a record 32 bytes with these eight, issue 43
//! 24 with the stamp).
//!
//! Bits, from the lowest: the time to live's code (34), the state (2), whether the record
//! expires (1), the delivery count (27, saturating at [`MAX_DELIVERY_COUNT`]).
//!
//! A time to live is kept exactly in whole milliseconds, as AMQP carries it. Up to
//! [`LONGEST_INLINE`] (99 days, past every `header.ttl` a client can send: it is a `uint`
//! of milliseconds, at most 49.7 days) it sits in the code itself; a longer one can only be
//! an entity's default time to live (rule TTL-2: the effective time to live is the lesser of
//! the message's and the entity's), so there are as many of them as defaults configured, and
//! the code is its index in a table of the longer durations seen by this process.

use std::cell::Cell;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use crate::broker::types::MessageState;

const TTL_BITS: u32 = 34;
const TTL_MASK: u64 = (1 << TTL_BITS) - 1;
const STATE_SHIFT: u32 = TTL_BITS;
const EXPIRES_BIT: u64 = 1 << (TTL_BITS + 2);
const COUNT_SHIFT: u32 = TTL_BITS + 3;

/// The highest delivery count a record keeps: counting stops there (134 million failed
/// deliveries of one message).
pub const MAX_DELIVERY_COUNT: u32 = (1 << (64 - COUNT_SHIFT)) - 1;

/// Time-to-live codes from here on are indexes into [`LONG`].
const LONG_BASE: u64 = 1 << 33;

/// The longest time to live kept in the code itself, in milliseconds (99.4 days).
pub const LONGEST_INLINE: u64 = LONG_BASE - 2;

/// Durations longer than [`LONGEST_INLINE`] milliseconds, by index: entities' default times
/// to live, each kept once.
static LONG: RwLock<Vec<u64>> = RwLock::new(Vec::new());

thread_local! {
    /// The long duration last coded or read on this thread, and its code (0: none yet): an
    /// entity whose default is long codes and reads the same one for every message, and
    /// does so without touching the table's lock, shared by every thread.
    static LAST_LONG: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The time-to-live code of `millis`.
fn ttl_code(millis: u64) -> u64 {
    if millis <= LONGEST_INLINE {
        return millis + 1;
    }
    let (last_millis, last_code) = LAST_LONG.get();
    if last_code != 0 && last_millis == millis {
        return last_code;
    }
    let code = long_code(millis);
    LAST_LONG.set((millis, code));
    code
}

/// The code of a duration longer than [`LONGEST_INLINE`], from the table.
fn long_code(millis: u64) -> u64 {
    if let Some(index) = LONG
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .position(|&long| long == millis)
    {
        return LONG_BASE + index as u64;
    }
    let mut long = LONG.write().unwrap_or_else(PoisonError::into_inner);
    let index = match long.iter().position(|&known| known == millis) {
        Some(index) => index,
        None => {
            long.push(millis);
            long.len() - 1
        }
    };
    // The index space (2^33) outlasts any number of configured defaults.
    (LONG_BASE + index as u64).min(TTL_MASK)
}

/// The milliseconds of a time-to-live code (not 0, which is none).
fn ttl_millis(code: u64) -> u64 {
    if code < LONG_BASE {
        return code - 1;
    }
    let (last_millis, last_code) = LAST_LONG.get();
    if last_code == code {
        return last_millis;
    }
    let index = (code - LONG_BASE) as usize;
    let millis = LONG
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(index)
        .copied()
        .unwrap_or(u64::MAX);
    LAST_LONG.set((millis, code));
    millis
}

/// See the module documentation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Packed(u64);

impl Packed {
    /// An active record with this time to live that does not expire yet and has no failed
    /// deliveries.
    pub fn new(time_to_live: Option<Duration>) -> Packed {
        let mut packed = Packed(0);
        packed.set_time_to_live(time_to_live);
        packed
    }

    /// The time to live, in whole milliseconds.
    pub fn time_to_live(self) -> Option<Duration> {
        match self.0 & TTL_MASK {
            0 => None,
            code => Some(Duration::from_millis(ttl_millis(code))),
        }
    }

    /// Sets the time to live (whole milliseconds; one past `u64` milliseconds is the
    /// longest).
    pub fn set_time_to_live(&mut self, time_to_live: Option<Duration>) {
        let code = time_to_live.map_or(0, |ttl| {
            ttl_code(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
        });
        self.0 = (self.0 & !TTL_MASK) | code;
    }

    /// Active, deferred or scheduled.
    pub fn state(self) -> MessageState {
        match (self.0 >> STATE_SHIFT) & 3 {
            0 => MessageState::Active,
            1 => MessageState::Deferred,
            _ => MessageState::Scheduled,
        }
    }

    /// Sets the state.
    pub fn set_state(&mut self, state: MessageState) {
        self.0 = (self.0 & !(3 << STATE_SHIFT)) | ((state as u64) << STATE_SHIFT);
    }

    /// Whether the record expires.
    pub fn expires(self) -> bool {
        self.0 & EXPIRES_BIT != 0
    }

    /// Sets whether the record expires.
    pub fn set_expires(&mut self, expires: bool) {
        self.0 = (self.0 & !EXPIRES_BIT) | if expires { EXPIRES_BIT } else { 0 };
    }

    /// Failed deliveries so far.
    pub fn delivery_count(self) -> u32 {
        (self.0 >> COUNT_SHIFT) as u32
    }

    /// Sets the failed deliveries (at most [`MAX_DELIVERY_COUNT`]).
    pub fn set_delivery_count(&mut self, count: u32) {
        let count = u64::from(count.min(MAX_DELIVERY_COUNT));
        self.0 = (self.0 & ((1 << COUNT_SHIFT) - 1)) | (count << COUNT_SHIFT);
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Packed")
            .field("time_to_live", &self.time_to_live())
            .field("state", &self.state())
            .field("expires", &self.expires())
            .field("delivery_count", &self.delivery_count())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_keeps_its_value_beside_the_others() {
        let ttls = [
            None,
            Some(Duration::ZERO),
            Some(Duration::from_millis(1500)),
            Some(Duration::from_millis(u64::from(u32::MAX))),
            Some(Duration::from_millis(LONGEST_INLINE)),
        ];
        let states = [
            MessageState::Active,
            MessageState::Deferred,
            MessageState::Scheduled,
        ];
        for ttl in ttls {
            for state in states {
                for expires in [false, true] {
                    for count in [0, 1, 9, MAX_DELIVERY_COUNT] {
                        let mut packed = Packed::new(Some(Duration::from_secs(7)));
                        packed.set_delivery_count(count);
                        packed.set_expires(expires);
                        packed.set_state(state);
                        packed.set_time_to_live(ttl);
                        assert_eq!(packed.time_to_live(), ttl);
                        assert_eq!(packed.state(), state);
                        assert_eq!(packed.expires(), expires);
                        assert_eq!(packed.delivery_count(), count);
                    }
                }
            }
        }
    }

    #[test]
    fn packed_values_take_eight_bytes() {
        assert_eq!(std::mem::size_of::<Packed>(), 8);
    }

    #[test]
    fn a_new_record_is_active_unexpiring_and_undelivered() {
        let packed = Packed::new(Some(Duration::from_millis(250)));
        assert_eq!(packed.state(), MessageState::Active);
        assert!(!packed.expires());
        assert_eq!(packed.delivery_count(), 0);
        assert_eq!(packed.time_to_live(), Some(Duration::from_millis(250)));
    }

    #[test]
    fn the_delivery_count_stops_at_its_highest() {
        let mut packed = Packed::new(None);
        packed.set_delivery_count(u32::MAX);
        assert_eq!(packed.delivery_count(), MAX_DELIVERY_COUNT);
        assert_eq!(packed.time_to_live(), None);
    }

    #[test]
    fn a_time_to_live_longer_than_the_inline_range_is_kept_exactly() {
        // Entity defaults past 99 days: a year, a year and a millisecond, the .NET
        // TimeSpan.MaxValue Service Bus reports for "never", whole milliseconds past u64.
        let long = [
            Duration::from_millis(LONGEST_INLINE + 1),
            Duration::from_secs(365 * 24 * 3600),
            Duration::from_millis(365 * 24 * 3600 * 1000 + 1),
            Duration::from_millis(922_337_203_685_477),
            Duration::from_millis(u64::MAX),
            Duration::MAX,
        ];
        for ttl in long {
            let mut packed = Packed::new(Some(ttl));
            packed.set_delivery_count(3);
            packed.set_expires(true);
            let expected =
                Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
            assert_eq!(packed.time_to_live(), Some(expected), "{ttl:?}");
            assert_eq!(packed.delivery_count(), 3);
            // The same duration again takes the same slot.
            let again = Packed::new(Some(ttl));
            assert_eq!(again.0 & TTL_MASK, packed.0 & TTL_MASK);
        }
        // Two long durations in turn, and read on a thread that coded neither.
        let year = Packed::new(Some(long[1]));
        let more = Packed::new(Some(long[3]));
        for _ in 0..3 {
            assert_eq!(year.time_to_live(), Some(long[1]));
            assert_eq!(more.time_to_live(), Some(long[3]));
        }
        std::thread::spawn(move || {
            assert_eq!(more.time_to_live(), Some(long[3]));
            assert_eq!(year.time_to_live(), Some(long[1]));
        })
        .join()
        .expect("reader");
        // Whole milliseconds, as on the wire.
        assert_eq!(
            Packed::new(Some(Duration::from_micros(2_500))).time_to_live(),
            Some(Duration::from_millis(2))
        );
    }
}
