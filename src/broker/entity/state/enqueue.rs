//! Accepting messages: sequence numbers, enqueued times, TTL, scheduled enqueue times and
//! duplicate detection at the door, then storing or scheduling each message (rules SEQ-1,
//! SEQ-3, TTL-1, TTL-2, SCH-1), and a scheduled message's activation.

use super::*;

impl EntityState {
    /// Accepts messages from a sender (rules SEQ-1, SEQ-3, TTL-1, TTL-2, SCH-1).
    /// All or none are accepted.
    pub fn enqueue(
        &mut self,
        now: Timestamp,
        messages: impl Into<crate::broker::entity::Messages>,
    ) -> Result<crate::broker::entity::SequenceNumbers, EntityError> {
        self.enqueue_numbered(now, messages, &[])
    }

    /// [`Self::enqueue`] of a topic's copies: each message takes the sequence number and
    /// enqueued time the topic gave it, in `numbers` (in order; none: the entity numbers
    /// it).
    pub fn enqueue_numbered(
        &mut self,
        now: Timestamp,
        messages: impl Into<crate::broker::entity::Messages>,
        numbers: &[(SequenceNumber, Timestamp)],
    ) -> Result<crate::broker::entity::SequenceNumbers, EntityError> {
        let messages = messages.into();
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        self.admit(&messages, 0)?;
        let mut sequence_numbers =
            crate::broker::entity::SequenceNumbers::with_capacity(messages.len());
        for (index, message) in messages.into_iter().enumerate() {
            let given = numbers.get(index).copied();
            // The id is read from the properties section only for the detector.
            if let Some(detector) = &mut self.duplicates
                && let Some(id) = message.system().message_id()
                && let Some(original) = detector.check(now, id)
            {
                // Accepted but not enqueued again.
                sequence_numbers.push(original);
                continue;
            }
            self.stored_bytes += message.size() as u64;
            // Kept for the detector only: a copy of the id per message costs an allocation.
            let message_id = self
                .duplicates
                .as_ref()
                .and_then(|_| message.system().message_id().map(str::to_string));
            if message.hop_count() > 0
                && self.settings.requires_session
                && message.system().session_id().is_none()
            {
                // Forwarded or published session-less into a session entity (rule SES-1).
                self.stored_bytes -= message.size() as u64;
                self.enqueue_dead_lettered(
                    now,
                    message,
                    SESSION_ID_IS_NULL.to_string(),
                    "The message has no session id and the entity requires sessions.".to_string(),
                );
                continue;
            }
            self.totals.sent += 1;
            let sequence_number = match message.extras().scheduled_enqueue_time {
                Some(at) if at > now => self.insert_scheduled(now, message, at, given),
                _ => self.append(now, message, 0, given),
            };
            if let (Some(detector), Some(id)) = (&mut self.duplicates, message_id) {
                detector.remember(now, &id, sequence_number);
                self.log.note(|| Change::Remembered {
                    message_id: id,
                    sequence_number,
                    at: now,
                });
            }
            sequence_numbers.push(sequence_number);
        }
        self.dispatch(now);
        Ok(sequence_numbers)
    }

    /// Whether `messages` (plus `also` bytes more) may be stored: the entity's size quota
    /// and, for session entities, a session id on every message sent by a client.
    pub(super) fn admit(&self, messages: &[Message], also: u64) -> Result<(), EntityError> {
        let incoming: u64 = also
            + messages
                .iter()
                .map(|message| message.size() as u64)
                .sum::<u64>();
        if self.stored_bytes + incoming > self.settings.max_size_bytes {
            return Err(EntityError::QuotaExceeded {
                entity: self.settings.path.clone(),
                size: self.stored_bytes,
                limit: self.settings.max_size_bytes,
            });
        }
        if self.settings.requires_session
            && messages
                .iter()
                .any(|message| message.system().session_id().is_none() && message.hop_count() == 0)
        {
            return Err(EntityError::NotAllowed(format!(
                "The SessionId was not set on a message, and it cannot be sent to the entity '{}'. Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.",
                self.settings.path
            )));
        }
        Ok(())
    }

    pub(super) fn allocate_sequence_number(&mut self) -> SequenceNumber {
        self.log.allocate()
    }

    /// The sequence number and enqueued time of an arriving message: the topic's when it
    /// comes from one (`given`, or a dead-lettered copy's rare fields; the same on every
    /// subscription), else the entity's next number and `now`.
    pub(super) fn arrival_number(
        &mut self,
        now: Timestamp,
        message: &Message,
        given: Option<(SequenceNumber, Timestamp)>,
    ) -> (SequenceNumber, Timestamp) {
        if let Some((given, at)) = given.or(message.extras().topic_sequence)
            && let Some(number) = self.log.allocate_given(given)
        {
            return (number, at);
        }
        let partition = self.partitioner.partition(message);
        (self.log.allocate_in(partition), now)
    }

