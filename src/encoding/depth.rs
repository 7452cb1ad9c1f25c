//! The guard in front of every decoder: walks encoded AMQP values without recursion and
//! refuses nesting deeper than [`MAX_DEPTH`] or lengths that run past their container,
//! before serde_amqp (which recurses) or any other recursive code sees the bytes.
//!
//! A peer that sends an `open` whose properties hold a map nested 2,000 deep would
//! otherwise overflow the stack and abort the whole process (issue 10, item 1). Every
//! list, map, array and described value counts as one level.

use super::codec::{CodecError, primitive_length, read_u8, read_u32};

/// Levels of list, map, array or described value a value may nest.
pub const MAX_DEPTH: usize = 32;

/// A container being walked: where it ends and how many values it still holds.
#[derive(Debug, Clone, Copy)]
struct Open {
    /// Offset just past its last byte (`usize::MAX` for described values, which end after
    /// their two values).
    end: usize,
    /// The nearest end of this container and every one around it: nothing inside may pass
    /// it (kept here so that a value's bound is not recomputed from the whole stack).
    limit: usize,
    /// Values still to read in it.
    remaining: u64,
    /// For arrays: the format code every element shares (elements carry no constructor).
    element: Option<u8>,
}

/// The containers being walked, innermost last: at most [`MAX_DEPTH`], on the stack (issue
/// 16: a `Vec` allocated for every message checked).
struct Stack {
    open: [Open; MAX_DEPTH],
    len: usize,
}

impl Stack {
    fn new() -> Stack {
        Stack {
            open: [Open {
                end: 0,
                limit: 0,
                remaining: 0,
                element: None,
            }; MAX_DEPTH],
            len: 0,
        }
    }

    fn last(&self) -> Option<&Open> {
        self.open[..self.len].last()
    }

    fn last_mut(&mut self) -> Option<&mut Open> {
        self.open[..self.len].last_mut()
    }

    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pushes `open`; false when the stack is full.
    fn push(&mut self, open: Open) -> bool {
        match self.open.get_mut(self.len) {
            Some(slot) => {
                *slot = open;
                self.len += 1;
                true
            }
            None => false,
        }
    }
}

/// Checks the one value at the start of `bytes` and returns its length.
pub fn check_value(bytes: &[u8]) -> Result<usize, CodecError> {
    walk(bytes, Some(1), |_| {})
}

/// Checks that `bytes` starts with one described value (a performative or SASL frame body)
/// and returns its length. Requiring the descriptor makes sure a decoder that reads a
/// described type reads only what was checked (a plain value first would leave the rest —
/// e.g. a 3 GB declared length — unchecked).
pub fn check_described(bytes: &[u8]) -> Result<usize, CodecError> {
    match bytes.first() {
        Some(0x00) => walk(bytes, Some(1), |_| {}),
        Some(code) => Err(CodecError::InvalidFormatCode {
            code: *code,
            offset: 0,
        }),
        None => Err(CodecError::Truncated { offset: 0 }),
    }
}

/// Checks that `bytes` is a sequence of whole values (message sections).
pub fn check_values(bytes: &[u8]) -> Result<(), CodecError> {
    walk(bytes, None, |_| {}).map(|_| ())
}

/// Where each value of a sequence of whole values (message sections) ends, in order,
/// once they are checked as [`check_values`] does (issue 16: the check finds them too).
pub type Ends = smallvec::SmallVec<[usize; 8]>;

/// [`check_values`], returning where each value ends.
pub fn check_values_ends(bytes: &[u8]) -> Result<Ends, CodecError> {
    let mut ends = Ends::new();
    if !flat_ends(bytes, &mut ends) {
        ends.clear();
        walk(bytes, None, |end| ends.push(end))?;
    }
    Ok(ends)
}

