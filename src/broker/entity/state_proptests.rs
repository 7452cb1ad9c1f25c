//! Property tests of the pure entity core, in the manner of RabbitMQ's `rabbit_fifo`: random
//! sequences of operations (sends, receivers, credit, settlements, lock renewal, browse,
//! deferred retrieval, cancellation, time) run against an [`EntityState`] with random
//! settings, and a model of what was accepted is checked against the state after every step.
//!
//! The model predicts only what the rules fix: where each accepted message must be, which
//! lock tokens are valid, how much credit each receiver has, which sequence numbers exist.
//! Everything else is read back from the state through its public API (`record`,
//! `take_effects`, `next_deadline`). Durations are multiples of [`TICK_MS`] so deadlines often
//! coincide. Runs are deterministic (fixed seed) unless `PROPTEST_RNG_SEED` is set;
//! `PROPTEST_CASES` raises the case count.
//!
//! Deterministic regression tests at the end pin down defects found this way.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError};

use super::settings::EntitySettings;
use super::state::{Effect, EntityState, MAX_DELIVERY_COUNT_EXCEEDED, Record, TTL_EXPIRED};
use crate::broker::message::Message;
use crate::broker::types::{
    EntityError, LockToken, MessageState, PropertyValue, ReceiveMode, ReceiverId, SequenceNumber,
    Settlement, SubQueue, Timestamp,
};

const START: Timestamp = Timestamp(1_700_000_000_000);
/// The unit of every generated duration.
const TICK_MS: u64 = 250;
/// Reason used for application dead-lettering and dead-letter-on-arrival.
const TEST_REASON: &str = "TestReason";

fn ticks(count: u64) -> Duration {
    Duration::from_millis(count * TICK_MS)
}

// ---------------------------------------------------------------------------------------------
// What is generated
// ---------------------------------------------------------------------------------------------

/// Entity settings under test.
#[derive(Debug, Clone)]
struct SettingsSpec {
    lock_ticks: u64,
    max_delivery_count: u32,
    default_ttl_ticks: Option<u64>,
    dead_letter_on_expiration: bool,
    duplicate_window_ticks: Option<u64>,
}

impl SettingsSpec {
    fn settings(&self) -> EntitySettings {
        let mut settings = EntitySettings::with_defaults("q");
        settings.lock_duration = ticks(self.lock_ticks);
        settings.max_delivery_count = self.max_delivery_count;
        settings.default_message_time_to_live = self.default_ttl_ticks.map(ticks);
        settings.dead_lettering_on_message_expiration = self.dead_letter_on_expiration;
        settings.duplicate_detection_window = self.duplicate_window_ticks.map(ticks);
        settings
    }
}

/// One message of a send.
#[derive(Debug, Clone)]
struct MessageSpec {
    ttl_ticks: Option<u64>,
    /// Scheduled enqueue time relative to the send (may be in the past).
    schedule_in_ticks: Option<i64>,
    message_id: Option<u8>,
}

/// Which lock token an operation uses.
#[derive(Debug, Clone, Copy)]
enum TokenChoice {
    /// One the model believes is held (index modulo the held locks).
    Held(usize),
    /// One that was settled or expired (index modulo the retired tokens).
    Retired(usize),
    /// One never issued.
    Unknown(u8),
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Complete,
    Abandon,
    Defer,
    DeadLetter,
    Release,
}

#[derive(Debug, Clone)]
enum Operation {
    Send(Vec<MessageSpec>),
    DeadLetterOnArrival,
    Attach {
        receiver: u64,
        dead_letter: bool,
        peek_lock: bool,
    },
    Detach {
        receiver: u64,
    },
    /// Credit limit = the model's link delivery count + `extra`.
    Credit {
        receiver: u64,
        extra: u32,
        drain: bool,
    },
    Settle {
        token: TokenChoice,
        outcome: Outcome,
    },
    Renew {
        token: TokenChoice,
    },
    Peek {
        dead_letter: bool,
        from: i64,
        count: usize,
    },
    ReceiveDeferred {
        dead_letter: bool,
        picks: Vec<usize>,
        bogus: bool,
        peek_lock: bool,
    },
    CancelScheduled {
        pick: usize,
        bogus: bool,
    },
    Advance {
        ticks: u64,
    },
}

