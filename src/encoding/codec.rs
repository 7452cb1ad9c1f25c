//! Low-level AMQP 1.0 type-system helpers the broker needs on its hot paths.
//!
//! Owns two things: measuring an encoded value without decoding it (so message sections
//! can be split and kept as the bytes the client sent) and writing the handful of
//! primitive encodings the broker emits itself (header, annotations, small maps).
//! Every described section is written with the smallulong descriptor form
//! (`0x00 0x53 code`) because the Python SDK's decoder accepts no other.
//! It must not know about frames, links or entities.

use bytes::{BufMut, BytesMut};

/// Why a byte sequence is not a well-formed AMQP value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    /// The input ended inside a value.
    #[error("truncated AMQP value at offset {offset}")]
    Truncated { offset: usize },
    /// A format code the AMQP 1.0 type system does not define.
    #[error("invalid AMQP format code 0x{code:02x} at offset {offset}")]
    InvalidFormatCode { code: u8, offset: usize },
    /// Descriptors nested beyond what any sane peer sends.
    #[error("AMQP value nested deeper than 32 levels at offset {offset}")]
    TooDeep { offset: usize },
}

/// The byte at `at`, or `Truncated`.
pub(crate) fn read_u8(bytes: &[u8], at: usize) -> Result<u8, CodecError> {
    bytes
        .get(at)
        .copied()
        .ok_or(CodecError::Truncated { offset: at })
}

/// The big-endian u32 at `at`, or `Truncated`.
pub(crate) fn read_u32(bytes: &[u8], at: usize) -> Result<usize, CodecError> {
    let slice = bytes
        .get(at..at + 4)
        .ok_or(CodecError::Truncated { offset: at })?;
    Ok(u32::from_be_bytes([slice[0], slice[1], slice[2], slice[3]]) as usize)
}

/// How [`value_length`] measures each format code: the whole value's length for the
/// fixed-width codes, or one of the markers below (issue 16: one table lookup instead of a
/// chain of range tests, for the dozen values measured per transfer).
const MEASURE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = match code {
            0x00 => DESCRIBED,
            0x40..=0x45 => 1,
            0x50..=0x56 => 2,
            0x60..=0x61 => 3,
            0x70..=0x74 => 5,
            0x80..=0x84 => 9,
            0x94 | 0x98 => 17,
            0xa0..=0xa3 | 0xc0..=0xc1 | 0xe0 => SHORT,
            0xb0..=0xb3 | 0xd0..=0xd1 | 0xf0 => LONG,
            _ => INVALID,
        };
        code += 1;
    }
    table
};
/// A described value: its descriptor, then the value.
const DESCRIBED: u8 = 0;
/// A 1-byte size follows the code.
const SHORT: u8 = 0xfe;
/// A 4-byte size follows the code.
const LONG: u8 = 0xfd;
/// Not a format code AMQP 1.0 defines.
const INVALID: u8 = 0xff;

/// Returns the length in bytes of the encoded value (constructor included) that starts at
/// `bytes[start]`. Described values are measured with their descriptor.
#[inline]
pub fn value_length(bytes: &[u8], start: usize) -> Result<usize, CodecError> {
    value_length_at_depth(bytes, start, 0)
}

#[inline]
fn value_length_at_depth(bytes: &[u8], start: usize, depth: u32) -> Result<usize, CodecError> {
    let code = read_u8(bytes, start)?;
    let length = match MEASURE[code as usize] {
        SHORT => 2 + read_u8(bytes, start + 1)? as usize,
        LONG => 5 + read_u32(bytes, start + 1)?,
        DESCRIBED => described_length(bytes, start, depth)?,
        INVALID => {
            return Err(CodecError::InvalidFormatCode {
                code,
                offset: start,
            });
        }
        fixed => fixed as usize,
    };
    if start + length > bytes.len() {
        return Err(CodecError::Truncated { offset: start });
    }
    Ok(length)
}

/// The length of the primitive value (not described, not a list, map or array) at
/// `start`, if it is one and lies within `bytes`.
#[inline]
pub fn primitive_length(bytes: &[u8], start: usize) -> Option<usize> {
    match bytes.get(start)? {
        0xc0..=0xd1 | 0xe0 | 0xf0 => None,
        code if matches!(MEASURE[*code as usize], DESCRIBED | INVALID) => None,
        _ => value_length(bytes, start).ok(),
    }
}

