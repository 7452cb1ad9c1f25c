//! A message's system properties (Service Bus: message id, correlation id, to, reply-to,
//! label, session id, reply-to session id, content type) as text: read from the encoded
//! properties section when asked for where it holds them as strings or symbols, kept as
//! text after the body otherwise (issue 16).

use crate::encoding::codec::{read_u32, value_length};
use crate::encoding::ids::GuidText;
use crate::encoding::sections::LIST_INDEX;

/// The system properties the broker reads (filters, sessions, duplicate detection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemField {
    /// `properties.message-id` as text (assigned at ingress if the sender set none).
    MessageId,
    /// `properties.correlation-id` as text.
    CorrelationId,
    /// `properties.to`.
    To,
    /// `properties.reply-to`.
    ReplyTo,
    /// `properties.subject` (the Service Bus label).
    Subject,
    /// `properties.group-id` (the Service Bus session id).
    SessionId,
    /// `properties.reply-to-group-id`.
    ReplyToSessionId,
    /// `properties.content-type`.
    ContentType,
}

impl SystemField {
    /// Every field, in storage order.
    pub const ALL: [SystemField; 8] = [
        SystemField::MessageId,
        SystemField::CorrelationId,
        SystemField::To,
        SystemField::ReplyTo,
        SystemField::Subject,
        SystemField::SessionId,
        SystemField::ReplyToSessionId,
        SystemField::ContentType,
    ];
}

/// Most bytes of system-property text a message carries (Service Bus: at most 64 KB of
/// message header).
pub const MAX_SYSTEM_TEXT: usize = u16::MAX as usize;

/// The length written for a field the text holds as absent (a value the section holds
/// that the message no longer has).
const ABSENT_TEXT: u16 = u16::MAX;

/// The offsets of the first `take` (at most 13) elements of an encoded properties section
/// (descriptor included), `None` where the list is shorter or the encoding is not one.
fn property_elements(section: &[u8], take: usize) -> [Option<usize>; 13] {
    let mut elements = [None; 13];
    if section.first() != Some(&0x00) {
        return elements;
    }
    let Ok(descriptor) = value_length(section, 1) else {
        return elements;
    };
    let list = 1 + descriptor;
    let (count, mut at) = match section.get(list) {
        Some(0xc0) => match section.get(list + 2) {
            Some(count) => (*count as usize, list + 3),
            None => return elements,
        },
        Some(0xd0) => match read_u32(section, list + 5) {
            Ok(count) => (count, list + 9),
            Err(_) => return elements,
        },
        _ => return elements,
    };
    for element in elements.iter_mut().take(count.min(take)) {
        let Ok(length) = value_length(section, at) else {
            break;
        };
        *element = Some(at);
        at += length;
    }
    elements
}

/// Whether an encoded properties section holds no message-id (none, or null).
pub(super) fn holds_no_message_id(properties: &[u8]) -> bool {
    if properties.is_empty() {
        return true;
    }
    match property_elements(properties, 1)[0] {
        Some(at) => properties.get(at) == Some(&0x40),
        // A list without elements; anything else is not a properties section the broker
        // wrote an id into.
        None => properties_list_is_empty(properties),
    }
}

/// Whether an encoded properties section is an empty list.
fn properties_list_is_empty(properties: &[u8]) -> bool {
    let Ok(descriptor) = value_length(properties, 1) else {
        return false;
    };
    let list = 1 + descriptor;
    match properties.get(list) {
        Some(0x45) => true,
        Some(0xc0) => properties.get(list + 2) == Some(&0),
        Some(0xd0) => read_u32(properties, list + 5) == Ok(0),
        _ => false,
    }
}

/// The text of the string or symbol encoded at `at`.
fn encoded_text(bytes: &[u8], at: usize) -> Option<&str> {
    let (start, length) = match *bytes.get(at)? {
        0xa1 | 0xa3 => (at + 2, *bytes.get(at + 1)? as usize),
        0xb1 | 0xb3 => (at + 5, read_u32(bytes, at + 1).ok()?),
        _ => return None,
    };
    std::str::from_utf8(bytes.get(start..start.checked_add(length)?)?).ok()
}

/// Field `index`'s value as the properties section holds it, given its elements.
fn held<'a>(section: &'a [u8], elements: &[Option<usize>; 13], index: usize) -> Option<&'a str> {
    elements[LIST_INDEX[index]].and_then(|at| encoded_text(section, at))
}

