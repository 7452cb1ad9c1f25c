//! Process-unique identifiers the broker invents: message ids for messages sent without
//! one, and seeds for lock tokens. Not cryptographic; unique within and (with the time
//! seed) across process starts.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(1);
static SEED: OnceLock<u64> = OnceLock::new();

fn seed() -> u64 {
    *SEED.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos() as u64)
            .unwrap_or(0);
        mix(nanos ^ (std::process::id() as u64).rotate_left(32))
    })
}

/// splitmix64 finaliser.
pub fn mix(mut value: u64) -> u64 {
    value = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

/// A fresh 64-bit value, different on every call and every process start.
pub fn unique_u64() -> u64 {
    mix(seed()
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x2545_f491_4f6c_dd1d))
}

/// Counts the GUIDs made (apart from [`COUNTER`]: each takes one word).
static GUIDS: AtomicU64 = AtomicU64::new(0);

/// 16 fresh bytes shaped as a version-4 GUID: [`guid_of_word`] of a word different on every
/// call and, with the time seed, every process start, so that [`guid_word`] gives the word
/// back and a message keeps 8 bytes of the id the broker assigned it instead of 16.
pub fn unique_guid_bytes() -> [u8; 16] {
    guid_of_word(mix(
        seed().wrapping_add(GUIDS.fetch_add(1, Ordering::Relaxed))
    ))
}

/// Mixed with a word for the GUID's check bits.
const CHECK_KEY: u64 = 0x6a09_e667_f3bc_c908;

/// The version-4 GUID of `word` (RFC order): the word's 64 bits in the GUID's first 9 bytes
/// around the version and variant bits, and 58 bits of a hash of it in the rest. Different
/// words give different GUIDs.
pub fn guid_of_word(word: u64) -> [u8; 16] {
    let check = mix(word ^ CHECK_KEY);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&word.to_be_bytes()[..6]);
    bytes[6] = 0x40 | ((word >> 12) & 0x0f) as u8;
    bytes[7] = (word >> 4) as u8;
    bytes[8] = 0x80 | (((word & 0x0f) as u8) << 2) | (check >> 62) as u8;
    bytes[9..].copy_from_slice(&check.to_be_bytes()[1..]);
    bytes
}

/// The word whose [`guid_of_word`] is exactly `bytes`, if there is one (every GUID
/// [`unique_guid_bytes`] made; another GUID only by a 1 in 2^58 chance, and then exactly
/// too).
pub fn guid_word(bytes: &[u8; 16]) -> Option<u64> {
    let mut high = [0u8; 8];
    high[..6].copy_from_slice(&bytes[..6]);
    let word = u64::from_be_bytes(high)
        | (u64::from(bytes[6] & 0x0f) << 12)
        | (u64::from(bytes[7]) << 4)
        | u64::from((bytes[8] >> 2) & 0x0f);
    (guid_of_word(word) == *bytes).then_some(word)
}

/// Formats RFC-order GUID bytes as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_guid(bytes: &[u8; 16]) -> String {
    GuidText::new(bytes).as_str().to_owned()
}

/// Bytes as lower-case hexadecimal text (a binary message id as the service shows it).
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|byte| [HEX[(byte >> 4) as usize], HEX[(byte & 0x0f) as usize]])
        .map(char::from)
        .collect()
}

/// A GUID's 36 characters of text, without allocating (ingress assigns one to every
/// message that has no message-id).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct GuidText([u8; 36]);

impl std::fmt::Debug for GuidText {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// The RFC-order bytes of a GUID written as [`GuidText`] writes one (lower-case digits
/// grouped 8-4-4-4-12), `None` for any other text (upper case included: the bytes must give
/// back exactly this text).
pub fn parse_guid_text(text: &str) -> Option<[u8; 16]> {
    let text = text.as_bytes();
    if text.len() != 36 || [8, 13, 18, 23].iter().any(|&at| text[at] != b'-') {
        return None;
    }
    let digit = |byte: u8| match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    };
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let mut bytes = [0; 16];
    for (byte, at) in bytes.iter_mut().zip(AT) {
        *byte = (digit(text[at])? << 4) | digit(text[at + 1])?;
    }
    Some(bytes)
}

