//! AMQP 1.0 framing: protocol headers, frame splitting and performative encoding.
//!
//! Reading works on a connection's input buffer: [`take_frame`] returns one complete frame
//! (or `None` until enough bytes arrived). Writing appends encoded frames to an output
//! buffer that the connection flushes once per batch of work, so many frames share one
//! `write` system call. Transfers larger than the peer's max-frame-size are split.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use fe2o3_amqp_types::messaging::DeliveryState;
use fe2o3_amqp_types::performatives::Performative;
use serde::Serialize;

/// `AMQP` 0 1 0 0: the plain AMQP protocol header.
pub const AMQP_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";
/// `AMQP` 3 1 0 0: the SASL protocol header.
pub const SASL_HEADER: [u8; 8] = *b"AMQP\x03\x01\x00\x00";
/// Frame type of AMQP frames.
pub const FRAME_TYPE_AMQP: u8 = 0x00;
/// Frame type of SASL frames.
pub const FRAME_TYPE_SASL: u8 = 0x01;
/// Smallest max-frame-size AMQP allows.
pub const MIN_MAX_FRAME_SIZE: u32 = 512;

/// Why the byte stream is not valid framing.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Declared frame size below 8 or above what we advertised.
    #[error("frame size {size} is outside 8..={limit}")]
    BadSize { size: u32, limit: u32 },
    /// Data offset smaller than the frame header.
    #[error("frame data offset {0} is invalid")]
    BadDataOffset(u8),
    /// Performative could not be decoded.
    #[error("malformed frame body: {0}")]
    Decode(String),
    /// Encoding failed (a bug or an unencodable value).
    #[error("cannot encode frame: {0}")]
    Encode(String),
}

/// One received frame.
#[derive(Debug)]
pub struct RawFrame {
    /// AMQP or SASL.
    pub frame_type: u8,
    /// Channel (AMQP frames).
    pub channel: u16,
    /// Frame body after the extended header; empty for heartbeats.
    pub body: Bytes,
}

/// Takes one complete frame from `input`, if buffered.
pub fn take_frame(input: &mut BytesMut, max_size: u32) -> Result<Option<RawFrame>, FrameError> {
    if input.len() < 8 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([input[0], input[1], input[2], input[3]]);
    if size < 8 || size > max_size {
        return Err(FrameError::BadSize {
            size,
            limit: max_size,
        });
    }
    if input.len() < size as usize {
        input.reserve(size as usize - input.len());
        return Ok(None);
    }
    let data_offset = input[4];
    if (data_offset as u32) < 2 || data_offset as u32 * 4 > size {
        return Err(FrameError::BadDataOffset(data_offset));
    }
    let frame_type = input[5];
    let channel = u16::from_be_bytes([input[6], input[7]]);
    let mut frame = input.split_to(size as usize).freeze();
    frame.advance(data_offset as usize * 4);
    Ok(Some(RawFrame {
        frame_type,
        channel,
        body: frame,
    }))
}

/// Decodes the performative at the start of a frame body and returns the rest (the
/// transfer payload). A disposition whose `rejected` error info or `modified` message
/// annotations have string keys (rhea and the Java SDK write them so; AMQP says symbols)
/// is normalised and decoded again.
pub fn decode_performative(body: &Bytes) -> Result<(Performative, Bytes), FrameError> {
    // Before serde_amqp (which recurses) sees it: bounded nesting, lengths within bounds.
    crate::encoding::depth::check_described(body)
        .map_err(|error| FrameError::Decode(format!("the performative is malformed: {error}")))?;
    match decode_performative_strict(body) {
        Err(error) => match normalize_outcome_keys(body) {
            Some(normalized) => decode_performative_strict(&normalized).map_err(|_| error),
            None => Err(error),
        },
        ok => ok,
    }
}

