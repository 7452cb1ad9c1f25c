//! Receivers, credit and dispatch: which receiver gets which available message, within its
//! credit, round-robin, touching only receivers that can take a message.

use super::*;

/// How many cache lines of the next message to load ahead: its head and about 1 KiB of its
/// bytes (what a typical message holds; the CPU's own prefetcher follows a longer copy once
/// it starts). Past a short message's end the lines are its neighbours', often the next
/// messages of the same backlog. Measured (issue 16, interleaved runs of the broker's CPU a
/// message): ten queues × ten pairs 2.22 → 1.98 µs (their receivers fall behind and the
/// queues hold thousands), a 500k backlog drained by one receiver 1.18–1.20 → 0.90–1.02 µs,
/// one pair without a backlog unchanged; 2 and 4 lines gained about half and two thirds, 24
/// nothing more (ten queues 0.98×, within the runs' noise).
const PREFETCH_LINES: usize = 16;

impl EntityState {
    /// Attaches a receiver with no credit.
    pub fn attach_receiver(
        &mut self,
        now: Timestamp,
        receiver: ReceiverId,
        sub_queue: SubQueue,
        mode: ReceiveMode,
    ) {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        self.receivers.insert(
            receiver,
            ReceiverState {
                sub_queue,
                mode,
                delivered: 0,
                credit: 0,
                in_ready: false,
                drain: false,
                session: None,
                session_wait_until: None,
            },
        );
    }

    /// Detaches a receiver. Its locks stay valid until they expire, as in Service Bus,
    /// so messages can still be settled through `$management`.
    pub fn detach_receiver(&mut self, now: Timestamp, receiver: ReceiverId) {
        self.touch(now);
        self.waiters.retain(|waiting| *waiting != receiver);
        if let Some(session_id) = self
            .receivers
            .get(&receiver)
            .and_then(|state| state.session.clone())
            && self
                .sessions
                .get(&session_id)
                .is_some_and(|entry| entry.holder == Some(receiver))
        {
            self.release_session(now, &session_id);
        }
        self.receivers.remove(&receiver);
    }

    /// Marks where the deliveries to `receiver` made so far end (see
    /// [`crate::broker::entity::Command::Fence`]).
    pub fn fence(&mut self, receiver: ReceiverId) {
        self.effects.push(Effect::Fenced { receiver });
    }

    /// Sets a receiver's credit from the client's `flow`: `link_credit` counted from the
    /// client's `delivery_count` (AMQP 1.0 §2.6.7). Deliveries the client has not seen yet
    /// (ours is ahead of its count) use up part of that credit; a missing count means the
    /// client is up to date. With `drain`, whatever credit is left after dispatch is
    /// consumed and [`Effect::Drained`] is emitted.
    pub fn grant_credit(
        &mut self,
        now: Timestamp,
        receiver: ReceiverId,
        delivery_count: Option<u32>,
        link_credit: u32,
        drain: bool,
    ) {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        let requires_session = self.settings.requires_session;
        if let Some(state) = self.receivers.get_mut(&receiver) {
            let in_flight = delivery_count
                .map(|count| state.delivered.wrapping_sub(count))
                .filter(|in_flight| (*in_flight as i32) > 0)
                .unwrap_or(0);
            state.credit = link_credit.saturating_sub(in_flight);
            state.drain = drain;
            if drain {
                self.draining.push(receiver);
            }
            if let Some(session_id) = state.session.clone() {
                self.dirty_sessions.insert(session_id);
            } else if state.credit > 0
                && !state.in_ready
                && !(state.sub_queue == SubQueue::Main && requires_session)
            {
                state.in_ready = true;
                self.ready_receivers[ready_index(state.sub_queue)].push_back(receiver);
            }
        }
        self.dispatch(now);
    }

