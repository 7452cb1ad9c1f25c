//! The broker's view of a message: the client's encoded sections kept as bytes, plus the
//! few fields the rules need, parsed once at ingress, in one allocation. A `Message` is
//! shared by every copy (subscriptions, dead-letter moves: cloning it counts a reference);
//! per-copy state lives in the entity's records.

use std::time::Duration;

use triomphe::ThinArc;

use super::types::Timestamp;

/// Sender-chosen header fields kept for redelivery (the broker sets `delivery-count`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HeaderFields {
    /// `header.durable`.
    pub durable: bool,
    /// `header.priority` (AMQP default 4).
    pub priority: u8,
    /// `header.ttl`: the message's own time to live (rule TTL-1).
    pub time_to_live: Option<Duration>,
}

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
const ABSENT: u16 = u16::MAX;

/// Where each system property's value lies (issue 16: not a copy of the text). Most lie in
/// the encoded properties section, where a string or symbol holds the text as it is; the
/// rest (identifiers that are not strings, values a rule set, a section too long for 16-bit
/// offsets) in a text after the body, back to back in field order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SystemSpans {
    /// Per field: the offset of its string or symbol constructor in the properties section,
    /// or (its bit set in `in_text`) of its text in the text after the body; [`ABSENT`]
    /// when the field is not there.
    at: [u16; 8],
    /// Bit `i` set: field `i` lies in the text after the body.
    in_text: u8,
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
    fn locate(properties: &[u8], values: [Option<&str>; 8], text: &mut Vec<u8>) -> SystemSpans {
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

/// What few messages carry: kept out of line so that a plain message does not pay for
/// them (issue 16).
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// `x-opt-scheduled-enqueue-time`, when the sender scheduled the message (rule SCH-1).
    pub scheduled_enqueue_time: Option<Timestamp>,
    /// `x-opt-enqueue-sequence-number` carried from a source entity when forwarded.
    pub original_sequence_number: Option<i64>,
    /// Application properties decoded for filters (filled for messages sent to topics).
    pub user_properties: Vec<(String, super::types::PropertyValue)>,
    /// The entity whose dead-letter queue forwarded this message (`x-opt-deadletter-source`).
    pub dead_letter_source: Option<String>,
    /// Application properties set by the broker before forwarding (e.g. the dead-letter
    /// reason of a forwarded dead letter), merged on delivery.
    pub extra_properties: super::types::PropertyChanges,
    /// The sequence number and enqueued time a topic gave this copy (sequence numbers are
    /// the topic's: every subscription's copy carries the same). In transit from a topic
    /// to its subscriptions only: not stored, dropped when the message is forwarded.
    pub topic_sequence: Option<(super::types::SequenceNumber, super::types::Timestamp)>,
    /// The `x-opt-partition-key` annotation: chooses the partition of a partitioned entity
    /// when there is no session id (rule PRT-2). The annotation itself stays in the message.
    pub partition_key: Option<std::sync::Arc<str>>,
}

static NO_EXTRAS: Extras = Extras {
    scheduled_enqueue_time: None,
    original_sequence_number: None,
    user_properties: Vec::new(),
    dead_letter_source: None,
    extra_properties: Vec::new(),
    topic_sequence: None,
    partition_key: None,
};

/// A message's fixed fields, kept in front of its bytes in its one allocation.
#[derive(Debug, Clone)]
struct Head {
    /// Where the annotations, the properties, the application properties and the body end.
    ends: [u32; 4],
    /// Number of encoded elements in the annotation entries (keys plus values).
    annotation_element_count: u32,
    /// Where the system properties lie ([`SystemSpans::at`]; kept as two fields, not a
    /// `SystemSpans`, so that the head packs into 56 bytes).
    system_at: [u16; 8],
    /// [`SystemSpans::in_text`].
    system_in_text: u8,
    /// `header.durable`.
    durable: bool,
    /// `header.priority`.
    priority: u8,
    /// Auto-forwarding hops this message has made (rule FWD-2).
    hop_count: u8,
    /// `header.ttl` in milliseconds (as AMQP carries it); [`NO_TTL`] when none.
    ttl_millis: u64,
    extras: Option<Box<Extras>>,
}

/// `Head::ttl_millis` of a message without a time to live.
const NO_TTL: u64 = u64::MAX;

impl Default for Head {
    fn default() -> Self {
        Head {
            ends: [0; 4],
            annotation_element_count: 0,
            system_at: [ABSENT; 8],
            system_in_text: 0,
            durable: false,
            priority: 0,
            hop_count: 0,
            ttl_millis: NO_TTL,
            extras: None,
        }
    }
}

/// One message as accepted from a client, immutable and shared by every copy (clones
/// share it; the `set_*` and `edit_*` methods copy it first when it is shared). Its
/// fixed fields and its kept sections lie in one allocation sized to them (issue 16: never
/// a slice of the connection's read buffer, which would pin the whole buffer for as long as
/// the message is stored): the client's message annotations as encoded map entries (keys and
/// values, without the map constructor, broker-owned `x-opt-*` keys removed), the encoded
/// properties section, the encoded application-properties section (both descriptor
/// included, empty if none), the body sections and footer exactly as sent, then the text of
/// the system properties the properties section does not hold as text (usually none). The
/// rarer fields are out of line.
#[derive(Clone)]
pub struct Message(ThinArc<Head, u8>);

