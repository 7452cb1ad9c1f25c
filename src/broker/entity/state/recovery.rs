//! Recovery and checkpoints: an entity rebuilt from its change records (issue 11), and its
//! whole durable state written as change records for compaction.

use super::*;

impl EntityState {
    /// An entity rebuilt from its change records (recovery): the records, counter,
    /// session states and duplicate-detection history they describe, with every index
    /// rebuilt — available messages, expiry deadlines and scheduled activations (re-armed).
    /// No lock is held and no receiver is attached: a restart releases locks. Deadlines
    /// that passed while the broker was down run at the next `advance`.
    pub fn restore(
        settings: EntitySettings,
        token_seed: u64,
        now: Timestamp,
        changes: impl IntoIterator<Item = Change>,
    ) -> EntityState {
        let mut state = EntityState::new(settings, token_seed, now);
        state.log.replay(changes, state.duplicates.as_mut());
        state.rebuild_indexes();
        state.resend_outbox();
        state
    }

    /// Rebuilds what is derived from the records: stored bytes, available sets, sessions,
    /// expiry and activation deadlines, the scheduled count.
    pub(super) fn rebuild_indexes(&mut self) {
        for sub_queue in [
            SubQueue::Main,
            SubQueue::DeadLetter,
            SubQueue::TransferDeadLetter,
        ] {
            let entries: Vec<_> = self
                .log
                .records(sub_queue)
                .values()
                .map(|record| {
                    (
                        record.sequence_number,
                        record.state,
                        record.expires_at,
                        record
                            .message
                            .scheduled_enqueue_time
                            .unwrap_or(record.enqueued_time),
                        record.message.size() as u64,
                    )
                })
                .collect();
            for (sequence_number, state, expires_at, activation, size) in entries {
                self.stored_bytes += size;
                match state {
                    MessageState::Active if sub_queue == SubQueue::Main => {
                        if let Some(at) = expires_at {
                            self.deadlines
                                .insert((at, Deadline::Expiry(sequence_number)));
                        }
                        if self.settings.requires_session {
                            self.session_make_available(sequence_number);
                        } else {
                            self.log.available_mut(sub_queue).insert(sequence_number);
                        }
                    }
                    MessageState::Active => {
                        self.log.available_mut(sub_queue).insert(sequence_number);
                    }
                    MessageState::Scheduled => {
                        self.scheduled_count += 1;
                        self.deadlines
                            .insert((activation, Deadline::Activation(sequence_number)));
                    }
                    MessageState::Deferred => {}
                }
            }
        }
        for (record, _) in self.log.outbox().values() {
            self.stored_bytes += record.message.size() as u64;
        }
    }

    /// The whole durable state as change records (a compaction checkpoint): the log's
    /// records, counter, session states and outbox, and the duplicate-detection history.
    pub fn checkpoint(&self) -> Vec<Change> {
        self.log.checkpoint_with(self.duplicates.as_ref())
    }
}
