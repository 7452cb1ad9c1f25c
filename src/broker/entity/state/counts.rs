//! An entity's counts: what its log holds now (the runtime counts Service Bus reports) and
//! what it has done since its actor started (metrics).

use super::{
    MAX_DELIVERY_COUNT_EXCEEDED, MAX_TRANSFER_HOP_COUNT_EXCEEDED, SESSION_ID_IS_NULL, TTL_EXPIRED,
};
use crate::broker::types::Timestamp;

/// An entity's message counts (rule-free observation of its log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntityCounts {
    /// Messages receivable now or later (not scheduled), deferred included.
    pub active: u64,
    /// Messages waiting for their scheduled enqueue time.
    pub scheduled: u64,
    /// Deferred messages of the main queue (counted in `active` too, as Service Bus does).
    pub deferred: u64,
    /// Messages in the dead-letter sub-queue.
    pub dead_letter: u64,
    /// Messages waiting to be auto-forwarded.
    pub transfer: u64,
    /// Messages in the transfer dead-letter sub-queue.
    pub transfer_dead_letter: u64,
    /// Bytes stored across the sub-queues.
    pub size_in_bytes: u64,
    /// What the entity has done since it started.
    pub totals: EntityTotals,
    /// The next sequence number it would assign (a topic starts numbering past its
    /// subscriptions').
    pub next_sequence_number: i64,
    /// The last activity that keeps the entity alive (rule IDL-1).
    pub last_activity: Timestamp,
    /// Whether something keeps it alive however long it is idle: an attached receiver,
    /// auto-forwarding or a pending scheduled message (rules IDL-2, FWD-4).
    pub kept_alive: bool,
    /// The next number of each partition (only the first entry when not partitioned; 0
    /// marks an unused entry).
    pub next_sequence_numbers: [i64; crate::broker::partitions::PARTITIONS as usize],
}

/// Cumulative event counts of an entity since its actor started (metrics). Not durable:
/// they restart with the broker, as Prometheus counters may.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntityTotals {
    /// Messages accepted (sent, forwarded in, or copied in by a topic).
    pub sent: u64,
    /// Deliveries to receivers (redeliveries included).
    pub delivered: u64,
    /// Messages completed.
    pub completed: u64,
    /// Messages abandoned.
    pub abandoned: u64,
    /// Messages moved to the dead-letter sub-queue (any reason).
    pub dead_lettered: u64,
    /// The same, by reason.
    pub dead_lettered_by_reason: DeadLetterReasons,
    /// Messages that expired (dropped or dead-lettered).
    pub expired: u64,
    /// Messages accepted with a scheduled enqueue time.
    pub scheduled: u64,
}

/// Dead-lettering counts by reason: the broker's own reasons each, applications' together
/// (their reasons are free text: a label per text would let clients grow the metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadLetterReasons {
    /// `MaxDeliveryCountExceeded` (rule LCK-2).
    pub max_delivery_count_exceeded: u64,
    /// `TTLExpiredException` (rule TTL-6).
    pub ttl_expired: u64,
    /// `MaxTransferHopCountExceeded` (rule FWD-2).
    pub max_transfer_hop_count_exceeded: u64,
    /// `Session ID is null.` (rule SES-1).
    pub session_id_is_null: u64,
    /// `FilterEvaluationException` (rule DLQ-3).
    pub filter_evaluation: u64,
    /// Any other reason: a receiver's dead-letter call (rule DLQ-4).
    pub application: u64,
}

/// The reason the topic records for a filter that fails to evaluate (rule DLQ-3).
pub const FILTER_EVALUATION_EXCEPTION: &str = "FilterEvaluationException";

impl DeadLetterReasons {
    /// Counts one dead-lettering with `reason`.
    pub fn count(&mut self, reason: Option<&str>) {
        let counter = match reason {
            Some(MAX_DELIVERY_COUNT_EXCEEDED) => &mut self.max_delivery_count_exceeded,
            Some(TTL_EXPIRED) => &mut self.ttl_expired,
            Some(MAX_TRANSFER_HOP_COUNT_EXCEEDED) => &mut self.max_transfer_hop_count_exceeded,
            Some(SESSION_ID_IS_NULL) => &mut self.session_id_is_null,
            Some(FILTER_EVALUATION_EXCEPTION) => &mut self.filter_evaluation,
            _ => &mut self.application,
        };
        *counter += 1;
    }

    /// `(reason, count)` pairs, for metric labels.
    pub fn labelled(&self) -> [(&'static str, u64); 6] {
        [
            (
                MAX_DELIVERY_COUNT_EXCEEDED,
                self.max_delivery_count_exceeded,
            ),
            (TTL_EXPIRED, self.ttl_expired),
            (
                MAX_TRANSFER_HOP_COUNT_EXCEEDED,
                self.max_transfer_hop_count_exceeded,
            ),
            (SESSION_ID_IS_NULL, self.session_id_is_null),
            (FILTER_EVALUATION_EXCEPTION, self.filter_evaluation),
            ("application", self.application),
        ]
    }
}

impl EntityTotals {
    /// `(event, count)` pairs, for metric labels.
    pub fn labelled(&self) -> [(&'static str, u64); 7] {
        [
            ("sent", self.sent),
            ("delivered", self.delivered),
            ("completed", self.completed),
            ("abandoned", self.abandoned),
            ("dead_lettered", self.dead_lettered),
            ("expired", self.expired),
            ("scheduled", self.scheduled),
        ]
    }
}
