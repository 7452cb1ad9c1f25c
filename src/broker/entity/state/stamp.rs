//! A record's enqueued time, time to live, delivery count, state and whether it expires, in
//! eight bytes (issue 43: with the message and the sequence number a record is 24 bytes; it
//! was 32 with the enqueued time in eight bytes of its own).
//!
//! Most records fit one word, *compact*. Bits, from the lowest: 1 (compact), the state (2),
//! whether the record expires (1), the delivery count (8), the time to live's code (8), the
//! enqueued time (44: unsigned milliseconds since the Unix epoch, 1970 to 2527). The time to
//! live's code is 0 for none, 1 for the message's own `header.ttl` (the effective time to
//! live is the lesser of the message's and the entity's default, rule TTL-2, so usually one
//! of the two) and from 2 on an index into a table of the other durations this process has
//! kept, at most [`TABLE_LIMIT`] of them: entities' default times to live, a handful.
//!
//! A record that does not fit — an enqueued time outside that range, more than
//! [`COMPACT_COUNT_LIMIT`] failed deliveries, a time to live neither its message's own nor
//! in the table once the table is full — keeps its values whole in a [`Wide`] on the heap,
//! which the same word points to (a pointer's lowest bit is 0). Every value reads back
//! exactly in either form; only the memory differs.

use std::cell::Cell;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use super::packed::Packed;
use crate::broker::message::Message;
use crate::broker::types::{MessageState, Timestamp};

// A compact word is kept in a pointer's place.
const _: () = assert!(usize::BITS == 64, "a compact stamp needs 64-bit pointers");

const COMPACT: usize = 1;
const STATE_SHIFT: u32 = 1;
const EXPIRES: usize = 1 << 3;
const COUNT_SHIFT: u32 = 4;
const TTL_SHIFT: u32 = 12;
const TIME_SHIFT: u32 = 20;

/// The most failed deliveries a compact stamp counts; a record delivered more often keeps
/// a [`Wide`] one.
pub const COMPACT_COUNT_LIMIT: u32 = 255;

/// Time-to-live codes: none, the message's own, then table indexes.
const TTL_NONE: usize = 0;
const TTL_OWN: usize = 1;
const TTL_TABLE: usize = 2;

/// The most durations the table keeps (codes 2 to 255).
pub const TABLE_LIMIT: usize = 256 - TTL_TABLE;

/// Enqueued times a compact stamp holds: `0..TIME_LIMIT` milliseconds since the epoch.
const TIME_LIMIT: i64 = 1 << (64 - TIME_SHIFT);

/// Times to live that are not a message's own, by code − [`TTL_TABLE`], each kept once, at
/// most [`TABLE_LIMIT`].
struct Table {
    kept: RwLock<Vec<u64>>,
}

/// The table of this process.
static TABLE: Table = Table::new();

thread_local! {
    /// The duration last coded or read on this thread, and its code (0: none yet): an
    /// entity with a default time to live codes and reads the same one for most messages,
    /// without the table's lock, shared by every thread.
    static LAST: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
}

impl Table {
    const fn new() -> Table {
        Table {
            kept: RwLock::new(Vec::new()),
        }
    }

    /// The code of `millis`, adding it when there is room.
    fn code(&self, millis: u64) -> Option<usize> {
        let index = {
            let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner);
            kept.iter().position(|&known| known == millis)
        };
        let index = match index {
            Some(index) => index,
            None => {
                let mut kept = self.kept.write().unwrap_or_else(PoisonError::into_inner);
                match kept.iter().position(|&known| known == millis) {
                    Some(index) => index,
                    None if kept.len() < TABLE_LIMIT => {
                        kept.push(millis);
                        kept.len() - 1
                    }
                    None => return None,
                }
            }
        };
        Some(TTL_TABLE + index)
    }

    /// The milliseconds of `code`.
    fn millis(&self, code: usize) -> u64 {
        self.kept
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(code - TTL_TABLE)
            .copied()
            // Codes are only made from the table's entries, which stay.
            .unwrap_or(u64::MAX)
    }
}

/// The code of `millis` in this process's table, if it is there or has room.
fn table_code(millis: u64) -> Option<usize> {
    let (last_millis, last_code) = LAST.get();
    if last_code != 0 && last_millis == millis {
        return Some(last_code);
    }
    let code = TABLE.code(millis)?;
    LAST.set((millis, code));
    Some(code)
}

