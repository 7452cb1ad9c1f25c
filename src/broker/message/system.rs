//! A message's system properties (Service Bus: message id, correlation id, to, reply-to,
//! label, session id, reply-to session id, content type) as text: found in the encoded
//! properties section where it holds them as strings or symbols, kept as text after the
//! body otherwise (issue 16).

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
/// message header). Offsets into it fit 16 bits.
pub const MAX_SYSTEM_TEXT: usize = u16::MAX as usize;

/// A field that is not there.
pub(super) const ABSENT: u16 = u16::MAX;

/// Where each system property's value lies (issue 16: not a copy of the text). Most lie in
/// the encoded properties section, where a string or symbol holds the text as it is; the
/// rest (identifiers that are not strings, values a rule set, a section too long for 16-bit
/// offsets) in a text after the body, back to back in field order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SystemSpans {
    /// Per field: the offset of its string or symbol constructor in the properties section,
    /// or (its bit set in `in_text`) of its text in the text after the body; [`ABSENT`]
    /// when the field is not there.
    pub(super) at: [u16; 8],
    /// Bit `i` set: field `i` lies in the text after the body.
    pub(super) in_text: u8,
}

impl Default for SystemSpans {
    fn default() -> Self {
        SystemSpans {
            at: [ABSENT; 8],
            in_text: 0,
        }
    }
}

/// Each system field's position in the AMQP properties list.
const LIST_INDEX: [usize; 8] = [0, 5, 2, 4, 3, 10, 12, 6];

/// The offsets of the first 13 elements of an encoded properties section (descriptor
/// included), `None` where the list is shorter or the encoding is not one.
fn property_elements(section: &[u8]) -> [Option<usize>; 13] {
    use crate::amqp::codec::value_length;
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
        Some(0xd0) => match crate::amqp::codec::read_u32(section, list + 5) {
            Ok(count) => (count, list + 9),
            Err(_) => return elements,
        },
        _ => return elements,
    };
    for element in elements.iter_mut().take(count) {
        let Ok(length) = value_length(section, at) else {
            break;
        };
        *element = Some(at);
        at += length;
    }
    elements
}

/// The text of the string or symbol encoded at `at`.
fn encoded_text(bytes: &[u8], at: usize) -> Option<&str> {
    let (start, length) = match *bytes.get(at)? {
        0xa1 | 0xa3 => (at + 2, *bytes.get(at + 1)? as usize),
        0xb1 | 0xb3 => (at + 5, crate::amqp::codec::read_u32(bytes, at + 1).ok()?),
        _ => return None,
    };
    std::str::from_utf8(bytes.get(start..start.checked_add(length)?)?).ok()
}

impl SystemSpans {
    /// Finds each present value in the encoded properties section, or else appends it to
    /// `text` (which starts empty). A value that would take the text past
    /// [`MAX_SYSTEM_TEXT`] is left out (ingress refuses such messages first; a rule action
    /// or an old record is the only way here).
    pub(super) fn locate(
        properties: &[u8],
        values: [Option<&str>; 8],
        text: &mut Vec<u8>,
    ) -> SystemSpans {
        let mut spans = SystemSpans::default();
        if values.iter().all(Option::is_none) {
            return spans;
        }
        let elements = property_elements(properties);
        for (index, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            if let Some(at) = elements[LIST_INDEX[index]]
                && at < ABSENT as usize
                && encoded_text(properties, at) == Some(value)
            {
                spans.at[index] = at as u16;
            } else if text.len() + value.len() <= MAX_SYSTEM_TEXT && text.len() < ABSENT as usize {
                spans.at[index] = text.len() as u16;
                spans.in_text |= 1 << index;
                text.extend_from_slice(value.as_bytes());
            }
        }
        spans
    }
}

/// The system properties as text, parsed once at ingress: a view of a message's
/// ([`Message::system`]) or of an owned [`SystemProperties`].
#[derive(Clone, Copy)]
pub struct System<'a> {
    source: Source<'a>,
}

#[derive(Clone, Copy)]
enum Source<'a> {
    /// A message's properties section and the text after its body.
    Message {
        properties: &'a [u8],
        text: &'a [u8],
        spans: SystemSpans,
    },
    /// Owned values.
    Values(&'a [Option<String>; 8]),
}

impl<'a> System<'a> {
    /// The view of a message's: its properties section, the text after its body, where
    /// each field lies.
    pub(super) fn of_message(properties: &'a [u8], text: &'a [u8], spans: SystemSpans) -> Self {
        System {
            source: Source::Message {
                properties,
                text,
                spans,
            },
        }
    }

    /// A field's value.
    pub fn get(&self, field: SystemField) -> Option<&'a str> {
        let index = field as usize;
        match self.source {
            Source::Values(values) => values[index].as_deref(),
            Source::Message {
                properties,
                text,
                spans,
            } => {
                let at = spans.at[index];
                if at == ABSENT {
                    None
                } else if spans.in_text & (1 << index) == 0 {
                    encoded_text(properties, at as usize)
                } else {
                    let end = (index + 1..8)
                        .find(|next| spans.in_text & (1 << next) != 0 && spans.at[*next] != ABSENT)
                        .map_or(text.len(), |next| spans.at[next] as usize);
                    std::str::from_utf8(text.get(at as usize..end)?).ok()
                }
            }
        }
    }
    /// Every field's value, in [`SystemField::ALL`] order.
    pub fn values(&self) -> [Option<&'a str>; 8] {
        SystemField::ALL.map(|field| self.get(field))
    }

    /// The same properties with one field changed.
    pub fn with(&self, field: SystemField, value: Option<&str>) -> SystemProperties {
        let mut values = self.values();
        values[field as usize] = value;
        SystemProperties::new(values)
    }

    /// `properties.message-id` as text.
    pub fn message_id(&self) -> Option<&'a str> {
        self.get(SystemField::MessageId)
    }
    /// `properties.correlation-id` as text.
    pub fn correlation_id(&self) -> Option<&'a str> {
        self.get(SystemField::CorrelationId)
    }
    /// `properties.to`.
    pub fn to(&self) -> Option<&'a str> {
        self.get(SystemField::To)
    }
    /// `properties.reply-to`.
    pub fn reply_to(&self) -> Option<&'a str> {
        self.get(SystemField::ReplyTo)
    }
    /// `properties.subject` (the Service Bus label).
    pub fn subject(&self) -> Option<&'a str> {
        self.get(SystemField::Subject)
    }
    /// `properties.group-id` (the Service Bus session id).
    pub fn session_id(&self) -> Option<&'a str> {
        self.get(SystemField::SessionId)
    }
    /// `properties.reply-to-group-id`.
    pub fn reply_to_session_id(&self) -> Option<&'a str> {
        self.get(SystemField::ReplyToSessionId)
    }
    /// `properties.content-type`.
    pub fn content_type(&self) -> Option<&'a str> {
        self.get(SystemField::ContentType)
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

/// System properties to give a message ([`Message::set_system`]).
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