/// Appends to `text` (which starts empty) the values the properties section does not hold
/// as they are (identifiers that are not strings, values a rule set): per such field, in
/// field order, a 16-bit little-endian length ([`ABSENT_TEXT`] for none) and the text;
/// then, when there is any, the whole text's length (these 4 bytes included) in the low 24
/// bits of a 32-bit little-endian number whose top 8 say which fields it holds, so that it
/// is found from the end of the message (issue 43: the message's head keeps only whether
/// there is a text). Returns which fields it holds (bit `i`: field `i`). A value too long for its length is held as absent
/// (ingress refuses such messages first; a rule action or an old record is the only way
/// here). Every other value is read from the section when asked for (issue 16: the head
/// keeps no offsets).
pub(super) fn text_apart(properties: &[u8], values: [Option<&str>; 8], text: &mut Vec<u8>) -> u8 {
    if values.iter().all(Option::is_none) && properties.is_empty() {
        return 0;
    }
    let elements = property_elements(properties, 13);
    let differs = std::array::from_fn(|index| held(properties, &elements, index) != values[index]);
    text_of(values, differs, text)
}

/// Appends to `text` what [`text_apart`] would for these values, all of which the properties
/// section does not hold (the ingress parser knows which: identifiers that are not strings),
/// without reading the section.
pub(super) fn text_apart_given(apart: [Option<&str>; 8], text: &mut Vec<u8>) -> u8 {
    text_of(apart, apart.map(|value| value.is_some()), text)
}

fn text_of(values: [Option<&str>; 8], apart: [bool; 8], text: &mut Vec<u8>) -> u8 {
    let mut in_text = 0;
    for (index, value) in values.iter().enumerate() {
        if !apart[index] {
            continue;
        }
        match value {
            Some(value) if value.len() < ABSENT_TEXT as usize => {
                text.extend_from_slice(&(value.len() as u16).to_le_bytes());
                text.extend_from_slice(value.as_bytes());
            }
            _ => text.extend_from_slice(&ABSENT_TEXT.to_le_bytes()),
        }
        in_text |= 1 << index;
    }
    if in_text != 0 {
        // At most 8 values of at most 2 + 65,534 bytes: far below 2^24.
        let length = text.len() + 4;
        text.extend_from_slice(&(length as u32 | u32::from(in_text) << 24).to_le_bytes());
    }
    in_text
}

/// The length of the text [`text_apart`] wrote at the end of `bytes`, and which fields it
/// holds (its bits), or `(0, 0)` when `bytes` end with no text (`apart` false).
pub(super) fn text_apart_at_end(bytes: &[u8], apart: bool) -> (usize, u8) {
    if !apart {
        return (0, 0);
    }
    match bytes.last_chunk::<4>() {
        Some(trailer) => {
            let trailer = u32::from_le_bytes(*trailer);
            let length = (trailer & 0x00ff_ffff) as usize;
            (length.min(bytes.len()), (trailer >> 24) as u8)
        }
        None => (0, 0),
    }
}

/// Field `index`'s value in a text [`text_apart`] wrote (its length trailer excluded).
fn text_value(text: &[u8], in_text: u8, index: usize) -> Option<&str> {
    let mut at = 0;
    for field in 0..8 {
        if in_text & (1 << field) == 0 {
            continue;
        }
        let length = u16::from_le_bytes([*text.get(at)?, *text.get(at + 1)?]);
        at += 2;
        let value = (length != ABSENT_TEXT).then(|| at..at + length as usize);
        if field == index {
            return std::str::from_utf8(text.get(value?)?).ok();
        }
        at += value.map_or(0, |range| range.len());
    }
    None
}

/// The system properties as text, parsed once at ingress: a view of a message's
/// ([`Message::system`](super::Message::system)) or of an owned [`SystemProperties`].
#[derive(Clone, Copy)]
pub struct System<'a> {
    source: Source<'a>,
}

#[derive(Clone, Copy)]
enum Source<'a> {
    /// A message's properties section, the text after its body and the id the broker
    /// assigned it (the section then holds none).
    Message {
        properties: &'a [u8],
        text: &'a [u8],
        in_text: u8,
        assigned: Option<GuidText>,
    },
    /// Owned values.
    Values(&'a [Option<String>; 8]),
}

