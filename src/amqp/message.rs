//! Message ⇄ broker adapter: splits a client's encoded message into sections without
//! re-encoding the body, and builds the bytes of a delivery (a fresh header and message
//! annotations with the broker's `x-opt-*` values, then the client's sections as sent).

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::messaging::{MessageId, Properties};

use super::codec::{self, CodecError, Writer};
use super::depth;
use super::ids;
use super::sections;
use crate::broker::entity::Record;
use crate::broker::message::{
    Extras, HeaderFields, MAX_HEADER_SECTIONS, MAX_SYSTEM_TEXT, Message, SystemField,
};
use crate::broker::types::{LockToken, MessageState, PropertyValue, Timestamp};

/// Message format of a Service Bus batch: every `data` section is a whole message.
pub const BATCH_MESSAGE_FORMAT: u32 = 0x8001_3700;

const HEADER: u64 = 0x70;
const DELIVERY_ANNOTATIONS: u64 = 0x71;
const MESSAGE_ANNOTATIONS: u64 = 0x72;
/// The properties section's descriptor code.
pub(crate) const PROPERTIES: u64 = 0x73;
/// The application-properties section's descriptor code.
pub(crate) const APPLICATION_PROPERTIES: u64 = 0x74;
const DATA: u64 = 0x75;
/// The last body section code (data 0x75, amqp-sequence 0x76, amqp-value 0x77).
const AMQP_VALUE: u64 = 0x77;
const FOOTER: u64 = 0x78;

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
            let value_at = at + descriptor_length(&payload, at)?;
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