fn settings_strategy() -> impl Strategy<Value = SettingsSpec> {
    (
        1..=8u64,
        1..=4u32,
        proptest::option::of(4..=40u64),
        any::<bool>(),
        proptest::option::of(1..=24u64),
    )
        .prop_map(
            |(lock_ticks, max_delivery_count, default_ttl_ticks, dead_letter, window)| {
                SettingsSpec {
                    lock_ticks,
                    max_delivery_count,
                    default_ttl_ticks,
                    dead_letter_on_expiration: dead_letter,
                    duplicate_window_ticks: window,
                }
            },
        )
}

fn message_strategy() -> impl Strategy<Value = MessageSpec> {
    (
        proptest::option::weighted(0.4, 1..=40u64),
        proptest::option::weighted(0.25, -2..=16i64),
        proptest::option::weighted(0.4, 0..4u8),
    )
        .prop_map(|(ttl_ticks, schedule_in_ticks, message_id)| MessageSpec {
            ttl_ticks,
            schedule_in_ticks,
            message_id,
        })
}

fn token_strategy() -> impl Strategy<Value = TokenChoice> {
    prop_oneof![
        6 => any::<usize>().prop_map(TokenChoice::Held),
        2 => any::<usize>().prop_map(TokenChoice::Retired),
        1 => any::<u8>().prop_map(TokenChoice::Unknown),
    ]
}

fn outcome_strategy() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        2 => Just(Outcome::Complete),
        2 => Just(Outcome::Abandon),
        2 => Just(Outcome::Defer),
        1 => Just(Outcome::DeadLetter),
        1 => Just(Outcome::Release),
    ]
}

fn operation_strategy() -> impl Strategy<Value = Operation> {
    prop_oneof![
        5 => vec(message_strategy(), 1..=3).prop_map(Operation::Send),
        1 => Just(Operation::DeadLetterOnArrival),
        3 => (0..3u64, proptest::bool::weighted(0.3), proptest::bool::weighted(0.7)).prop_map(
            |(receiver, dead_letter, peek_lock)| Operation::Attach { receiver, dead_letter, peek_lock }
        ),
        1 => (0..3u64).prop_map(|receiver| Operation::Detach { receiver }),
        6 => (0..3u64, 0..=4u32, proptest::bool::weighted(0.2)).prop_map(
            |(receiver, extra, drain)| Operation::Credit { receiver, extra, drain }
        ),
        5 => (token_strategy(), outcome_strategy())
            .prop_map(|(token, outcome)| Operation::Settle { token, outcome }),
        1 => token_strategy().prop_map(|token| Operation::Renew { token }),
        1 => (any::<bool>(), 1..=40i64, 0..=5usize).prop_map(
            |(dead_letter, from, count)| Operation::Peek { dead_letter, from, count }
        ),
        2 => (any::<bool>(), vec(any::<usize>(), 1..=2), proptest::bool::weighted(0.2), any::<bool>())
            .prop_map(|(dead_letter, picks, bogus, peek_lock)| Operation::ReceiveDeferred {
                dead_letter, picks, bogus, peek_lock
            }),
        1 => (any::<usize>(), proptest::bool::weighted(0.3))
            .prop_map(|(pick, bogus)| Operation::CancelScheduled { pick, bogus }),
        5 => prop_oneof![3 => 0..=4u64, 1 => 0..=16u64]
            .prop_map(|ticks| Operation::Advance { ticks }),
    ]
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

/// How an accepted message left the entity, or that it has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Stored,
    Completed,
    ReceivedAndDeleted,
    /// Expired with dead-lettering on expiration off (rule TTL-6).
    Dropped,
    Cancelled,
}

