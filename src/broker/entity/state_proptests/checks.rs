//! The invariant checks of the property test: what the entity shows after a step against
//! what the model expects.

#![allow(clippy::wildcard_imports)]

use super::*;

impl Harness {
    /// Checks the effects of one step in order; returns receive-and-delete deliveries.
    pub(super) fn observe(
        &mut self,
        effects: Vec<Effect>,
        now: Timestamp,
        pending: &Pending,
    ) -> Result<HashMap<u64, Placement>, TestCaseError> {
        let mut delivered: HashMap<u64, Placement> = HashMap::new();
        let mut moved_to_dead_letter: HashSet<u64> = HashSet::new();
        let mut drained = 0;
        let lock_duration = self.lock_duration();
        for effect in effects {
            match effect {
                Effect::Deliver(delivery) => {
                    let receiver = delivery
                        .receiver
                        .ok_or_else(|| TestCaseError::fail("link delivery without receiver"))?;
                    let record = delivery.record;
                    let delivered_lock = delivery.lock;
                    let body = body_of(&record);
                    let Some(model) = self.receivers.get_mut(&receiver.0) else {
                        return Err(TestCaseError::fail(format!(
                            "delivery to detached receiver {receiver:?}"
                        )));
                    };
                    prop_assert!(
                        model.has_credit(),
                        "receiver {} got a delivery beyond its credit (count {}, limit {})",
                        receiver.0,
                        model.delivered,
                        model.limit
                    );
                    model.delivered = model.delivered.wrapping_add(1);
                    let (receiver_queue, mode) = (model.sub_queue, model.mode);
                    prop_assert_eq!(
                        record.state(),
                        MessageState::Active,
                        "rules LCK-4/SCH-2: message {} delivered in state {:?}",
                        body,
                        record.state()
                    );
                    prop_assert!(
                        record.expires_at().is_none_or(|at| at > now),
                        "rule TTL-4: message {body} delivered at {now:?} after expiry {:?}",
                        record.expires_at()
                    );
                    let tracked = self
                        .messages
                        .get(&body)
                        .ok_or_else(|| TestCaseError::fail("unknown message delivered"))?;
                    prop_assert_eq!(
                        tracked.fate,
                        Fate::Stored,
                        "message {} delivered after it left",
                        body
                    );
                    let from = if moved_to_dead_letter.contains(&body) {
                        SubQueue::DeadLetter
                    } else {
                        tracked
                            .last
                            .as_ref()
                            .map_or(SubQueue::Main, |placement| placement.sub_queue)
                    };
                    prop_assert_eq!(from, receiver_queue, "delivered from the wrong sub-queue");
                    self.register(record.sequence_number, body)?;
                    match mode {
                        ReceiveMode::PeekLock => {
                            let lock = delivered_lock
                                .ok_or_else(|| TestCaseError::fail("peek-lock without a lock"))?;
                            prop_assert_eq!(lock.until, now.plus(lock_duration), "rule LCK-1");
                            prop_assert!(
                                !self.held.iter().any(|held| held.body == body),
                                "message {body} delivered while another lock on it is held"
                            );
                            self.held.push(HeldLock {
                                token: lock.token,
                                body,
                                until: lock.until,
                            });
                        }
                        ReceiveMode::ReceiveAndDelete => {
                            prop_assert!(delivered_lock.is_none(), "rule LCK-5: no lock");
                            self.messages.get_mut(&body).expect("tracked").fate =
                                Fate::ReceivedAndDeleted;
                            delivered.insert(
                                body,
                                Placement {
                                    sub_queue: receiver_queue,
                                    record,
                                    lock: None,
                                },
                            );
                        }
                    }
                }
                Effect::Drained {
                    receiver,
                    delivery_count,
                } => {
                    drained += 1;
                    prop_assert_eq!(Some(receiver.0), pending.drain, "unrequested drain");
                    let model = self.receivers.get_mut(&receiver.0).expect("attached");
                    let expected = if model.has_credit() {
                        model.limit
                    } else {
                        model.delivered
                    };
                    prop_assert_eq!(delivery_count, expected, "drain consumes remaining credit");
                    model.delivered = expected;
                }
                Effect::DeadLettered {
                    sequence_number, ..
                } => {
                    let body = match self.owner.get(&sequence_number.0) {
                        Some(body) => *body,
                        None => {
                            let body = pending.arrival.ok_or_else(|| {
                                TestCaseError::fail(format!(
                                    "dead-lettered unknown number {}",
                                    sequence_number.0
                                ))
                            })?;
                            self.register(sequence_number, body)?;
                            body
                        }
                    };
                    moved_to_dead_letter.insert(body);
                }
                other => {
                    return Err(TestCaseError::fail(format!("unexpected {other:?}")));
                }
            }
        }
        prop_assert_eq!(
            drained,
            usize::from(pending.drain.is_some()),
            "one Drained per drain"
        );
        Ok(delivered)
    }