    /// Sets a receiver's credit as an absolute limit on its delivery count (the form the
    /// core tests use): credit = `credit_limit` − deliveries so far, or none if that is
    /// not positive.
    pub fn set_credit(
        &mut self,
        now: Timestamp,
        receiver: ReceiverId,
        credit_limit: u32,
        drain: bool,
    ) {
        let delivered = self
            .receivers
            .get(&receiver)
            .map_or(0, |state| state.delivered);
        let credit = credit_limit.wrapping_sub(delivered);
        let credit = if (credit as i32) > 0 { credit } else { 0 };
        self.grant_credit(now, receiver, Some(delivered), credit, drain);
    }

    /// Hands available messages to receivers with credit, round-robin, in sequence order.
    ///
    /// Session receivers are not in `receiver_order`: they are served through
    /// `dirty_sessions` (sessions whose holder got credit or that got messages), so the cost
    /// of an operation does not grow with the number of session receivers.
    pub(super) fn dispatch(&mut self, now: Timestamp) {
        // Receive-disabled: messages wait until the status allows receiving again; drains
        // are still answered.
        if self.settings.status.allows_receive() {
            self.deliver_available(now);
        }
        self.complete_drains();
    }

    /// Hands available messages to receivers with credit.
    fn deliver_available(&mut self, now: Timestamp) {
        self.assign_waiting_sessions(now);
        for session_id in std::mem::take(&mut self.dirty_sessions) {
            let holder = self
                .sessions
                .get(&session_id)
                .and_then(|entry| entry.holder);
            let Some(receiver) = holder else { continue };
            while let Some(state) = self.receivers.get(&receiver) {
                let mode = state.mode;
                if !state.has_credit()
                    || state.session.as_deref() != Some(session_id.as_str())
                    || !self.deliver_from_session(now, receiver, &session_id, mode)
                {
                    break;
                }
            }
        }
        for sub_queue in [
            SubQueue::Main,
            SubQueue::DeadLetter,
            SubQueue::TransferDeadLetter,
        ] {
            self.dispatch_round_robin(now, sub_queue);
        }
    }

    /// Answers the drains asked for: the remaining credit is consumed.
    fn complete_drains(&mut self) {
        for receiver in std::mem::take(&mut self.draining) {
            let Some(state) = self.receivers.get_mut(&receiver) else {
                continue;
            };
            if state.drain {
                state.drain = false;
                // Consume the remaining credit; never move the delivery count backwards
                // (the client's view of it may lag deliveries in flight).
                state.delivered = state.delivered.wrapping_add(state.credit);
                state.credit = 0;
                self.effects.push(Effect::Drained {
                    receiver,
                    delivery_count: state.delivered,
                });
            }
        }
    }

    /// Serves the ready receivers of one sub-queue in turn while it has available
    /// messages. Each step delivers one message or ends the loop, so the cost is the
    /// number of deliveries, not the number of receivers.
    pub(super) fn dispatch_round_robin(&mut self, now: Timestamp, sub_queue: SubQueue) {
        let index = ready_index(sub_queue);
        while !self.store(sub_queue).available.is_empty() {
            let Some(receiver) = self.ready_receivers[index].pop_front() else {
                return;
            };
            self.dispatch_visits += 1;
            let Some(state) = self.receivers.get_mut(&receiver) else {
                continue; // detached
            };
            state.in_ready = false;
            if !state.has_credit() || state.session.is_some() || state.sub_queue != sub_queue {
                continue;
            }
            let mode = state.mode;
            let delivered = self.deliver_next(now, receiver, sub_queue, mode);
            let Some(state) = self.receivers.get_mut(&receiver) else {
                continue;
            };
            if state.has_credit() {
                state.in_ready = true;
                if delivered {
                    self.ready_receivers[index].push_back(receiver);
                } else {
                    // Nothing deliverable is left: it keeps its turn.
                    self.ready_receivers[index].push_front(receiver);
                    return;
                }
            }
        }
    }

