//! Dead-lettering and auto-forwarding: how records enter the dead-letter and transfer
//! dead-letter sub-queues, and how messages leave for `forward_to` (rules DLQ-3/4, FWD-1..3).

use std::sync::Arc;

use super::{
    Effect, EntityState, MAX_TRANSFER_HOP_COUNT_EXCEEDED, MAX_TRANSFER_HOPS, MessageState, Record,
};
use crate::broker::message::Message;
use crate::broker::types::{PropertyChanges, PropertyValue, SequenceNumber, SubQueue, Timestamp};

impl EntityState {
    /// Hands an arriving message to `forward_to` (rule FWD-1), or dead-letters it here
    /// once it has made too many hops (rule FWD-2).
    pub(super) fn forward(
        &mut self,
        now: Timestamp,
        message: Arc<Message>,
        sequence_number: SequenceNumber,
        property_changes: PropertyChanges,
    ) {
        self.stored_bytes -= message.size() as u64;
        if message.hop_count >= MAX_TRANSFER_HOPS {
            self.stored_bytes += message.size() as u64;
            let record = self.arrival_record(message, sequence_number, now, property_changes);
            self.store_dead_letter(
                record,
                Some(MAX_TRANSFER_HOP_COUNT_EXCEEDED.to_string()),
                Some(format!(
                    "The message passed more than {MAX_TRANSFER_HOPS} auto-forwarding hops."
                )),
            );
            return;
        }
        let mut forwarded = Arc::unwrap_or_clone(message);
        forwarded.hop_count += 1;
        forwarded.original_sequence_number = Some(sequence_number.0);
        forwarded.extra_properties.extend(property_changes);
        self.effects.push(Effect::Forward {
            message: Arc::new(forwarded),
            dead_letter: false,
        });
    }

    /// Stores a message that could not be forwarded in the transfer dead-letter queue
    /// (rule FWD-3).
    pub fn enqueue_transfer_dead_lettered(
        &mut self,
        now: Timestamp,
        message: Arc<Message>,
        reason: String,
        description: String,
    ) {
        self.advance(now);
        let sequence_number = self.allocate_sequence_number();
        self.stored_bytes += message.size() as u64;
        let mut record = self.arrival_record(message, sequence_number, now, Vec::new());
        record.property_changes.push((
            "DeadLetterReason".to_string(),
            PropertyValue::String(reason),
        ));
        record.property_changes.push((
            "DeadLetterErrorDescription".to_string(),
            PropertyValue::String(description),
        ));
        self.transfer_dead_letter
            .records
            .insert(sequence_number, record);
        self.transfer_dead_letter.available.insert(sequence_number);
        self.dispatch(now);
    }

    /// Puts a record into the dead-letter sub-queue with its reason, or forwards it to
    /// `forward_dead_lettered_messages_to` (rule FWD-1) with `x-opt-deadletter-source`.
    pub(super) fn store_dead_letter(
        &mut self,
        mut record: Record,
        reason: Option<String>,
        description: Option<String>,
    ) {
        record.lock = None;
        record.state = MessageState::Active;
        record.expires_at = None;
        if let Some(reason) = &reason {
            record.property_changes.push((
                "DeadLetterReason".to_string(),
                PropertyValue::String(reason.clone()),
            ));
        }
        if let Some(description) = description {
            record.property_changes.push((
                "DeadLetterErrorDescription".to_string(),
                PropertyValue::String(description),
            ));
        }
        let sequence_number = record.sequence_number;
        if self.settings.forward_dead_lettered_messages_to.is_some() {
            self.stored_bytes -= record.message.size() as u64;
            let mut forwarded = Arc::unwrap_or_clone(record.message);
            forwarded.hop_count += 1;
            forwarded.original_sequence_number = Some(sequence_number.0);
            forwarded.dead_letter_source = Some(self.settings.path.clone());
            forwarded.extra_properties.extend(record.property_changes);
            self.effects.push(Effect::Forward {
                message: Arc::new(forwarded),
                dead_letter: true,
            });
        } else {
            self.dead_letter.records.insert(sequence_number, record);
            self.dead_letter.available.insert(sequence_number);
        }
        self.effects.push(Effect::DeadLettered {
            sequence_number,
            reason,
        });
    }

    /// Stores an arriving message directly in the dead-letter sub-queue with a reason
    /// (rule DLQ-3: filter evaluation errors, `Session ID is null.`).
    pub fn enqueue_dead_lettered(
        &mut self,
        now: Timestamp,
        message: Arc<Message>,
        reason: String,
        description: String,
    ) {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        let sequence_number = self.allocate_sequence_number();
        self.stored_bytes += message.size() as u64;
        let record = self.arrival_record(message, sequence_number, now, Vec::new());
        self.store_dead_letter(record, Some(reason), Some(description));
        self.dispatch(now);
    }

    /// Moves a main-queue record into the dead-letter sub-queue, keeping its sequence
    /// number; dead-lettered messages never expire (rule TTL-8). A record already in the
    /// dead-letter queue just becomes available again.
    pub(super) fn dead_letter(
        &mut self,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
        reason: Option<String>,
        description: Option<String>,
    ) {
        if sub_queue != SubQueue::Main {
            // Already a dead letter: it just becomes receivable again (and not deferred).
            let store = self.store_mut(sub_queue);
            if let Some(record) = store.records.get_mut(&sequence_number) {
                record.state = MessageState::Active;
                store.available.insert(sequence_number);
            }
            return;
        }
        self.session_remove_available(sequence_number);
        self.main.available.remove(&sequence_number);
        let Some(record) = self.main.records.remove(&sequence_number) else {
            return;
        };
        self.forget_deadlines(&record);
        self.store_dead_letter(record, reason, description);
    }
}
