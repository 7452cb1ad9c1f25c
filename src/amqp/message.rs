//! Message ⇄ broker adapter: splits a client's encoded message into sections without
//! re-encoding the body, and builds the bytes of a delivery (a fresh header and message
//! annotations with the broker's `x-opt-*` values, then the client's sections as sent).

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::messaging::Properties;

use crate::broker::entity::Record;
use crate::broker::message::{
    Extras, HeaderFields, MAX_HEADER_SECTIONS, MAX_SYSTEM_TEXT, Message, SystemField,
    write_changed_application_properties,
};
use crate::broker::types::{LockToken, MessageState, Timestamp};
use crate::encoding::codec::{self, CodecError, Writer};
use crate::encoding::sections::{
    self, AMQP_VALUE, APPLICATION_PROPERTIES, DATA, DELIVERY_ANNOTATIONS, FOOTER, HEADER,
    MESSAGE_ANNOTATIONS, PROPERTIES, SectionError,
};
use crate::encoding::{depth, ids};

/// Message format of a Service Bus batch: every `data` section is a whole message.
pub const BATCH_MESSAGE_FORMAT: u32 = 0x8001_3700;

/// Annotation keys the broker owns: values sent by clients are dropped and replaced.
const BROKER_ANNOTATIONS: [&str; 7] = [
    "x-opt-sequence-number",
    "x-opt-enqueued-time",
    "x-opt-locked-until",
    "x-opt-message-state",
    "x-opt-lock-token",
    "x-opt-enqueue-sequence-number",
    "x-opt-deadletter-source",
];

/// Why a transfer's payload is not an acceptable message.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// The bytes are not AMQP.
    #[error("malformed message: {0}")]
    Codec(#[from] CodecError),
    /// A section that must be described is not.
    #[error("malformed message: section at offset {0} is not a described type")]
    NotASection(usize),
    /// A section failed to decode.
    #[error("malformed message {section}: {reason}")]
    Section {
        /// Which section.
        section: &'static str,
        /// The decoder's complaint.
        reason: String,
    },
    /// A batch held no messages.
    #[error("the batch message holds no messages")]
    EmptyBatch,
    /// An identifier longer than Service Bus allows.
    #[error("the {field} is {length} characters long; at most 128 are allowed")]
    TooLong {
        /// Which field.
        field: &'static str,
        /// Its length in characters.
        length: usize,
    },
    /// System properties (ids, addresses, subject, content type) longer than Service Bus
    /// allows in a message header.
    #[error("the message's properties hold {length} bytes of text; at most 65535 are allowed")]
    PropertiesTooLong {
        /// Their text's length in bytes.
        length: usize,
    },
    /// Annotations, properties and application properties larger than the broker keeps.
    #[error(
        "the message's annotations, properties and application properties take {length} bytes; at most {MAX_HEADER_SECTIONS} are allowed (Service Bus allows 64 KB of header)"
    )]
    HeaderTooLarge {
        /// Their encoded length in bytes.
        length: usize,
    },
    /// No data, amqp-sequence or amqp-value section (AMQP 1.0 §3.2 requires one).
    #[error("malformed message: it has no body section (data, amqp-sequence or amqp-value)")]
    NoBody,
    /// A message-format other than 0 (standard) or the Service Bus batch format.
    #[error(
        "message-format {0} is not supported: send standard AMQP messages (0) or Service Bus batches (0x80013700)"
    )]
    UnsupportedFormat(u32),
    /// `x-opt-partition-key` and the session id disagree (rule PRT-3).
    #[error(
        "The PartitionKey '{partition_key}' does not match the SessionId '{session_id}'; when both are set they must be identical."
    )]
    PartitionKeyMismatch {
        /// The partition key.
        partition_key: String,
        /// The session id.
        session_id: String,
    },
}

impl From<SectionError> for MessageError {
    fn from(error: SectionError) -> Self {
        match error {
            SectionError::Codec(error) => MessageError::Codec(error),
            SectionError::Section { section, reason } => MessageError::Section { section, reason },
        }
    }
}

fn section_error(section: &'static str, error: impl std::fmt::Display) -> MessageError {
    MessageError::Section {
        section,
        reason: error.to_string(),
    }
}

