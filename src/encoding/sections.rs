//! The sections of an encoded message (AMQP 1.0 §3.2): their descriptor codes, the header
//! and properties sections read where they lie, without decoding them into owned values
//! (issue 16: ingress decoded both with serde for every message, allocating each string it
//! then only looked at), and a properties section written with an assigned message-id. Each
//! field is checked against the types AMQP 1.0 §3.2.1 and §3.2.4 allow, so a malformed
//! section is refused, naming the field.

use std::borrow::Cow;
use std::ops::Range;
use std::time::Duration;

use fe2o3_amqp_types::messaging::{MessageId, Properties};

use super::codec::{self, CodecError, Sink};
use super::ids;

/// The header section's descriptor code.
pub const HEADER: u64 = 0x70;
/// The delivery-annotations section's descriptor code.
pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
/// The message-annotations section's descriptor code.
pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
/// The properties section's descriptor code.
pub const PROPERTIES: u64 = 0x73;
/// The application-properties section's descriptor code.
pub const APPLICATION_PROPERTIES: u64 = 0x74;
/// The first body section code (data 0x75, amqp-sequence 0x76, amqp-value 0x77).
pub const DATA: u64 = 0x75;
/// The last body section code (data 0x75, amqp-sequence 0x76, amqp-value 0x77).
pub const AMQP_VALUE: u64 = 0x77;
/// The footer section's descriptor code.
pub const FOOTER: u64 = 0x78;