/// The length of the described value at `start` (at nesting `depth`): no value may sit
/// deeper than 16 levels.
#[inline(never)]
fn described_length(bytes: &[u8], start: usize, depth: u32) -> Result<usize, CodecError> {
    if depth >= 16 {
        return Err(CodecError::TooDeep { offset: start + 1 });
    }
    let body = start + 1;
    let descriptor = value_length_at_depth(bytes, body, depth + 1)?;
    let value = value_length_at_depth(bytes, body + descriptor, depth + 1)?;
    Ok(1 + descriptor + value)
}

/// Reads the descriptor code of a section that starts at `bytes[start]`, if it is described
/// with a numeric descriptor (`0x00 0x53 code` or `0x00 0x80 u64`).
pub fn section_code(bytes: &[u8], start: usize) -> Option<u64> {
    if *bytes.get(start)? != 0x00 {
        return None;
    }
    match *bytes.get(start + 1)? {
        0x53 => bytes.get(start + 2).map(|code| *code as u64),
        0x80 => {
            let slice = bytes.get(start + 2..start + 10)?;
            let mut code = [0u8; 8];
            code.copy_from_slice(slice);
            Some(u64::from_be_bytes(code))
        }
        0x44 => Some(0),
        _ => None,
    }
}

/// `text` encoded as a symbol (sym8), at compile time: the annotation keys the broker writes
/// on every delivery are copied, not encoded (issue 16). `N` is the text's length and 2;
/// a wrong `N` or a text past 255 bytes fails the build.
pub const fn sym8<const N: usize>(text: &str) -> [u8; N] {
    let text = text.as_bytes();
    assert!(text.len() <= u8::MAX as usize && N == text.len() + 2);
    let mut encoded = [0; N];
    encoded[0] = 0xa3;
    encoded[1] = text.len() as u8;
    let mut at = 0;
    while at < text.len() {
        encoded[at + 2] = text[at];
        at += 1;
    }
    encoded
}

/// Where a [`Writer`] puts what it encodes: the connection's output buffer, or a buffer on
/// the stack that gathers many small values into one copy (issue 16: a delivery's header
/// and annotations were 37 calls into the output buffer).
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
    /// How many bytes are written.
    fn written(&self) -> usize;
    /// Overwrites the four bytes at `at` (a compound's size or count).
    fn patch(&mut self, at: usize, bytes: [u8; 4]);
}

impl Sink for BytesMut {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.put_slice(bytes);
    }
    #[inline]
    fn written(&self) -> usize {
        self.len()
    }
    #[inline]
    fn patch(&mut self, at: usize, bytes: [u8; 4]) {
        self[at..at + 4].copy_from_slice(&bytes);
    }
}

/// Up to `N` bytes on the stack; past that, on the heap (never lost, only slower).
pub struct StackBuffer<const N: usize> {
    bytes: [u8; N],
    len: usize,
    spilled: Vec<u8>,
}

impl<const N: usize> StackBuffer<N> {
    /// Empty.
    pub fn new() -> Self {
        StackBuffer {
            bytes: [0; N],
            len: 0,
            spilled: Vec::new(),
        }
    }

    /// What was written.
    pub fn as_slice(&self) -> &[u8] {
        if self.spilled.is_empty() {
            &self.bytes[..self.len]
        } else {
            &self.spilled
        }
    }
}

impl<const N: usize> Default for StackBuffer<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Sink for StackBuffer<N> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        if self.spilled.is_empty()
            && let Some(room) = self.bytes.get_mut(self.len..self.len + bytes.len())
        {
            room.copy_from_slice(bytes);
            self.len += bytes.len();
            return;
        }
        if self.spilled.is_empty() {
            self.spilled.extend_from_slice(&self.bytes[..self.len]);
        }
        self.spilled.extend_from_slice(bytes);
    }
    #[inline]
    fn written(&self) -> usize {
        if self.spilled.is_empty() {
            self.len
        } else {
            self.spilled.len()
        }
    }
    fn patch(&mut self, at: usize, bytes: [u8; 4]) {
        let target = if self.spilled.is_empty() {
            &mut self.bytes[..self.len]
        } else {
            &mut self.spilled[..]
        };
        target[at..at + 4].copy_from_slice(&bytes);
    }
}

