//! Operations the `$management` node drives: browsing, deferred retrieval, cancelling
//! scheduled messages and renewing locks (rules LCK-1, LCK-4, SCH-2, SCH-4).

use super::{Deadline, EntityState, Lock, MessageState, Record};
use crate::broker::types::{
    EntityError, LockToken, ReceiveMode, SequenceNumber, SubQueue, Timestamp,
};

impl EntityState {
    /// Up to `count` messages with sequence number ≥ `from`, in order, whatever their
    /// state or lock (browse; rule SCH-2 shows scheduled messages here).
    pub fn peek(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        from: SequenceNumber,
        count: usize,
        session_id: Option<&str>,
    ) -> Vec<(Record, Option<Lock>)> {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        self.store(sub_queue)
            .records
            .range_from(from)
            .filter(|(_, record)| {
                session_id.is_none() || record.message.system().session_id() == session_id
            })
            .take(count)
            .map(|(number, record)| (record.clone(), self.lock_of(sub_queue, *number)))
            .collect()
    }

    /// Takes deferred messages by sequence number (rule LCK-4): locked for peek-lock, or
    /// removed for receive-and-delete. Any number that names no deferred message fails the
    /// whole request with `MessageNotFound`.
    pub fn receive_deferred(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
    ) -> Result<Vec<(Record, Option<Lock>)>, EntityError> {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        for sequence_number in sequence_numbers {
            let deferred = matches!(
                self.store(sub_queue).records.get(sequence_number),
                Some(record) if record.state() == MessageState::Deferred
            ) && self.lock_of(sub_queue, *sequence_number).is_none();
            if !deferred {
                return Err(EntityError::MessageNotFound(format!(
                    "Failed to lock one or more specified messages. The message with sequence number {} was not found, is not deferred, or is already locked.",
                    sequence_number.0
                )));
            }
        }
        let mut records = Vec::with_capacity(sequence_numbers.len());
        let mut unique: Vec<SequenceNumber> = Vec::with_capacity(sequence_numbers.len());
        for number in sequence_numbers {
            if !unique.contains(number) {
                unique.push(*number);
            }
        }
        for sequence_number in unique {
            match mode {
                ReceiveMode::PeekLock => {
                    let lock = self.new_lock(now, sub_queue, sequence_number);
                    if self
                        .set_lock(sub_queue, sequence_number, Some(lock))
                        .is_none()
                    {
                        continue;
                    }
                    let Some(record) = self.log.get(sub_queue, sequence_number) else {
                        continue;
                    };
                    records.push((record.clone(), Some(lock)));
                    self.arm_lock(lock.until, lock.token);
                }
                ReceiveMode::ReceiveAndDelete => {
                    if let Some(record) = self.log.remove(sub_queue, sequence_number) {
                        self.stored_bytes -= record.message.size() as u64;
                        self.forget_deadlines(&record);
                        records.push((record, None));
                    }
                }
            }
        }
        Ok(records)
    }

    /// Cancels scheduled messages (rule SCH-4). Unknown or already activated numbers are
    /// ignored: activation wins a race with cancellation.
    pub fn cancel_scheduled(&mut self, now: Timestamp, sequence_numbers: &[SequenceNumber]) {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        for sequence_number in sequence_numbers {
            let scheduled = matches!(
                self.log.get(SubQueue::Main, *sequence_number),
                Some(record) if record.state() == MessageState::Scheduled
            );
            if scheduled && let Some(record) = self.log.remove(SubQueue::Main, *sequence_number) {
                if let Some(at) = record.message.extras().scheduled_enqueue_time {
                    self.deadlines
                        .remove(&(at, Deadline::Activation(*sequence_number)));
                }
                self.stored_bytes -= record.message.size() as u64;
                self.scheduled_count -= 1;
            }
        }
    }

