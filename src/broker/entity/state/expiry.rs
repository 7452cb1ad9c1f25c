//! Message expiry (rules TTL-4..9): expired messages are dead-lettered or dropped.

use super::*;

impl EntityState {
    pub(super) fn expire_if_due(&mut self, now: Timestamp, sequence_number: SequenceNumber) {
        let unlocked = self.lock_of(SubQueue::Main, sequence_number).is_none();
        let due = unlocked
            && matches!(
                self.log.get(SubQueue::Main, sequence_number),
                Some(record) if record.state() == MessageState::Active
                    && matches!(record.expires_at(), Some(at) if at <= now)
            );
        if due {
            let session_id = self.session_of(sequence_number);
            self.session_remove_available(sequence_number);
            self.log
                .available_mut(SubQueue::Main)
                .remove(&sequence_number);
            self.expire(now, sequence_number);
            // Rule TTL-9: while a listener is active, one expired message expires its
            // whole session.
            if let Some(session_id) = session_id
                && !self.receivers.is_empty()
            {
                self.expire_session(now, &session_id);
            }
        }
    }

    /// Removes an expired main-queue message: dead-letter or drop (rule TTL-6).
    pub(super) fn expire(&mut self, _now: Timestamp, sequence_number: SequenceNumber) {
        self.totals.expired += 1;
        if self.settings.dead_lettering_on_message_expiration {
            self.dead_letter(
                SubQueue::Main,
                sequence_number,
                Some(TTL_EXPIRED.to_string()),
                Some("The message expired and was dead lettered.".to_string()),
            );
        } else {
            self.session_remove_available(sequence_number);
            if let Some(record) = self.log.remove(SubQueue::Main, sequence_number) {
                self.stored_bytes -= record.message.size() as u64;
                self.forget_deadlines(&record);
            }
        }
    }

    /// Drops the pending expiry and lock deadlines of a record leaving the log, so the
    /// deadline set stays as small as the set of live records.
    /// (A record's lock is always released before the record leaves.)
    pub(super) fn forget_deadlines(&mut self, record: &Record) {
        if let Some(at) = record.expires_at() {
            self.deadlines
                .remove(&(at, Deadline::Expiry(record.sequence_number)));
        }
    }
}