/// Parses the messages of one transfer: a single message, or the messages inside a
/// batch envelope.
pub fn parse_transfer(
    payload: Bytes,
    message_format: u32,
) -> Result<crate::broker::entity::Messages, MessageError> {
    match message_format {
        0 => return Ok(smallvec::smallvec![parse_message(payload)?]),
        BATCH_MESSAGE_FORMAT => depth::check_values(&payload)?,
        other => return Err(MessageError::UnsupportedFormat(other)),
    }
    let mut messages = crate::broker::entity::Messages::new();
    let mut at = 0;
    while at < payload.len() {
        let length = codec::value_length(&payload, at)?;
        if codec::section_code(&payload, at) == Some(DATA) {
            let value_at = at + sections::descriptor_length(&payload, at)?;
            let (offset, size) = binary_extent(&payload, value_at)?;
            // parse_message copies what it keeps: no message pins the batch.
            messages.push(parse_message(payload.slice(offset..offset + size))?);
        }
        at += length;
    }
    if messages.is_empty() {
        return Err(MessageError::EmptyBatch);
    }
    Ok(messages)
}

/// Offset and length of the content of a binary value.
fn binary_extent(bytes: &[u8], at: usize) -> Result<(usize, usize), MessageError> {
    let length = codec::value_length(bytes, at)?;
    match bytes[at] {
        0xa0 => Ok((at + 2, length - 2)),
        0xb0 => Ok((at + 5, length - 5)),
        _ => Err(section_error("data section", "content is not binary")),
    }
}