/// The milliseconds of table code `code`.
fn table_millis(code: usize) -> u64 {
    let (last_millis, last_code) = LAST.get();
    if last_code == code {
        return last_millis;
    }
    let millis = TABLE.millis(code);
    LAST.set((millis, code));
    millis
}

/// Whole milliseconds, as a record keeps a time to live.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The code of a time to live in a compact stamp of a record of `message`, if it has one.
fn ttl_code(time_to_live: Option<Duration>, message: &Message) -> Option<usize> {
    let Some(ttl) = time_to_live else {
        return Some(TTL_NONE);
    };
    let ttl = millis(ttl);
    if message.header().time_to_live.map(millis) == Some(ttl) {
        return Some(TTL_OWN);
    }
    table_code(ttl)
}

/// A record's values, whole.
#[derive(Clone)]
struct Wide {
    enqueued_time: Timestamp,
    packed: Packed,
}

/// See the module documentation.
pub struct Stamp {
    /// A compact word (lowest bit 1, no provenance) or the pointer of a `Box<Wide>` this
    /// stamp owns.
    word: *mut Wide,
}

// SAFETY: a stamp owns its `Box<Wide>` (plain values), as a `Box<Wide>` field would.
unsafe impl Send for Stamp {}
// SAFETY: as above; shared access only reads it.
unsafe impl Sync for Stamp {}

impl Stamp {
    /// An active stamp with these values, no expiry and no failed deliveries, for a record
    /// of `message`.
    pub fn new(
        enqueued_time: Timestamp,
        time_to_live: Option<Duration>,
        message: &Message,
    ) -> Stamp {
        match (
            Stamp::time_bits(enqueued_time),
            ttl_code(time_to_live, message),
        ) {
            (Some(time), Some(code)) => Stamp::compact(time | (code << TTL_SHIFT)),
            _ => Stamp::wide(Wide {
                enqueued_time,
                packed: Packed::new(time_to_live),
            }),
        }
    }

    fn compact(word: usize) -> Stamp {
        Stamp {
            word: std::ptr::without_provenance_mut(word | COMPACT),
        }
    }

    fn wide(wide: Wide) -> Stamp {
        Stamp {
            word: Box::into_raw(Box::new(wide)),
        }
    }

    /// The compact word, if this stamp is one.
    #[inline]
    fn word(&self) -> Option<usize> {
        let word = self.word.addr();
        (word & COMPACT != 0).then_some(word)
    }

    /// The enqueued time's bits in a compact word, if it fits.
    fn time_bits(time: Timestamp) -> Option<usize> {
        (0..TIME_LIMIT)
            .contains(&time.0)
            .then_some((time.0 as usize) << TIME_SHIFT)
    }

    fn as_wide(&self) -> &Wide {
        // SAFETY: not compact, so the word is the pointer of the `Box<Wide>` this stamp
        // owns, alive as long as the stamp.
        unsafe { &*self.word }
    }

    /// The whole values, to change: a compact stamp becomes wide first (the values of a
    /// record of `message`).
    fn widened(&mut self, message: &Message) -> &mut Wide {
        if self.word().is_some() {
            let mut packed = Packed::new(self.time_to_live(message));
            packed.set_state(self.state());
            packed.set_expires(self.expires());
            packed.set_delivery_count(self.delivery_count());
            *self = Stamp::wide(Wide {
                enqueued_time: self.enqueued_time(),
                packed,
            });
        }
        // SAFETY: not compact (made wide above): the pointer of the `Box<Wide>` this stamp
        // owns, borrowed mutably with the stamp.
        unsafe { &mut *self.word }
    }

    /// Replaces the compact word's bits under `mask` with `bits`, when compact.
    fn set_bits(&mut self, mask: usize, bits: usize) -> bool {
        match self.word() {
            Some(word) => {
                *self = Stamp::compact((word & !mask) | bits);
                true
            }
            None => false,
        }
    }

    /// When the record was enqueued.
    #[inline]
    pub fn enqueued_time(&self) -> Timestamp {
        match self.word() {
            Some(word) => Timestamp((word >> TIME_SHIFT) as i64),
            None => self.as_wide().enqueued_time,
        }
    }

    /// Sets it.
    pub fn set_enqueued_time(&mut self, time: Timestamp, message: &Message) {
        let fits = Stamp::time_bits(time)
            .is_some_and(|bits| self.set_bits(usize::MAX << TIME_SHIFT, bits));
        if !fits {
            self.widened(message).enqueued_time = time;
        }
    }

