//! The broker's view of a message: the client's encoded sections kept as bytes, plus the
//! few fields the rules need, parsed once at ingress. A `Message` is immutable and shared
//! (`Arc`) by every copy (subscriptions, dead-letter moves); per-copy state lives in the
//! entity's records.

use std::time::Duration;

use super::types::Timestamp;

/// Sender-chosen header fields kept for redelivery (the broker sets `delivery-count`).
#[derive(Debug, Clone, Default, PartialEq)]
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

/// Where each system property's text lies in a text holding them back to back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SystemSpans {
    /// Where each field's text ends.
    ends: [u16; 8],
    /// Bit `i` set: field `i` is present (possibly empty).
    present: u8,
}

impl SystemSpans {
    /// Appends every present value to `text`, which starts empty or holds other bytes
    /// before (the spans count from where the values start). A value that would take the
    /// text past [`MAX_SYSTEM_TEXT`] is left out (ingress refuses such messages first; a
    /// rule action or an old record is the only way here).
    fn write(values: [Option<&str>; 8], text: &mut Vec<u8>) -> SystemSpans {
        let start = text.len();
        let mut spans = SystemSpans::default();
        for (index, value) in values.iter().enumerate() {
            if let Some(value) = value
                && text.len() - start + value.len() <= MAX_SYSTEM_TEXT
            {
                text.extend_from_slice(value.as_bytes());
                spans.present |= 1 << index;
            }
            spans.ends[index] = (text.len() - start) as u16;
        }
        spans
    }

    fn get<'a>(&self, text: &'a str, field: SystemField) -> Option<&'a str> {
        let index = field as usize;
        if self.present & (1 << index) == 0 {
            return None;
        }
        let start = if index == 0 {
            0
        } else {
            self.ends[index - 1] as usize
        };
        text.get(start..self.ends[index] as usize)
    }
}

/// The system properties as text, parsed once at ingress: a view of a message's
/// ([`Message::system`]) or of an owned [`SystemProperties`].
#[derive(Clone, Copy)]
pub struct System<'a> {
    text: &'a str,
    spans: &'a SystemSpans,
}

impl<'a> System<'a> {
    /// A field's value.
    pub fn get(&self, field: SystemField) -> Option<&'a str> {
        self.spans.get(self.text, field)
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
    text: String,
    spans: SystemSpans,
}

impl SystemProperties {
    /// From each field's value, in [`SystemField::ALL`] order.
    pub fn new(values: [Option<&str>; 8]) -> SystemProperties {
        let mut text = Vec::new();
        let spans = SystemSpans::write(values, &mut text);
        SystemProperties {
            text: String::from_utf8(text).unwrap_or_default(),
            spans,
        }
    }

    /// A view of them.
    pub fn view(&self) -> System<'_> {
        System {
            text: &self.text,
            spans: &self.spans,
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

/// One message as accepted from a client: its kept sections in one allocation sized to
/// them (never a slice of the connection's read buffer, which would pin the whole buffer
/// for as long as the message is stored), the fields the rules need, and the rarer ones
/// out of line.
#[derive(Debug, Clone, Default)]
pub struct Message {
    /// Header fields to reproduce on delivery.
    pub header: HeaderFields,
    /// The client's message annotations as encoded map entries (keys and values, without
    /// the map constructor, broker-owned `x-opt-*` keys removed), then the encoded
    /// properties section, the encoded application-properties section (both descriptor
    /// included, empty if none), the body sections and footer exactly as sent, and the
    /// system properties' text.
    sections: Box<[u8]>,
    /// Where the annotations, the properties, the application properties and the body end.
    ends: [u32; 4],
    /// Number of encoded elements in the annotation entries (keys plus values).
    pub annotation_element_count: u32,
    /// Auto-forwarding hops this message has made (rule FWD-2).
    pub hop_count: u8,
    /// Where the system properties lie in the text after the body.
    system: SystemSpans,
    extras: Option<Box<Extras>>,
}

/// The sections and the system properties' text back to back in one allocation, where
/// the sections end, and where the system properties lie in the text.
fn join_sections(
    sections: [&[u8]; 4],
    system: [Option<&str>; 8],
) -> (Box<[u8]>, [u32; 4], SystemSpans) {
    let length = sections.iter().map(|section| section.len()).sum::<usize>()
        + system
            .iter()
            .flatten()
            .map(|value| value.len())
            .sum::<usize>();
    let mut joined = Vec::with_capacity(length);
    let mut ends = [0u32; 4];
    for (index, section) in sections.iter().enumerate() {
        joined.extend_from_slice(section);
        ends[index] = joined.len() as u32;
    }
    let spans = SystemSpans::write(system, &mut joined);
    (joined.into_boxed_slice(), ends, spans)
}

/// Memory one stored message costs beyond its encoded bytes: the `Message` in its `Arc`,
/// its one allocation's slack, the record in its sub-queue's `RecordMap` run and its
/// entry in the available index — measured by `tests/memory.rs` (counting allocator) at
/// 229 bytes for an SDK-encoded message (was 772 before issue 16), rounded up. Counting it
/// makes `max_size_in_megabytes` bound what a queue of tiny messages really holds (issue 10,
/// item 9: a 10 MiB queue of empty messages used to hold 143 MiB).
pub const MESSAGE_OVERHEAD: usize = 288;

impl Message {
    /// A message of these sections and system properties ([`SystemField::ALL`] order), in
    /// one allocation built once (ingress and recovery).
    pub fn from_parts(sections: [&[u8]; 4], system: [Option<&str>; 8]) -> Message {
        let (sections, ends, spans) = join_sections(sections, system);
        Message {
            sections,
            ends,
            system: spans,
            ..Message::default()
        }
    }

    /// A message with this body and nothing else (tests, management replies).
    pub fn with_body(body: &[u8]) -> Message {
        Message::from_parts([&[], &[], &[], body], [None; 8])
    }

    /// The parsed system properties.
    pub fn system(&self) -> System<'_> {
        let text = self
            .sections
            .get(self.ends[3] as usize..)
            .and_then(|text| std::str::from_utf8(text).ok())
            .unwrap_or("");
        System {
            text,
            spans: &self.system,
        }
    }

    /// Gives the message these system properties.
    pub fn set_system(&mut self, system: SystemProperties) {
        let sections = [0, 1, 2, 3].map(|at| self.section(at));
        (self.sections, self.ends, self.system) = join_sections(sections, system.view().values());
    }

    fn section(&self, index: usize) -> &[u8] {
        let start = if index == 0 {
            0
        } else {
            self.ends[index - 1] as usize
        };
        &self.sections[start..self.ends[index] as usize]
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
        let mut sections = [0, 1, 2, 3].map(|at| self.section(at));
        sections[index] = section;
        let system = self.system().values();
        (self.sections, self.ends, self.system) = join_sections(sections, system);
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
        self.extras.as_deref().unwrap_or(&NO_EXTRAS)
    }

    /// The same, to change.
    pub fn extras_mut(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Box::default)
    }

    /// Size of the message as the client encoded it (Service Bus `Size`), in bytes.
    pub fn encoded_size(&self) -> usize {
        self.ends[3] as usize + 16
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

    /// Bytes of system-property text held (without reading it).
    fn system_text_len(&self) -> usize {
        self.sections.len().saturating_sub(self.ends[3] as usize)
    }
}