/// Rewrites string keys of a disposition's `rejected.error.info` or
/// `modified.message-annotations` map as symbols, also inside a `transactional-state` (the
/// Java SDK's dead-letter and abandon/defer with properties to modify, in a transaction or
/// not). Same length, so in place on a copy. `None` if the body is not such a disposition.
fn normalize_outcome_keys(body: &Bytes) -> Option<Bytes> {
    use crate::encoding::codec::{compound_elements, section_code};
    if section_code(body, 0)? != 0x15 {
        return None;
    }
    let disposition = compound_elements(body, 3).ok()?;
    let mut state = disposition.get(4)?.start;
    if section_code(body, state)? == 0x34 {
        // transactional-state: txn-id, outcome
        state = compound_elements(body, state + 3).ok()?.get(1)?.start;
    }
    let map = match section_code(body, state)? {
        0x25 => {
            let rejected = compound_elements(body, state + 3).ok()?;
            let error = rejected.first()?;
            if section_code(body, error.start)? != 0x1d {
                return None;
            }
            compound_elements(body, error.start + 3).ok()?.get(2)?.start
        }
        0x27 => compound_elements(body, state + 3).ok()?.get(2)?.start,
        _ => return None,
    };
    let entries = compound_elements(body, map).ok()?;
    let mut copy = body.to_vec();
    for key in entries.iter().step_by(2) {
        match copy[key.start] {
            0xa1 => copy[key.start] = 0xa3,
            0xb1 => copy[key.start] = 0xb3,
            _ => {}
        }
    }
    Some(Bytes::from(copy))
}

fn decode_performative_strict(body: &Bytes) -> Result<(Performative, Bytes), FrameError> {
    let mut reader: &[u8] = body;
    let performative: Performative = {
        let io = serde_amqp::read::IoReader::new(&mut reader);
        let mut deserializer = serde_amqp::de::Deserializer::new(io);
        serde::Deserialize::deserialize(&mut deserializer)
            .map_err(|error| FrameError::Decode(error.to_string()))?
    };
    let consumed = body.len() - reader.len();
    Ok((performative, body.slice(consumed..)))
}

fn serialize_into<T: Serialize>(output: &mut BytesMut, value: &T) -> Result<(), FrameError> {
    let mut serializer = serde_amqp::ser::Serializer::new(output.writer());
    value
        .serialize(&mut serializer)
        .map_err(|error| FrameError::Encode(error.to_string()))
}

/// A frame's 8-byte header: its size, data offset 2 (no extended header), type, channel.
pub(super) fn frame_header(size: u32, frame_type: u8, channel: u16) -> [u8; 8] {
    let [a, b, c, d] = size.to_be_bytes();
    let [high, low] = channel.to_be_bytes();
    [a, b, c, d, 2, frame_type, high, low]
}

pub(super) fn begin_frame(output: &mut BytesMut, frame_type: u8, channel: u16) -> usize {
    let start = output.len();
    // The size is patched by `end_frame`.
    output.extend_from_slice(&frame_header(0, frame_type, channel));
    start
}