/// A code and the big-endian bytes of a fixed-width value, as one array (one copy).
fn coded<const N: usize, const M: usize>(code: u8, value: [u8; N]) -> [u8; M] {
    let mut out = [0u8; M];
    out[0] = code;
    out[1..].copy_from_slice(&value);
    out
}

/// Writes AMQP primitives into a buffer. Compound values (lists, maps) are written with a
/// 32-bit size placeholder that [`Writer::finish_compound`] back-patches.
pub struct Writer<'a, S: Sink = BytesMut> {
    /// The buffer being appended to.
    pub buffer: &'a mut S,
}

/// A started list or map whose size and count are patched when it is finished.
#[must_use]
pub struct Compound {
    /// Offset of the 4-byte size field.
    size_at: usize,
    /// Number of elements written so far (map keys and values count separately).
    pub count: u32,
}

impl Compound {
    /// The same compound, its bytes moved `offset` further into another buffer (started
    /// in a [`StackBuffer`], finished in the output it was copied to).
    pub fn moved_by(self, offset: usize) -> Compound {
        Compound {
            size_at: self.size_at + offset,
            count: self.count,
        }
    }
}

impl<'a, S: Sink> Writer<'a, S> {
    /// Wraps a buffer.
    pub fn new(buffer: &'a mut S) -> Self {
        Writer { buffer }
    }
    /// `0x00 0x53 code`: a described value's smallulong descriptor.
    pub fn descriptor(&mut self, code: u8) {
        self.buffer.put(&[0x00, 0x53, code]);
    }
    /// `0x00 0x80 code`: a described value's ulong descriptor (Service Bus rule types).
    pub fn descriptor_ulong(&mut self, code: u64) {
        self.buffer.put(&[0x00]);
        self.buffer.put(&coded::<8, 9>(0x80, code.to_be_bytes()));
    }
    /// AMQP null.
    pub fn null(&mut self) {
        self.buffer.put(&[0x40]);
    }
    /// AMQP boolean.
    pub fn boolean(&mut self, value: bool) {
        self.buffer.put(&[if value { 0x41 } else { 0x42 }]);
    }
    /// AMQP ubyte.
    pub fn ubyte(&mut self, value: u8) {
        self.buffer.put(&[0x50, value]);
    }
    /// AMQP uint, smallest encoding.
    pub fn uint(&mut self, value: u32) {
        match value {
            0 => self.buffer.put(&[0x43]),
            1..=255 => self.buffer.put(&[0x52, value as u8]),
            _ => self.buffer.put(&coded::<4, 5>(0x70, value.to_be_bytes())),
        }
    }
    /// AMQP int (always 4 bytes: `0x71`), as the SDKs read status codes numerically.
    pub fn int(&mut self, value: i32) {
        self.buffer.put(&coded::<4, 5>(0x71, value.to_be_bytes()));
    }
    /// AMQP long (always 8 bytes: `0x81`), which rhea and pyamqp read for sequence numbers.
    pub fn long(&mut self, value: i64) {
        self.buffer.put(&coded::<8, 9>(0x81, value.to_be_bytes()));
    }
    /// AMQP timestamp: milliseconds since the Unix epoch.
    pub fn timestamp(&mut self, unix_milliseconds: i64) {
        self.buffer
            .put(&coded::<8, 9>(0x83, unix_milliseconds.to_be_bytes()));
    }
    /// AMQP uuid from its 16 RFC-order bytes.
    pub fn uuid(&mut self, bytes: &[u8; 16]) {
        self.buffer.put(&coded::<16, 17>(0x98, *bytes));
    }
    fn variable(&mut self, short_code: u8, long_code: u8, bytes: &[u8]) {
        if bytes.len() <= 255 {
            self.buffer.put(&[short_code, bytes.len() as u8]);
        } else {
            self.buffer.put(&coded::<4, 5>(
                long_code,
                (bytes.len() as u32).to_be_bytes(),
            ));
        }
        self.buffer.put(bytes);
    }
    /// AMQP string (UTF-8).
    pub fn string(&mut self, value: &str) {
        self.variable(0xa1, 0xb1, value.as_bytes());
    }
    /// AMQP symbol (ASCII).
    pub fn symbol(&mut self, value: &str) {
        self.variable(0xa3, 0xb3, value.as_bytes());
    }
    /// AMQP binary.
    pub fn binary(&mut self, value: &[u8]) {
        self.variable(0xa0, 0xb0, value);
    }
    /// Already-encoded bytes of one or more values.
    #[inline]
    pub fn raw(&mut self, encoded: &[u8]) {
        self.buffer.put(encoded);
    }
    fn start_compound(&mut self, code: u8) -> Compound {
        let size_at = self.buffer.written() + 1;
        self.buffer.put(&[code, 0, 0, 0, 0, 0, 0, 0, 0]);
        Compound { size_at, count: 0 }
    }
    /// Starts a list32; write the elements, bump `count`, then call `finish_compound`.
    pub fn start_list(&mut self) -> Compound {
        self.start_compound(0xd0)
    }
    /// Starts a map32; keys and values each count as one element.
    pub fn start_map(&mut self) -> Compound {
        self.start_compound(0xd1)
    }
    /// Patches size and count of a list or map started by this writer.
    pub fn finish_compound(&mut self, compound: Compound) {
        let size = (self.buffer.written() - compound.size_at - 4) as u32;
        self.buffer.patch(compound.size_at, size.to_be_bytes());
        self.buffer
            .patch(compound.size_at + 4, compound.count.to_be_bytes());
    }
}