/// Where a message was seen at the end of a step.
#[derive(Debug, Clone)]
struct Placement {
    sub_queue: SubQueue,
    record: Record,
}

/// One accepted message, identified by the number in its body.
#[derive(Debug)]
struct Tracked {
    fate: Fate,
    /// When the send was accepted.
    accepted_at: Timestamp,
    /// The message's own TTL lowered to the entity default (rule TTL-2).
    effective_ttl: Option<Duration>,
    /// The scheduling sequence number, if the message was scheduled for later.
    scheduled_sequence_number: Option<SequenceNumber>,
    /// Activation time while the schedule is pending.
    pending_activation: Option<Timestamp>,
    /// When it materialised, for a scheduled message.
    activated_at: Option<Timestamp>,
    /// End of the previous step.
    last: Option<Placement>,
    /// Highest delivery count ever observed.
    highest_delivery_count: u32,
    /// Sequence numbers it was given (scheduling, then activation).
    sequence_numbers: Vec<SequenceNumber>,
}

/// A lock the model believes is held.
#[derive(Debug, Clone)]
struct HeldLock {
    token: LockToken,
    body: u64,
    until: Timestamp,
}

/// A receiver as the model sees it (link delivery-count arithmetic).
#[derive(Debug)]
struct ModelReceiver {
    sub_queue: SubQueue,
    mode: ReceiveMode,
    delivered: u32,
    limit: u32,
}

impl ModelReceiver {
    fn has_credit(&self) -> bool {
        (self.limit.wrapping_sub(self.delivered) as i32) > 0
    }
}

/// What the rules say about one message once a step is done.
#[derive(Debug)]
enum Expect {
    /// Stored in `sub_queue` (or just handed from there to a receive-and-delete receiver).
    At {
        body: u64,
        sub_queue: SubQueue,
        state: MessageState,
        delivery_count: u32,
        reason: Option<&'static str>,
        rule: &'static str,
    },
    /// Left the entity this way.
    Gone {
        body: u64,
        fate: Fate,
        rule: &'static str,
    },
    /// A scheduled message materialised (rule SCH-3).
    Activated {
        body: u64,
        scheduling: SequenceNumber,
        at: Timestamp,
    },
}

/// Checks made after the step on what an operation returned.
#[derive(Debug, Default)]
struct Pending {
    peek: Option<(SubQueue, SequenceNumber, usize, Vec<Record>)>,
    deferred_refused: Option<(SubQueue, Vec<SequenceNumber>)>,
    drain: Option<u64>,
    arrival: Option<u64>,
    /// Lowest sequence number a send assigned in this step.
    first_sent: Option<i64>,
}

struct Harness {
    spec: SettingsSpec,
    state: EntityState,
    now: Timestamp,
    messages: BTreeMap<u64, Tracked>,
    /// Sequence number → the message that got it (rule SEQ-1: never reused).
    owner: BTreeMap<i64, u64>,
    held: Vec<HeldLock>,
    retired: Vec<LockToken>,
    receivers: BTreeMap<u64, ModelReceiver>,
    /// Duplicate detection: id → (first accepted, sequence number).
    duplicates: HashMap<u8, (Timestamp, SequenceNumber)>,
    next_body: u64,
}

fn body_of(record: &Record) -> u64 {
    let bytes: [u8; 8] = record.message.body[..8]
        .try_into()
        .expect("test messages carry an 8-byte id");
    u64::from_be_bytes(bytes)
}

fn test_message(body: u64) -> Message {
    Message {
        body: Bytes::copy_from_slice(&body.to_be_bytes()),
        ..Message::default()
    }
}

fn has_reason(record: &Record, reason: &str) -> bool {
    record.property_changes.contains(&(
        "DeadLetterReason".to_string(),
        PropertyValue::String(reason.to_string()),
    ))
}