pub(super) fn end_frame(output: &mut BytesMut, start: usize) {
    let size = (output.len() - start) as u32;
    output[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

/// Appends a frame holding one serialisable body (a performative or SASL frame).
pub fn write_frame<T: Serialize>(
    output: &mut BytesMut,
    frame_type: u8,
    channel: u16,
    body: &T,
) -> Result<(), FrameError> {
    let start = begin_frame(output, frame_type, channel);
    serialize_into(output, body)?;
    end_frame(output, start);
    Ok(())
}

/// Appends a performative frame.
pub fn write_performative(
    output: &mut BytesMut,
    channel: u16,
    performative: &Performative,
) -> Result<(), FrameError> {
    write_frame(output, FRAME_TYPE_AMQP, channel, performative)
}

/// Appends an empty frame (heartbeat).
pub fn write_heartbeat(output: &mut BytesMut) {
    output.put_slice(&[0, 0, 0, 8, 2, FRAME_TYPE_AMQP, 0, 0]);
}

/// The fields of an incoming transfer the broker uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingTransfer {
    /// Link handle.
    pub handle: u32,
    /// Delivery id (first frame of a delivery).
    pub delivery_id: Option<u32>,
    /// Message format (first frame).
    pub message_format: Option<u32>,
    /// Pre-settled by the sender.
    pub settled: Option<bool>,
    /// More frames follow.
    pub more: bool,
    /// The sender aborted the delivery.
    pub aborted: bool,
    /// The transaction the delivery belongs to (a `transactional-state` in its state).
    pub txn_id: Option<Bytes>,
}

fn read_uint(bytes: &[u8]) -> Option<Option<u32>> {
    match bytes {
        [0x40] => Some(None),
        [0x43] => Some(Some(0)),
        [0x52, value] => Some(Some(*value as u32)),
        [0x70, a, b, c, d] => Some(Some(u32::from_be_bytes([*a, *b, *c, *d]))),
        _ => None,
    }
}

fn read_bool(bytes: &[u8]) -> Option<Option<bool>> {
    match bytes {
        [0x40] => Some(None),
        [0x41] | [0x56, 0x01] => Some(Some(true)),
        [0x42] | [0x56, 0x00] => Some(Some(false)),
        _ => None,
    }
}

/// Decodes a transfer frame body by hand (the hot path): `None` if the body is not a
/// transfer or uses an encoding this reader does not handle — then the general decoder
/// runs. Returns the transfer and its payload.
pub fn decode_transfer(body: &Bytes) -> Option<(IncomingTransfer, Bytes)> {
    use crate::encoding::codec::{compound_elements_into, section_code, value_length};
    if section_code(body, 0)? != 0x14 || body.get(1) != Some(&0x53) {
        return None;
    }
    // The transfer's 11 fields (AMQP 1.0 §2.7.5), without allocating (one per transfer).
    let mut elements: [std::ops::Range<usize>; 11] = Default::default();
    let count = compound_elements_into(body, 3, &mut elements).ok()?;
    let end = 3 + value_length(body, 3).ok()?;
    let field = |index: usize| {
        elements[..count.min(11)]
            .get(index)
            .map(|range| &body[range.clone()])
    };
    let handle = read_uint(field(0)?)??;
    let delivery_id = match field(1) {
        Some(bytes) => read_uint(bytes)?,
        None => None,
    };
    let message_format = match field(3) {
        Some(bytes) => read_uint(bytes)?,
        None => None,
    };
    let settled = match field(4) {
        Some(bytes) => read_bool(bytes)?,
        None => None,
    };
    let more = match field(5) {
        Some(bytes) => read_bool(bytes)?.unwrap_or(false),
        None => false,
    };
    let aborted = match field(9) {
        Some(bytes) => read_bool(bytes)?.unwrap_or(false),
        None => false,
    };
    // Only a transactional state matters on an incoming transfer (AMQP 1.0 §4.4.1).
    let txn_id = match field(7) {
        None | Some([0x40]) => None,
        Some(bytes) => match serde_amqp::from_slice::<DeliveryState>(bytes).ok()? {
            DeliveryState::TransactionalState(state) => Some(Bytes::from(state.txn_id.into_vec())),
            _ => None,
        },
    };
    Some((
        IncomingTransfer {
            handle,
            delivery_id,
            message_format,
            settled,
            more,
            aborted,
            txn_id,
        },
        body.slice(end..),
    ))
}

/// What the first frame of an outgoing delivery carries.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryHeader<'a> {
    /// Link handle.
    pub handle: u32,
    /// Session delivery id.
    pub delivery_id: u32,
    /// 16-byte delivery tag (the lock token in .NET order, or a fresh GUID).
    pub tag: &'a [u8],
    /// Sent pre-settled (receive-and-delete, responses).
    pub settled: bool,
}