/// Parses one encoded message. Assigns a message-id when the sender set none (the JS
/// SDK's batch items carry none, and its lock renewal needs one).
pub fn parse_message(bytes: Bytes) -> Result<Message, MessageError> {
    // Before any decoder (serde_amqp recurses): bounded nesting, lengths within bounds;
    // the same walk finds where each section ends.
    let ends = depth::check_values_ends(&bytes)?;
    let mut header_fields = HeaderFields::default();
    // Only a message with annotations can carry what goes here.
    let mut extras = None;
    let mut annotations = Vec::new();
    let mut properties_range = 0..0;
    let mut application_properties_range = 0..0;
    // The body sections (and footer): inline for the usual few, in a vector past that.
    let mut body_inline: [std::ops::Range<usize>; 4] = Default::default();
    let mut body_count = 0;
    let mut body_spilled: Vec<std::ops::Range<usize>> = Vec::new();
    let mut at = 0;
    for end in ends {
        let code = codec::section_code(&bytes, at).ok_or(MessageError::NotASection(at))?;
        let section = at..end;
        match code {
            HEADER => header_fields = sections::read_header(&bytes, &section)?,
            DELIVERY_ANNOTATIONS => {}
            MESSAGE_ANNOTATIONS => {
                annotations = parse_annotations(&bytes, at, extras.get_or_insert_default())?;
            }
            PROPERTIES => properties_range = section,
            APPLICATION_PROPERTIES => application_properties_range = section,
            DATA..=FOOTER => {
                match body_inline.get_mut(body_count) {
                    Some(slot) => *slot = section,
                    None => {
                        if body_spilled.is_empty() {
                            body_spilled.extend(body_inline.iter().cloned());
                        }
                        body_spilled.push(section);
                    }
                }
                body_count += 1;
            }
            _ => {
                return Err(section_error(
                    "section",
                    format!("unknown section 0x{code:x}"),
                ));
            }
        }
        at = end;
    }
    let body_ranges = if body_spilled.is_empty() {
        &body_inline[..body_count]
    } else {
        &body_spilled[..]
    };
    if !body_ranges.iter().any(|range| {
        matches!(
            codec::section_code(&bytes, range.start),
            Some(DATA..=AMQP_VALUE)
        )
    }) {
        return Err(MessageError::NoBody);
    }
    let body = join_ranges(&bytes, body_ranges);
    let values = if properties_range.is_empty() {
        Default::default()
    } else {
        sections::read_properties(&bytes, &properties_range)?
    };
    // A message sent without an id is given one (the SDKs need it, wire contract §5): the
    // 8-byte word its GUID is made of is kept beside the message and the GUID written into
    // its properties section on the way out (issues 16 and 43: 8 bytes kept where a section
    // written with the text took 44).
    let assigned = values[SystemField::MessageId as usize]
        .is_none()
        .then(ids::unique_guid_bytes);
    let system = values.each_ref().map(|value| value.as_deref());
    for (field, value) in [
        ("message-id", system[SystemField::MessageId as usize]),
        ("session-id", system[SystemField::SessionId as usize]),
        (
            "reply-to-session-id",
            system[SystemField::ReplyToSessionId as usize],
        ),
    ] {
        // A character takes at least a byte: only a longer text is counted.
        if let Some(value) = value
            && value.len() > MAX_ID_LENGTH
            && value.chars().count() > MAX_ID_LENGTH
        {
            return Err(MessageError::TooLong {
                field,
                length: value.chars().count(),
            });
        }
    }
    let length: usize = system.iter().flatten().map(|value| value.len()).sum();
    if length > MAX_SYSTEM_TEXT {
        return Err(MessageError::PropertiesTooLong { length });
    }
    // The section holds every value as text but identifiers that are not strings (the
    // ones made into text here): only those are kept apart.
    let apart = values.each_ref().map(|value| match value {
        Some(std::borrow::Cow::Owned(text)) => Some(text.as_str()),
        _ => None,
    });
    // One allocation sized to what is kept: never a slice of the connection's read buffer
    // (issue 10, item 9 and issue 16: slices pinned whole 64 KiB buffers). The properties,
    // application properties and body usually lie back to back in the transfer: then they
    // are copied once, straight into it.
    let properties_bytes = &bytes[properties_range.clone()];
    let lengths = [
        annotations.len(),
        properties_bytes.len(),
        application_properties_range.len(),
        body.len(),
    ];
    let header_length: usize = lengths[..3].iter().sum();
    if header_length > MAX_HEADER_SECTIONS {
        return Err(MessageError::HeaderTooLarge {
            length: header_length,
        });
    }
    let body_range = match (&body, body_ranges.first()) {
        (std::borrow::Cow::Borrowed(_), Some(first)) => first.start..first.start + body.len(),
        _ => 0..0,
    };
    let kept = [
        properties_range.clone(),
        application_properties_range.clone(),
        body_range.clone(),
    ];
    let back_to_back = annotations.is_empty() && !body_range.is_empty() && contiguous(&kept);
    let mut message = if back_to_back {
        let start = kept
            .iter()
            .find(|range| !range.is_empty())
            .map_or(0, |range| range.start);
        Message::from_joined(
            header_fields,
            &bytes[start..body_range.end],
            lengths,
            apart,
            assigned,
        )
    } else {
        Message::from_parts_apart(
            header_fields,
            [
                &annotations,
                properties_bytes,
                &bytes[application_properties_range],
                &body,
            ],
            apart,
            assigned,
        )
    };
    let Some(extras) = extras else {
        return Ok(message);
    };
    if let Some(partition_key) = &extras.partition_key
        && let Some(session_id) = message.system().session_id()
        && **partition_key != *session_id
    {
        return Err(MessageError::PartitionKeyMismatch {
            partition_key: partition_key.to_string(),
            session_id: session_id.to_string(),
        });
    }
    if extras.scheduled_enqueue_time.is_some()
        || extras.partition_key.is_some()
        || extras.original_sequence_number.is_some()
    {
        message.edit_extras(|kept| *kept = extras);
    }
    Ok(message)
}

/// Longest message-id and session-id Service Bus accepts.
pub const MAX_ID_LENGTH: usize = 128;

/// Whether the non-empty ranges follow each other with nothing between.
fn contiguous(ranges: &[std::ops::Range<usize>]) -> bool {
    let mut present = ranges.iter().filter(|range| !range.is_empty());
    let Some(first) = present.next() else {
        return true;
    };
    let mut end = first.end;
    for range in present {
        if range.start != end {
            return false;
        }
        end = range.end;
    }
    true
}

fn join_ranges<'a>(
    bytes: &'a [u8],
    ranges: &[std::ops::Range<usize>],
) -> std::borrow::Cow<'a, [u8]> {
    match (ranges.first(), ranges.last()) {
        (Some(first), Some(last)) if contiguous(ranges) => {
            std::borrow::Cow::Borrowed(&bytes[first.start..last.end])
        }
        (None, _) | (_, None) => std::borrow::Cow::Borrowed(&[]),
        _ => std::borrow::Cow::Owned(
            ranges
                .iter()
                .map(|range| &bytes[range.clone()])
                .collect::<Vec<_>>()
                .concat(),
        ),
    }
}

