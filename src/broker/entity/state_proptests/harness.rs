//! The model-checking harness of the property test: applies one operation to the entity
//! and to the model, then checks every invariant.

#![allow(clippy::wildcard_imports)]

use super::*;

impl Harness {
    pub(super) fn new(spec: SettingsSpec) -> Harness {
        Harness {
            state: EntityState::new(spec.settings(), 42, START),
            spec,
            now: START,
            messages: BTreeMap::new(),
            owner: BTreeMap::new(),
            held: Vec::new(),
            retired: Vec::new(),
            receivers: BTreeMap::new(),
            duplicates: HashMap::new(),
            next_body: 0,
        }
    }

    pub(super) fn lock_duration(&self) -> Duration {
        ticks(self.spec.lock_ticks)
    }

    pub(super) fn new_body(&mut self) -> u64 {
        self.next_body += 1;
        self.next_body
    }

    /// Records that `sequence_number` names `body` (rule SEQ-1: unique, never reused).
    pub(super) fn register(
        &mut self,
        sequence_number: SequenceNumber,
        body: u64,
    ) -> Result<(), TestCaseError> {
        prop_assert!(sequence_number.0 >= 1, "rule SEQ-1: numbers start at 1");
        match self.owner.get(&sequence_number.0) {
            Some(owner) => prop_assert_eq!(
                *owner,
                body,
                "rule SEQ-1: sequence number {} reused",
                sequence_number.0
            ),
            None => {
                self.owner.insert(sequence_number.0, body);
                let tracked = self
                    .messages
                    .get_mut(&body)
                    .ok_or_else(|| TestCaseError::fail(format!("unknown message {body}")))?;
                tracked.sequence_numbers.push(sequence_number);
                prop_assert!(
                    tracked.sequence_numbers.len() <= 2,
                    "message {body} got numbers {:?}",
                    tracked.sequence_numbers
                );
            }
        }
        Ok(())
    }

    /// Where a message goes after a failed delivery (abandon, lock expiry: `counted`) or a
    /// release (not counted), from where it was (rules LCK-2, TTL-5, TTL-6, TTL-7).
    pub(super) fn returned(&self, body: u64, counted: bool, rule: &'static str) -> Expect {
        let placement = self.messages[&body]
            .last
            .as_ref()
            .expect("a locked message was seen");
        let record = &placement.record;
        let delivery_count = record.delivery_count + u32::from(counted);
        let sub_queue = placement.sub_queue;
        let expired = record.expires_at.is_some_and(|at| at <= self.now);
        if counted && sub_queue == SubQueue::Main && delivery_count >= self.spec.max_delivery_count
        {
            Expect::At {
                body,
                sub_queue: SubQueue::DeadLetter,
                state: MessageState::Active,
                delivery_count,
                reason: Some(MAX_DELIVERY_COUNT_EXCEEDED),
                rule,
            }
        } else if record.state == MessageState::Deferred {
            Expect::At {
                body,
                sub_queue,
                state: MessageState::Deferred,
                delivery_count,
                reason: None,
                rule,
            }
        } else if sub_queue == SubQueue::Main && expired {
            if self.spec.dead_letter_on_expiration {
                Expect::At {
                    body,
                    sub_queue: SubQueue::DeadLetter,
                    state: MessageState::Active,
                    delivery_count,
                    reason: Some(TTL_EXPIRED),
                    rule: "TTL-5/TTL-6: expired while locked, dead-lettered on return",
                }
            } else {
                Expect::Gone {
                    body,
                    fate: Fate::Dropped,
                    rule: "TTL-5/TTL-6: expired while locked, dropped on return",
                }
            }
        } else {
            Expect::At {
                body,
                sub_queue,
                state: MessageState::Active,
                delivery_count,
                reason: None,
                rule,
            }
        }
    }

    pub(super) fn resolve(&self, choice: TokenChoice) -> (LockToken, Option<usize>) {
        match choice {
            TokenChoice::Held(index) if !self.held.is_empty() => {
                let index = index % self.held.len();
                (self.held[index].token, Some(index))
            }
            TokenChoice::Retired(index) if !self.retired.is_empty() => {
                (self.retired[index % self.retired.len()], None)
            }
            TokenChoice::Held(index) | TokenChoice::Retired(index) => {
                (unknown_token(index as u8), None)
            }
            TokenChoice::Unknown(byte) => (unknown_token(byte), None),
        }
    }

