//! Dead-lettering and auto-forwarding: how records enter the dead-letter and transfer
//! dead-letter sub-queues, and how messages leave for `forward_to` (rules DLQ-3/4, FWD-1..3).

use super::log::ForwardKey;
use super::{
    Effect, EntityState, MAX_TRANSFER_HOP_COUNT_EXCEEDED, MAX_TRANSFER_HOPS, MessageState, Record,
};
use crate::broker::message::Message;
use crate::broker::types::{
    OutboxTarget, PropertyChanges, PropertyValue, SequenceNumber, SubQueue, Timestamp,
};

impl EntityState {
    /// Hands an arriving message to `forward_to` (rule FWD-1), or dead-letters it here
    /// once it has made too many hops (rule FWD-2).
    pub(super) fn forward(
        &mut self,
        now: Timestamp,
        message: Message,
        sequence_number: SequenceNumber,
    ) {
        if message.hop_count() >= MAX_TRANSFER_HOPS {
            let record = self.arrival_record(message, sequence_number, now);
            self.store_dead_letter(
                record,
                Some(MAX_TRANSFER_HOP_COUNT_EXCEEDED.to_string()),
                Some(format!(
                    "The message passed more than {MAX_TRANSFER_HOPS} auto-forwarding hops."
                )),
            );
            return;
        }
        let mut forwarded = message;
        forwarded.set_hop_count(forwarded.hop_count() + 1);
        forwarded.edit_extras(|extras| extras.original_sequence_number = Some(sequence_number.0));
        let record = self.arrival_record(forwarded, sequence_number, now);
        self.send_through_outbox(record, OutboxTarget::Forward);
    }

    /// Keeps a stamped message in the outbox (durably, with durable storage) and hands it to
    /// the forwarder; it leaves the source only when the target has it ([`Self::forwarded`])
    /// or moves to the transfer dead-letter queue when the target refuses it.
    pub(super) fn send_through_outbox(&mut self, mut record: Record, target: OutboxTarget) {
        if record.message.extras().topic_sequence.is_some() {
            // The target numbers it: a topic's number belongs to the topic's entities.
            record
                .message
                .edit_extras(|extras| extras.topic_sequence = None);
        }
        let message = record.message.clone();
        let sequence_number = record.sequence_number;
        self.log.add_to_outbox(record, target.clone());
        self.effects.push(Effect::Forward {
            message,
            sequence_number,
            target,
        });
    }

    /// The forwarding target stored the outbox message `sequence_number`.
    pub fn forwarded(&mut self, now: Timestamp, sequence_number: SequenceNumber) {
        self.advance(now);
        if let Some((record, _)) = self.log.take_from_outbox(sequence_number) {
            self.stored_bytes -= record.message.size() as u64;
        }
    }

    /// The forwarding target refused the outbox message `sequence_number` (missing,
    /// full, disabled): it moves to the transfer dead-letter queue (rule FWD-3).
    pub fn forward_failed(
        &mut self,
        now: Timestamp,
        sequence_number: SequenceNumber,
        reason: String,
        description: String,
    ) {
        let Some((record, _)) = self.log.take_from_outbox(sequence_number) else {
            return;
        };
        self.stored_bytes -= record.message.size() as u64;
        self.enqueue_transfer_dead_lettered(now, record.message, reason, description);
    }

    /// Before a message forwarded from another entity's outbox entry `key` is stored
    /// (`docs/scale-out.md` §8 item 6): forgets the keys of that source numbered below
    /// `floor` (the lowest entry still in its outbox when it sent this one, so it committed
    /// every lower one as forwarded), then says whether `key` is stored here already (a
    /// re-send after a crash between this entity's commit and the source's), which the
    /// caller answers "stored" without storing it again.
    pub fn forwarded_already(&mut self, key: &ForwardKey, floor: SequenceNumber) -> bool {
        self.log.forget_received(&key.source, floor);
        self.log.was_received(key)
    }

    /// The message of the outbox entry `key` was stored (or recognised as a duplicate by
    /// message id) in this turn: its key goes into the same record.
    pub fn received_forwarded(&mut self, key: ForwardKey) {
        self.log.note_received(key);
    }

    /// The lowest number still in the outbox (every lower entry left it): what a forward
    /// tells its target it may forget below. `None` when the outbox is empty.
    pub fn outbox_floor(&self) -> Option<SequenceNumber> {
        self.log.outbox().keys().next().copied()
    }

    /// Re-sends what the outbox held when the broker stopped (recovery).
    pub(super) fn resend_outbox(&mut self) {
        let pending: Vec<_> = self
            .log
            .outbox()
            .values()
            .map(|(record, target)| {
                (
                    record.message.clone(),
                    record.sequence_number,
                    target.clone(),
                )
            })
            .collect();
        for (message, sequence_number, target) in pending {
            self.effects.push(Effect::Forward {
                message,
                sequence_number,
                target,
            });
        }
    }