    /// The effective time to live of a record of `message`, in whole milliseconds.
    pub fn time_to_live(&self, message: &Message) -> Option<Duration> {
        match self.word() {
            Some(word) => match (word >> TTL_SHIFT) & 0xff {
                TTL_NONE => None,
                TTL_OWN => message.header().time_to_live,
                code => Some(Duration::from_millis(table_millis(code))),
            },
            None => self.as_wide().packed.time_to_live(),
        }
    }

    /// Sets it.
    pub fn set_time_to_live(&mut self, time_to_live: Option<Duration>, message: &Message) {
        let fits = ttl_code(time_to_live, message)
            .is_some_and(|code| self.set_bits(0xff << TTL_SHIFT, code << TTL_SHIFT));
        if !fits {
            self.widened(message).packed.set_time_to_live(time_to_live);
        }
    }

    /// Failed deliveries so far.
    #[inline]
    pub fn delivery_count(&self) -> u32 {
        match self.word() {
            Some(word) => ((word >> COUNT_SHIFT) & 0xff) as u32,
            None => self.as_wide().packed.delivery_count(),
        }
    }

    /// Sets them (at most [`super::packed::MAX_DELIVERY_COUNT`]).
    pub fn set_delivery_count(&mut self, count: u32, message: &Message) {
        let fits = count <= COMPACT_COUNT_LIMIT
            && self.set_bits(0xff << COUNT_SHIFT, (count as usize) << COUNT_SHIFT);
        if !fits {
            self.widened(message).packed.set_delivery_count(count);
        }
    }

    /// Active, deferred or scheduled.
    #[inline]
    pub fn state(&self) -> MessageState {
        match self.word() {
            Some(word) => match (word >> STATE_SHIFT) & 3 {
                0 => MessageState::Active,
                1 => MessageState::Deferred,
                _ => MessageState::Scheduled,
            },
            None => self.as_wide().packed.state(),
        }
    }

    /// Sets the state.
    pub fn set_state(&mut self, state: MessageState) {
        let bits = (state as usize) << STATE_SHIFT;
        if !self.set_bits(3 << STATE_SHIFT, bits) {
            // SAFETY: not compact: the owned `Box<Wide>`, borrowed mutably with the stamp.
            unsafe { (*self.word).packed.set_state(state) };
        }
    }

    /// Whether the record expires.
    #[inline]
    pub fn expires(&self) -> bool {
        match self.word() {
            Some(word) => word & EXPIRES != 0,
            None => self.as_wide().packed.expires(),
        }
    }

    /// Sets whether the record expires.
    pub fn set_expires(&mut self, expires: bool) {
        if !self.set_bits(EXPIRES, if expires { EXPIRES } else { 0 }) {
            // SAFETY: not compact: the owned `Box<Wide>`, borrowed mutably with the stamp.
            unsafe { (*self.word).packed.set_expires(expires) };
        }
    }

    /// Whether the values sit in the word itself (tests of the layout).
    #[cfg(test)]
    pub fn is_compact(&self) -> bool {
        self.word().is_some()
    }
}

impl Clone for Stamp {
    fn clone(&self) -> Stamp {
        match self.word() {
            Some(word) => Stamp::compact(word),
            None => Stamp::wide(self.as_wide().clone()),
        }
    }
}

impl Drop for Stamp {
    fn drop(&mut self) {
        if self.word().is_none() {
            // SAFETY: not compact: the pointer of the `Box<Wide>` this stamp owns, dropped
            // once, here.
            drop(unsafe { Box::from_raw(self.word) });
        }
    }
}

impl std::fmt::Debug for Stamp {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let time_to_live = match self.word() {
            Some(word) => match (word >> TTL_SHIFT) & 0xff {
                TTL_NONE => "none".to_string(),
                TTL_OWN => "the message's".to_string(),
                code => format!("{} ms", table_millis(code)),
            },
            None => format!("{:?}", self.as_wide().packed.time_to_live()),
        };
        formatter
            .debug_struct("Stamp")
            .field("compact", &self.word().is_some())
            .field("enqueued_time", &self.enqueued_time())
            .field("time_to_live", &time_to_live)
            .field("state", &self.state())
            .field("expires", &self.expires())
            .field("delivery_count", &self.delivery_count())
            .finish()
    }
}

#[cfg(test)]
#[path = "stamp_tests.rs"]
mod tests;