    pub(super) fn step(&mut self, operation: &Operation) -> Result<(), TestCaseError> {
        let before_max = self.owner.keys().next_back().copied().unwrap_or(0);
        if let Operation::Advance { ticks: count } = operation {
            self.now = self.now.plus(ticks(*count));
        }
        let now = self.now;
        let mut expects = Vec::new();
        let mut pending = Pending::default();

        // Every operation first advances the state to `now`: locks and schedules due by
        // then lapse or activate before the operation itself.
        let (lapsed, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|lock| lock.until <= now);
        self.held = held;
        for lock in lapsed {
            self.retired.push(lock.token);
            expects.push(self.returned(lock.body, true, "LCK-2: lock expiry counts a delivery"));
        }
        for (body, tracked) in self.messages.iter_mut() {
            if tracked.fate != Fate::Stored {
                continue;
            }
            if let Some(at) = tracked.pending_activation
                && at <= now
            {
                tracked.pending_activation = None;
                expects.push(Expect::Activated {
                    body: *body,
                    scheduling: tracked.scheduled_sequence_number.expect("scheduled"),
                    at,
                });
            }
        }

        self.apply(operation, now, &mut expects, &mut pending)?;
        let effects = self.state.take_effects();
        let delivered = self.observe(effects, now, &pending)?;
        self.check(now, before_max, expects, pending, delivered)
    }

