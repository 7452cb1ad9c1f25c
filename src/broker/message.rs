//! The broker's view of a message: the client's encoded sections kept as bytes, plus the
//! few fields the rules need, parsed once at ingress, in one allocation. A `Message` is
//! shared by every copy (subscriptions, dead-letter moves: cloning it counts a reference);
//! per-copy state lives in the entity's records.

use std::time::Duration;

use super::types::Timestamp;
use crate::encoding::codec;
use crate::encoding::ids::{self, GuidText};
use crate::encoding::sections::{self, APPLICATION_PROPERTIES, PROPERTIES};

mod application_properties;
mod shared;
mod spare;
mod system;

use shared::Shared;

/// The header fields a message keeps are those of its encoded header section.
pub use crate::encoding::sections::HeaderFields;
pub use application_properties::{
    application_properties_without, application_property_text, merged_application_properties,
    write_changed_application_properties, write_property_value,
};
pub use system::{MAX_SYSTEM_TEXT, System, SystemField, SystemProperties};
use system::{text_apart, text_apart_at_end, text_apart_given};

/// A properties section as delivered ([`Message::delivered_properties`]).
// Lives on the stack for one delivery: boxing the written section would cost the
// allocation the stack buffer avoids.
#[allow(clippy::large_enum_variant)]
pub enum DeliveredProperties<'a> {
    /// The stored section.
    Stored(&'a [u8]),
    /// The stored section with the assigned message-id written in.
    Assigned(sections::AssignedProperties),
}

impl DeliveredProperties<'_> {
    /// The encoded section.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            DeliveredProperties::Stored(section) => section,
            DeliveredProperties::Assigned(section) => section.as_slice(),
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

/// A message's fixed fields, kept in front of its bytes in its one allocation (2 bytes;
/// with the reference count and the length, 8: issues 16 and 43). The rare fields
/// ([`Extras`]) are pointed to from the allocation only when there are any (`shared`); the
/// text of system properties kept apart, a time to live, an assigned id and, for sections
/// that do not delimit themselves, their ends, follow the bytes only when there are any
/// ([`Tail`]), as the bits say.
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    /// [`DURABLE`], what follows the body ([`HAS_TTL`], [`TEXT_APART`], [`ENDS_KEPT`],
    /// [`ID_ASSIGNED`]), and above them ([`HOP_SHIFT`]) the auto-forwarding hops this
    /// message has made (rule FWD-2; at most [`MAX_HOPS`]).
    bits: u8,
    /// `header.priority`.
    priority: u8,
}

/// `Head::bits`: `header.durable`.
const DURABLE: u8 = 1;

/// `Head::bits`: the message has a time to live, kept after the text of the system
/// properties ([`TTL_LEN`]).
const HAS_TTL: u8 = 2;

/// `Head::bits`: system properties the properties section does not hold as they are are
/// kept as text after the body, ending with its length and which fields it holds
/// (`system::text_apart`).
const TEXT_APART: u8 = 4;

/// `Head::bits`: the ends of the annotations, properties and application properties are
/// kept as 24-bit little-endian numbers in the last 9 bytes. Without it the annotations are
/// empty and the other two sections are found by their descriptors and encoded lengths, as
/// ingress checked them (issue 16: 9 bytes less per message). Annotations, or sections
/// given that are not such (a test's, a hand-built one), keep their ends.
const ENDS_KEPT: u8 = 8;

/// `Head::bits`: the broker gave the message its id (the sender set none) and keeps the
/// 8-byte word its GUID is made of (`ids::guid_of_word`) in front of the kept ends instead
/// of a properties section written with its 36 characters: the id is written into the
/// properties section on the way out (issue 16: 44 bytes of properties became the GUID's
/// 16; issue 43: its word's 8). An assigned GUID that is no such word's (one recovered from
/// an older build's log) is written into the properties section instead.
const ID_ASSIGNED: u8 = 16;

/// What follows the body: none of these, the usual message, has nothing after it.
const TRAILERS: u8 = HAS_TTL | TEXT_APART | ENDS_KEPT | ID_ASSIGNED;