impl GuidText {
    /// The text of RFC-order GUID bytes.
    pub fn new(bytes: &[u8; 16]) -> GuidText {
        // Each byte's two digits at once, at positions known in advance (issue 16: every
        // message sent without an id gets one; a digit and a branch at a time cost more
        // than the rest of its ingress checks of the header).
        const PAIRS: [[u8; 2]; 256] = {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let mut pairs = [[0; 2]; 256];
            let mut byte = 0;
            while byte < 256 {
                pairs[byte] = [HEX[byte >> 4], HEX[byte & 0x0f]];
                byte += 1;
            }
            pairs
        };
        const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
        let mut text = [b'-'; 36];
        for (byte, at) in bytes.iter().zip(AT) {
            text[at..at + 2].copy_from_slice(&PAIRS[*byte as usize]);
        }
        GuidText(text)
    }

    /// The text's bytes (ASCII).
    pub fn as_bytes(&self) -> &[u8; 36] {
        &self.0
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits and dashes are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// Converts between RFC 4122 order and .NET `Guid.ToByteArray()` order (the same swap
/// both ways): the first three groups are byte-reversed.
pub fn swap_guid_byte_order(bytes: &[u8; 16]) -> [u8; 16] {
    let mut swapped = *bytes;
    swapped[0..4].reverse();
    swapped[4..6].reverse();
    swapped[6..8].reverse();
    swapped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_byte_order_matches_the_captured_example() {
        // wire contract §4.4: tag 9f54b160 8d3f adcc a813 01cca7b60a70 is lock token
        // 60b1549f-3f8d-ccad-a813-01cca7b60a70.
        let tag = [
            0x9f, 0x54, 0xb1, 0x60, 0x8d, 0x3f, 0xad, 0xcc, 0xa8, 0x13, 0x01, 0xcc, 0xa7, 0xb6,
            0x0a, 0x70,
        ];
        assert_eq!(
            format_guid(&swap_guid_byte_order(&tag)),
            "60b1549f-3f8d-ccad-a813-01cca7b60a70"
        );
    }

    #[test]
    fn guid_text_parses_back_to_its_bytes_and_nothing_else_parses() {
        for _ in 0..100 {
            let bytes = unique_guid_bytes();
            assert_eq!(parse_guid_text(GuidText::new(&bytes).as_str()), Some(bytes));
        }
        let text = "0f203142-5364-7586-97a8-b9cadbecfd0e";
        assert!(parse_guid_text(text).is_some());
        for other in [
            "0F203142-5364-7586-97a8-b9cadbecfd0e",
            "0f203142-5364-7586-97a8-b9cadbecfd0",
            "0f203142-5364-7586-97a8-b9cadbecfd0e0",
            "0f2031425-364-7586-97a8-b9cadbecfd0e",
            "0f203142-5364-7586-97a8-b9cadbecfd0g",
            "{f203142-5364-7586-97a8-b9cadbecfd0}",
            "0f203142x5364-7586-97a8-b9cadbecfd0e",
            "",
        ] {
            assert_eq!(parse_guid_text(other), None, "{other}");
        }
    }

    #[test]
    fn guid_text_groups_the_digits_8_4_4_4_12() {
        let bytes: [u8; 16] =
            std::array::from_fn(|index| (index as u8).wrapping_mul(0x11).wrapping_add(0x0f));
        assert_eq!(
            GuidText::new(&bytes).as_str(),
            "0f203142-5364-7586-97a8-b9cadbecfd0e"
        );
        assert_eq!(
            GuidText::new(&[0xff; 16]).as_str(),
            "ffffffff-ffff-ffff-ffff-ffffffffffff"
        );
    }

    #[test]
    fn a_guid_made_here_gives_back_its_word_and_others_do_not() {
        let mut made = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let bytes = unique_guid_bytes();
            assert_eq!(bytes[6] >> 4, 4, "version 4");
            assert_eq!(bytes[8] >> 6, 0b10, "RFC 4122 variant");
            let word = guid_word(&bytes).expect("a word");
            assert_eq!(guid_of_word(word), bytes);
            assert!(made.insert(bytes), "unique");
        }
        for word in [0, 1, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(guid_word(&guid_of_word(word)), Some(word));
        }
        // A GUID made elsewhere (the service's, an older build's random ones).
        let other = parse_guid_text("60b1549f-3f8d-4cad-a813-01cca7b60a70").expect("a GUID");
        assert_eq!(guid_word(&other), None);
        let mut changed = unique_guid_bytes();
        changed[15] ^= 1;
        assert_eq!(guid_word(&changed), None, "one bit off");
    }

    #[test]
    fn unique_values_do_not_repeat() {
        let values: std::collections::HashSet<u64> = (0..10_000).map(|_| unique_u64()).collect();
        assert_eq!(values.len(), 10_000);
    }
}