/// A list's or map's element count, where its first element starts and where it ends.
pub fn compound_extent(bytes: &[u8], start: usize) -> Result<(usize, usize, usize), CodecError> {
    let (count, first) = match read_u8(bytes, start)? {
        0x45 => (0, start + 1),
        0xc0 | 0xc1 => (read_u8(bytes, start + 2)? as usize, start + 3),
        0xd0 | 0xd1 => (read_u32(bytes, start + 5)?, start + 9),
        other => {
            return Err(CodecError::InvalidFormatCode {
                code: other,
                offset: start,
            });
        }
    };
    Ok((count, first, start + value_length(bytes, start)?))
}

/// The element starting at `at`, inside a compound ending at `end`.
fn element_at(bytes: &[u8], at: usize, end: usize) -> Result<std::ops::Range<usize>, CodecError> {
    if at >= end {
        return Err(CodecError::Truncated { offset: at });
    }
    Ok(at..at + value_length(bytes, at)?)
}

/// Iterates the encoded elements of a list or map value (for a map: keys and values in
/// turn), returning each element's byte range.
pub fn compound_elements(
    bytes: &[u8],
    start: usize,
) -> Result<Vec<std::ops::Range<usize>>, CodecError> {
    let (count, mut at, end) = compound_extent(bytes, start)?;
    let mut elements = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let element = element_at(bytes, at, end)?;
        at = element.end;
        elements.push(element);
    }
    Ok(elements)
}

/// [`compound_elements`] without allocating: fills `elements` with the byte ranges of the
/// first elements of the list or map at `start` (as many as it has room for; the rest are
/// left as they are) and returns how many elements the value has. Elements past the room
/// are measured but not kept.
pub fn compound_elements_into(
    bytes: &[u8],
    start: usize,
    elements: &mut [std::ops::Range<usize>],
) -> Result<usize, CodecError> {
    let (count, mut at, end) = compound_extent(bytes, start)?;
    for index in 0..count {
        let element = element_at(bytes, at, end)?;
        at = element.end;
        if let Some(slot) = elements.get_mut(index) {
            *slot = element;
        }
    }
    Ok(count)
}

