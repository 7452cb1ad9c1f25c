//! The broker's view of a message: the client's encoded sections kept as bytes, plus the
//! few fields the rules need, parsed once at ingress. A `Message` is immutable and shared
//! (`Arc`) by every copy (subscriptions, dead-letter moves); per-copy state lives in the
//! entity's records.

use std::time::Duration;

use bytes::Bytes;

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

/// System properties the broker reads (filters, sessions, duplicate detection).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SystemProperties {
    /// `properties.message-id` as text (assigned at ingress if the sender set none).
    pub message_id: Option<String>,
    /// `properties.correlation-id` as text.
    pub correlation_id: Option<String>,
    /// `properties.to`.
    pub to: Option<String>,
    /// `properties.reply-to`.
    pub reply_to: Option<String>,
    /// `properties.subject` (the Service Bus label).
    pub subject: Option<String>,
    /// `properties.group-id` (the Service Bus session id).
    pub session_id: Option<String>,
    /// `properties.reply-to-group-id`.
    pub reply_to_session_id: Option<String>,
    /// `properties.content-type`.
    pub content_type: Option<String>,
}

/// One message as accepted from a client.
#[derive(Debug, Clone, Default)]
pub struct Message {
    /// Header fields to reproduce on delivery.
    pub header: HeaderFields,
    /// The client's message annotations as encoded map entries (keys and values, without
    /// the map constructor), broker-owned `x-opt-*` keys removed.
    pub annotation_entries: Bytes,
    /// Number of encoded elements in `annotation_entries` (keys plus values).
    pub annotation_element_count: u32,
    /// The encoded properties section, descriptor included (empty if none).
    pub properties_section: Bytes,
    /// The encoded application-properties section, descriptor included (empty if none).
    pub application_properties_section: Bytes,
    /// Body sections and footer, exactly as sent.
    pub body: Bytes,
    /// Parsed system properties.
    pub system: SystemProperties,
    /// `x-opt-scheduled-enqueue-time`, when the sender scheduled the message (rule SCH-1).
    pub scheduled_enqueue_time: Option<Timestamp>,
    /// `x-opt-enqueue-sequence-number` carried from a source entity when forwarded.
    pub original_sequence_number: Option<i64>,
    /// Application properties decoded for filters (filled for messages sent to topics).
    pub user_properties: Vec<(String, super::types::PropertyValue)>,
    /// Auto-forwarding hops this message has made (rule FWD-2).
    pub hop_count: u8,
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

/// Memory one stored message costs beyond its encoded bytes: the `Message` and `Record`
/// structs, their index entries (sequence-number maps, the available set, deadlines) and
/// allocator slack — measured at about 900 bytes for an empty message, rounded up. Counting
/// it makes `max_size_in_megabytes` bound what a queue of tiny messages really holds
/// (issue 10, item 9: a 10 MiB queue of empty messages used to hold 143 MiB).
pub const MESSAGE_OVERHEAD: usize = 1024;

impl Message {
    /// Size of the message as the client encoded it (Service Bus `Size`), in bytes.
    pub fn encoded_size(&self) -> usize {
        self.annotation_entries.len()
            + self.properties_section.len()
            + self.application_properties_section.len()
            + self.body.len()
            + 16
    }

    /// Bytes this message holds in memory, counted against entity quotas and the broker's
    /// memory budget: its bytes, the fixed overhead and its decoded properties.
    pub fn size(&self) -> usize {
        let decoded: usize = self
            .user_properties
            .iter()
            .map(|(name, _)| name.len() + 64)
            .sum();
        self.encoded_size()
            + MESSAGE_OVERHEAD
            + decoded
            + self.system.message_id.as_ref().map_or(0, String::len)
            + self.system.session_id.as_ref().map_or(0, String::len)
    }
}