impl<'a> System<'a> {
    /// The view of a message's: its properties section, the text after its body (without
    /// its length) and which fields that text holds.
    pub(super) fn of_message(
        properties: &'a [u8],
        text: &'a [u8],
        in_text: u8,
        assigned: Option<GuidText>,
    ) -> Self {
        System {
            source: Source::Message {
                properties,
                text,
                in_text,
                assigned,
            },
        }
    }

    /// A field's value.
    pub fn get(&self, field: SystemField) -> Option<&str> {
        match &self.source {
            Source::Message {
                assigned: Some(id), ..
            } if field == SystemField::MessageId => Some(id.as_str()),
            _ => self.held(field),
        }
    }

    /// A field's value as the message or the values hold it: all but an assigned
    /// message-id, which is made when asked for ([`System::get`]).
    fn held(&self, field: SystemField) -> Option<&'a str> {
        let index = field as usize;
        match self.source {
            Source::Values(values) => values[index].as_deref(),
            Source::Message {
                properties,
                text,
                in_text,
                ..
            } => {
                if in_text & (1 << index) != 0 {
                    text_value(text, in_text, index)
                } else {
                    let elements = property_elements(properties, LIST_INDEX[index] + 1);
                    held(properties, &elements, index)
                }
            }
        }
    }

    /// Every field's value, in [`SystemField::ALL`] order (the section read once).
    pub fn values(&self) -> [Option<&str>; 8] {
        match &self.source {
            Source::Values(values) => values.each_ref().map(|value| value.as_deref()),
            &Source::Message {
                properties,
                text,
                in_text,
                ref assigned,
            } => {
                let elements = property_elements(properties, 13);
                std::array::from_fn(|index| {
                    if index == SystemField::MessageId as usize
                        && let Some(id) = assigned
                    {
                        Some(id.as_str())
                    } else if in_text & (1 << index) != 0 {
                        text_value(text, in_text, index)
                    } else {
                        held(properties, &elements, index)
                    }
                })
            }
        }
    }

    /// The same properties with one field changed.
    pub fn with(&self, field: SystemField, value: Option<&str>) -> SystemProperties {
        let mut values = self.values();
        values[field as usize] = value;
        SystemProperties::new(values)
    }

    /// `properties.message-id` as text.
    pub fn message_id(&self) -> Option<&str> {
        self.get(SystemField::MessageId)
    }
    /// `properties.correlation-id` as text.
    pub fn correlation_id(&self) -> Option<&'a str> {
        self.held(SystemField::CorrelationId)
    }
    /// `properties.to`.
    pub fn to(&self) -> Option<&'a str> {
        self.held(SystemField::To)
    }
    /// `properties.reply-to`.
    pub fn reply_to(&self) -> Option<&'a str> {
        self.held(SystemField::ReplyTo)
    }
    /// `properties.subject` (the Service Bus label).
    pub fn subject(&self) -> Option<&'a str> {
        self.held(SystemField::Subject)
    }
    /// `properties.group-id` (the Service Bus session id).
    pub fn session_id(&self) -> Option<&'a str> {
        self.held(SystemField::SessionId)
    }
    /// `properties.reply-to-group-id`.
    pub fn reply_to_session_id(&self) -> Option<&'a str> {
        self.held(SystemField::ReplyToSessionId)
    }
    /// `properties.content-type`.
    pub fn content_type(&self) -> Option<&'a str> {
        self.held(SystemField::ContentType)
    }
}

impl std::fmt::Debug for System<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = formatter.debug_map();
        for field in SystemField::ALL {
            if let Some(value) = self.get(field) {
                map.entry(&field, &value);
            }
        }
        map.finish()
    }
}

/// System properties to give a message ([`Message::set_system`](super::Message::set_system)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemProperties {
    values: [Option<String>; 8],
}

impl SystemProperties {
    /// From each field's value, in [`SystemField::ALL`] order.
    pub fn new(values: [Option<&str>; 8]) -> SystemProperties {
        SystemProperties {
            values: values.map(|value| value.map(str::to_string)),
        }
    }

    /// A view of them.
    pub fn view(&self) -> System<'_> {
        System {
            source: Source::Values(&self.values),
        }
    }
}