    /// Stores a message that could not be forwarded in the transfer dead-letter queue
    /// (rule FWD-3).
    pub fn enqueue_transfer_dead_lettered(
        &mut self,
        now: Timestamp,
        message: Message,
        reason: String,
        description: String,
    ) {
        self.advance(now);
        let sequence_number = self.allocate_sequence_number();
        let mut message = message;
        message
            .merge_application_properties(&dead_letter_properties(Some(reason), Some(description)));
        self.stored_bytes += message.size() as u64;
        let record = self.arrival_record(message, sequence_number, now);
        self.log.insert(SubQueue::TransferDeadLetter, record);
        self.log
            .available_mut(SubQueue::TransferDeadLetter)
            .insert(sequence_number);
        self.dispatch(now);
    }

    /// Puts an arriving record (not yet in the log) into the dead-letter sub-queue with its
    /// reason, or forwards it to `forward_dead_lettered_messages_to` (rule FWD-1) with
    /// `x-opt-deadletter-source`.
    pub(super) fn store_dead_letter(
        &mut self,
        mut record: Record,
        reason: Option<String>,
        description: Option<String>,
    ) {
        record.set_state(MessageState::Active);
        record.set_expires_at(None);
        // Its size is counted already: count what the reason adds.
        let grown = record
            .message
            .merge_application_properties(&dead_letter_properties(reason.clone(), description));
        self.grow_stored(grown);
        let sequence_number = record.sequence_number;
        if self.settings.forward_dead_lettered_messages_to.is_some() {
            self.forward_dead_letter(record);
        } else {
            self.log.insert(SubQueue::DeadLetter, record);
            self.log
                .available_mut(SubQueue::DeadLetter)
                .insert(sequence_number);
        }
        self.totals.dead_lettered += 1;
        self.totals.dead_lettered_by_reason.count(reason.as_deref());
        self.effects.push(Effect::DeadLettered {
            sequence_number,
            reason,
        });
    }

    /// Hands a dead letter (already out of the log) to `forward_dead_lettered_messages_to`.
    fn forward_dead_letter(&mut self, record: Record) {
        let sequence_number = record.sequence_number;
        let mut forwarded = record.message;
        forwarded.set_hop_count(forwarded.hop_count() + 1);
        forwarded.edit_extras(|extras| {
            extras.original_sequence_number = Some(sequence_number.0);
            extras.dead_letter_source = Some(self.settings.path.clone());
        });
        let outgoing = Record {
            message: forwarded,
            ..record
        };
        self.send_through_outbox(outgoing, OutboxTarget::DeadLetters);
    }

    /// Stores an arriving message directly in the dead-letter sub-queue with a reason
    /// (rule DLQ-3: filter evaluation errors, `Session ID is null.`).
    pub fn enqueue_dead_lettered(
        &mut self,
        now: Timestamp,
        message: Message,
        reason: String,
        description: String,
    ) {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        let (sequence_number, enqueued) = self.arrival_number(now, &message, None);
        self.stored_bytes += message.size() as u64;
        let record = self.arrival_record(message, sequence_number, enqueued);
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
        self.dead_letter_with(sub_queue, sequence_number, reason, description, Vec::new());
    }

    /// [`Self::dead_letter`], merging the settling receiver's `properties` first.
    pub(super) fn dead_letter_with(
        &mut self,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
        reason: Option<String>,
        description: Option<String>,
        properties: PropertyChanges,
    ) {
        if sub_queue != SubQueue::Main {
            // Already a dead letter: it just becomes receivable again (and not deferred).
            if self.update_merging(sub_queue, sequence_number, properties, |record| {
                record.set_state(MessageState::Active);
            }) {
                self.log.available_mut(sub_queue).insert(sequence_number);
            }
            return;
        }
        self.session_remove_available(sequence_number);
        let Some(record) = self.log.get(SubQueue::Main, sequence_number) else {
            return;
        };
        let record = record.clone();
        self.forget_deadlines(&record);
        let mut added = properties;
        added.extend(dead_letter_properties(reason.clone(), description));
        if self.settings.forward_dead_lettered_messages_to.is_some() {
            let Some(mut record) = self.log.remove(SubQueue::Main, sequence_number) else {
                return;
            };
            // Still counted (in the outbox until the target has it).
            let grown = record.message.merge_application_properties(&added);
            self.grow_stored(grown);
            self.forward_dead_letter(record);
        } else {
            self.log
                .move_to(SubQueue::Main, SubQueue::DeadLetter, sequence_number);
            self.update_merging(SubQueue::DeadLetter, sequence_number, added, |record| {
                record.set_state(MessageState::Active);
                record.set_expires_at(None);
            });
            self.log
                .available_mut(SubQueue::DeadLetter)
                .insert(sequence_number);
        }
        self.totals.dead_lettered += 1;
        self.totals.dead_lettered_by_reason.count(reason.as_deref());
        self.effects.push(Effect::DeadLettered {
            sequence_number,
            reason,
        });
    }
}

/// The application properties a dead-letter reason and description become (rule DLQ-4).
fn dead_letter_properties(reason: Option<String>, description: Option<String>) -> PropertyChanges {
    let mut properties = Vec::new();
    if let Some(reason) = reason {
        properties.push((
            "DeadLetterReason".to_string(),
            PropertyValue::String(reason),
        ));
    }
    if let Some(description) = description {
        properties.push((
            "DeadLetterErrorDescription".to_string(),
            PropertyValue::String(description),
        ));
    }
    properties
}