    /// Receivers dispatch has looked at since the entity started.
    pub fn dispatch_visits(&self) -> u64 {
        self.dispatch_visits
    }

    /// Delivers the next message of a locked session (rules SES-1, TTL-9).
    pub(super) fn deliver_from_session(
        &mut self,
        now: Timestamp,
        receiver: ReceiverId,
        session_id: &str,
        mode: ReceiveMode,
    ) -> bool {
        let Some(sequence_number) = self
            .sessions
            .get(session_id)
            .and_then(|entry| entry.available.first())
        else {
            return false;
        };
        let expired = matches!(
            self.log.get(SubQueue::Main, sequence_number),
            Some(record) if record.expires_at().is_some_and(|at| at <= now)
        );
        if expired {
            self.expire_session(now, session_id);
            return true;
        }
        self.session_remove_available(sequence_number);
        self.deliver_record(now, receiver, SubQueue::Main, mode, sequence_number)
    }

    /// Delivers the first available, unexpired message of `sub_queue` to `receiver`.
    pub(super) fn deliver_next(
        &mut self,
        now: Timestamp,
        receiver: ReceiverId,
        sub_queue: SubQueue,
        mode: ReceiveMode,
    ) -> bool {
        loop {
            let Some(sequence_number) = self.log.available_mut(sub_queue).pop_first() else {
                return false;
            };
            // The message after this one starts loading while this one is delivered: from a
            // backlog it was stored long ago and sits in no cache, and the entity and then
            // the connection would each wait for it (issue 16: ten queues' deliveries cost
            // 100+ ns a message more than one queue's, most of it there).
            if let Some(next) = self.store(sub_queue).available.first()
                && let Some(record) = self.log.get(sub_queue, next)
            {
                record.message.prefetch(PREFETCH_LINES);
            }
            let expired = sub_queue == SubQueue::Main
                && matches!(
                    self.log.get(SubQueue::Main, sequence_number),
                    Some(record) if record.expires_at().is_some_and(|at| at <= now)
                );
            if expired {
                // Rule TTL-4: an expired message is never delivered.
                self.expire(now, sequence_number);
                continue;
            }
            if self.deliver_record(now, receiver, sub_queue, mode, sequence_number) {
                return true;
            }
        }
    }

    /// Hands one record to a receiver: locks it (peek-lock) or removes it.
    pub(super) fn deliver_record(
        &mut self,
        now: Timestamp,
        receiver: ReceiverId,
        sub_queue: SubQueue,
        mode: ReceiveMode,
        sequence_number: SequenceNumber,
    ) -> bool {
        {
            let lock = match mode {
                ReceiveMode::PeekLock => Some(self.new_lock(now, sub_queue, sequence_number)),
                ReceiveMode::ReceiveAndDelete => None,
            };
            let record = match mode {
                ReceiveMode::PeekLock => {
                    // One lookup of the record (set_lock would make a second).
                    let Some(record) = self.log.get(sub_queue, sequence_number) else {
                        return false;
                    };
                    let record = record.clone();
                    if let Some(lock) = lock {
                        self.held.insert((sub_queue, sequence_number), lock);
                    }
                    record
                }
                ReceiveMode::ReceiveAndDelete => {
                    let Some(record) = self.log.remove(sub_queue, sequence_number) else {
                        return false;
                    };
                    self.stored_bytes -= record.message.size() as u64;
                    self.forget_deadlines(&record);
                    record
                }
            };
            if let Some(lock) = lock {
                self.arm_lock(lock.until, lock.token);
            }
            if let Some(state) = self.receivers.get_mut(&receiver) {
                state.delivered = state.delivered.wrapping_add(1);
                state.credit = state.credit.saturating_sub(1);
            }
            self.totals.delivered += 1;
            self.effects.push(Effect::Deliver(Delivery {
                sub_queue,
                receiver: Some(receiver),
                record,
                lock,
            }));
            true
        }
    }
}