/// Where each value of `bytes` ends, when every one is flat: a primitive, a list or map of
/// primitives, or one of those described by a `0x00 0x53 code` descriptor — as message
/// sections usually are. Such values nest at most two levels, so they are checked in one
/// loop, without the stack (issue 16: the walk was 4 % of a message's instructions).
/// `false` when a value is anything else or malformed: [`walk`] then checks it, and
/// refuses it naming the fault.
fn flat_ends(bytes: &[u8], ends: &mut Ends) -> bool {
    let mut at = 0;
    while at < bytes.len() {
        let value = match bytes[at] {
            0x00 if bytes.get(at + 1) == Some(&0x53) && at + 3 <= bytes.len() => at + 3,
            0x00 => return false,
            _ => at,
        };
        let end = match bytes.get(value) {
            Some(0x45) => value + 1,
            Some(&code @ (0xc0 | 0xc1 | 0xd0 | 0xd1)) => {
                let header = if code < 0xd0 { 1 } else { 4 };
                let (size, count) = if header == 1 {
                    match bytes.get(value + 1..value + 3) {
                        Some(&[size, count]) => (size as usize, count as usize),
                        _ => return false,
                    }
                } else {
                    match (read_u32(bytes, value + 1), read_u32(bytes, value + 5)) {
                        (Ok(size), Ok(count)) => (size, count),
                        _ => return false,
                    }
                };
                let end = value + 1 + header + size;
                if size < header || end > bytes.len() || (code & 0x01 == 1 && count % 2 == 1) {
                    return false;
                }
                // Every element takes a byte at least: at most `size` steps.
                let compound = &bytes[..end];
                let mut element = value + 1 + 2 * header;
                for _ in 0..count {
                    match primitive_length(compound, element) {
                        Some(length) => element += length,
                        None => return false,
                    }
                }
                if element != end {
                    return false;
                }
                end
            }
            _ => match primitive_length(bytes, value) {
                Some(length) => value + length,
                None => return false,
            },
        };
        ends.push(end);
        at = end;
    }
    true
}

