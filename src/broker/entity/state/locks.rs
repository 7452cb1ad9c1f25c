//! Peek-locks and settlement (rules LCK-1..5, DLQ-4): locks live here, beside the log, and
//! are never recorded; settling, abandoning and lock expiry change the log.

use super::*;

impl EntityState {
    /// The lock held on a record, if any.
    pub fn lock_of(&self, sub_queue: SubQueue, sequence_number: SequenceNumber) -> Option<Lock> {
        self.held.get(&(sub_queue, sequence_number)).copied()
    }

    /// Sets or clears the lock on a stored record; `None` when there is no such record,
    /// else the previous lock. Locks are volatile: nothing is recorded in the log.
    pub(super) fn set_lock(
        &mut self,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
        lock: Option<Lock>,
    ) -> Option<Option<Lock>> {
        self.log.get(sub_queue, sequence_number)?;
        Some(match lock {
            Some(lock) => self.held.insert((sub_queue, sequence_number), lock),
            None => self.held.remove(&(sub_queue, sequence_number)),
        })
    }

    /// Arms the lapse of the lock `token` at `until`: at the back of the lock queue while
    /// that keeps it in time order, else in the general deadline set. When most of the
    /// queue is stale (settled or renewed locks behind one still held), it is rebuilt from
    /// what is still due, so it never holds more than twice the locks held (plus a little).
    pub(super) fn arm_lock(&mut self, until: Timestamp, token: LockToken) {
        if self
            .lock_deadlines
            .back()
            .is_some_and(|&(last, _)| last > until)
        {
            self.deadlines.insert((until, Deadline::Lock(token)));
            return;
        }
        self.lock_deadlines.push_back((until, token));
        if self.lock_deadlines.len() > 2 * self.held.len() + 64 {
            let held = &self.held;
            self.lock_deadlines.retain(|&(at, token)| {
                locked_record(token)
                    .and_then(|place| held.get(&place))
                    .is_some_and(|lock| lock.token == token && lock.until == at)
            });
        }
    }

    /// Disarms the lapse of a lock that was settled, released or renewed: out of the
    /// deadline set, and off the front of the lock queue when it is there. Other stale
    /// entries at the front go when the next deadline is asked for, once a turn (issue 16:
    /// looking up the next lock after every settlement cost 3 % of the CPU).
    pub(super) fn disarm_lock(&mut self, until: Timestamp, token: LockToken) {
        if !self.deadlines.is_empty() {
            self.deadlines.remove(&(until, Deadline::Lock(token)));
        }
        // Locks settled in the order they were taken are at the front: known stale
        // without looking them up.
        if self.lock_deadlines.front() == Some(&(until, token)) {
            self.lock_deadlines.pop_front();
        }
    }

    /// Drops stale entries (settled, released or renewed locks) off the front of the lock
    /// queue, so the timer is never set for one.
    pub(super) fn trim_lock_deadlines(&mut self) {
        while let Some(&(at, token)) = self.lock_deadlines.front() {
            let current = locked_record(token)
                .and_then(|place| self.held.get(&place))
                .is_some_and(|lock| lock.token == token && lock.until == at);
            if current {
                break;
            }
            self.lock_deadlines.pop_front();
        }
    }

    /// Extends a held lock to `until`; false when the record holds none.
    pub(super) fn extend_lock(
        &mut self,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
        until: Timestamp,
    ) -> bool {
        match self.held.get_mut(&(sub_queue, sequence_number)) {
            Some(lock) => {
                lock.until = until;
                true
            }
            None => false,
        }
    }