/// Hand-encodes a transfer performative (the hot path: no serde, no allocation). The
/// first frame carries delivery id, tag, format and settled; continuation frames only
/// the handle and `more`.
pub(super) fn write_transfer_performative(
    output: &mut BytesMut,
    header: &DeliveryHeader<'_>,
    first: bool,
    more: bool,
) {
    // Gathered on the stack and copied at once (issue 16: a dozen small writes per
    // delivery); a transfer's fields never pass 64 bytes but for the tag (at most 32).
    let mut front = crate::encoding::codec::StackBuffer::<128>::new();
    let mut writer = crate::encoding::codec::Writer::new(&mut front);
    writer.descriptor(0x14);
    let mut list = writer.start_list();
    writer.uint(header.handle);
    if first {
        writer.uint(header.delivery_id);
        writer.binary(header.tag);
        writer.uint(0);
        writer.boolean(header.settled);
    } else {
        for _ in 0..4 {
            writer.null();
        }
    }
    writer.boolean(more);
    list.count = 6;
    writer.finish_compound(list);
    output.extend_from_slice(front.as_slice());
}

/// Appends a delivery, split into several frames when it would exceed `max_frame_size`.
/// Returns the number of frames written (each counts against the session window).
pub fn write_delivery(
    output: &mut BytesMut,
    channel: u16,
    header: &DeliveryHeader<'_>,
    payload: &[u8],
    max_frame_size: u32,
) -> u32 {
    let max_frame_size = max_frame_size.max(MIN_MAX_FRAME_SIZE) as usize;
    let mut remaining = payload;
    let mut first = true;
    let mut frames = 0;
    loop {
        let start = begin_frame(output, FRAME_TYPE_AMQP, channel);
        write_transfer_performative(output, header, first, false);
        let room = max_frame_size.saturating_sub(output.len() - start).max(1);
        if room >= remaining.len() {
            output.put_slice(remaining);
            end_frame(output, start);
            return frames + 1;
        }
        // Rewrite this frame's performative with more=true and fill it.
        output.truncate(start + 8);
        write_transfer_performative(output, header, first, true);
        let room = max_frame_size.saturating_sub(output.len() - start).max(1);
        let (chunk, rest) = remaining.split_at(room.min(remaining.len()));
        output.put_slice(chunk);
        end_frame(output, start);
        remaining = rest;
        first = false;
        frames += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_decoded_transfers_match_the_general_decoder() {
        let tag = [5u8; 16];
        let header = DeliveryHeader {
            handle: 300,
            delivery_id: 70_000,
            tag: &tag,
            settled: true,
        };
        let mut output = BytesMut::new();
        write_delivery(&mut output, 2, &header, b"payload bytes", 65_536);
        let raw = take_frame(&mut output, 65_536)
            .expect("framing")
            .expect("a frame");
        let (fast, fast_payload) = decode_transfer(&raw.body).expect("hand decoder handles it");
        let (Performative::Transfer(general), general_payload) =
            decode_performative_strict(&raw.body).expect("decodes")
        else {
            panic!("not a transfer")
        };
        assert_eq!(fast.handle, general.handle.0);
        assert_eq!(fast.delivery_id, general.delivery_id);
        assert_eq!(fast.message_format, general.message_format);
        assert_eq!(fast.settled, general.settled);
        assert_eq!(fast.more, general.more);
        assert_eq!(fast_payload, general_payload);
        assert_eq!(&fast_payload[..], b"payload bytes");
    }

    #[test]
    fn large_deliveries_are_split_into_frames_that_decode() {
        let payload = vec![7u8; 3000];
        let tag = [1u8; 16];
        let header = DeliveryHeader {
            handle: 3,
            delivery_id: 9,
            tag: &tag,
            settled: false,
        };
        let mut output = BytesMut::new();
        let frames = write_delivery(&mut output, 1, &header, &payload, 1024);
        assert!(
            frames >= 3,
            "3000 bytes need at least 3 frames of 1024, got {frames}"
        );
        let mut reassembled = Vec::new();
        let mut more_flags = Vec::new();
        while let Some(raw) = take_frame(&mut output, 1024).expect("valid framing") {
            assert!(raw.body.len() + 8 <= 1024);
            let (performative, rest) = decode_performative(&raw.body).expect("decodes");
            let Performative::Transfer(transfer) = performative else {
                panic!("not a transfer")
            };
            assert_eq!(transfer.handle.0, 3);
            more_flags.push(transfer.more);
            reassembled.extend_from_slice(&rest);
        }
        assert_eq!(more_flags.len(), frames as usize);
        assert_eq!(more_flags.last(), Some(&false));
        assert!(more_flags[..more_flags.len() - 1].iter().all(|more| *more));
        assert_eq!(reassembled, payload);
    }

    #[test]
    fn a_rejected_disposition_with_string_info_keys_decodes() {
        // rhea (JS SDK) writes rejected.error.info with str8 keys.
        let mut body = vec![0x00, 0x53, 0x15, 0xc0];
        let mut list = vec![0x05, 0x41, 0x43, 0x40, 0x41];
        let mut state = vec![0x00, 0x53, 0x25, 0xc0];
        let mut error = vec![0x00, 0x53, 0x1d, 0xc0];
        let mut error_fields = vec![0x03];
        error_fields.extend_from_slice(&[0xa3, 25]);
        error_fields.extend_from_slice(b"com.microsoft:dead-letter");
        error_fields.push(0x40);
        error_fields.extend_from_slice(&[0xc1, 11, 0x02, 0xa1, 0x01, b'k', 0xa1, 0x05]);
        error_fields.extend_from_slice(b"value");
        error.push(error_fields.len() as u8);
        error.extend_from_slice(&error_fields);
        let mut rejected = vec![0x01];
        rejected.extend_from_slice(&error);
        state.push(rejected.len() as u8);
        state.extend_from_slice(&rejected);
        list.extend_from_slice(&state);
        body.push(list.len() as u8);
        body.extend_from_slice(&list);
        let body = Bytes::from(body);
        let normalized = normalize_outcome_keys(&body).expect("recognised");
        let (performative, _) = decode_performative_strict(&normalized).expect("decodes");
        assert!(matches!(performative, Performative::Disposition(_)));
    }

    /// `[0x00, 0x53, code, list8 …fields]`
    fn described_list(code: u8, count: u8, fields: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0x00, 0x53, code, 0xc0, fields.len() as u8 + 1, count];
        bytes.extend_from_slice(fields);
        bytes
    }

    #[test]
    fn a_modified_disposition_with_string_annotation_keys_decodes_also_in_a_transaction() {
        use fe2o3_amqp_types::messaging::DeliveryState;
        use fe2o3_amqp_types::primitives::Symbol;
        // The Java SDK's abandon with properties to modify: modified.message-annotations
        // with str8 keys; in a transaction, inside a transactional-state.
        let mut modified_fields = vec![0x41, 0x42];
        modified_fields.extend_from_slice(&[0xc1, 11, 0x02, 0xa1, 0x01, b'k', 0xa1, 0x05]);
        modified_fields.extend_from_slice(b"value");
        let modified = described_list(0x27, 3, &modified_fields);
        let mut transactional_fields = vec![0xa0, 0x04, 1, 2, 3, 4];
        transactional_fields.extend_from_slice(&modified);
        let transactional = described_list(0x34, 2, &transactional_fields);
        for (state, in_transaction) in [(modified, false), (transactional, true)] {
            let mut fields = vec![0x41, 0x43, 0x40, 0x41];
            fields.extend_from_slice(&state);
            let body = Bytes::from(described_list(0x15, 5, &fields));
            let (performative, _) = decode_performative(&body).expect("decodes");
            let Performative::Disposition(disposition) = performative else {
                panic!("not a disposition")
            };
            let modified = match disposition.state {
                Some(DeliveryState::Modified(modified)) if !in_transaction => modified,
                Some(DeliveryState::TransactionalState(state)) if in_transaction => {
                    match state.outcome {
                        Some(fe2o3_amqp_types::messaging::Outcome::Modified(modified)) => modified,
                        other => panic!("not modified: {other:?}"),
                    }
                }
                other => panic!("unexpected state {other:?}"),
            };
            let annotations = modified.message_annotations.expect("annotations");
            assert!(annotations.contains_key(&Symbol::from("k")));
        }
    }
}
