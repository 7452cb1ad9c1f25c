//! The model-checking harness of the property test: applies one operation to the entity
//! and to the model, then checks every invariant.

#![allow(clippy::wildcard_imports)]

use super::*;

impl Harness {
    pub(super) fn new(spec: SettingsSpec) -> Harness {
        Harness {
            state: {
                let mut state = EntityState::new(spec.settings(), 42, START);
                state.set_journaling(true);
                state
            },
            replica: MessageLog::new(false),
            changes: Vec::new(),
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
        let delivery_count = record.delivery_count() + u32::from(counted);
        let sub_queue = placement.sub_queue;
        let expired = record.expires_at().is_some_and(|at| at <= self.now);
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
        } else if record.state() == MessageState::Deferred {
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
        // Issue 11: the change records of this step, replayed into a replica, rebuild
        // exactly the durable state the core has.
        let changes = self.state.take_changes();
        for change in &changes {
            self.replica.apply(change.clone());
        }
        self.changes.extend(changes);
        prop_assert_eq!(
            self.replica.fingerprint(),
            self.state.log().fingerprint(),
            "replaying the change records rebuilds the log"
        );
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
                    test_message(body),
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
                        delivery_count: record.delivery_count(),
                        reason: None,
                        rule: "LCK-4: defer sets aside",
                    },
                    Outcome::DeadLetter => Expect::At {
                        body: lock.body,
                        sub_queue: SubQueue::DeadLetter,
                        state: if placement.sub_queue == SubQueue::Main {
                            MessageState::Active
                        } else {
                            record.state()
                        },
                        delivery_count: record.delivery_count(),
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
            message.set_header(crate::broker::message::HeaderFields {
                time_to_live: spec.ttl_ticks.map(ticks),
                ..message.header()
            });
            let system = message.system().with(
                crate::broker::message::SystemField::MessageId,
                (spec.message_id.map(|id| format!("id-{id}"))).as_deref(),
            );
            message.set_system(system);
            message.edit_extras(|extras| {
                extras.scheduled_enqueue_time = spec
                    .schedule_in_ticks
                    .map(|offset| Timestamp(now.0 + offset * TICK_MS as i64))
            });
            bodies.push(body);
            batch.push(message);
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
                message.header().time_to_live,
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
            let later = message
                .extras()
                .scheduled_enqueue_time
                .filter(|at| *at > now);
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
                placement.sub_queue == sub_queue
                    && placement.record.state() == MessageState::Deferred
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
                for ((record, record_lock), number) in records.iter().zip(&numbers) {
                    prop_assert_eq!(record.sequence_number, *number);
                    prop_assert_eq!(record.state(), MessageState::Deferred, "rule LCK-4");
                    let body = body_of(record);
                    prop_assert!(
                        !self.held.iter().any(|lock| lock.body == body),
                        "rule LCK-4: deferred message {body} handed out while locked"
                    );
                    match mode {
                        ReceiveMode::PeekLock => {
                            let lock = record_lock
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
                                delivery_count: record.delivery_count(),
                                reason: None,
                                rule: "LCK-4: deferred message locked by sequence number",
                            });
                        }
                        ReceiveMode::ReceiveAndDelete => {
                            prop_assert!(record_lock.is_none());
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
}