    /// Extends a lock by the lock duration (rule LCK-1) and returns the new expiry.
    pub fn renew_lock(
        &mut self,
        now: Timestamp,
        token: LockToken,
    ) -> Result<Timestamp, EntityError> {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        let (sub_queue, sequence_number) = self.locked(now, token).ok_or(EntityError::LockLost)?;
        let until = now.plus(self.settings.lock_duration);
        if let Some(Some(previous)) =
            self.set_lock(sub_queue, sequence_number, Some(Lock { token, until }))
        {
            self.disarm_lock(previous.until, previous.token);
        }
        self.arm_lock(until, token);
        Ok(until)
    }
}

impl EntityState {
    /// Takes messages by sequence number, whatever their place in the queue (the explorer's
    /// single-message actions): active or deferred, unlocked messages are locked
    /// (peek-lock, to be settled with the lock) or removed (receive-and-delete). A number
    /// that names no such message fails the whole request with `MessageNotFound`.
    pub fn take_by_sequence(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        sequence_numbers: &[SequenceNumber],
        mode: ReceiveMode,
    ) -> Result<Vec<(Record, Option<Lock>)>, EntityError> {
        self.touch(now);
        self.advance(now);
        for sequence_number in sequence_numbers {
            let takeable = matches!(
                self.store(sub_queue).records.get(sequence_number),
                Some(record) if matches!(record.state(), MessageState::Active | MessageState::Deferred)
            ) && self.lock_of(sub_queue, *sequence_number).is_none();
            if !takeable {
                return Err(EntityError::MessageNotFound(format!(
                    "The message with sequence number {} was not found, is scheduled, or is locked.",
                    sequence_number.0
                )));
            }
        }
        for sequence_number in sequence_numbers {
            self.log.available_mut(sub_queue).remove(sequence_number);
            if sub_queue == SubQueue::Main {
                self.session_remove_available(*sequence_number);
            }
        }
        let mut unique = sequence_numbers.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let mut taken = Vec::with_capacity(unique.len());
        for sequence_number in unique {
            match mode {
                ReceiveMode::PeekLock => {
                    let lock = self.new_lock(now, sub_queue, sequence_number);
                    if self
                        .set_lock(sub_queue, sequence_number, Some(lock))
                        .is_none()
                    {
                        continue;
                    }
                    let Some(record) = self.log.get(sub_queue, sequence_number) else {
                        continue;
                    };
                    taken.push((record.clone(), Some(lock)));
                    self.arm_lock(lock.until, lock.token);
                }
                ReceiveMode::ReceiveAndDelete => {
                    if let Some(record) = self.log.remove(sub_queue, sequence_number) {
                        self.stored_bytes -= record.message.size() as u64;
                        self.forget_deadlines(&record);
                        taken.push((record, None));
                    }
                }
            }
        }
        Ok(taken)
    }

    /// Deletes up to `max` unlocked messages of `sub_queue` enqueued before `before` (all
    /// when `None`), of one session when `session_id` is given, oldest first: active,
    /// deferred and scheduled ones. Locked messages stay with their receivers. Returns how
    /// many were deleted.
    pub fn purge(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        before: Option<Timestamp>,
        session_id: Option<&str>,
        max: usize,
    ) -> usize {
        self.touch(now);
        self.advance(now);
        let doomed: Vec<SequenceNumber> = self
            .store(sub_queue)
            .records
            .iter()
            .filter(|(number, record)| {
                before.is_none_or(|before| record.enqueued_time() < before)
                    && session_id.is_none_or(|id| record.message.system().session_id() == Some(id))
                    && self.lock_of(sub_queue, **number).is_none()
            })
            .map(|(number, _)| *number)
            .take(max)
            .collect();
        for sequence_number in &doomed {
            if sub_queue == SubQueue::Main {
                self.session_remove_available(*sequence_number);
            }
            let Some(record) = self.log.remove(sub_queue, *sequence_number) else {
                continue;
            };
            self.stored_bytes -= record.message.size() as u64;
            if record.state() == MessageState::Scheduled {
                if let Some(at) = record.message.extras().scheduled_enqueue_time {
                    self.deadlines
                        .remove(&(at, Deadline::Activation(*sequence_number)));
                }
                self.scheduled_count -= 1;
            } else {
                self.forget_deadlines(&record);
            }
        }
        doomed.len()
    }
}