/// Reads a string or symbol value's text, if the value at `range` is one.
pub fn read_text(bytes: &[u8], range: std::ops::Range<usize>) -> Option<&str> {
    let value = bytes.get(range)?;
    let text = match value.first()? {
        0xa1 | 0xa3 => value.get(2..)?,
        0xb1 | 0xb3 => value.get(5..)?,
        _ => return None,
    };
    std::str::from_utf8(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same values written through a writer on the output buffer and on stack buffers
    /// of every size (small ones spill to the heap midway, a compound patched across it).
    #[test]
    fn a_stack_buffer_writes_what_the_output_buffer_does() {
        fn values<S: Sink>(writer: &mut Writer<'_, S>) {
            writer.descriptor(0x70);
            let mut list = writer.start_list();
            writer.boolean(true);
            writer.ubyte(4);
            writer.uint(0);
            writer.uint(200);
            writer.uint(70_000);
            writer.int(-3);
            writer.long(i64::MIN);
            writer.timestamp(1_700_000_000_000);
            writer.uuid(&[7; 16]);
            writer.symbol("x-opt-sequence-number");
            writer.string(&"é".repeat(200));
            writer.binary(&[1, 2, 3]);
            writer.null();
            list.count = 13;
            writer.finish_compound(list);
            writer.descriptor_ulong(0x0000_0137_0000_0009);
        }
        let mut output = BytesMut::new();
        values(&mut Writer::new(&mut output));
        let mut small = StackBuffer::<16>::new();
        values(&mut Writer::new(&mut small));
        assert_eq!(small.as_slice(), &output[..], "spilled at 16 bytes");
        let mut large = StackBuffer::<1024>::new();
        values(&mut Writer::new(&mut large));
        assert_eq!(large.as_slice(), &output[..]);
        assert!(large.spilled.is_empty(), "no spill when it fits");
        assert_eq!(
            &output[..14],
            &[
                0x00, 0x53, 0x70, 0xd0, 0, 0, 0x01, 0xe9, 0, 0, 0, 13, 0x41, 0x50
            ],
            "size (489: a str32 of 400 bytes among them) and count patched"
        );
    }

    #[test]
    fn elements_into_a_slice_are_the_allocated_ones() {
        // list8 of 4: null, smalluint 7, str8 "ab", true; a map; list0; a truncated list.
        let list = [0xc0, 9, 4, 0x40, 0x52, 7, 0xa1, 2, b'a', b'b', 0x41];
        let all = compound_elements(&list, 0).expect("a list");
        let mut two = [0..0, 0..0];
        assert_eq!(compound_elements_into(&list, 0, &mut two), Ok(4));
        assert_eq!(&two[..], &all[..2]);
        let mut six: [std::ops::Range<usize>; 6] = Default::default();
        assert_eq!(compound_elements_into(&list, 0, &mut six), Ok(4));
        assert_eq!((&six[..4], &six[4..]), (&all[..], &[0..0, 0..0][..]));
        let map = [0xc1, 5, 2, 0xa3, 1, b'k', 0x40];
        let mut pair = [0..0, 0..0];
        assert_eq!(compound_elements_into(&map, 0, &mut pair), Ok(2));
        assert_eq!(pair.to_vec(), compound_elements(&map, 0).expect("a map"));
        assert_eq!(compound_elements_into(&[0x45], 0, &mut pair), Ok(0));
        assert!(compound_elements_into(&[0xc0, 3, 3, 0x40, 0x40], 0, &mut pair).is_err());
    }

    #[test]
    fn measures_primitives_and_described_values() {
        assert_eq!(value_length(&[0x40], 0), Ok(1));
        assert_eq!(value_length(&[0x52, 7], 0), Ok(2));
        assert_eq!(value_length(&[0xa1, 3, b'a', b'b', b'c'], 0), Ok(5));
        assert_eq!(
            value_length(&[0x00, 0x53, 0x75, 0xa0, 1, 9, 0xff], 0),
            Ok(6)
        );
        assert!(matches!(
            value_length(&[0xa1, 9, b'a'], 0),
            Err(CodecError::Truncated { .. })
        ));
        assert!(matches!(
            value_length(&[0x3f], 0),
            Err(CodecError::InvalidFormatCode { .. })
        ));
    }

    #[test]
    fn every_format_code_is_measured_as_the_type_system_defines_it() {
        // Fixed widths (constructor included), by the ranges of AMQP 1.0 §1.6.
        for (codes, width) in [
            (0x40..=0x45, 1),
            (0x50..=0x56, 2),
            (0x60..=0x61, 3),
            (0x70..=0x74, 5),
            (0x80..=0x84, 9),
        ] {
            for code in codes {
                let bytes = [vec![code], vec![0; width - 1]].concat();
                assert_eq!(value_length(&bytes, 0), Ok(width), "code 0x{code:02x}");
                assert_eq!(
                    value_length(&bytes[..width - 1], 0),
                    Err(CodecError::Truncated { offset: 0 }),
                    "code 0x{code:02x} truncated"
                );
            }
        }
        for code in [0x94, 0x98] {
            assert_eq!(value_length(&[&[code][..], &[0; 16]].concat(), 0), Ok(17));
        }
        for code in [0xa0, 0xa1, 0xa3, 0xc0, 0xc1, 0xe0] {
            assert_eq!(
                value_length(&[code, 2, 0, 0], 0),
                Ok(4),
                "code 0x{code:02x}"
            );
        }
        for code in [0xb0, 0xb1, 0xb3, 0xd0, 0xd1, 0xf0] {
            assert_eq!(
                value_length(&[code, 0, 0, 0, 1, 0], 0),
                Ok(6),
                "code 0x{code:02x}"
            );
        }
        let defined: Vec<u8> = (0..=255u8)
            .filter(|code| {
                let mut bytes = [0; 64];
                bytes[0] = *code;
                if *code == 0x00 {
                    bytes[1..4].copy_from_slice(&[0x53, 0x01, 0x40]);
                }
                value_length(&bytes, 0).is_ok()
            })
            .collect();
        // The described constructor, the fixed widths, the 1- and 4-byte sizes.
        assert_eq!(
            defined.len(),
            1 + 6 + 7 + 2 + 5 + 5 + 2 + 7 + 7,
            "{defined:x?}"
        );
    }

    #[test]
    fn a_symbol_encoded_at_compile_time_is_the_written_one() {
        const KEY: [u8; 18] = sym8("x-opt-lock-token");
        let mut written = BytesMut::new();
        Writer::new(&mut written).symbol("x-opt-lock-token");
        assert_eq!(&KEY[..], &written[..]);
    }

    #[test]
    fn only_primitives_are_measured_as_primitives() {
        assert_eq!(primitive_length(&[0x40], 0), Some(1));
        assert_eq!(primitive_length(&[0x52, 7], 0), Some(2));
        assert_eq!(primitive_length(&[0xa1, 2, b'h', b'i'], 0), Some(4));
        assert_eq!(primitive_length(&[0xb0, 0, 0, 0, 1, 9], 0), Some(6));
        // list0 is a constructor and nothing else: it holds nothing.
        assert_eq!(primitive_length(&[0x45], 0), Some(1));
        for compound in [
            &[0xc0, 1, 0][..],
            &[0xc1, 1, 0],
            &[0xd0, 0, 0, 0, 4, 0, 0, 0, 0],
            &[0xd1, 0, 0, 0, 4, 0, 0, 0, 0],
            &[0xe0, 2, 0, 0x40],
            &[0xf0, 0, 0, 0, 5, 0, 0, 0, 0, 0x40],
            &[0x00, 0x53, 0x01, 0x40],
            &[0x3f],
        ] {
            assert_eq!(primitive_length(compound, 0), None, "{compound:x?}");
        }
        assert_eq!(primitive_length(&[0xa1, 3, b'h'], 0), None, "truncated");
        assert_eq!(primitive_length(&[], 0), None);
    }

    #[test]
    fn described_values_nest_at_most_16_deep() {
        // n described values, each the next one's descriptor: the last one's values sit n
        // levels down.
        let nested = |n: usize| [vec![0x00; n], vec![0x53, 0x01], vec![0x40; n]].concat();
        assert_eq!(value_length(&nested(16), 0), Ok(16 + 2 + 16));
        assert_eq!(
            value_length(&nested(17), 0),
            Err(CodecError::TooDeep { offset: 17 })
        );
    }

    #[test]
    fn written_maps_are_readable_by_serde_amqp() {
        let mut buffer = BytesMut::new();
        let mut writer = Writer::new(&mut buffer);
        let mut map = writer.start_map();
        writer.symbol("x-opt-sequence-number");
        writer.long(42);
        map.count += 2;
        writer.finish_compound(map);
        let value: serde_amqp::Value = serde_amqp::from_slice(&buffer).expect("decodes");
        let serde_amqp::Value::Map(map) = value else {
            panic!("not a map")
        };
        assert_eq!(map.len(), 1);
        let elements = compound_elements(&buffer, 0).expect("elements");
        assert_eq!(elements.len(), 2);
        assert_eq!(
            read_text(&buffer, elements[0].clone()),
            Some("x-opt-sequence-number")
        );
    }
}
