//! The message body: bytes 0..8 hold the send time (nanoseconds since the generator's start,
//! little-endian), bytes 8..12 the message number, the rest is filler. Sender and receivers
//! share one process, so one monotonic clock dates both ends.

use std::sync::OnceLock;
use std::time::Instant;

/// Smallest body that carries the stamp.
pub const MINIMUM_SIZE: usize = 12;

/// The generator's time origin.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Nanoseconds since the generator's time origin.
pub fn nanos_since_origin(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(origin()).as_nanos()).unwrap_or(u64::MAX)
}

/// Fixes the time origin; call once before any message is stamped.
pub fn start_clock() {
    let _ = origin();
}

/// A body of `size` bytes stamped with `sent_at` and `number`.
pub fn encode(size: usize, sent_at: Instant, number: u32) -> Vec<u8> {
    let mut body = vec![0x5a; size.max(MINIMUM_SIZE)];
    body[0..8].copy_from_slice(&nanos_since_origin(sent_at).to_le_bytes());
    body[8..12].copy_from_slice(&number.to_le_bytes());
    body
}

/// The send time (nanoseconds since origin) and number in a body, if it is one of ours.
pub fn decode(body: &[u8]) -> Option<(u64, u32)> {
    let sent = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let number = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
    Some((sent, number))
}