impl Default for Message {
    fn default() -> Self {
        Message::from_parts([&[]; 4], [None; 8])
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Message")
            .field("header", &self.header())
            .field("annotation_entries", &self.annotation_entries().len())
            .field("properties_section", &self.properties_section().len())
            .field(
                "application_properties_section",
                &self.application_properties_section().len(),
            )
            .field("body", &self.body().len())
            .field("system", &self.system())
            .field("hop_count", &self.hop_count())
            .field("extras", &self.head().extras)
            .finish()
    }
}

/// Memory one stored message costs beyond its encoded bytes: its allocation's reference
/// count, length, fixed fields and rounding, the record in its sub-queue's `RecordMap` run
/// and its entry in the available index — measured by `tests/memory.rs` (counting
/// allocator) at 116–125 bytes for SDK-encoded messages (772 before issue 16, 229 before the
/// one-allocation layout), rounded up. Counting it makes `max_size_in_megabytes` bound what
/// a queue of tiny messages really holds (issue 10, item 9: a 10 MiB queue of empty
/// messages used to hold 143 MiB).
pub const MESSAGE_OVERHEAD: usize = 160;

thread_local! {
    /// Where the parts of a message that do not lie back to back are joined before they are
    /// copied into its allocation (a buffer per thread instead of an allocation per message).
    static JOINED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A joining buffer grown past this is let go after use.
const JOINED_KEPT: usize = 256 * 1024;

/// Builds a message's one allocation: its sections back to back (`whole`, when they already
/// lie so), then the text of the system properties the properties section does not hold.
fn assemble(
    mut head: Head,
    sections: [&[u8]; 4],
    whole: Option<&[u8]>,
    system: [Option<&str>; 8],
) -> ThinArc<Head, u8> {
    let mut end = 0;
    for (index, section) in sections.iter().enumerate() {
        end += section.len();
        head.ends[index] = u32::try_from(end).unwrap_or(u32::MAX);
    }
    let mut text = Vec::new();
    let spans = SystemSpans::locate(sections[1], system, &mut text);
    head.system_at = spans.at;
    head.system_in_text = spans.in_text;
    if text.is_empty() {
        if let Some(whole) = whole {
            return ThinArc::from_header_and_slice(head, whole);
        }
        let mut present = sections.iter().filter(|section| !section.is_empty());
        if let (first, None) = (present.next(), present.next()) {
            return ThinArc::from_header_and_slice(head, first.copied().unwrap_or_default());
        }
    }
    JOINED.with_borrow_mut(|joined| {
        joined.clear();
        match whole {
            Some(whole) => joined.extend_from_slice(whole),
            None => sections
                .iter()
                .for_each(|section| joined.extend_from_slice(section)),
        }
        joined.extend_from_slice(&text);
        let message = ThinArc::from_header_and_slice(head, joined);
        if joined.capacity() > JOINED_KEPT {
            *joined = Vec::new();
        }
        message
    })
}

impl Message {
    /// A message of these sections and system properties ([`SystemField::ALL`] order), in
    /// one allocation built once (ingress and recovery).
    pub fn from_parts(sections: [&[u8]; 4], system: [Option<&str>; 8]) -> Message {
        Message(assemble(Head::default(), sections, None, system))
    }

    /// A message of its four sections lying back to back in `joined` (as a transfer
    /// usually carries them), each `lengths[i]` bytes long: one copy, into the message's
    /// allocation.
    pub fn from_joined(joined: &[u8], lengths: [usize; 4], system: [Option<&str>; 8]) -> Message {
        let mut sections: [&[u8]; 4] = [&[]; 4];
        let mut rest = joined;
        for (section, length) in sections.iter_mut().zip(lengths) {
            let (this, after) = rest.split_at(length.min(rest.len()));
            *section = this;
            rest = after;
        }
        Message(assemble(Head::default(), sections, Some(joined), system))
    }

    /// A message with this body and nothing else (tests, management replies).
    pub fn with_body(body: &[u8]) -> Message {
        Message::from_parts([&[], &[], &[], body], [None; 8])
    }

    fn head(&self) -> &Head {
        &self.0.header.header
    }

    fn bytes(&self) -> &[u8] {
        &self.0.slice
    }

    /// Changes the fixed fields: in place when this is the only copy, else in a copy.
    fn edit_head<R>(&mut self, change: impl FnOnce(&mut Head) -> R) -> R {
        let mut change = Some(change);
        let in_place = self.0.with_arc_mut(|arc| {
            triomphe::Arc::get_mut(arc)
                .map(|inner| (change.take().expect("once"))(inner.header_mut()))
        });
        match in_place {
            Some(result) => result,
            None => {
                let mut head = self.head().clone();
                let result = (change.take().expect("not yet called"))(&mut head);
                self.0 = ThinArc::from_header_and_slice(head, self.bytes());
                result
            }
        }
    }

    /// The sender-chosen header fields.
    pub fn header(&self) -> HeaderFields {
        let head = self.head();
        HeaderFields {
            durable: head.durable,
            priority: head.priority,
            time_to_live: (head.ttl_millis != NO_TTL)
                .then(|| Duration::from_millis(head.ttl_millis)),
        }
    }

    /// Gives the message these header fields (a time to live in whole milliseconds, as AMQP
    /// carries it).
    pub fn set_header(&mut self, header: HeaderFields) {
        self.edit_head(|head| {
            head.durable = header.durable;
            head.priority = header.priority;
            head.ttl_millis = header.time_to_live.map_or(NO_TTL, |ttl| {
                u64::try_from(ttl.as_millis())
                    .unwrap_or(NO_TTL - 1)
                    .min(NO_TTL - 1)
            });
        });
    }

    /// Number of encoded elements in the annotation entries (keys plus values).
    pub fn annotation_element_count(&self) -> u32 {
        self.head().annotation_element_count
    }

    /// Sets it.
    pub fn set_annotation_element_count(&mut self, count: u32) {
        self.edit_head(|head| head.annotation_element_count = count);
    }

    /// Auto-forwarding hops this message has made (rule FWD-2).
    pub fn hop_count(&self) -> u8 {
        self.head().hop_count
    }

    /// Sets it.
    pub fn set_hop_count(&mut self, hops: u8) {
        self.edit_head(|head| head.hop_count = hops);
    }

    /// The parsed system properties.
    pub fn system(&self) -> System<'_> {
        let head = self.head();
        let bytes = self.bytes();
        System {
            source: Source::Message {
                properties: self.section(1),
                text: bytes.get(head.ends[3] as usize..).unwrap_or_default(),
                spans: SystemSpans {
                    at: head.system_at,
                    in_text: head.system_in_text,
                },
            },
        }
    }

    /// Gives the message these system properties.
    pub fn set_system(&mut self, system: SystemProperties) {
        self.rebuild(None, system.view().values());
    }

    /// Rebuilds the allocation with one section replaced and these system properties.
    fn rebuild(&mut self, replace: Option<(usize, &[u8])>, system: [Option<&str>; 8]) {
        let mut sections = [0, 1, 2, 3].map(|at| self.section(at));
        if let Some((index, section)) = replace {
            sections[index] = section;
        }
        self.0 = assemble(self.head().clone(), sections, None, system);
    }

    fn section(&self, index: usize) -> &[u8] {
        let ends = &self.head().ends;
        let start = if index == 0 {
            0
        } else {
            ends[index - 1] as usize
        };
        self.bytes()
            .get(start..ends[index] as usize)
            .unwrap_or_default()
    }

    /// The client's message annotations as encoded map entries (keys and values, without
    /// the map constructor), broker-owned `x-opt-*` keys removed.
    pub fn annotation_entries(&self) -> &[u8] {
        self.section(0)
    }

    /// The encoded properties section, descriptor included (empty if none).
    pub fn properties_section(&self) -> &[u8] {
        self.section(1)
    }

    /// The encoded application-properties section, descriptor included (empty if none).
    pub fn application_properties_section(&self) -> &[u8] {
        self.section(2)
    }

    /// Body sections and footer, exactly as sent.
    pub fn body(&self) -> &[u8] {
        self.section(3)
    }

    fn replace_section(&mut self, index: usize, section: &[u8]) {
        let system = self
            .system()
            .values()
            .map(|value| value.map(str::to_string));
        self.rebuild(
            Some((index, section)),
            system.each_ref().map(|value| value.as_deref()),
        );
    }

    /// Replaces the properties section.
    pub fn set_properties_section(&mut self, section: &[u8]) {
        self.replace_section(1, section);
    }

    /// Replaces the application-properties section.
    pub fn set_application_properties_section(&mut self, section: &[u8]) {
        self.replace_section(2, section);
    }

    /// What few messages carry (scheduling, forwarding, topic and partition details).
    pub fn extras(&self) -> &Extras {
        self.head().extras.as_deref().unwrap_or(&NO_EXTRAS)
    }

    /// Changes them.
    pub fn edit_extras<R>(&mut self, change: impl FnOnce(&mut Extras) -> R) -> R {
        self.edit_head(|head| change(head.extras.get_or_insert_with(Box::default)))
    }

    /// Size of the message as the client encoded it (Service Bus `Size`), in bytes.
    pub fn encoded_size(&self) -> usize {
        self.head().ends[3] as usize + 16
    }

    /// Bytes this message holds in memory, counted against entity quotas and the broker's
    /// memory budget: its bytes, the fixed overhead and its decoded properties.
    pub fn size(&self) -> usize {
        let decoded: usize = self
            .extras()
            .user_properties
            .iter()
            .map(|(name, _)| name.len() + 64)
            .sum();
        self.encoded_size() + MESSAGE_OVERHEAD + decoded + self.system_text_len()
    }

    /// Bytes of system-property text held apart from the properties section.
    fn system_text_len(&self) -> usize {
        self.bytes()
            .len()
            .saturating_sub(self.head().ends[3] as usize)
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