/// `Head::bits`: where the hop count starts.
const HOP_SHIFT: u32 = 5;

/// The most hops a message's head counts (above the forwarding limit, rule FWD-2: a
/// message that made that many is dead-lettered, not forwarded again).
pub const MAX_HOPS: u8 = u8::MAX >> HOP_SHIFT;

const _: () = assert!(MAX_HOPS as usize > crate::broker::entity::state::MAX_TRANSFER_HOPS as usize);

/// Bytes of the kept ends.
const ENDS_LEN: usize = 9;

/// Bytes of an assigned id's word.
const ID_LEN: usize = 8;

/// Bytes of the kept time to live (`header.ttl`, a 32-bit little-endian number of
/// milliseconds, after the text of the system properties, when [`HAS_TTL`] is set).
const TTL_LEN: usize = 4;

/// How many bytes a message's annotations, properties and application properties may take
/// together: their ends, when kept (`ENDS_KEPT`), are kept in 24 bits, and this leaves
/// room for what the broker adds to them later (rule actions, dead-letter reasons). Service
/// Bus allows 64 KB of header; ingress refuses more than this with an error naming the size.
pub const MAX_HEADER_SECTIONS: usize = 8 * 1024 * 1024;

/// The largest end a head can hold.
const MAX_END: usize = (1 << 24) - 1;

fn end_to_bytes(end: usize) -> [u8; 3] {
    debug_assert!(end <= MAX_END, "header sections of {end} bytes");
    let [a, b, c, _] = (end.min(MAX_END) as u32).to_le_bytes();
    [a, b, c]
}

fn end_from_bytes([a, b, c]: [u8; 3]) -> usize {
    u32::from_le_bytes([a, b, c, 0]) as usize
}

/// Where a message's text and trailers lie, read from the back of its bytes.
struct Tail {
    /// Where the body ends and the text of the system properties kept apart starts.
    body_end: usize,
    /// Where that text (with its length) ends and the trailers start.
    text_end: usize,
    /// The sections' ends, when kept ([`ENDS_KEPT`]).
    kept_ends: Option<[usize; 3]>,
    /// Where the assigned id's word lies, when there is one ([`ID_ASSIGNED`]).
    id_at: Option<usize>,
    /// Which system fields the text holds (`system::text_apart`; 0: none).
    in_text: u8,
}

/// Where a message's parts lie in its bytes.
struct Bounds {
    /// Where the annotations, the properties and the application properties end.
    ends: [usize; 3],
    /// Where the body ends and the text of the system properties kept apart starts.
    body_end: usize,
}

/// The length of the section with descriptor `code` that starts `bytes` (0 when another
/// starts it, or nothing readable).
fn leading_section(bytes: &[u8], code: u64) -> usize {
    // The usual encoding first (a small descriptor, a list or map): read at once (issue 16:
    // every delivery finds the sections).
    if let [0x00, 0x53, this, constructor, size, ..] = *bytes
        && u64::from(this) == code
    {
        let length = match constructor {
            0x45 => Some(4),
            0xc0 | 0xc1 => Some(5 + usize::from(size)),
            0xd0 | 0xd1 => bytes.get(4..8).and_then(|size| {
                let size = u32::from_be_bytes(size.try_into().ok()?);
                usize::try_from(size).ok()?.checked_add(8)
            }),
            _ => None,
        };
        if let Some(length) = length {
            return if length <= bytes.len() { length } else { 0 };
        }
    }
    if codec::section_code(bytes, 0) != Some(code) {
        return 0;
    }
    codec::value_length(bytes, 0).unwrap_or(0)
}

/// The ends of the annotations (none), properties and application properties at the start
/// of `bytes` (which end with the body), found from their descriptors and lengths.
fn found_ends(bytes: &[u8]) -> [usize; 3] {
    let properties = leading_section(bytes, PROPERTIES);
    let application = leading_section(&bytes[properties..], APPLICATION_PROPERTIES);
    [0, properties, properties + application]
}