fn read_timestamp(bytes: &[u8], range: std::ops::Range<usize>) -> Option<i64> {
    let value = bytes.get(range)?;
    if value.len() == 9 && matches!(value[0], 0x83 | 0x81) {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&value[1..]);
        return Some(i64::from_be_bytes(raw));
    }
    None
}

/// Keeps the client's annotations except the broker-owned keys, and picks out the
/// scheduled enqueue time.
fn parse_annotations(
    bytes: &[u8],
    at: usize,
    extras: &mut Extras,
) -> Result<Vec<u8>, MessageError> {
    let value_at = at + sections::descriptor_length(bytes, at)?;
    let elements = codec::compound_elements(bytes, value_at)?;
    let mut kept = Vec::new();
    for pair in elements.chunks(2) {
        let [key, value] = pair else {
            return Err(section_error(
                "message-annotations",
                "odd number of map elements",
            ));
        };
        let name = codec::read_text(bytes, key.clone()).unwrap_or("");
        if name == "x-opt-scheduled-enqueue-time" {
            extras.scheduled_enqueue_time = read_timestamp(bytes, value.clone()).map(Timestamp);
        }
        if name == "x-opt-partition-key" {
            extras.partition_key = codec::read_text(bytes, value.clone()).map(Into::into);
        }
        if name == "x-opt-enqueue-sequence-number" {
            extras.original_sequence_number = read_timestamp(bytes, value.clone());
        }
        if BROKER_ANNOTATIONS.contains(&name) {
            continue;
        }
        kept.extend_from_slice(&bytes[key.start..value.end]);
    }
    Ok(kept)
}

/// The broker-side view of a delivery to encode.
pub struct DeliveryView<'a> {
    /// The record being delivered or peeked.
    pub record: &'a Record,
    /// The lock, for peek-lock deliveries.
    pub lock: Option<(LockToken, Timestamp)>,
    /// Whether the lock token goes into the `x-opt-lock-token` delivery annotation too, as
    /// the service sends it to receivers (clients that do not read the delivery tag take it
    /// from there); not for peeks.
    pub lock_token: bool,
}

/// The annotation keys a delivery carries, encoded once (issue 16).
const LOCK_TOKEN_KEY: [u8; 18] = codec::sym8("x-opt-lock-token");
const SEQUENCE_NUMBER_KEY: [u8; 23] = codec::sym8("x-opt-sequence-number");
const ENQUEUED_TIME_KEY: [u8; 21] = codec::sym8("x-opt-enqueued-time");
const LOCKED_UNTIL_KEY: [u8; 20] = codec::sym8("x-opt-locked-until");
const ENQUEUE_SEQUENCE_NUMBER_KEY: [u8; 31] = codec::sym8("x-opt-enqueue-sequence-number");
const DEAD_LETTER_SOURCE_KEY: [u8; 25] = codec::sym8("x-opt-deadletter-source");
const MESSAGE_STATE_KEY: [u8; 21] = codec::sym8("x-opt-message-state");