fn descriptor_length(bytes: &[u8], section_at: usize) -> Result<usize, MessageError> {
    Ok(1 + codec::value_length(bytes, section_at + 1)?)
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

fn message_id_text(id: &MessageId) -> String {
    match id {
        MessageId::String(text) => text.clone(),
        MessageId::Ulong(number) => number.to_string(),
        MessageId::Uuid(uuid) => ids::format_guid(uuid.as_inner()),
        MessageId::Binary(bytes) => ids::hex(bytes),
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
    // A message sent without an id is given one (the SDKs need it, wire contract §5): its
    // GUID bytes are kept beside the message and written into its properties section on
    // the way out (issue 16: 16 bytes kept where a section written with the text took 44).
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

/// The system properties of a decoded properties section as text, in [`SystemField::ALL`]
/// order (identifiers that are not strings as the service shows them).
pub fn system_values(properties: &Properties) -> [Option<std::borrow::Cow<'_, str>>; 8] {
    use std::borrow::Cow;
    fn id(id: &Option<MessageId>) -> Option<Cow<'_, str>> {
        match id.as_ref()? {
            MessageId::String(text) => Some(Cow::Borrowed(text.as_str())),
            other => Some(Cow::Owned(message_id_text(other))),
        }
    }
    fn text(value: &Option<String>) -> Option<Cow<'_, str>> {
        value.as_deref().map(Cow::Borrowed)
    }
    [
        id(&properties.message_id),
        id(&properties.correlation_id),
        text(&properties.to),
        text(&properties.reply_to),
        text(&properties.subject),
        text(&properties.group_id),
        text(&properties.reply_to_group_id),
        properties
            .content_type
            .as_ref()
            .map(|symbol| Cow::Borrowed(symbol.0.as_str())),
    ]
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
    let value_at = at + descriptor_length(bytes, at)?;
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
    writer.timestamp(record.enqueued_time.0);
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

pub fn write_property_value(writer: &mut Writer<'_>, value: &PropertyValue) {
    match value {
        PropertyValue::Null => writer.null(),
        PropertyValue::Bool(flag) => writer.boolean(*flag),
        PropertyValue::Long(number) => writer.long(*number),
        PropertyValue::Double(number) => {
            writer.raw(&[0x82]);
            writer.raw(&number.to_be_bytes());
        }
        PropertyValue::String(text) => writer.string(text),
        PropertyValue::Timestamp(millis) => writer.timestamp(*millis),
        PropertyValue::Uuid(bytes) => writer.uuid(bytes),
        PropertyValue::Binary(bytes) => writer.binary(bytes),
    }
}

/// An application-properties section: `original`'s entries with `changes` merged in (changed
/// keys replace the sender's values; later changes to the same key win).
pub fn merged_application_properties(
    original: &[u8],
    changes: &[(String, PropertyValue)],
) -> Vec<u8> {
    let mut output = BytesMut::new();
    write_changed_application_properties(&mut Writer::new(&mut output), original, changes);
    output.to_vec()
}

/// An application-properties section: `original`'s entries but those named in `names`;
/// empty (no section) when none is left, `original` itself when it cannot be read.
pub fn application_properties_without(original: &[u8], names: &[&str]) -> Vec<u8> {
    let mut output = BytesMut::new();
    let kept = write_application_properties(
        &mut Writer::new(&mut output),
        original,
        |name| !names.contains(&name),
        &[],
    );
    match kept {
        Some(0) => Vec::new(),
        Some(_) => output.to_vec(),
        None => original.to_vec(),
    }
}

/// Rewrites application properties with the broker's changes merged in (changed keys
/// replace the sender's values).
fn write_changed_application_properties(
    writer: &mut Writer<'_>,
    original: &[u8],
    changes: &[(String, PropertyValue)],
) {
    write_application_properties(
        writer,
        original,
        |name| !changes.iter().any(|(changed, _)| changed == name),
        changes,
    );
}

/// Writes an application-properties section: the entries of `original` whose names `keep`
/// accepts, then `changes` (later changes to the same key win). How many map elements it
/// wrote, or `None` when `original` is not a readable map (its entries are then left out).
fn write_application_properties(
    writer: &mut Writer<'_>,
    original: &[u8],
    keep: impl Fn(&str) -> bool,
    changes: &[(String, PropertyValue)],
) -> Option<u32> {
    writer.descriptor(APPLICATION_PROPERTIES as u8);
    let mut map = writer.start_map();
    let mut readable = true;
    if !original.is_empty() {
        let value_at = descriptor_length(original, 0).unwrap_or(original.len());
        match codec::compound_elements(original, value_at) {
            Ok(elements) => {
                for pair in elements.chunks(2) {
                    let [key, value] = pair else { break };
                    if keep(codec::read_text(original, key.clone()).unwrap_or("")) {
                        writer.raw(&original[key.start..value.end]);
                        map.count += 2;
                    }
                }
            }
            Err(_) => readable = false,
        }
    }
    for (index, (name, value)) in changes.iter().enumerate() {
        if changes[index + 1..].iter().any(|(later, _)| later == name) {
            continue;
        }
        writer.string(name);
        write_property_value(writer, value);
        map.count += 2;
    }
    let count = map.count;
    writer.finish_compound(map);
    readable.then_some(count)
}

/// Decodes an application-properties section into name → value for the given keys.
pub fn application_property_text(message: &Message, key: &str) -> Option<String> {
    let section = message.application_properties_section();
    if section.is_empty() {
        return None;
    }
    let value_at = descriptor_length(section, 0).ok()?;
    let elements = codec::compound_elements(section, value_at).ok()?;
    elements.chunks(2).find_map(|pair| match pair {
        [name, value] if codec::read_text(section, name.clone()) == Some(key) => {
            codec::read_text(section, value.clone()).map(str::to_string)
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_properties_field_count_is_read_from_the_list_constructor() {
        // rule TTL-2: only a list that reaches creation-time (its tenth field) is decoded to
        // lower absolute-expiry-time.
        let with_times = serde_amqp::to_vec(&Properties {
            message_id: Some(fe2o3_amqp_types::messaging::MessageId::String("m".into())),
            absolute_expiry_time: Some(serde_amqp::primitives::Timestamp::from_milliseconds(9)),
            creation_time: Some(serde_amqp::primitives::Timestamp::from_milliseconds(1)),
            ..Properties::default()
        })
        .expect("encodes");
        assert_eq!(properties_count(&with_times), CREATION_TIME_COUNT);
        let id_only = serde_amqp::to_vec(&Properties {
            message_id: Some(fe2o3_amqp_types::messaging::MessageId::String("m".into())),
            ..Properties::default()
        })
        .expect("encodes");
        assert_eq!(properties_count(&id_only), 1);
        let list32 = b"\x00\x53\x73\xd0\x00\x00\x00\x0e\x00\x00\x00\x0a\x40\x40\x40\x40\x40\x40\x40\x40\x40\x40";
        assert_eq!(properties_count(list32), 10);
        for other in [&b""[..], b"\x00\x53\x73\x45", b"\x00\x53\x73\x40", b"\x40"] {
            assert_eq!(properties_count(other), 0, "{other:x?}");
        }
    }

    /// A data section with this content.
    fn data(content: &[u8]) -> Vec<u8> {
        [&[0x00, 0x53, 0x75, 0xa0, content.len() as u8][..], content].concat()
    }

    #[test]
    fn the_body_is_every_body_section_in_order_whatever_lies_between() {
        let application = vec![0x00, 0x53, 0x74, 0xc1, 0x01, 0x00];
        let back_to_back = [data(b"one"), data(b"two")].concat();
        let message = parse_message(Bytes::from(back_to_back.clone())).expect("parsed");
        assert_eq!(message.body(), &back_to_back[..]);
        // A section between two body sections (out of the spec's order, accepted): the
        // body sections are joined without it.
        let apart = [data(b"one"), application.clone(), data(b"two")].concat();
        let message = parse_message(Bytes::from(apart)).expect("parsed");
        assert_eq!(message.body(), &back_to_back[..]);
        assert_eq!(message.application_properties_section(), &application[..]);
        // More body sections than are kept inline, with one section between: all of them,
        // in order.
        let parts: Vec<Vec<u8>> = (0..7u8).map(|index| data(&[b'a' + index; 3])).collect();
        let mut sections = parts[..5].to_vec();
        sections.push(application.clone());
        sections.extend_from_slice(&parts[5..]);
        let message = parse_message(Bytes::from(sections.concat())).expect("parsed");
        assert_eq!(message.body(), &parts.concat()[..]);
    }

    #[test]
    fn the_section_of_an_assigned_id_alone_is_the_one_written_with_the_id() {
        let id = ids::GuidText::new(&ids::unique_guid_bytes());
        let written = sections::with_message_id(&[], &(0..0), id.as_str());
        assert_eq!(
            written.as_slice(),
            &[&ASSIGNED_ID_ONLY[..], id.as_bytes()].concat()[..]
        );
        let decoded: Properties = serde_amqp::from_slice(written.as_slice()).expect("decodes");
        assert_eq!(
            decoded.message_id,
            Some(MessageId::String(id.as_str().to_string()))
        );
    }

    #[test]
    fn a_message_without_a_header_has_the_amqp_defaults() {
        // AMQP 1.0 §3.2.1: priority 4 when there is no header (it was stored as 0).
        let body = b"\x00\x53\x77\xa1\x02hi".to_vec();
        let message = parse_message(Bytes::from(body.clone())).expect("parsed");
        assert_eq!(
            message.header(),
            HeaderFields {
                durable: false,
                priority: 4,
                time_to_live: None,
            }
        );
        // A header with another priority keeps it.
        let mut with_header = vec![0x00, 0x53, 0x70, 0xc0, 0x04, 0x02, 0x41, 0x50, 0x09];
        with_header.extend_from_slice(&body);
        let message = parse_message(Bytes::from(with_header)).expect("parsed");
        assert_eq!(
            (message.header().durable, message.header().priority),
            (true, 9)
        );
    }
}