    /// Reads the state back and checks every invariant.
    pub(super) fn check(
        &mut self,
        now: Timestamp,
        before_max: i64,
        expects: Vec<Expect>,
        pending: Pending,
        delivered: HashMap<u64, Placement>,
    ) -> Result<(), TestCaseError> {
        // Read back every record (each message has at most two numbers).
        let bound = 2 * self.next_body as i64 + 2;
        let mut found: HashMap<u64, Placement> = HashMap::new();
        let mut stored = 0;
        for number in 1..=bound {
            for sub_queue in [SubQueue::Main, SubQueue::DeadLetter] {
                let Some(record) = self
                    .state
                    .record(sub_queue, SequenceNumber(number))
                    .cloned()
                else {
                    continue;
                };
                stored += 1;
                prop_assert_eq!(record.sequence_number, SequenceNumber(number));
                let body = body_of(&record);
                self.register(record.sequence_number, body)?;
                let lock = self.state.lock_of(sub_queue, SequenceNumber(number));
                let placement = Placement {
                    sub_queue,
                    record,
                    lock,
                };
                if let Some(other) = found.insert(body, placement) {
                    return Err(TestCaseError::fail(format!(
                        "message {body} stored twice: {:?} {} and {sub_queue:?} {number}",
                        other.sub_queue, other.record.sequence_number.0
                    )));
                }
                prop_assert!(
                    !delivered.contains_key(&body),
                    "message {body} received-and-deleted but kept"
                );
            }
        }
        prop_assert_eq!(
            stored,
            self.state.message_count(SubQueue::Main)
                + self.state.message_count(SubQueue::DeadLetter),
            "records beyond the assigned numbers"
        );
        prop_assert_eq!(self.state.message_count(SubQueue::TransferDeadLetter), 0);

        // Rule SEQ-1: numbers 1, 2, 3 … without gaps.
        let max = self.owner.keys().next_back().copied().unwrap_or(0);
        prop_assert_eq!(
            self.owner.len() as i64,
            max,
            "rule SEQ-1: gap in {:?}",
            self.owner.keys().collect::<Vec<_>>()
        );

        for expect in expects {
            match expect {
                Expect::At {
                    body,
                    sub_queue,
                    state,
                    delivery_count,
                    reason,
                    rule,
                } => {
                    let Some(placement) = found.get(&body).or_else(|| delivered.get(&body)) else {
                        return Err(TestCaseError::fail(format!(
                            "rule {rule}: message {body} should be in {sub_queue:?} but is gone"
                        )));
                    };
                    prop_assert_eq!(
                        placement.sub_queue,
                        sub_queue,
                        "rule {}: message {}",
                        rule,
                        body
                    );
                    prop_assert_eq!(
                        placement.record.state(),
                        state,
                        "rule {}: message {}",
                        rule,
                        body
                    );
                    prop_assert_eq!(
                        placement.record.delivery_count(),
                        delivery_count,
                        "rule {}: message {} delivery count",
                        rule,
                        body
                    );
                    if let Some(reason) = reason {
                        prop_assert!(
                            has_reason(&placement.record, reason),
                            "rule {rule}: reason {reason}"
                        );
                    }
                }
                Expect::Gone { body, fate, rule } => {
                    prop_assert!(
                        !found.contains_key(&body) && !delivered.contains_key(&body),
                        "rule {rule}: message {body} should be gone"
                    );
                    self.messages.get_mut(&body).expect("tracked").fate = fate;
                }
                Expect::Activated {
                    body,
                    scheduling,
                    at,
                } => {
                    prop_assert!(
                        self.state.record(SubQueue::Main, scheduling).is_none(),
                        "rule SCH-3: scheduled record {} still there",
                        scheduling.0
                    );
                    let Some(placement) = found.get(&body).or_else(|| delivered.get(&body)) else {
                        // Rule TTL-10: activation is stamped with the scheduled time, so a
                        // late timer may activate a message whose TTL already passed; with
                        // dead-lettering on expiration off it is dropped at once.
                        let tracked = self.messages.get_mut(&body).expect("tracked");
                        let expired = tracked.effective_ttl.is_some_and(|ttl| at.plus(ttl) <= now);
                        prop_assert!(
                            expired,
                            "rule SCH-3: message {} vanished at activation",
                            body
                        );
                        tracked.fate = Fate::Dropped;
                        continue;
                    };
                    let expired_at_activation = self
                        .messages
                        .get(&body)
                        .and_then(|tracked| tracked.effective_ttl)
                        .is_some_and(|ttl| at.plus(ttl) <= now);
                    if expired_at_activation && placement.sub_queue == SubQueue::DeadLetter {
                        // Rule TTL-10/TTL-6: expired before it could be seen; dead-lettered
                        // under its scheduling number.
                        prop_assert_eq!(placement.record.sequence_number, scheduling);
                        continue;
                    }
                    let number = placement.record.sequence_number;
                    prop_assert!(
                        number.0 > before_max && number.0 < pending.first_sent.unwrap_or(i64::MAX),
                        "rule SCH-3: activation number {} (previous max {before_max})",
                        number.0
                    );
                    prop_assert_eq!(
                        placement.record.delivery_count(),
                        0,
                        "rule SCH-3: as if just enqueued"
                    );
                    let enqueued = placement.record.enqueued_time();
                    prop_assert!(
                        at <= enqueued && enqueued <= now,
                        "rule SCH-3: enqueued {enqueued:?}"
                    );
                    self.messages.get_mut(&body).expect("tracked").activated_at = Some(enqueued);
                }
            }
        }

        // No message is lost: each is stored once, or left by a rule.
        let dead_letter_on_expiration = self.spec.dead_letter_on_expiration;
        for (body, tracked) in self.messages.iter_mut() {
            if tracked.fate != Fate::Stored {
                prop_assert!(
                    !found.contains_key(body),
                    "message {body} is {:?} but stored",
                    tracked.fate
                );
                continue;
            }
            if found.contains_key(body) {
                continue;
            }
            let held = self.held.iter().any(|lock| lock.body == *body);
            let droppable = tracked.last.as_ref().is_some_and(|placement| {
                placement.sub_queue == SubQueue::Main
                    && placement.record.state() == MessageState::Active
                    && placement.record.expires_at().is_some_and(|at| at <= now)
            });
            prop_assert!(
                !dead_letter_on_expiration && droppable && !held,
                "message {body} lost (last seen {:?})",
                tracked.last
            );
            tracked.fate = Fate::Dropped;
        }

        // Per-record rules.
        for (body, placement) in &found {
            let tracked = self.messages.get_mut(body).expect("tracked");
            let record = &placement.record;
            prop_assert!(
                record.delivery_count() >= tracked.highest_delivery_count,
                "message {body}: delivery count went down to {}",
                record.delivery_count()
            );
            tracked.highest_delivery_count = record.delivery_count();
            match placement.sub_queue {
                SubQueue::DeadLetter => {
                    prop_assert_eq!(record.expires_at(), None, "rule TTL-8");
                    prop_assert!(record.state() != MessageState::Scheduled);
                }
                _ => {
                    prop_assert_eq!(record.time_to_live(), tracked.effective_ttl, "rule TTL-2");
                    let enqueued = tracked.activated_at.unwrap_or(tracked.accepted_at);
                    prop_assert_eq!(record.enqueued_time(), enqueued, "rule SEQ-3");
                    if record.state() == MessageState::Scheduled {
                        prop_assert_eq!(record.expires_at(), None, "rule TTL-10");
                    } else {
                        prop_assert_eq!(
                            record.expires_at(),
                            tracked.effective_ttl.map(|ttl| enqueued.plus(ttl)),
                            "rule TTL-1"
                        );
                    }
                    if record.state() == MessageState::Active && placement.lock.is_none() {
                        prop_assert!(
                            record.expires_at().is_none_or(|at| at > now),
                            "rule TTL-6: message {body} unlocked past its expiry at {now:?}"
                        );
                    }
                }
            }
            let model_lock = self.held.iter().find(|lock| lock.body == *body);
            match (placement.lock, model_lock) {
                (None, None) => {}
                (Some(lock), Some(held)) => {
                    prop_assert_eq!(lock.token, held.token, "message {}: lock token", body);
                    prop_assert_eq!(lock.until, held.until, "message {}: locked until", body);
                    prop_assert!(record.state() != MessageState::Scheduled);
                }
                (lock, held) => {
                    return Err(TestCaseError::fail(format!(
                        "message {body}: state lock {lock:?}, model lock {held:?}"
                    )));
                }
            }
        }
        for lock in &self.held {
            prop_assert!(
                found.contains_key(&lock.body),
                "held lock on a message that is gone"
            );
        }

        // Dispatch: a receiver with credit leaves nothing deliverable in its sub-queue.
        for (id, receiver) in &self.receivers {
            if !receiver.has_credit() {
                continue;
            }
            for placement in found.values() {
                let record = &placement.record;
                let deliverable = placement.sub_queue == receiver.sub_queue
                    && record.state() == MessageState::Active
                    && placement.lock.is_none()
                    && record.expires_at().is_none_or(|at| at > now);
                prop_assert!(
                    !deliverable,
                    "receiver {id} has credit but message {} waits",
                    record.sequence_number.0
                );
            }
        }

        if let Some((sub_queue, from, count, records)) = pending.peek {
            let mut expected: Vec<&Placement> = found
                .values()
                .filter(|placement| {
                    placement.sub_queue == sub_queue && placement.record.sequence_number >= from
                })
                .collect();
            expected.sort_by_key(|placement| placement.record.sequence_number);
            let expected: Vec<i64> = expected
                .iter()
                .take(count)
                .map(|placement| placement.record.sequence_number.0)
                .collect();
            let got: Vec<i64> = records
                .iter()
                .map(|(record, _)| record.sequence_number.0)
                .collect();
            prop_assert_eq!(
                got,
                expected,
                "rule SCH-2: peek returns stored messages in order"
            );
        }
        if let Some((sub_queue, numbers)) = pending.deferred_refused {
            let refusable = numbers.iter().any(|number| {
                !matches!(
                    self.state.record(sub_queue, *number),
                    Some(record) if record.state() == MessageState::Deferred
                ) || self.state.lock_of(sub_queue, *number).is_some()
            });
            prop_assert!(
                refusable,
                "rule LCK-4: refused deferred {numbers:?} that were available"
            );
        }

        // The timer: never in the past, and never later than the earliest real deadline.
        let next = self.state.next_deadline();
        prop_assert!(
            next.is_none_or(|at| at > now),
            "next_deadline {next:?} at {now:?}"
        );
        let earliest = self
            .held
            .iter()
            .map(|lock| lock.until)
            .chain(
                self.messages
                    .values()
                    .filter(|tracked| tracked.fate == Fate::Stored)
                    .filter_map(|tracked| tracked.pending_activation),
            )
            .chain(
                found
                    .values()
                    .filter(|placement| {
                        placement.sub_queue == SubQueue::Main
                            && placement.record.state() == MessageState::Active
                            && placement.lock.is_none()
                    })
                    .filter_map(|placement| placement.record.expires_at()),
            )
            .min();
        if let Some(earliest) = earliest {
            prop_assert!(
                next.is_some_and(|at| at <= earliest),
                "next_deadline {next:?} misses {earliest:?}"
            );
        }

        for (body, placement) in found {
            self.messages.get_mut(&body).expect("tracked").last = Some(placement);
        }
        Ok(())
    }
}