/// Encodes a message for delivery: header, annotations, then the client's sections.
pub fn encode_delivery(view: DeliveryView<'_>, output: &mut BytesMut) {
    let record = view.record;
    let message = &record.message;
    // The header and the broker's annotations are small values of bounded size: gathered on
    // the stack, then copied into the output at once (issue 16).
    let mut front = codec::StackBuffer::<256>::new();
    let mut writer = Writer::new(&mut front);

    writer.descriptor(HEADER as u8);
    let mut header = writer.start_list();
    let sent = message.header();
    writer.boolean(sent.durable);
    writer.ubyte(sent.priority);
    match record.time_to_live() {
        Some(ttl) => writer.uint(ttl.as_millis().min(u32::MAX as u128) as u32),
        None => writer.null(),
    }
    writer.boolean(record.delivery_count() == 0);
    writer.uint(record.delivery_count());
    header.count = 5;
    writer.finish_compound(header);

    if let (true, Some((token, _))) = (view.lock_token, view.lock) {
        writer.descriptor(DELIVERY_ANNOTATIONS as u8);
        let mut delivery_annotations = writer.start_map();
        writer.raw(&LOCK_TOKEN_KEY);
        writer.uuid(&token.0);
        delivery_annotations.count = 2;
        writer.finish_compound(delivery_annotations);
    }

    writer.descriptor(MESSAGE_ANNOTATIONS as u8);
    let mut annotations = writer.start_map();
    writer.raw(&SEQUENCE_NUMBER_KEY);
    writer.long(record.sequence_number.0);
    writer.raw(&ENQUEUED_TIME_KEY);
    writer.timestamp(record.enqueued_time().0);
    annotations.count += 4;
    if let Some((_, until)) = view.lock {
        writer.raw(&LOCKED_UNTIL_KEY);
        writer.timestamp(until.0);
        annotations.count += 2;
    }
    let offset = output.len();
    output.extend_from_slice(front.as_slice());
    let mut annotations = annotations.moved_by(offset);
    let mut writer = Writer::new(output);
    let extras = message.extras();
    if let Some(original) = extras.original_sequence_number {
        writer.raw(&ENQUEUE_SEQUENCE_NUMBER_KEY);
        writer.long(original);
        annotations.count += 2;
    }
    if let Some(source) = &extras.dead_letter_source {
        writer.raw(&DEAD_LETTER_SOURCE_KEY);
        writer.string(source);
        annotations.count += 2;
    }
    if record.state() != MessageState::Active {
        writer.raw(&MESSAGE_STATE_KEY);
        writer.int(record.state() as i32);
        annotations.count += 2;
    }
    // Where the sections lie is read once (issue 16: the head keeps no offsets).
    let ([entries, properties, application, body], assigned) = message.sections_and_assigned_id();
    writer.raw(entries);
    annotations.count += Message::element_count(entries);
    writer.finish_compound(annotations);

    match assigned {
        // The usual message sent without an id has no properties section at all: the
        // section holding only the id is written at once (no time to live to lower: it
        // has no creation time).
        Some(id) if properties.is_empty() => {
            writer.raw(&ASSIGNED_ID_ONLY);
            writer.raw(ids::GuidText::new(&id).as_bytes());
        }
        _ => {
            let properties = Message::properties_with_id(properties, assigned);
            match lowered_ttl_properties(record, properties.as_slice()) {
                Some(properties) => writer.raw(&properties),
                None => writer.raw(properties.as_slice()),
            }
        }
    }
    // What the broker set on this copy (dead-letter reason, properties-to-modify) is in the
    // section already; properties carried from a forwarding source are merged here.
    if extras.extra_properties.is_empty() {
        writer.raw(application);
    } else {
        write_changed_application_properties(&mut writer, application, &extras.extra_properties);
    }
    writer.raw(body);
}

/// A properties section holding only a message-id of a GUID's 36 characters, up to the
/// text: descriptor, list8 of 39 bytes and 1 field, str8 of 36.
const ASSIGNED_ID_ONLY: [u8; 8] = [0x00, 0x53, 0x73, 0xc0, 39, 1, 0xa1, 36];

/// When the entity lowered the message's TTL (rule TTL-2), the properties section with
/// `absolute-expiry-time` = `creation-time` + the effective TTL: the JS SDK derives
/// `timeToLive` from those two timestamps when both are present.
fn lowered_ttl_properties(record: &Record, section: &[u8]) -> Option<Vec<u8>> {
    let effective = record.time_to_live()?;
    if record.message.header().time_to_live == Some(effective)
        || properties_count(section) < CREATION_TIME_COUNT
    {
        return None;
    }
    let mut properties: Properties = serde_amqp::from_slice(section).ok()?;
    let creation = properties.creation_time.as_ref()?.milliseconds();
    properties.absolute_expiry_time?;
    let expiry = creation.saturating_add(effective.as_millis().min(i64::MAX as u128) as i64);
    properties.absolute_expiry_time =
        Some(serde_amqp::primitives::Timestamp::from_milliseconds(expiry));
    serde_amqp::to_vec(&properties).ok()
}

/// How many fields a properties list must hold to carry `creation-time` (the tenth).
const CREATION_TIME_COUNT: usize = 10;

/// How many fields an encoded properties section's list holds, from its constructor (0 when
/// it is not a list): messages without a creation time are told apart before any decoding
/// (issue 16: an entity with a default time to live decoded the properties of every
/// message without one, on every delivery).
fn properties_count(section: &[u8]) -> usize {
    if section.first() != Some(&0x00) {
        return 0;
    }
    codec::value_length(section, 1)
        .and_then(|descriptor| codec::compound_extent(section, 1 + descriptor))
        .map_or(0, |(count, _, _)| count)
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