    pub(super) fn effective_time_to_live(&self, message: &Message) -> Option<Duration> {
        match (
            message.header().time_to_live,
            self.settings.default_message_time_to_live,
        ) {
            (Some(own), Some(ceiling)) => Some(own.min(ceiling)),
            (own, ceiling) => own.or(ceiling),
        }
    }

    /// Appends an active message at the tail of the main queue.
    pub(super) fn append(
        &mut self,
        now: Timestamp,
        message: Message,
        delivery_count: u32,
        given: Option<(SequenceNumber, Timestamp)>,
    ) -> SequenceNumber {
        let (sequence_number, now) = self.arrival_number(now, &message, given);
        if self.settings.forward_to.is_some() {
            self.forward(now, message, sequence_number);
            return sequence_number;
        }
        let mut record = self.arrival_record(message, sequence_number, now);
        record.set_delivery_count(delivery_count);
        record.set_expires_at(record.time_to_live().map(|ttl| now.plus(ttl)));
        if let Some(at) = record.expires_at() {
            self.deadlines
                .insert((at, Deadline::Expiry(sequence_number)));
        }
        self.log.insert(SubQueue::Main, record);
        if self.settings.requires_session {
            self.session_make_available(sequence_number);
        } else {
            self.log
                .available_mut(SubQueue::Main)
                .insert(sequence_number);
        }
        sequence_number
    }

    /// A fresh active record for an arriving message: its effective TTL (rule TTL-2), no
    /// expiry yet, no deliveries.
    pub(super) fn arrival_record(
        &self,
        message: Message,
        sequence_number: SequenceNumber,
        now: Timestamp,
    ) -> Record {
        let time_to_live = self.effective_time_to_live(&message);
        Record::new(message, sequence_number, now, time_to_live)
    }

    /// Changes a stored record in one logged change, merging `properties` into its message
    /// first and counting the bytes they add. Whether the record was there.
    pub(super) fn update_merging(
        &mut self,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
        properties: PropertyChanges,
        change: impl FnOnce(&mut Record),
    ) -> bool {
        match self
            .log
            .update_merging(sub_queue, sequence_number, properties, change)
        {
            Some(grown) => {
                self.grow_stored(grown);
                true
            }
            None => false,
        }
    }

    /// Counts `grown` more stored bytes (fewer when negative): a stored message changed size.
    pub(super) fn grow_stored(&mut self, grown: i64) {
        self.stored_bytes = self.stored_bytes.saturating_add_signed(grown);
    }

    pub(super) fn insert_scheduled(
        &mut self,
        now: Timestamp,
        message: Message,
        at: Timestamp,
        given: Option<(SequenceNumber, Timestamp)>,
    ) -> SequenceNumber {
        let (sequence_number, now) = self.arrival_number(now, &message, given);
        self.scheduled_count += 1;
        self.totals.scheduled += 1;
        self.deadlines
            .insert((at, Deadline::Activation(sequence_number)));
        let mut record = self.arrival_record(message, sequence_number, now);
        record.set_state(MessageState::Scheduled);
        self.log.insert(SubQueue::Main, record);
        sequence_number
    }

    /// A scheduled message materialises with a new sequence number (rules SCH-3, TTL-10).
    pub(super) fn activate(
        &mut self,
        now: Timestamp,
        at: Timestamp,
        sequence_number: SequenceNumber,
    ) {
        let scheduled = matches!(
            self.log.get(SubQueue::Main, sequence_number),
            Some(record) if record.state() == MessageState::Scheduled
        );
        if !scheduled {
            return;
        }
        self.scheduled_count -= 1;
        self.touch(now);
        let already_expired = self
            .log
            .get(SubQueue::Main, sequence_number)
            .and_then(|record| record.time_to_live())
            .is_some_and(|ttl| at.plus(ttl) <= now);
        if already_expired {
            // The timer ran so late that the message expired before it could be seen:
            // expire it under its scheduling sequence number (rules TTL-10, TTL-6).
            self.log.update(SubQueue::Main, sequence_number, |record| {
                record.set_state(MessageState::Active);
                record.set_enqueued_time(at);
                record.set_expires_at(record.time_to_live().map(|ttl| at.plus(ttl)));
            });
            self.expire(now, sequence_number);
            return;
        }
        if let Some(record) = self.log.remove(SubQueue::Main, sequence_number) {
            self.append(at, record.message, 0, None);
        }
    }
}