/// Whether [`found_ends`] finds these sections where they are given: no annotations, each
/// of the two sections either empty or one whole section of its kind, and nothing after an
/// empty one that would be taken for it. (Out of line: ingress, which most messages come
/// through, never needs it.)
#[inline(never)]
fn self_delimiting(sections: [&[u8]; 4]) -> bool {
    let whole = |section: &[u8], code| {
        section.is_empty() || leading_section(section, code) == section.len()
    };
    let next = |from: usize| {
        sections[from..]
            .iter()
            .copied()
            .find(|section| !section.is_empty())
            .unwrap_or_default()
    };
    sections[0].is_empty()
        && whole(sections[1], PROPERTIES)
        && whole(sections[2], APPLICATION_PROPERTIES)
        && (!sections[1].is_empty() || leading_section(next(2), PROPERTIES) == 0)
        && (!sections[2].is_empty() || leading_section(sections[3], APPLICATION_PROPERTIES) == 0)
}

/// One message as accepted from a client, immutable and shared by every copy (clones
/// share it; the `set_*` and `edit_*` methods copy it first when it is shared). Its
/// fixed fields and its kept sections lie in one allocation sized to them (issue 16: never
/// a slice of the connection's read buffer, which would pin the whole buffer for as long as
/// the message is stored): the client's message annotations as encoded map entries (keys and
/// values, without the map constructor, broker-owned `x-opt-*` keys removed), the encoded
/// properties section, the encoded application-properties section (both descriptor
/// included, empty if none), the body sections and footer exactly as sent, then the text of
/// the system properties the properties section does not hold as text (usually none), then
/// `header.ttl` when the sender set one, then the 8-byte word of the id the broker assigned
/// when the sender set none (`ID_ASSIGNED`), then the sections' ends when they are kept
/// (`ENDS_KEPT`). The rarer fields are out of line.
#[derive(Clone)]
pub struct Message(Shared<Head, Extras>);

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
            .field("extras", &self.0.extras())
            .finish()
    }
}

/// Memory one stored message costs beyond its encoded bytes: its allocation's reference
/// count, length, fixed fields and rounding, and the record in its sub-queue's `RecordMap`
/// run — measured by `tests/memory.rs` (counting allocator) at 28–37 bytes for SDK-encoded
/// messages, 33–40 for messages sent without an id (its 8-byte word included) — rounded up
/// with room for the allocator's own header and rounding. Counting it makes
/// `max_size_in_megabytes` bound what a queue of tiny messages really holds (issue 10, item
/// 9: a 10 MiB queue of empty messages used to hold 143 MiB).
pub const MESSAGE_OVERHEAD: usize = 100;