/// Walks `count` top-level values (all of `bytes` when `None`), telling `each_end` where
/// each ends; returns the bytes read.
fn walk(
    bytes: &[u8],
    count: Option<u64>,
    mut each_end: impl FnMut(usize),
) -> Result<usize, CodecError> {
    let mut stack = Stack::new();
    let mut position = 0usize;
    let mut top_left = count;
    loop {
        // Close every container that is complete.
        while let Some(open) = stack.last() {
            if open.remaining > 0 {
                break;
            }
            if open.end != usize::MAX && position != open.end {
                return Err(CodecError::Truncated { offset: position });
            }
            stack.pop();
            if let Some(parent) = stack.last_mut() {
                parent.remaining -= 1;
            } else {
                each_end(position);
                if let Some(left) = top_left.as_mut() {
                    *left -= 1;
                }
            }
        }
        if stack.is_empty() {
            match top_left {
                Some(0) => return Ok(position),
                None if position == bytes.len() => return Ok(position),
                _ => {}
            }
        }
        let limit = stack.last().map_or(bytes.len(), |open| open.limit);
        let (code, body) = match stack.last().and_then(|open| open.element) {
            Some(code) => (code, position),
            None => (read_u8(bytes, position)?, position + 1),
        };
        let opened = match code {
            0x00 => {
                if stack.last().is_some_and(|open| open.element.is_some()) {
                    // Array elements are never themselves described.
                    return Err(CodecError::InvalidFormatCode {
                        code,
                        offset: position,
                    });
                }
                position = body;
                Some(Open {
                    end: usize::MAX,
                    limit: 0,
                    remaining: 2,
                    element: None,
                })
            }
            0x40..=0x45 => {
                position = body;
                None
            }
            0x50..=0x56 => {
                position = body + 1;
                None
            }
            0x60..=0x61 => {
                position = body + 2;
                None
            }
            0x70..=0x74 => {
                position = body + 4;
                None
            }
            0x80..=0x84 => {
                position = body + 8;
                None
            }
            0x94 | 0x98 => {
                position = body + 16;
                None
            }
            0xa0..=0xa3 => {
                position = body + 1 + read_u8(bytes, body)? as usize;
                None
            }
            0xb0..=0xb3 => {
                position = body + 4 + read_u32(bytes, body)?;
                None
            }
            0xc0..=0xc1 | 0xd0..=0xd1 => {
                let (size, count, header) = if code < 0xd0 {
                    let size = read_u8(bytes, body)? as usize;
                    let count = read_u8(bytes, body + 1)? as u64;
                    (size, count, 1)
                } else {
                    let size = read_u32(bytes, body)?;
                    let count = read_u32(bytes, body + 4)? as u64;
                    (size, count, 4)
                };
                let end = body + header + size;
                // The size covers the count: a smaller one is malformed (a decoder would
                // read the count from the bytes after the value).
                if size < header {
                    return Err(CodecError::Truncated { offset: position });
                }
                if (code == 0xc1 || code == 0xd1) && count % 2 == 1 {
                    return Err(CodecError::InvalidFormatCode {
                        code,
                        offset: position,
                    });
                }
                position = body + 2 * header;
                Some(Open {
                    end,
                    limit: 0,
                    remaining: count,
                    element: None,
                })
            }
            0xe0 | 0xf0 => {
                let (size, count, header) = if code == 0xe0 {
                    let size = read_u8(bytes, body)? as usize;
                    (size, read_u8(bytes, body + 1)? as u64, 1)
                } else {
                    let size = read_u32(bytes, body)?;
                    (size, read_u32(bytes, body + 4)? as u64, 4)
                };
                let end = body + header + size;
                let mut at = body + 2 * header;
                let mut element = read_u8(bytes, at)?;
                at += 1;
                if element == 0x00 {
                    // A described element type: a simple descriptor, then the element code.
                    at += match read_u8(bytes, at)? {
                        0x53 | 0x50 => 2,
                        0x44 => 1,
                        0x80 => 9,
                        0xa3 => 2 + read_u8(bytes, at + 1)? as usize,
                        0xb3 => 5 + read_u32(bytes, at + 1)?,
                        other => {
                            return Err(CodecError::InvalidFormatCode {
                                code: other,
                                offset: at,
                            });
                        }
                    };
                    element = read_u8(bytes, at)?;
                    at += 1;
                }
                if element == 0x00 {
                    return Err(CodecError::InvalidFormatCode {
                        code: element,
                        offset: at - 1,
                    });
                }
                // The count and the element constructor lie inside the array's size.
                if at > end {
                    return Err(CodecError::Truncated { offset: position });
                }
                position = at;
                // Elements of a zero-width type take no bytes: none to walk (a count of
                // four billion must not cost four billion steps).
                let remaining = if (0x40..=0x45).contains(&element) {
                    0
                } else {
                    count
                };
                Some(Open {
                    end,
                    limit: 0,
                    remaining,
                    element: Some(element),
                })
            }
            other => {
                return Err(CodecError::InvalidFormatCode {
                    code: other,
                    offset: position,
                });
            }
        };
        if position > limit {
            return Err(CodecError::Truncated { offset: position });
        }
        match opened {
            Some(mut open) => {
                if open.end != usize::MAX && open.end > limit {
                    return Err(CodecError::Truncated { offset: position });
                }
                open.limit = open.end.min(limit);
                // An empty array or compound is complete at once; the loop head closes it.
                if !stack.push(open) {
                    return Err(CodecError::TooDeep { offset: position });
                }
            }
            None => {
                if let Some(parent) = stack.last_mut() {
                    parent.remaining -= 1;
                } else {
                    each_end(position);
                    if let Some(left) = top_left.as_mut() {
                        *left -= 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `depth` lists nested in each other around a null.
    fn nested_lists(depth: usize) -> Vec<u8> {
        let mut value = vec![0x40];
        for _ in 0..depth {
            let mut list = vec![0xd0];
            list.extend_from_slice(&((value.len() + 4) as u32).to_be_bytes());
            list.extend_from_slice(&1u32.to_be_bytes());
            list.extend_from_slice(&value);
            value = list;
        }
        value
    }

    fn nested_maps(depth: usize) -> Vec<u8> {
        let mut value = vec![0x40];
        for _ in 0..depth {
            let mut map = vec![0xd1];
            map.extend_from_slice(&((value.len() + 4 + 2) as u32).to_be_bytes());
            map.extend_from_slice(&2u32.to_be_bytes());
            map.extend_from_slice(&[0xa3, 0x00]);
            map.extend_from_slice(&value);
            value = map;
        }
        value
    }

    #[test]
    fn nesting_up_to_the_limit_is_accepted_and_one_more_is_refused() {
        let ok = nested_lists(MAX_DEPTH);
        assert_eq!(check_value(&ok), Ok(ok.len()));
        assert!(matches!(
            check_value(&nested_lists(MAX_DEPTH + 1)),
            Err(CodecError::TooDeep { .. })
        ));
        assert!(matches!(
            check_value(&nested_maps(2_000)),
            Err(CodecError::TooDeep { .. })
        ));
    }

    #[test]
    fn described_values_count_as_a_level() {
        let mut value = vec![0x40];
        for _ in 0..MAX_DEPTH + 1 {
            let mut described = vec![0x00, 0x53, 0x70];
            described.extend_from_slice(&value);
            value = described;
        }
        assert!(matches!(
            check_value(&value),
            Err(CodecError::TooDeep { .. })
        ));
    }

    #[test]
    fn arrays_of_arrays_are_walked_and_counted() {
        // array8 of one array8 of two ubytes.
        let inner = [0x02u8 + 2, 0x02, 0x50, 0x01, 0x02];
        let mut outer = vec![0xe0, (2 + inner.len()) as u8, 0x01, 0xe0];
        outer.extend_from_slice(&inner);
        assert_eq!(check_value(&outer), Ok(outer.len()));
        // The inner array claims more bytes than the outer one holds.
        let mut bad = outer.clone();
        bad[4] = 0x40;
        assert!(check_value(&bad).is_err());
    }

    #[test]
    fn lengths_past_the_container_or_the_input_are_refused() {
        assert!(matches!(
            check_value(&[0xa1, 0x05, b'a']),
            Err(CodecError::Truncated { .. })
        ));
        // A list whose size says 2 bytes but whose element needs 5.
        assert!(check_value(&[0xc0, 0x02, 0x01, 0x71, 0, 0, 0, 1]).is_err());
        // A map with an odd number of entries.
        assert!(check_value(&[0xc1, 0x02, 0x01, 0x40]).is_err());
        // A list inside a list, sized past its parent's end (not the input's): refused,
        // also through a described value (which has no end of its own) between them.
        let inner_past_outer = [0xc0, 0x04, 0x01, 0xc0, 0x03, 0x01, 0x40, 0x40, 0x40];
        assert!(check_value(&inner_past_outer[..]).is_err());
        let through_described = [
            0xc0, 0x05, 0x01, 0x00, 0x53, 0x70, 0xa1, 0x03, b'a', b'b', b'c',
        ];
        assert!(check_value(&through_described[..]).is_err());
        // The same values within their bounds are accepted.
        assert_eq!(check_value(&[0xc0, 0x04, 0x01, 0xc0, 0x01, 0x00]), Ok(6));
        let described = [
            0xc0, 0x09, 0x01, 0x00, 0x53, 0x70, 0xa1, 0x03, b'a', b'b', b'c',
        ];
        assert_eq!(check_value(&described[..]), Ok(11));
    }

    #[test]
    fn each_section_end_is_told_in_order() {
        // header (list0), data of 3 bytes, an amqp-value null.
        let sections = [
            0x00, 0x53, 0x70, 0x45, 0x00, 0x53, 0x75, 0xa0, 0x03, 1, 2, 3, 0x00, 0x53, 0x77, 0x40,
        ];
        assert_eq!(
            check_values_ends(&sections).map(|ends| ends.to_vec()),
            Ok(vec![4, 12, 16])
        );
        assert!(check_values_ends(&sections[..14]).is_err());
    }

    #[test]
    fn a_sequence_of_sections_is_checked_whole() {
        let mut sections = vec![0x00, 0x53, 0x70, 0x45];
        sections.extend_from_slice(&[0x00, 0x53, 0x77, 0xa1, 0x02, b'h', b'i']);
        assert_eq!(check_values(&sections), Ok(()));
        sections.push(0xa1);
        assert!(check_values(&sections).is_err());
        assert_eq!(check_values(&[]), Ok(()));
    }

    #[test]
    fn a_compound_whose_size_does_not_cover_its_count_is_refused() {
        // Found by the frame target: list8 of size 0, then a symbol declaring 3 GB.
        let body = [
            0x00, 0x53, 0x18, 0xc0, 0x00, 0xd3, 0x00, 0xb3, 0xb3, 0xb3, 0x00, 0x00,
        ];
        assert!(check_described(&body).is_err());
        assert_eq!(check_value(&[0xc0, 0x01, 0x00]), Ok(3));
        assert!(check_value(&[0xe0, 0x00, 0x00]).is_err());
    }

    #[test]
    fn a_frame_body_must_start_with_a_described_value() {
        let body = [0x52, 0x16, 0x00, 0xb3, 0xb3, 0x4a, 0xb3, 0xff, 0x01];
        assert!(check_described(&body).is_err());
        assert_eq!(check_described(&[0x00, 0x53, 0x10, 0x45]), Ok(4));
    }

    #[test]
    fn a_performative_followed_by_payload_measures_only_the_performative() {
        let mut body = vec![0x00, 0x53, 0x14, 0xc0, 0x02, 0x01, 0x43];
        let performative = body.len();
        body.extend_from_slice(b"\x00\x53\x75\xa0\x01x");
        assert_eq!(check_value(&body), Ok(performative));
    }

    /// Message sections as senders write them: header, properties, application
    /// properties (map8 and map32), a data, an amqp-value and a footer section.
    fn flat_sections() -> Vec<Vec<u8>> {
        let header = b"\x00\x53\x70\xc0\x0b\x05\x42\x50\x04\x70\x00\x00\x03\xe8\x40\x43".to_vec();
        let mut properties =
            b"\x00\x53\x73\xc0\x18\x04\xa1\x05id-17\x40\xa1\x05queue\xa1\x05label".to_vec();
        properties[4] = (properties.len() - 5) as u8;
        let application = b"\x00\x53\x74\xc1\x09\x02\xa1\x01k\x71\x00\x00\x00\x07".to_vec();
        let mut application32 =
            b"\x00\x53\x74\xd1\x00\x00\x00\x0e\x00\x00\x00\x02\xa3\x01k\xb1\x00\x00\x00\x01v"
                .to_vec();
        application32[7] = (application32.len() - 8) as u8;
        let data = [&b"\x00\x53\x75\xb0\x00\x00\x01\x00"[..], &[7; 256]].concat();
        let value = b"\x00\x53\x77\xa1\x02hi".to_vec();
        let footer = b"\x00\x53\x78\xc1\x01\x00".to_vec();
        vec![
            header,
            properties,
            application,
            application32,
            data,
            value,
            footer,
        ]
    }

    #[test]
    fn flat_sections_are_checked_without_the_walk_and_end_where_it_says() {
        let sections = flat_sections();
        let message = sections.concat();
        let mut expected = Vec::new();
        let mut at = 0;
        for section in &sections {
            at += section.len();
            expected.push(at);
        }
        let mut flat = smallvec::SmallVec::new();
        assert!(flat_ends(&message, &mut flat));
        assert_eq!(flat.to_vec(), expected);
        let mut walked = Vec::new();
        assert_eq!(
            walk(&message, None, |end| walked.push(end)),
            Ok(message.len())
        );
        assert_eq!(walked, expected);
        // Nested values are left to the walk: a list in a map, an array, a described
        // descriptor, a described value in a list.
        for nested in [
            &b"\x00\x53\x74\xc1\x05\x02\xa1\x01k\x45"[..],
            b"\x00\x53\x74\xc1\x07\x02\xa1\x01k\xc0\x01\x00",
            b"\x00\x53\x77\xe0\x03\x02\x50\x01\x02",
            b"\x00\x00\x53\x01\x40\x40",
            b"\x00\x53\x70\xc0\x04\x01\x00\x53\x01",
        ] {
            let mut flat = smallvec::SmallVec::new();
            let taken = flat_ends(nested, &mut flat);
            let mut walked = Vec::new();
            let walk_result = walk(nested, None, |end| walked.push(end));
            if taken {
                assert_eq!(walk_result, Ok(nested.len()), "{nested:x?}");
                assert_eq!(flat.to_vec(), walked, "{nested:x?}");
            }
        }
        // A list in a map: walked, and found whole.
        let nested = b"\x00\x53\x74\xc1\x07\x02\xa1\x01k\xc0\x01\x00";
        assert!(!flat_ends(nested, &mut Ends::new()));
        assert_eq!(
            check_values_ends(nested).map(|ends| ends.to_vec()),
            Ok(vec![nested.len()])
        );
    }

    #[test]
    fn wherever_the_flat_path_answers_the_walk_agrees() {
        // Every section alone and all together, then each with one to three bytes changed
        // or cut short (a fixed seed): wherever the flat path takes the bytes, the walk
        // accepts them and finds the same ends; where the walk refuses, so does it.
        let sections = flat_sections();
        let mut messages = sections.clone();
        messages.push(sections.concat());
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut taken, mut declined) = (0, 0);
        for message in &messages {
            for round in 0..3000 {
                let mut bytes = message.clone();
                if round > 0 {
                    for _ in 0..1 + next() % 3 {
                        let at = next() as usize % bytes.len();
                        // Mostly small values: sizes and counts that stay near the truth.
                        bytes[at] = if next() % 2 == 0 {
                            next() as u8
                        } else {
                            bytes[at].wrapping_add(next() as u8 % 5).wrapping_sub(2)
                        };
                    }
                    if next() % 8 == 0 {
                        bytes.truncate(next() as usize % bytes.len());
                    }
                }
                let mut flat = smallvec::SmallVec::new();
                let mut walked = Vec::new();
                let walk_result = walk(&bytes, None, |end| walked.push(end));
                if flat_ends(&bytes, &mut flat) {
                    assert_eq!(walk_result, Ok(bytes.len()), "{bytes:x?}");
                    assert_eq!(flat.to_vec(), walked, "{bytes:x?}");
                    taken += 1;
                } else {
                    declined += 1;
                }
            }
        }
        // Both paths were exercised.
        assert!(
            taken > 1000 && declined > 1000,
            "{taken} taken, {declined} declined"
        );
    }
}
