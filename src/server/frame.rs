//! AMQP 1.0 framing: protocol headers, frame splitting and performative encoding.
//!
//! Reading works on a connection's input buffer: [`take_frame`] returns one complete frame
//! (or `None` until enough bytes arrived). Writing appends encoded frames to an output
//! buffer that the connection flushes once per batch of work, so many frames share one
//! `write` system call. Transfers larger than the peer's max-frame-size are split.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use fe2o3_amqp_types::performatives::{Performative, Transfer};
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
/// transfer payload). A disposition whose `rejected` error info has string keys (rhea
/// writes them so; AMQP says symbols) is normalised and decoded again.
pub fn decode_performative(body: &Bytes) -> Result<(Performative, Bytes), FrameError> {
    match decode_performative_strict(body) {
        Err(error) => match normalize_rejected_info(body) {
            Some(normalized) => decode_performative_strict(&normalized).map_err(|_| error),
            None => Err(error),
        },
        ok => ok,
    }
}

/// Rewrites string keys of a disposition's `rejected.error.info` map as symbols (same
/// length, so in place on a copy). `None` if the body is not such a disposition.
fn normalize_rejected_info(body: &Bytes) -> Option<Bytes> {
    use crate::amqp::codec::{compound_elements, section_code};
    if section_code(body, 0)? != 0x15 {
        return None;
    }
    let disposition = compound_elements(body, 3).ok()?;
    let state = disposition.get(4)?;
    if section_code(body, state.start)? != 0x25 {
        return None;
    }
    let rejected = compound_elements(body, state.start + 3).ok()?;
    let error = rejected.first()?;
    if section_code(body, error.start)? != 0x1d {
        return None;
    }
    let fields = compound_elements(body, error.start + 3).ok()?;
    let info = fields.get(2)?;
    let entries = compound_elements(body, info.start).ok()?;
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

fn begin_frame(output: &mut BytesMut, frame_type: u8, channel: u16) -> usize {
    let start = output.len();
    output.put_u32(0);
    output.put_u8(2);
    output.put_u8(frame_type);
    output.put_u16(channel);
    start
}

fn end_frame(output: &mut BytesMut, start: usize) {
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

/// Appends a transfer and its payload, split into several frames when it would exceed
/// `max_frame_size`. Only the first frame repeats delivery id, tag and format.
pub fn write_transfer(
    output: &mut BytesMut,
    channel: u16,
    mut transfer: Transfer,
    payload: &[u8],
    max_frame_size: u32,
) -> Result<(), FrameError> {
    let max_frame_size = max_frame_size.max(MIN_MAX_FRAME_SIZE) as usize;
    let start = begin_frame(output, FRAME_TYPE_AMQP, channel);
    serialize_into(output, &Performative::Transfer(transfer.clone()))?;
    if output.len() - start + payload.len() <= max_frame_size {
        output.put_slice(payload);
        end_frame(output, start);
        return Ok(());
    }
    // Too big for one frame: rewrite the first frame with more=true and continue.
    output.truncate(start);
    let final_more = transfer.more;
    let mut remaining = payload;
    let mut first = true;
    while first || !remaining.is_empty() {
        let start = begin_frame(output, FRAME_TYPE_AMQP, channel);
        transfer.more = true;
        serialize_into(output, &Performative::Transfer(transfer.clone()))?;
        let room = max_frame_size.saturating_sub(output.len() - start);
        if room >= remaining.len() {
            // Last fragment: re-encode with the caller's `more`.
            output.truncate(start + 8);
            transfer.more = final_more;
            serialize_into(output, &Performative::Transfer(transfer.clone()))?;
            output.put_slice(remaining);
            remaining = &[];
        } else {
            let (chunk, rest) = remaining.split_at(room.max(1));
            output.put_slice(chunk);
            remaining = rest;
        }
        end_frame(output, start);
        if first {
            first = false;
            transfer.delivery_id = None;
            transfer.delivery_tag = None;
            transfer.message_format = None;
            transfer.settled = None;
            transfer.rcv_settle_mode = None;
        }
        if remaining.is_empty() && transfer.more != final_more {
            // The payload ended exactly at a frame boundary with `more` set: close it.
            let start = begin_frame(output, FRAME_TYPE_AMQP, channel);
            transfer.more = final_more;
            serialize_into(output, &Performative::Transfer(transfer.clone()))?;
            end_frame(output, start);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let normalized = normalize_rejected_info(&body).expect("recognised");
        let (performative, _) = decode_performative_strict(&normalized).expect("decodes");
        assert!(matches!(performative, Performative::Disposition(_)));
    }
}