/// A message's system properties, as given to build it.
#[derive(Clone, Copy)]
enum Given<'a> {
    /// Every value: those the properties section does not hold are found by reading it.
    All([Option<&'a str>; 8]),
    /// Only the values the properties section does not hold (the ingress parser knows, and
    /// the sections are as it parsed them: each one whole and of its kind).
    Apart([Option<&'a str>; 8]),
}

/// Builds a message's one allocation: its sections back to back (`whole`, when they already
/// lie so), then the text of the system properties the properties section does not hold,
/// then `ttl` (`header.ttl` in milliseconds) when there is one, then the word of the id the
/// broker `assigned` it, then the sections' ends when they do not delimit themselves.
fn assemble(
    mut head: Head,
    extras: Option<Box<Extras>>,
    sections: [&[u8]; 4],
    whole: Option<&[u8]>,
    system: Given<'_>,
    ttl: Option<u32>,
    assigned: Option<[u8; 16]>,
) -> Shared<Head, Extras> {
    let assigned = match (system, assigned) {
        (_, Some(id)) => Some(id),
        (Given::All(values), None) => assignable_id(sections[1], values[0]),
        (Given::Apart(_), None) => None,
    };
    let word = assigned.and_then(|id| ids::guid_word(&id));
    if let (Some(id), None) = (assigned, word) {
        // A GUID that is no word's: written into the properties section, which then holds
        // it as text.
        return assemble_with_id_written(head, extras, sections, system, ttl, &id);
    }
    let system = match (system, word) {
        (Given::All(mut values), Some(_)) => {
            values[0] = None;
            Given::All(values)
        }
        _ => system,
    };
    let mut text = Vec::new();
    let in_text = match system {
        Given::All(values) => text_apart(sections[1], values, &mut text),
        Given::Apart(values) => text_apart_given(values, &mut text),
    };
    head.bits &= !TRAILERS;
    if in_text != 0 {
        head.bits |= TEXT_APART;
    }
    let mut trailers = [0; TTL_LEN + ID_LEN + ENDS_LEN];
    let mut trailers_len = 0;
    if let Some(ttl) = ttl {
        head.bits |= HAS_TTL;
        trailers[..TTL_LEN].copy_from_slice(&ttl.to_le_bytes());
        trailers_len = TTL_LEN;
    }
    if let Some(word) = word {
        head.bits |= ID_ASSIGNED;
        trailers[trailers_len..trailers_len + ID_LEN].copy_from_slice(&word.to_le_bytes());
        trailers_len += ID_LEN;
    }
    let delimiting = match system {
        // The ingress parser gave them: each section whole and of its kind, so without
        // annotations nothing needs checking (issue 16: it was 1 % of the instructions).
        Given::Apart(_) => {
            debug_assert!(!sections[0].is_empty() || self_delimiting(sections));
            sections[0].is_empty()
        }
        Given::All(_) => self_delimiting(sections),
    };
    if !delimiting {
        head.bits |= ENDS_KEPT;
        let mut end = 0;
        for section in sections.iter().take(3) {
            end += section.len();
            trailers[trailers_len..trailers_len + 3].copy_from_slice(&end_to_bytes(end));
            trailers_len += 3;
        }
    }
    let trailers = &trailers[..trailers_len];
    // Each part copied once, straight into the allocation (issue 16: parts that did not
    // lie back to back, as when the broker assigns a message id, were joined in a buffer
    // first and the body copied twice).
    match whole {
        Some(whole) => Shared::new(head, extras, &[whole, &text, trailers]),
        None => Shared::new(
            head,
            extras,
            &[
                sections[0],
                sections[1],
                sections[2],
                sections[3],
                &text,
                trailers,
            ],
        ),
    }
}

/// [`assemble`] of a message given an assigned GUID that is no word's: its properties
/// section written with the id (as a receiver would get it), and the system properties
/// read from that.
#[inline(never)]
fn assemble_with_id_written(
    head: Head,
    extras: Option<Box<Extras>>,
    sections: [&[u8]; 4],
    system: Given<'_>,
    ttl: Option<u32>,
    id: &[u8; 16],
) -> Shared<Head, Extras> {
    let text = GuidText::new(id);
    let properties = sections::with_message_id(sections[1], &(0..sections[1].len()), text.as_str());
    let held = System::of_message(sections[1], &[], 0, None);
    let mut values = match system {
        Given::All(values) => values,
        // Those apart are the identifiers that are not strings; the rest are in the
        // section as they are.
        Given::Apart(apart) => {
            let mut values = held.values();
            for (value, apart) in values.iter_mut().zip(apart) {
                if apart.is_some() {
                    *value = apart;
                }
            }
            values
        }
    };
    values[0] = Some(text.as_str());
    let written = [sections[0], properties.as_slice(), sections[2], sections[3]];
    assemble(head, extras, written, None, Given::All(values), ttl, None)
}

/// `header.ttl` as a head keeps it: whole milliseconds up to `u32::MAX`.
fn ttl_millis(header: &HeaderFields) -> Option<u32> {
    header
        .time_to_live
        .map(|ttl| u32::try_from(ttl.as_millis()).unwrap_or(u32::MAX))
}

/// The GUID bytes of `id` when it can be kept as an assigned id ([`ID_ASSIGNED`]): the
/// properties section holds no message-id (none, or null: a sender's id of another type is
/// kept as it was sent) and `id` is a GUID in the lower-case text the broker writes, so that
/// the id written on the way out is exactly `id` (recovery, rebuilt messages).
fn assignable_id(properties: &[u8], id: Option<&str>) -> Option<[u8; 16]> {
    let bytes = ids::parse_guid_text(id?)?;
    system::holds_no_message_id(properties).then_some(bytes)
}

impl Message {
    /// A message of these sections and system properties ([`SystemField::ALL`] order), in
    /// one allocation built once (ingress and recovery).
    pub fn from_parts(sections: [&[u8]; 4], system: [Option<&str>; 8]) -> Message {
        Message::from_parts_with_header(HeaderFields::default(), sections, system)
    }

    /// [`Message::from_parts`] with these header fields (recovery: a time to live set
    /// afterwards would build the allocation again).
    pub fn from_parts_with_header(
        header: HeaderFields,
        sections: [&[u8]; 4],
        system: [Option<&str>; 8],
    ) -> Message {
        Message(assemble(
            Message::head_of(&header),
            None,
            sections,
            None,
            Given::All(system),
            ttl_millis(&header),
            None,
        ))
    }

    /// A head holding these header fields but the time to live, which goes in the bytes.
    fn head_of(header: &HeaderFields) -> Head {
        Head {
            bits: if header.durable { DURABLE } else { 0 },
            priority: header.priority,
        }
    }

    /// A message of these header fields and sections whose properties section holds every
    /// system property as text but those in `apart` (ingress: identifiers that are not
    /// strings), which is then not read, and, when the sender set no message-id, the id the
    /// broker `assigned` it (GUID bytes: not in the section, written into it on the way out).
    pub fn from_parts_apart(
        header: HeaderFields,
        sections: [&[u8]; 4],
        apart: [Option<&str>; 8],
        assigned: Option<[u8; 16]>,
    ) -> Message {
        Message(assemble(
            Message::head_of(&header),
            None,
            sections,
            None,
            Given::Apart(apart),
            ttl_millis(&header),
            assigned,
        ))
    }

    /// [`Message::from_parts_apart`] of four sections lying back to back in `joined` (as a
    /// transfer usually carries them), each `lengths[i]` bytes long: one copy, into the
    /// message's allocation.
    pub fn from_joined(
        header: HeaderFields,
        joined: &[u8],
        lengths: [usize; 4],
        apart: [Option<&str>; 8],
        assigned: Option<[u8; 16]>,
    ) -> Message {
        let mut sections: [&[u8]; 4] = [&[]; 4];
        let mut rest = joined;
        for (section, length) in sections.iter_mut().zip(lengths) {
            let (this, after) = rest.split_at(length.min(rest.len()));
            *section = this;
            rest = after;
        }
        Message(assemble(
            Message::head_of(&header),
            None,
            sections,
            Some(joined),
            Given::Apart(apart),
            ttl_millis(&header),
            assigned,
        ))
    }

    /// A message with this body and nothing else (tests, management replies).
    pub fn with_body(body: &[u8]) -> Message {
        Message::from_parts([&[], &[], &[], body], [None; 8])
    }

    fn head(&self) -> &Head {
        self.0.head()
    }

    fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }

    /// Changes the fixed fields: in place when this is the only copy, else in a copy.
    fn edit_head<R>(&mut self, change: impl FnOnce(&mut Head) -> R) -> R {
        self.0.edit(|head, _| change(head))
    }

    /// The sender-chosen header fields.
    pub fn header(&self) -> HeaderFields {
        let head = self.head();
        HeaderFields {
            durable: head.bits & DURABLE != 0,
            priority: head.priority,
            time_to_live: self
                .ttl_millis()
                .map(|millis| Duration::from_millis(millis.into())),
        }
    }

    /// `header.ttl` in milliseconds, from the bytes after the text (when there is one).
    fn ttl_millis(&self) -> Option<u32> {
        if self.head().bits & HAS_TTL == 0 {
            return None;
        }
        let at = self.tail().text_end;
        let ttl = self.bytes().get(at..at + TTL_LEN)?;
        Some(u32::from_le_bytes(ttl.try_into().ok()?))
    }

    /// Gives the message these header fields (a time to live in whole milliseconds up to
    /// `u32::MAX`, as AMQP carries it: `header.ttl` is a `uint`). A different time to live
    /// rebuilds the allocation (it lies after the bytes); the rest is changed in place when
    /// this is the only copy.
    pub fn set_header(&mut self, header: HeaderFields) {
        let ttl = ttl_millis(&header);
        if ttl != self.ttl_millis() {
            self.rebuild(None, None, ttl);
        }
        self.edit_head(|head| {
            head.bits = (head.bits & !DURABLE) | if header.durable { DURABLE } else { 0 };
            head.priority = header.priority;
        });
    }

    /// Number of encoded elements in the annotation entries (keys plus values), counted
    /// from them (they are few, and most messages have none).
    pub fn annotation_element_count(&self) -> u32 {
        Message::element_count(self.annotation_entries())
    }

    /// Number of encoded elements in `entries` (annotation entries taken from
    /// [`Message::sections`]: a delivery reads where the sections lie once).
    pub fn element_count(entries: &[u8]) -> u32 {
        let mut at = 0;
        let mut count = 0;
        while at < entries.len() {
            match codec::value_length(entries, at) {
                Ok(length) if length > 0 => {
                    at += length;
                    count += 1;
                }
                _ => break,
            }
        }
        count
    }

    /// Auto-forwarding hops this message has made (rule FWD-2).
    pub fn hop_count(&self) -> u8 {
        self.head().bits >> HOP_SHIFT
    }

    /// Sets it (at most [`MAX_HOPS`]).
    pub fn set_hop_count(&mut self, hops: u8) {
        self.edit_head(|head| {
            head.bits = (head.bits & !(MAX_HOPS << HOP_SHIFT)) | (hops.min(MAX_HOPS) << HOP_SHIFT)
        });
    }

    /// The parsed system properties.
    pub fn system(&self) -> System<'_> {
        let tail = self.tail();
        let bytes = self.bytes();
        // Only the properties section is needed: found alone when the ends are not kept.
        let properties = match tail.kept_ends {
            Some([annotations, properties, _]) => &bytes[annotations..properties],
            None => {
                let within = &bytes[..tail.body_end];
                &within[..leading_section(within, PROPERTIES)]
            }
        };
        let text = bytes
            .get(tail.body_end..tail.text_end.saturating_sub(4))
            .unwrap_or_default();
        let assigned = self.assigned_id_in(&tail).map(|id| GuidText::new(&id));
        System::of_message(properties, text, tail.in_text, assigned)
    }

    /// The GUID bytes of the id the broker assigned this message (the sender set none),
    /// which its properties section does not hold (`ID_ASSIGNED`).
    pub fn assigned_id(&self) -> Option<[u8; 16]> {
        self.assigned_id_in(&self.tail())
    }

    fn assigned_id_in(&self, tail: &Tail) -> Option<[u8; 16]> {
        let at = tail.id_at?;
        let word = self.bytes().get(at..at + ID_LEN)?.try_into().ok()?;
        Some(ids::guid_of_word(u64::from_le_bytes(word)))
    }

    /// The properties section as a receiver gets it: the stored one, or, when the broker
    /// assigned the message its id, the stored one with that id written in (`section` is
    /// [`Message::properties_section`], found by the caller with the other sections).
    pub fn delivered_properties<'a>(&self, section: &'a [u8]) -> DeliveredProperties<'a> {
        Message::properties_with_id(section, self.assigned_id())
    }

    /// [`Message::delivered_properties`] of a section and an assigned id found with the
    /// other sections ([`Message::sections_and_assigned_id`]).
    pub fn properties_with_id(
        section: &[u8],
        assigned: Option<[u8; 16]>,
    ) -> DeliveredProperties<'_> {
        match assigned {
            None => DeliveredProperties::Stored(section),
            Some(id) => DeliveredProperties::Assigned(sections::with_message_id(
                section,
                &(0..section.len()),
                GuidText::new(&id).as_str(),
            )),
        }
    }

    /// Gives the message these system properties.
    pub fn set_system(&mut self, system: SystemProperties) {
        self.rebuild(None, Some(system.view().values()), self.ttl_millis());
    }

    /// Rebuilds the allocation with one section replaced, these system properties (or the
    /// same) and this time to live.
    fn rebuild(
        &mut self,
        replace: Option<(usize, &[u8])>,
        system: Option<[Option<&str>; 8]>,
        ttl: Option<u32>,
    ) {
        let mut sections = self.sections();
        if let Some((index, section)) = replace {
            sections[index] = section;
        }
        let kept;
        let system = match system {
            Some(values) => values,
            None => {
                kept = self
                    .system()
                    .values()
                    .map(|value| value.map(str::to_string));
                kept.each_ref().map(|value| value.as_deref())
            }
        };
        let extras = self.0.extras().map(|extras| Box::new(extras.clone()));
        self.0 = assemble(
            *self.head(),
            extras,
            sections,
            None,
            Given::All(system),
            ttl,
            None,
        );
    }

    /// Where the text and the trailers lie: read from the back (the kept ends, the assigned
    /// id's word, the time to live, the text's length).
    #[inline]
    fn tail(&self) -> Tail {
        let end = self.bytes().len();
        match self.head().bits & TRAILERS {
            // Most messages: nothing after the body, or only the word of the id the broker
            // assigned them (a sender that sets no id).
            0 => Tail {
                body_end: end,
                text_end: end,
                kept_ends: None,
                id_at: None,
                in_text: 0,
            },
            ID_ASSIGNED => {
                let body_end = end.saturating_sub(ID_LEN);
                Tail {
                    body_end,
                    text_end: body_end,
                    kept_ends: None,
                    id_at: Some(body_end),
                    in_text: 0,
                }
            }
            _ => self.tail_after_body(),
        }
    }

    /// [`Message::tail`] of a message with more after its body.
    #[inline(never)]
    fn tail_after_body(&self) -> Tail {
        let bytes = self.bytes();
        let bits = self.head().bits;
        let mut end = bytes.len();
        let mut kept_ends = None;
        if bits & ENDS_KEPT != 0 {
            end = end.saturating_sub(ENDS_LEN);
            let kept = bytes.get(end..end + ENDS_LEN).unwrap_or(&[0; ENDS_LEN]);
            kept_ends =
                Some([0, 3, 6].map(|at| end_from_bytes([kept[at], kept[at + 1], kept[at + 2]])));
        }
        let mut id_at = None;
        if bits & ID_ASSIGNED != 0 {
            end = end.saturating_sub(ID_LEN);
            id_at = Some(end);
        }
        if bits & HAS_TTL != 0 {
            end = end.saturating_sub(TTL_LEN);
        }
        let text_end = end;
        let (text_len, in_text) = text_apart_at_end(&bytes[..text_end], bits & TEXT_APART != 0);
        let body_end = text_end - text_len;
        Tail {
            body_end,
            text_end,
            kept_ends: kept_ends.map(|ends| ends.map(|end| end.min(body_end))),
            id_at,
            in_text,
        }
    }

    /// Where the parts lie: the tail, then the sections' ends kept or found from their
    /// descriptors.
    fn bounds(&self) -> Bounds {
        let tail = self.tail();
        Bounds {
            ends: tail
                .kept_ends
                .unwrap_or_else(|| found_ends(&self.bytes()[..tail.body_end])),
            body_end: tail.body_end,
        }
    }

    /// Where the body ends: before the text of the system properties kept apart.
    fn body_end(&self) -> usize {
        self.tail().body_end
    }

    /// The annotation entries, properties, application properties and body, as
    /// [`Message::annotation_entries`] and the others give them, found at once.
    pub fn sections(&self) -> [&[u8]; 4] {
        self.sections_within(&self.bounds())
    }

    /// [`Message::sections`] and [`Message::assigned_id`], found at once (a delivery).
    pub fn sections_and_assigned_id(&self) -> ([&[u8]; 4], Option<[u8; 16]>) {
        let tail = self.tail();
        let assigned = self.assigned_id_in(&tail);
        let bounds = Bounds {
            ends: tail
                .kept_ends
                .unwrap_or_else(|| found_ends(&self.bytes()[..tail.body_end])),
            body_end: tail.body_end,
        };
        (self.sections_within(&bounds), assigned)
    }

    fn sections_within(&self, bounds: &Bounds) -> [&[u8]; 4] {
        let bytes = &self.bytes()[..bounds.body_end];
        let [annotations, properties, application] = bounds.ends;
        [
            &bytes[..annotations],
            &bytes[annotations..properties],
            &bytes[properties..application],
            &bytes[application..],
        ]
    }

    fn section(&self, index: usize) -> &[u8] {
        self.sections()[index]
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
        self.rebuild(Some((index, section)), None, self.ttl_millis());
    }

    /// Replaces the properties section.
    pub fn set_properties_section(&mut self, section: &[u8]) {
        self.replace_section(1, section);
    }

    /// Replaces the application-properties section.
    pub fn set_application_properties_section(&mut self, section: &[u8]) {
        self.replace_section(2, section);
    }

    /// Merges application properties the broker sets on this copy (dead-letter reason and
    /// description, a settling receiver's properties-to-modify) into its
    /// application-properties section, after those carried from a forwarding source
    /// ([`Extras::extra_properties`], which it then no longer carries apart). A record keeps
    /// no list of its own (issue 16: 8 bytes per stored record). Returns how many bytes
    /// [`Message::size`] grew by (negative when it shrank).
    pub fn merge_application_properties(
        &mut self,
        changes: &[(String, super::types::PropertyValue)],
    ) -> i64 {
        if changes.is_empty() {
            return 0;
        }
        let before = self.size() as i64;
        let carried = &self.extras().extra_properties;
        let all: std::borrow::Cow<'_, [_]> = if carried.is_empty() {
            changes.into()
        } else {
            carried
                .iter()
                .chain(changes)
                .cloned()
                .collect::<Vec<_>>()
                .into()
        };
        let section = merged_application_properties(self.application_properties_section(), &all);
        let header = self.annotation_entries().len() + self.properties_section().len();
        if header + section.len() > MAX_HEADER_SECTIONS {
            // Never past what the head's section ends hold: such a change is not merged
            // (a receiver abandoning with new keys again and again in a dead-letter queue).
            return 0;
        }
        if !self.extras().extra_properties.is_empty() {
            self.edit_extras(|extras| extras.extra_properties.clear());
        }
        self.set_application_properties_section(&section);
        self.size() as i64 - before
    }

    /// Takes these application properties out of the message (those the broker set when it
    /// dead-lettered it, for a resubmitted copy).
    pub fn remove_application_properties(&mut self, names: &[&str]) {
        let section = self.application_properties_section();
        if section.is_empty() {
            return;
        }
        let kept = application_properties_without(section, names);
        if kept.len() != section.len() {
            self.set_application_properties_section(&kept);
        }
    }

    /// What few messages carry (scheduling, forwarding, topic and partition details).
    pub fn extras(&self) -> &Extras {
        self.0.extras().unwrap_or(&NO_EXTRAS)
    }

    /// Changes them.
    pub fn edit_extras<R>(&mut self, change: impl FnOnce(&mut Extras) -> R) -> R {
        self.0
            .edit(|_, extras| change(extras.get_or_insert_with(Box::default)))
    }

    /// Size of the message as the client encoded it (Service Bus `Size`), in bytes.
    pub fn encoded_size(&self) -> usize {
        self.body_end() + 16
    }

    /// Starts loading the message's first `lines` cache lines (see `Shared::prefetch`).
    #[inline]
    pub fn prefetch(&self, lines: usize) {
        self.0.prefetch(lines)
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
        let tail = self.tail();
        // As encoded_size(), and the text kept apart.
        tail.body_end + 16 + MESSAGE_OVERHEAD + decoded + (tail.text_end - tail.body_end)
    }

    /// Bytes of system-property text held apart from the properties section.
    #[cfg(test)]
    pub(crate) fn system_text_len(&self) -> usize {
        let tail = self.tail();
        tail.text_end - tail.body_end
    }

    /// Every byte the message holds (tests of how ingress builds it).
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> &[u8] {
        self.bytes()
    }

    /// Whether the message keeps its section ends (its sections do not delimit
    /// themselves).
    #[cfg(test)]
    pub(crate) fn keeps_section_ends(&self) -> bool {
        self.head().bits & ENDS_KEPT != 0
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