    pub(super) fn apply(
        &mut self,
        operation: &Operation,
        now: Timestamp,
        expects: &mut Vec<Expect>,
        pending: &mut Pending,
    ) -> Result<(), TestCaseError> {
        match operation {
            Operation::Send(specs) => self.send(specs, now, expects, pending)?,
            Operation::DeadLetterOnArrival => {
                let body = self.new_body();
                self.track(body, now, None);
                self.state.enqueue_dead_lettered(
                    now,
                    Arc::new(test_message(body)),
                    TEST_REASON.to_string(),
                    "arrived dead".to_string(),
                );
                pending.arrival = Some(body);
                expects.push(Expect::At {
                    body,
                    sub_queue: SubQueue::DeadLetter,
                    state: MessageState::Active,
                    delivery_count: 0,
                    reason: Some(TEST_REASON),
                    rule: "DLQ-3: dead-lettered on arrival",
                });
            }
            Operation::Attach {
                receiver,
                dead_letter,
                peek_lock,
            } => {
                let sub_queue = sub_queue(*dead_letter);
                let mode = if *peek_lock {
                    ReceiveMode::PeekLock
                } else {
                    ReceiveMode::ReceiveAndDelete
                };
                self.state
                    .attach_receiver(now, ReceiverId(*receiver), sub_queue, mode);
                self.receivers.insert(
                    *receiver,
                    ModelReceiver {
                        sub_queue,
                        mode,
                        delivered: 0,
                        limit: 0,
                    },
                );
            }
            Operation::Detach { receiver } => {
                self.state.detach_receiver(now, ReceiverId(*receiver));
                self.receivers.remove(receiver);
            }
            Operation::Credit {
                receiver,
                extra,
                drain,
            } => {
                let limit = match self.receivers.get_mut(receiver) {
                    Some(model) => {
                        model.limit = model.delivered.wrapping_add(*extra);
                        if *drain {
                            pending.drain = Some(*receiver);
                        }
                        model.limit
                    }
                    None => *extra,
                };
                self.state
                    .set_credit(now, ReceiverId(*receiver), limit, *drain);
            }
            Operation::Settle { token, outcome } => {
                let (token, held) = self.resolve(*token);
                let settlement = match outcome {
                    Outcome::Complete => Settlement::Complete,
                    Outcome::Abandon => Settlement::Abandon {
                        properties: vec![("abandoned".to_string(), PropertyValue::Bool(true))],
                    },
                    Outcome::Defer => Settlement::Defer {
                        properties: Vec::new(),
                    },
                    Outcome::DeadLetter => Settlement::DeadLetter {
                        reason: Some(TEST_REASON.to_string()),
                        description: None,
                        properties: Vec::new(),
                    },
                    Outcome::Release => Settlement::Release,
                };
                let result = self.state.settle(now, token, settlement);
                let Some(index) = held else {
                    prop_assert_eq!(
                        result,
                        Err(EntityError::LockLost),
                        "rule LCK-3: unknown or lapsed token"
                    );
                    return Ok(());
                };
                prop_assert_eq!(result, Ok(()), "rule LCK-1: settle with a held lock");
                let lock = self.held.remove(index);
                self.retired.push(lock.token);
                let placement = self.messages[&lock.body]
                    .last
                    .clone()
                    .expect("a locked message was seen");
                let record = &placement.record;
                expects.push(match outcome {
                    Outcome::Complete => Expect::Gone {
                        body: lock.body,
                        fate: Fate::Completed,
                        rule: "LCK-1/TTL-5: complete removes a locked message",
                    },
                    Outcome::Abandon => self.returned(lock.body, true, "LCK-2: abandon"),
                    Outcome::Release => self.returned(lock.body, false, "release"),
                    Outcome::Defer => Expect::At {
                        body: lock.body,
                        sub_queue: placement.sub_queue,
                        state: MessageState::Deferred,
                        delivery_count: record.delivery_count,
                        reason: None,
                        rule: "LCK-4: defer sets aside",
                    },
                    Outcome::DeadLetter => Expect::At {
                        body: lock.body,
                        sub_queue: SubQueue::DeadLetter,
                        state: if placement.sub_queue == SubQueue::Main {
                            MessageState::Active
                        } else {
                            record.state
                        },
                        delivery_count: record.delivery_count,
                        reason: if placement.sub_queue == SubQueue::Main {
                            Some(TEST_REASON)
                        } else {
                            None
                        },
                        rule: "DLQ-4: application dead-lettering",
                    },
                });
            }
            Operation::Renew { token } => {
                let (token, held) = self.resolve(*token);
                let result = self.state.renew_lock(now, token);
                match held {
                    Some(index) => {
                        let until = now.plus(self.lock_duration());
                        prop_assert_eq!(result, Ok(until), "rule LCK-1: renew");
                        self.held[index].until = until;
                    }
                    None => prop_assert_eq!(
                        result,
                        Err(EntityError::LockLost),
                        "rule LCK-3: renew an unknown or lapsed token"
                    ),
                }
            }
            Operation::Peek {
                dead_letter,
                from,
                count,
            } => {
                let sub_queue = sub_queue(*dead_letter);
                let from = SequenceNumber(*from);
                let records = self.state.peek(now, sub_queue, from, *count, None);
                pending.peek = Some((sub_queue, from, *count, records));
            }
            Operation::ReceiveDeferred {
                dead_letter,
                picks,
                bogus,
                peek_lock,
            } => self.receive_deferred(
                now,
                sub_queue(*dead_letter),
                picks,
                *bogus,
                *peek_lock,
                expects,
                pending,
            )?,
            Operation::CancelScheduled { pick, bogus } => {
                let candidates: Vec<SequenceNumber> = self
                    .messages
                    .values()
                    .filter_map(|tracked| tracked.scheduled_sequence_number)
                    .collect();
                let target = if *bogus || candidates.is_empty() {
                    SequenceNumber((*pick % (self.owner.len() + 2)) as i64 + 1)
                } else {
                    candidates[*pick % candidates.len()]
                };
                self.state.cancel_scheduled(now, &[target]);
                if let Some(&body) = self.owner.get(&target.0) {
                    let tracked = self.messages.get_mut(&body).expect("tracked");
                    // Still pending here means its time is after `now` (rule SCH-4).
                    if tracked.scheduled_sequence_number == Some(target)
                        && tracked.pending_activation.is_some()
                    {
                        tracked.pending_activation = None;
                        expects.push(Expect::Gone {
                            body,
                            fate: Fate::Cancelled,
                            rule: "SCH-4: cancel deletes a scheduled message",
                        });
                    }
                }
            }
            Operation::Advance { .. } => self.state.advance(now),
        }
        Ok(())
    }

    pub(super) fn track(&mut self, body: u64, now: Timestamp, effective_ttl: Option<Duration>) {
        self.messages.insert(
            body,
            Tracked {
                fate: Fate::Stored,
                accepted_at: now,
                effective_ttl,
                scheduled_sequence_number: None,
                pending_activation: None,
                activated_at: None,
                last: None,
                highest_delivery_count: 0,
                sequence_numbers: Vec::new(),
            },
        );
    }