    /// A new lock on the record `sequence_number` of `sub_queue`. Its token is unguessable
    /// in its first half (a mix of the entity's seed and a counter) and says which record it
    /// locks in its second (the sub-queue, then the sequence number's low 56 bits: sequence
    /// numbers stay far below 2^56, partitioned ones included), so settling looks the lock
    /// up directly; a token only counts when it equals the record's current lock.
    pub(super) fn new_lock(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
    ) -> Lock {
        self.tokens_issued += 1;
        let high = mix(self.token_seed ^ self.tokens_issued.rotate_left(17));
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&sequence_number.0.to_be_bytes());
        // Mark it as a version-4 style GUID so tools display it as one; the variant bits
        // (10) lead byte 8 and the sub-queue fills its low bits.
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = 0x80 | sub_queue_code(sub_queue);
        Lock {
            token: LockToken(bytes),
            until: now.plus(self.settings.lock_duration),
        }
    }

    /// Finds the locked record for `token`, if the lock is still held at `now`.
    pub(super) fn locked(
        &self,
        now: Timestamp,
        token: LockToken,
    ) -> Option<(SubQueue, SequenceNumber)> {
        let (sub_queue, sequence_number) = locked_record(token)?;
        match self.lock_of(sub_queue, sequence_number) {
            Some(lock) if lock.token == token && lock.until > now => {
                Some((sub_queue, sequence_number))
            }
            _ => None,
        }
    }

    /// Settles a locked message (rules LCK-1..4, DLQ-4). An unknown or expired lock is
    /// `LockLost` (rule LCK-3).
    pub fn settle(
        &mut self,
        now: Timestamp,
        token: LockToken,
        settlement: Settlement,
    ) -> Result<(), EntityError> {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        self.settle_one(now, token, settlement)?;
        self.dispatch(now);
        Ok(())
    }

    /// Settles the locks `tokens` alike, in order, as one client disposition naming them
    /// all (issue 16: one command per settled message, each advancing the entity's clock
    /// and dispatching twice). The same as settling each in turn at `now`, except that
    /// messages made available again (release, abandon) are handed out once all are
    /// settled. Returns how many were not settled (their lock lost, expired or never held:
    /// the outcome [`Self::settle`] reports for each).
    pub fn settle_all(
        &mut self,
        now: Timestamp,
        tokens: &[LockToken],
        settlement: &Settlement,
    ) -> usize {
        self.touch(now);
        self.advance(now);
        let refused = tokens
            .iter()
            .filter(|&&token| self.settle_one(now, token, settlement.clone()).is_err())
            .count();
        self.dispatch(now);
        refused
    }

    /// [`Self::settle`]'s work on one lock, without the clock's advance before it and the
    /// dispatch after it.
    fn settle_one(
        &mut self,
        now: Timestamp,
        token: LockToken,
        settlement: Settlement,
    ) -> Result<(), EntityError> {
        let lost = || {
            if self.settings.requires_session {
                // In a session entity message locks live and die with the session lock.
                EntityError::SessionLockLost(
                    "The session lock was lost; accept the session again.".to_string(),
                )
            } else {
                EntityError::LockLost
            }
        };
        let (sub_queue, sequence_number) = self.locked(now, token).ok_or_else(lost)?;
        if sub_queue == SubQueue::Main && !self.session_lock_held(now, sequence_number) {
            return Err(EntityError::SessionLockLost(
                "The session lock was lost; accept the session again.".to_string(),
            ));
        }
        let Some(previous) = self.set_lock(sub_queue, sequence_number, None) else {
            return Err(EntityError::LockLost);
        };
        if let Some(lock) = previous {
            self.disarm_lock(lock.until, lock.token);
        }
        match settlement {
            Settlement::Complete => {
                self.totals.completed += 1;
                if let Some(record) = self.log.remove(sub_queue, sequence_number) {
                    self.stored_bytes -= record.message.size() as u64;
                    self.forget_deadlines(&record);
                }
            }
            Settlement::Release => self.make_available(now, sub_queue, sequence_number),
            Settlement::Abandon { properties } => {
                self.totals.abandoned += 1;
                // One change: the properties and the counted attempt together.
                self.count_failed_delivery_with(now, sub_queue, sequence_number, properties);
            }
            Settlement::Defer { properties } => {
                self.update_merging(sub_queue, sequence_number, properties, |record| {
                    record.set_state(MessageState::Deferred);
                });
            }
            Settlement::DeadLetter {
                reason,
                description,
                properties,
            } => {
                self.dead_letter_with(sub_queue, sequence_number, reason, description, properties);
            }
        }
        Ok(())
    }

    pub(super) fn expire_lock(&mut self, now: Timestamp, token: LockToken) {
        let Some((sub_queue, sequence_number)) = locked_record(token) else {
            return;
        };
        let lapsed = matches!(
            self.lock_of(sub_queue, sequence_number),
            Some(lock) if lock.token == token && lock.until <= now
        );
        if !lapsed {
            return; // renewed: a later deadline is pending
        }
        self.set_lock(sub_queue, sequence_number, None);
        // Rule LCK-2: lock expiry counts as a failed delivery.
        self.count_failed_delivery(now, sub_queue, sequence_number);
    }

    /// Abandon or lock expiry: count the attempt, dead-letter at the maximum, else return
    /// the message (expiring it first if its TTL passed while locked, rule TTL-5).
    pub(super) fn count_failed_delivery(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
    ) {
        self.count_failed_delivery_with(now, sub_queue, sequence_number, Vec::new());
    }

    /// [`Self::count_failed_delivery`], merging `properties` in the same change (abandon).
    pub(super) fn count_failed_delivery_with(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
        properties: PropertyChanges,
    ) {
        let max = self.settings.max_delivery_count;
        let mut delivery_count = 0;
        let updated = self.update_merging(sub_queue, sequence_number, properties, |record| {
            record.set_delivery_count(record.delivery_count().saturating_add(1));
            delivery_count = record.delivery_count();
        });
        if !updated {
            return;
        }
        if delivery_count >= max && sub_queue == SubQueue::Main {
            let description =
                format!("Message could not be consumed after {max} delivery attempts.");
            self.dead_letter(
                sub_queue,
                sequence_number,
                Some(MAX_DELIVERY_COUNT_EXCEEDED.to_string()),
                Some(description),
            );
        } else {
            self.make_available(now, sub_queue, sequence_number);
        }
    }

    pub(super) fn make_available(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
    ) {
        let expired = sub_queue == SubQueue::Main
            && matches!(
                self.log.get(SubQueue::Main, sequence_number),
                Some(record) if record.expires_at().is_some_and(|at| at <= now)
            );
        let deferred = matches!(
            self.store(sub_queue).records.get(&sequence_number),
            Some(record) if record.state() == MessageState::Deferred
        );
        if deferred {
            // Rule TTL-7, LCK-4: a deferred message stays deferred (and never expires).
        } else if expired {
            self.expire(now, sequence_number);
        } else {
            if sub_queue == SubQueue::Main && self.settings.requires_session {
                self.session_make_available(sequence_number);
            } else {
                self.log.available_mut(sub_queue).insert(sequence_number);
            }
        }
    }
}

/// The sub-queue's code in a lock token.
fn sub_queue_code(sub_queue: SubQueue) -> u8 {
    match sub_queue {
        SubQueue::Main => 0,
        SubQueue::DeadLetter => 1,
        SubQueue::TransferDeadLetter => 2,
    }
}

/// The record a lock token names (see [`EntityState::new_lock`]); `None` for a token this
/// broker cannot have issued.
fn locked_record(token: LockToken) -> Option<(SubQueue, SequenceNumber)> {
    let sub_queue = match token.0[8] {
        0x80 => SubQueue::Main,
        0x81 => SubQueue::DeadLetter,
        0x82 => SubQueue::TransferDeadLetter,
        _ => return None,
    };
    let mut number = [0u8; 8];
    number[1..].copy_from_slice(&token.0[9..]);
    Some((sub_queue, SequenceNumber(i64::from_be_bytes(number))))
}
