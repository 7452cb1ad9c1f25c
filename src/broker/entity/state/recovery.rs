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
        state.log.replay(changes, state.duplicates.as_mut(), |_| {});
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
                        record.state(),
                        record.expires_at(),
                        record
                            .message
                            .extras()
                            .scheduled_enqueue_time
                            .unwrap_or(record.enqueued_time()),
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

impl EntityState {
    /// Takes back messages whose send could not be made durable (the sender was refused):
    /// they leave the entity as if never sent, so no receiver gets a message its sender was
    /// told failed. Their sequence numbers stay used (rule SEQ-1).
    pub fn withdraw(&mut self, sequence_numbers: &[SequenceNumber]) {
        for &number in sequence_numbers {
            for sub_queue in [SubQueue::Main, SubQueue::DeadLetter] {
                if self.log.get(sub_queue, number).is_none() {
                    continue;
                }
                if sub_queue == SubQueue::Main {
                    self.session_remove_available(number);
                }
                if let Some(lock) = self.held.remove(&(sub_queue, number)) {
                    self.disarm_lock(lock.until, lock.token);
                }
                let Some(record) = self.log.remove(sub_queue, number) else {
                    continue;
                };
                self.stored_bytes -= record.message.size() as u64;
                self.forget_deadlines(&record);
                if record.state() == MessageState::Scheduled {
                    self.scheduled_count -= 1;
                    if let Some(at) = record.message.extras().scheduled_enqueue_time {
                        self.deadlines.remove(&(at, Deadline::Activation(number)));
                    }
                }
            }
            if let Some((record, _)) = self.log.take_from_outbox(number) {
                self.stored_bytes -= record.message.size() as u64;
            }
        }
        // The withdrawal itself is not news for the log: it never had these messages.
        let _ = self.log.take_changes();
    }
}