    pub(super) fn send(
        &mut self,
        specs: &[MessageSpec],
        now: Timestamp,
        expects: &mut Vec<Expect>,
        pending: &mut Pending,
    ) -> Result<(), TestCaseError> {
        let mut batch = Vec::new();
        let mut bodies = Vec::new();
        for spec in specs {
            let body = self.new_body();
            let mut message = test_message(body);
            message.header.time_to_live = spec.ttl_ticks.map(ticks);
            message.system.message_id = spec.message_id.map(|id| format!("id-{id}"));
            message.scheduled_enqueue_time = spec
                .schedule_in_ticks
                .map(|offset| Timestamp(now.0 + offset * TICK_MS as i64));
            bodies.push(body);
            batch.push(Arc::new(message));
        }
        let numbers = self
            .state
            .enqueue(now, batch.clone())
            .map_err(|error| TestCaseError::fail(format!("send refused: {error}")))?;
        prop_assert_eq!(numbers.len(), specs.len(), "one number per message");
        let window = self.spec.duplicate_window_ticks.map(ticks);
        let mut previous = i64::MIN;
        for ((spec, body), (number, message)) in
            specs.iter().zip(bodies).zip(numbers.into_iter().zip(batch))
        {
            if let (Some(window), Some(id)) = (window, spec.message_id)
                && let Some(&(first, original)) = self.duplicates.get(&id)
                && now < first.plus(window)
            {
                prop_assert_eq!(
                    number,
                    original,
                    "duplicate detection answers with the original number"
                );
                continue;
            }
            prop_assert!(
                number.0 > previous && !self.owner.contains_key(&number.0),
                "rule SEQ-1/SEQ-2: send got {} after {}",
                number.0,
                previous
            );
            previous = number.0;
            pending.first_sent.get_or_insert(number.0);
            let effective_ttl = match (
                message.header.time_to_live,
                self.spec.default_ttl_ticks.map(ticks),
            ) {
                (Some(own), Some(ceiling)) => Some(own.min(ceiling)),
                (own, ceiling) => own.or(ceiling),
            };
            self.track(body, now, effective_ttl);
            self.register(number, body)?;
            if window.is_some()
                && let Some(id) = spec.message_id
            {
                self.duplicates.insert(id, (now, number));
            }
            let later = message.scheduled_enqueue_time.filter(|at| *at > now);
            if let Some(at) = later {
                let tracked = self.messages.get_mut(&body).expect("tracked");
                tracked.scheduled_sequence_number = Some(number);
                tracked.pending_activation = Some(at);
            }
            expects.push(Expect::At {
                body,
                sub_queue: SubQueue::Main,
                state: if later.is_some() {
                    MessageState::Scheduled
                } else {
                    MessageState::Active
                },
                delivery_count: 0,
                reason: None,
                rule: "SEQ-3/SCH-1: accepted into the main queue",
            });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn receive_deferred(
        &mut self,
        now: Timestamp,
        sub_queue: SubQueue,
        picks: &[usize],
        bogus: bool,
        peek_lock: bool,
        expects: &mut Vec<Expect>,
        pending: &mut Pending,
    ) -> Result<(), TestCaseError> {
        let candidates: Vec<SequenceNumber> = self
            .messages
            .values()
            .filter(|tracked| tracked.fate == Fate::Stored)
            .filter_map(|tracked| tracked.last.as_ref())
            .filter(|placement| {
                placement.sub_queue == sub_queue && placement.record.state == MessageState::Deferred
            })
            .map(|placement| placement.record.sequence_number)
            .collect();
        let mut numbers: Vec<SequenceNumber> = Vec::new();
        for pick in picks {
            let number = if bogus || candidates.is_empty() {
                SequenceNumber((*pick % (self.owner.len() + 2)) as i64 + 1)
            } else {
                candidates[*pick % candidates.len()]
            };
            if !numbers.contains(&number) {
                numbers.push(number);
            }
        }
        let mode = if peek_lock {
            ReceiveMode::PeekLock
        } else {
            ReceiveMode::ReceiveAndDelete
        };
        match self.state.receive_deferred(now, sub_queue, &numbers, mode) {
            Ok(records) => {
                prop_assert_eq!(records.len(), numbers.len());
                for (record, number) in records.iter().zip(&numbers) {
                    prop_assert_eq!(record.sequence_number, *number);
                    prop_assert_eq!(record.state, MessageState::Deferred, "rule LCK-4");
                    let body = body_of(record);
                    prop_assert!(
                        !self.held.iter().any(|lock| lock.body == body),
                        "rule LCK-4: deferred message {body} handed out while locked"
                    );
                    match mode {
                        ReceiveMode::PeekLock => {
                            let lock = record
                                .lock
                                .ok_or_else(|| TestCaseError::fail("peek-lock without a lock"))?;
                            prop_assert_eq!(lock.until, now.plus(self.lock_duration()));
                            self.held.push(HeldLock {
                                token: lock.token,
                                body,
                                until: lock.until,
                            });
                            expects.push(Expect::At {
                                body,
                                sub_queue,
                                state: MessageState::Deferred,
                                delivery_count: record.delivery_count,
                                reason: None,
                                rule: "LCK-4: deferred message locked by sequence number",
                            });
                        }
                        ReceiveMode::ReceiveAndDelete => {
                            prop_assert!(record.lock.is_none());
                            expects.push(Expect::Gone {
                                body,
                                fate: Fate::ReceivedAndDeleted,
                                rule: "LCK-4/LCK-5: deferred message received and deleted",
                            });
                        }
                    }
                }
            }
            Err(EntityError::MessageNotFound(_)) => {
                pending.deferred_refused = Some((sub_queue, numbers));
            }
            Err(other) => {
                return Err(TestCaseError::fail(format!(
                    "receive_deferred: unexpected {other:?}"
                )));
            }
        }
        Ok(())
    }

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
                        record.state,
                        MessageState::Active,
                        "rules LCK-4/SCH-2: message {} delivered in state {:?}",
                        body,
                        record.state
                    );
                    prop_assert!(
                        record.expires_at.is_none_or(|at| at > now),
                        "rule TTL-4: message {body} delivered at {now:?} after expiry {:?}",
                        record.expires_at
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
                            let lock = record
                                .lock
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
                            prop_assert!(record.lock.is_none(), "rule LCK-5: no lock");
                            self.messages.get_mut(&body).expect("tracked").fate =
                                Fate::ReceivedAndDeleted;
                            delivered.insert(
                                body,
                                Placement {
                                    sub_queue: receiver_queue,
                                    record,
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
                let placement = Placement { sub_queue, record };
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
                        placement.record.state,
                        state,
                        "rule {}: message {}",
                        rule,
                        body
                    );
                    prop_assert_eq!(
                        placement.record.delivery_count,
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
                        placement.record.delivery_count,
                        0,
                        "rule SCH-3: as if just enqueued"
                    );
                    let enqueued = placement.record.enqueued_time;
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
                    && placement.record.state == MessageState::Active
                    && placement.record.expires_at.is_some_and(|at| at <= now)
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
                record.delivery_count >= tracked.highest_delivery_count,
                "message {body}: delivery count went down to {}",
                record.delivery_count
            );
            tracked.highest_delivery_count = record.delivery_count;
            match placement.sub_queue {
                SubQueue::DeadLetter => {
                    prop_assert_eq!(record.expires_at, None, "rule TTL-8");
                    prop_assert!(record.state != MessageState::Scheduled);
                }
                _ => {
                    prop_assert_eq!(record.time_to_live, tracked.effective_ttl, "rule TTL-2");
                    let enqueued = tracked.activated_at.unwrap_or(tracked.accepted_at);
                    prop_assert_eq!(record.enqueued_time, enqueued, "rule SEQ-3");
                    if record.state == MessageState::Scheduled {
                        prop_assert_eq!(record.expires_at, None, "rule TTL-10");
                    } else {
                        prop_assert_eq!(
                            record.expires_at,
                            tracked.effective_ttl.map(|ttl| enqueued.plus(ttl)),
                            "rule TTL-1"
                        );
                    }
                    if record.state == MessageState::Active && record.lock.is_none() {
                        prop_assert!(
                            record.expires_at.is_none_or(|at| at > now),
                            "rule TTL-6: message {body} unlocked past its expiry at {now:?}"
                        );
                    }
                }
            }
            let model_lock = self.held.iter().find(|lock| lock.body == *body);
            match (record.lock, model_lock) {
                (None, None) => {}
                (Some(lock), Some(held)) => {
                    prop_assert_eq!(lock.token, held.token, "message {}: lock token", body);
                    prop_assert_eq!(lock.until, held.until, "message {}: locked until", body);
                    prop_assert!(record.state != MessageState::Scheduled);
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
                    && record.state == MessageState::Active
                    && record.lock.is_none()
                    && record.expires_at.is_none_or(|at| at > now);
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
                .map(|record| record.sequence_number.0)
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
                    Some(record) if record.state == MessageState::Deferred && record.lock.is_none()
                )
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
                            && placement.record.state == MessageState::Active
                            && placement.record.lock.is_none()
                    })
                    .filter_map(|placement| placement.record.expires_at),
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