impl Harness {
    fn new(spec: SettingsSpec) -> Harness {
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

    fn lock_duration(&self) -> Duration {
        ticks(self.spec.lock_ticks)
    }

    fn new_body(&mut self) -> u64 {
        self.next_body += 1;
        self.next_body
    }

    /// Records that `sequence_number` names `body` (rule SEQ-1: unique, never reused).
    fn register(
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
    fn returned(&self, body: u64, counted: bool, rule: &'static str) -> Expect {
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

    fn resolve(&self, choice: TokenChoice) -> (LockToken, Option<usize>) {
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

    fn step(&mut self, operation: &Operation) -> Result<(), TestCaseError> {
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

    fn apply(
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

    fn track(&mut self, body: u64, now: Timestamp, effective_ttl: Option<Duration>) {
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

    fn send(
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
    fn receive_deferred(
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
    fn observe(
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
    fn check(
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

fn sub_queue(dead_letter: bool) -> SubQueue {
    if dead_letter {
        SubQueue::DeadLetter
    } else {
        SubQueue::Main
    }
}

/// A token the entity never issues (its version nibble is 0, issued tokens have 4).
fn unknown_token(byte: u8) -> LockToken {
    let mut bytes = [byte; 16];
    bytes[6] = 0;
    LockToken(bytes)
}

fn config() -> Config {
    let base = Config::default();
    Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            base.cases
        } else {
            512
        },
        rng_seed: match base.rng_seed {
            RngSeed::Random => RngSeed::Fixed(0x00f0_bb05),
            seed => seed,
        },
        failure_persistence: None,
        ..base
    }
}

proptest! {
    #![proptest_config(config())]

    /// rules SEQ-1, SEQ-3, SCH-2, SCH-3, SCH-4, TTL-1, TTL-2, TTL-4, TTL-5, TTL-6, TTL-7,
    /// TTL-8, TTL-10, LCK-1..5, DLQ-3, DLQ-4 and credit-based flow control.
    #[test]
    fn random_operations_keep_every_invariant(
        settings in settings_strategy(),
        operations in vec(operation_strategy(), 1..120),
    ) {
        let mut harness = Harness::new(settings);
        for operation in &operations {
            harness.step(operation)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Regression tests for defects found by the properties above (and by reading the model
// against the rules). Each is a minimal reproduction.
// ---------------------------------------------------------------------------------------------

fn entity(configure: impl FnOnce(&mut EntitySettings)) -> EntityState {
    let mut settings = EntitySettings::with_defaults("q");
    settings.lock_duration = Duration::from_secs(30);
    configure(&mut settings);
    EntityState::new(settings, 7, START)
}

fn deliveries(state: &mut EntityState) -> Vec<Record> {
    state
        .take_effects()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Deliver(delivery) => Some(delivery.record),
            _ => None,
        })
        .collect()
}

#[test]
fn dead_lettering_a_deferred_dead_letter_keeps_it_out_of_dispatch() {
    // rule LCK-4: a deferred message is only retrievable by its sequence number.
    let receiver = ReceiverId(1);
    let mut state = entity(|_| {});
    state.enqueue_dead_lettered(
        START,
        Arc::new(test_message(1)),
        TEST_REASON.to_string(),
        String::new(),
    );
    state.attach_receiver(START, receiver, SubQueue::DeadLetter, ReceiveMode::PeekLock);
    state.set_credit(START, receiver, 1, false);
    let first = deliveries(&mut state)
        .pop()
        .expect("delivered from the DLQ");
    let token = first.lock.expect("locked").token;
    state
        .settle(
            START,
            token,
            Settlement::Defer {
                properties: Vec::new(),
            },
        )
        .expect("deferred");
    let locked = state
        .receive_deferred(
            START,
            SubQueue::DeadLetter,
            &[first.sequence_number],
            ReceiveMode::PeekLock,
        )
        .expect("deferred message locked by number");
    let dead_letter = Settlement::DeadLetter {
        reason: None,
        description: None,
        properties: Vec::new(),
    };
    state
        .settle(START, locked[0].lock.expect("locked").token, dead_letter)
        .expect("dead-lettered again");
    state.set_credit(START, receiver, 2, false);
    let again = deliveries(&mut state);
    assert!(
        again
            .iter()
            .all(|record| record.state == MessageState::Active),
        "a Deferred record was dispatched to a link receiver: {again:?}"
    );
}

#[test]
fn drain_with_a_stale_credit_limit_never_moves_the_delivery_count_back() {
    // AMQP 1.0 §2.6.7: drain consumes only remaining (positive) credit. The link layer
    // passes credit_limit = the client's delivery-count + link-credit, and the client's
    // delivery-count lags while transfers are in flight.
    let receiver = ReceiverId(1);
    let mut state = entity(|_| {});
    state
        .enqueue(
            START,
            (1..=5).map(|body| Arc::new(test_message(body))).collect(),
        )
        .expect("accepted");
    state.attach_receiver(START, receiver, SubQueue::Main, ReceiveMode::PeekLock);
    state.set_credit(START, receiver, 2, false);
    assert_eq!(deliveries(&mut state).len(), 2);
    // The client has not seen the two transfers yet: delivery-count 0, credit 0, drain.
    state.set_credit(START, receiver, 0, true);
    let drained = state
        .take_effects()
        .into_iter()
        .find_map(|effect| match effect {
            Effect::Drained { delivery_count, .. } => Some(delivery_count),
            _ => None,
        });
    assert_eq!(drained, Some(2), "the link delivery-count is already 2");
    // Having received both, the client grants one more: delivery-count 2 + credit 1.
    state.set_credit(START, receiver, 3, false);
    assert_eq!(deliveries(&mut state).len(), 1, "one credit, one delivery");
}

#[test]
fn a_send_at_the_idle_deadline_is_not_acknowledged_by_an_entity_that_deletes_itself() {
    // rules IDL-1, IDL-2: a send is activity. The actor replies Ok to the send and then
    // deletes the entity (and the message) when both happen in one call.
    let mut state = entity(|settings| settings.auto_delete_on_idle = Some(Duration::from_secs(60)));
    let deadline = state.next_deadline().expect("idle deadline");
    let accepted = state.enqueue(deadline, vec![Arc::new(test_message(1))]);
    let idle = state
        .take_effects()
        .iter()
        .any(|effect| matches!(effect, Effect::Idle));
    assert!(
        !(accepted.is_ok() && idle),
        "send acknowledged ({accepted:?}) by an entity that reports Idle in the same call"
    );
}

#[test]
fn a_late_advance_activates_a_scheduled_message_as_of_its_scheduled_time() {
    // rules TTL-10, SCH-3, and the core's contract: "first advances the state to it, so
    // deadlines are honoured even when the shell's timer fires late".
    let mut state = entity(|settings| settings.dead_lettering_on_message_expiration = true);
    let at = START.plus(Duration::from_secs(10));
    let mut message = test_message(1);
    message.header.time_to_live = Some(Duration::from_secs(5));
    message.scheduled_enqueue_time = Some(at);
    state
        .enqueue(START, vec![Arc::new(message)])
        .expect("scheduled");
    // The timer fires 20 s late: the message materialised at `at` and expired at `at + 5 s`.
    state.advance(at.plus(Duration::from_secs(20)));
    // It expired before it could be seen, so it keeps its scheduling number.
    let activated = state
        .record(SubQueue::DeadLetter, SequenceNumber(1))
        .expect("dead-lettered under its scheduling number");
    assert_eq!(
        activated.enqueued_time, at,
        "rule SCH-3: enqueued at its scheduled time"
    );
    assert_eq!(
        state.message_count(SubQueue::DeadLetter),
        1,
        "rule TTL-10: expired at scheduled time + TTL, so dead-lettered"
    );
}
