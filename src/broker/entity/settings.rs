//! The rules an entity runs with, derived from its validated configuration.

use std::time::Duration;

/// Settings of one queue or subscription (topics fan out and hold no messages).
#[derive(Debug, Clone)]
pub struct EntitySettings {
    /// The entity path as configured (`orders`, `events/Subscriptions/all`).
    pub path: String,
    /// How long a peek-lock lasts (rule LCK-1).
    pub lock_duration: Duration,
    /// Deliveries before a message is dead-lettered (rule LCK-2); at least 1.
    pub max_delivery_count: u32,
    /// Default and ceiling for message TTL (rule TTL-2); `None` is unlimited.
    pub default_message_time_to_live: Option<Duration>,
    /// Expired messages go to the DLQ instead of being dropped (rule TTL-6).
    pub dead_lettering_on_message_expiration: bool,
    /// Quota over all stored messages, in bytes.
    pub max_size_bytes: u64,
    /// Messages must carry a session id (rule SES-1).
    pub requires_session: bool,
    /// Duplicate-detection history window, when duplicate detection is on.
    pub duplicate_detection_window: Option<Duration>,
    /// Delete the entity after this long without activity (rule IDL-1).
    pub auto_delete_on_idle: Option<Duration>,
    /// The entity auto-forwards, which counts as a permanent receiver (rule FWD-4).
    pub forwards: bool,
    /// Forward every message to this queue or topic (rule FWD-1).
    pub forward_to: Option<String>,
    /// Forward dead-lettered messages to this queue or topic (rule FWD-1).
    pub forward_dead_lettered_messages_to: Option<String>,
    /// Whether sends are taken and messages given out (admin API `Status`).
    pub status: crate::config::EntityStatus,
    /// Partitions its messages are spread over (1: not partitioned; rule PRT-1).
    pub partitions: u16,
}

impl EntitySettings {
    /// Settings with Service Bus defaults, for tests and programmatic use.
    pub fn with_defaults(path: &str) -> EntitySettings {
        EntitySettings {
            path: path.to_string(),
            lock_duration: Duration::from_secs(60),
            max_delivery_count: 10,
            default_message_time_to_live: None,
            dead_lettering_on_message_expiration: false,
            max_size_bytes: 1024 * 1024 * 1024,
            requires_session: false,
            duplicate_detection_window: None,
            auto_delete_on_idle: None,
            forwards: false,
            forward_to: None,
            forward_dead_lettered_messages_to: None,
            status: crate::config::EntityStatus::Active,
            partitions: 1,
        }
    }
}