/// Why a section is not what AMQP 1.0 allows in it.
#[derive(Debug, thiserror::Error)]
pub enum SectionError {
    /// The bytes are not AMQP.
    #[error("malformed message: {0}")]
    Codec(#[from] CodecError),
    /// A field of the section has a type or value the section does not allow.
    #[error("malformed message {section}: {reason}")]
    Section {
        /// Which section.
        section: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Sender-chosen header fields kept for redelivery (the broker sets `delivery-count`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeaderFields {
    /// `header.durable`.
    pub durable: bool,
    /// `header.priority` (AMQP default 4).
    pub priority: u8,
    /// `header.ttl`: the message's own time to live (rule TTL-1).
    pub time_to_live: Option<Duration>,
}

impl HeaderFields {
    /// What AMQP 1.0 gives a message without a header (§3.2.1): not durable, priority 4, no
    /// time to live.
    pub const AMQP_DEFAULT: HeaderFields = HeaderFields {
        durable: false,
        priority: 4,
        time_to_live: None,
    };
}

impl Default for HeaderFields {
    /// [`HeaderFields::AMQP_DEFAULT`]: a message sent without a header is delivered with
    /// priority 4, not 0.
    fn default() -> Self {
        HeaderFields::AMQP_DEFAULT
    }
}

/// The system properties' positions in the AMQP properties list, in the order
/// [`read_properties`] returns them: message-id, correlation-id, to, reply-to, subject,
/// group-id (session id), reply-to-group-id, content-type.
pub const LIST_INDEX: [usize; 8] = [0, 5, 2, 4, 3, 10, 12, 6];

/// The properties list's fields, in order (AMQP 1.0 §3.2.4).
const PROPERTY_NAMES: [&str; 13] = [
    "message-id",
    "user-id",
    "to",
    "subject",
    "reply-to",
    "correlation-id",
    "content-type",
    "content-encoding",
    "absolute-expiry-time",
    "creation-time",
    "group-id",
    "group-sequence",
    "reply-to-group-id",
];

const NULL: u8 = 0x40;
const STRINGS: [u8; 4] = [0xa1, 0xb1, 0xa3, 0xb3];
const UINTS: [u8; 3] = [0x70, 0x52, 0x43];
const BOOLEANS: [u8; 3] = [0x41, 0x42, 0x56];
const IDS: [u8; 8] = [0x80, 0x53, 0x44, 0x98, 0xa0, 0xb0, 0xa1, 0xb1];

fn refuse(section: &'static str, reason: impl Into<String>) -> SectionError {
    SectionError::Section {
        section,
        reason: reason.into(),
    }
}

/// The length of the descriptor of the section at `section_at` (its leading `0x00`
/// included): where the section's value starts.
pub fn descriptor_length(bytes: &[u8], section_at: usize) -> Result<usize, CodecError> {
    Ok(1 + codec::value_length(bytes, section_at + 1)?)
}

/// Where the list of the described section at `section` starts (past its descriptor).
fn list_start(bytes: &[u8], section: &Range<usize>) -> Result<usize, codec::CodecError> {
    Ok(section.start + 1 + codec::value_length(bytes, section.start + 1)?)
}

/// Whether the section at `section` is `0x00 0x53 code` and an empty list (list0), as
/// Proton-C and others send a header or properties with no field set: nothing to read.
fn is_list0(bytes: &[u8], section: &Range<usize>) -> bool {
    matches!(bytes.get(section.clone()), Some([0x00, 0x53, _, 0x45]))
}

/// Fills `elements` with the element ranges of the described list section at `section`
/// and returns their count. A list of more elements than `elements` holds, or a value that
/// is not a list, is refused.
fn list_elements(
    bytes: &[u8],
    section: &Range<usize>,
    name: &'static str,
    elements: &mut [Range<usize>],
) -> Result<usize, SectionError> {
    let bytes = &bytes[..section.end];
    let list = list_start(bytes, section)?;
    let count = match codec::read_u8(bytes, list)? {
        0x45 | 0xc0 | 0xd0 => codec::compound_elements_into(bytes, list, elements)?,
        other => return Err(refuse(name, format!("0x{other:02x} is not a list"))),
    };
    if count > elements.len() {
        return Err(refuse(
            name,
            format!("a list of {count} fields; it has {}", elements.len()),
        ));
    }
    Ok(count)
}

/// Checks that the field is null or one of `allowed`; its format code.
fn field_code(
    bytes: &[u8],
    range: &Range<usize>,
    allowed: &[u8],
    section: &'static str,
    field: &str,
) -> Result<u8, SectionError> {
    match bytes.get(range.clone()).and_then(<[u8]>::first) {
        None => Ok(NULL),
        Some(&NULL) => Ok(NULL),
        Some(code) if allowed.contains(code) => Ok(*code),
        Some(code) => Err(refuse(
            section,
            format!("{field} has the wrong type (format code 0x{code:02x})"),
        )),
    }
}

/// A boolean field's value (`None`: null or absent).
fn boolean(bytes: &[u8], range: &Range<usize>, field: &str) -> Result<Option<bool>, SectionError> {
    match field_code(bytes, range, &BOOLEANS, "header", field)? {
        0x41 => Ok(Some(true)),
        0x42 => Ok(Some(false)),
        0x56 => match bytes[range.start + 1] {
            0 => Ok(Some(false)),
            1 => Ok(Some(true)),
            other => Err(refuse(
                "header",
                format!("{field} is a boolean of value {other}"),
            )),
        },
        _ => Ok(None),
    }
}

/// An unsigned int field's value (`None`: null or absent).
fn uint(
    bytes: &[u8],
    range: &Range<usize>,
    section: &'static str,
    field: &str,
) -> Result<Option<u32>, SectionError> {
    Ok(match field_code(bytes, range, &UINTS, section, field)? {
        0x43 => Some(0),
        0x52 => Some(bytes[range.start + 1] as u32),
        0x70 => Some(u32::from_be_bytes(
            bytes[range.start + 1..range.start + 5]
                .try_into()
                .unwrap_or([0; 4]),
        )),
        _ => None,
    })
}

/// The header section at `section` (descriptor included): the fields the broker keeps.
pub fn read_header(bytes: &[u8], section: &Range<usize>) -> Result<HeaderFields, SectionError> {
    // An empty list (as Proton and others send): every field takes its default.
    if is_list0(bytes, section) {
        return Ok(HeaderFields::AMQP_DEFAULT);
    }
    let mut fields: [Range<usize>; 5] = Default::default();
    list_elements(bytes, section, "header", &mut fields)?;
    let durable = boolean(bytes, &fields[0], "durable")?.unwrap_or(false);
    let priority = match field_code(bytes, &fields[1], &[0x50], "header", "priority")? {
        0x50 => bytes[fields[1].start + 1],
        _ => 4,
    };
    let ttl = uint(bytes, &fields[2], "header", "ttl")?;
    boolean(bytes, &fields[3], "first-acquirer")?;
    uint(bytes, &fields[4], "header", "delivery-count")?;
    Ok(HeaderFields {
        durable,
        priority,
        time_to_live: ttl.map(|ttl| Duration::from_millis(ttl as u64)),
    })
}

/// The system properties of the properties section at `section` (descriptor included) as
/// text, in [`LIST_INDEX`] order: borrowed where the section
/// holds them as text, identifiers that are not strings as the service shows them.
/// Whether the section holds a message-id is `values[0].is_some()`.
pub fn read_properties<'a>(
    bytes: &'a [u8],
    section: &Range<usize>,
) -> Result<[Option<Cow<'a, str>>; 8], SectionError> {
    if is_list0(bytes, section) {
        return Ok(Default::default());
    }
    let mut fields: [Range<usize>; 13] = Default::default();
    let count = list_elements(bytes, section, "properties", &mut fields)?;
    let mut text: [Option<&str>; 13] = [None; 13];
    // Fields past the list's end are absent (null).
    for (index, range) in fields.iter().enumerate().take(count) {
        let allowed: &[u8] = match index {
            0 | 5 => &IDS,
            1 => &[0xa0, 0xb0],
            8 | 9 => &[0x83],
            11 => &UINTS,
            _ => &STRINGS,
        };
        let code = field_code(bytes, range, allowed, "properties", PROPERTY_NAMES[index])?;
        if STRINGS.contains(&code) {
            text[index] = Some(codec::read_text(bytes, range.clone()).ok_or_else(|| {
                refuse(
                    "properties",
                    format!("{} is not valid UTF-8", PROPERTY_NAMES[index]),
                )
            })?);
        }
    }
    let mut values: [Option<Cow<'a, str>>; 8] = Default::default();
    for (value, index) in values.iter_mut().zip(LIST_INDEX) {
        *value = match text[index] {
            Some(text) => Some(Cow::Borrowed(text)),
            None => id_text(bytes.get(fields[index].clone()).unwrap_or_default()),
        };
    }
    Ok(values)
}

/// An identifier that is not a string (ulong, uuid, binary) as the service shows it.
fn id_text(value: &[u8]) -> Option<Cow<'static, str>> {
    match value.first()? {
        0x44 => Some(Cow::Owned("0".to_owned())),
        0x53 => Some(Cow::Owned(value[1].to_string())),
        0x80 => Some(Cow::Owned(
            u64::from_be_bytes(value[1..9].try_into().unwrap_or([0; 8])).to_string(),
        )),
        0x98 => Some(Cow::Owned(ids::format_guid(
            &value[1..17].try_into().unwrap_or([0; 16]),
        ))),
        // Binary (0xa0 with a 1-byte length, 0xb0 with 4): as hexadecimal text.
        code @ (0xa0 | 0xb0) => {
            let content = &value[if *code == 0xa0 { 2 } else { 5 }..];
            Some(Cow::Owned(ids::hex(content)))
        }
        _ => None,
    }
}

/// A properties section written with an assigned message-id.
pub type AssignedProperties = codec::StackBuffer<192>;

/// A properties section with message-id `id` (a string) and the other fields of the
/// section at `section` (descriptor included; empty: none), which has no message-id.
/// Written on the stack when it fits (issue 16: it is copied into the stored message at
/// once, and the heap buffer cost an allocation and a free per message sent without an
/// id).
pub fn with_message_id(bytes: &[u8], section: &Range<usize>, id: &str) -> AssignedProperties {
    // The fields after the (absent) message-id, as they are: from the end of the list's
    // first element to the list's end — two lengths read, not every field's (issue 16).
    let after_id = || {
        let bytes = bytes.get(..section.end)?;
        let list = list_start(bytes, section).ok()?;
        let (count, first, end) = codec::compound_extent(bytes, list).ok()?;
        let first_end = first + codec::value_length(bytes, first).ok()?;
        (count > 1 && first_end <= end).then(|| (&bytes[first_end..end], count))
    };
    let (rest, count) = after_id().unwrap_or((&[][..], 1));
    let short_id = id.len() <= u8::MAX as usize;
    let content = if short_id { 2 } else { 5 } + id.len() + rest.len();
    let mut out = AssignedProperties::new();
    out.put(&[0x00, 0x53, 0x73]);
    if content < u8::MAX as usize {
        out.put(&[0xc0, content as u8 + 1, count as u8]);
    } else {
        out.put(&[0xd0]);
        out.put(&((content + 4) as u32).to_be_bytes());
        out.put(&(count as u32).to_be_bytes());
    }
    if short_id {
        out.put(&[0xa1, id.len() as u8]);
    } else {
        out.put(&[0xb1]);
        out.put(&(id.len() as u32).to_be_bytes());
    }
    out.put(id.as_bytes());
    out.put(rest);
    out
}

/// The text of a message-id or correlation-id as the service shows it.
pub fn message_id_text(id: &MessageId) -> String {
    match id {
        MessageId::String(text) => text.clone(),
        MessageId::Ulong(number) => number.to_string(),
        MessageId::Uuid(uuid) => ids::format_guid(uuid.as_inner()),
        MessageId::Binary(bytes) => ids::hex(bytes),
    }
}

/// The system properties of a decoded properties section as text, in [`LIST_INDEX`]
/// order (identifiers that are not strings as the service shows them).
pub fn system_values(properties: &Properties) -> [Option<Cow<'_, str>>; 8] {
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

#[cfg(test)]
#[path = "sections_tests.rs"]
mod tests;
