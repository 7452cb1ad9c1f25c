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
use std::time::Duration;

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError};

mod checks;
mod harness;

use super::settings::EntitySettings;
use super::state::{
    Change, Effect, EntityState, MAX_DELIVERY_COUNT_EXCEEDED, MessageLog, Record, TTL_EXPIRED,
};
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
    /// The lock held on it (volatile: beside the log, not in the record).
    lock: Option<super::state::Lock>,
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

/// A peeked record with the lock it holds.
type Peeked = (Record, Option<super::state::Lock>);

/// Checks made after the step on what an operation returned.
#[derive(Debug, Default)]
struct Pending {
    peek: Option<(SubQueue, SequenceNumber, usize, Vec<Peeked>)>,
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
    /// The core's change records replayed as they come (issue 11).
    replica: MessageLog,
    /// Every change record so far, for the recovery check at the end.
    changes: Vec<Change>,
}

fn body_of(record: &Record) -> u64 {
    let bytes: [u8; 8] = record.message.body()[..8]
        .try_into()
        .expect("test messages carry an 8-byte id");
    u64::from_be_bytes(bytes)
}

fn test_message(body: u64) -> Message {
    Message::with_body(&Bytes::copy_from_slice(&body.to_be_bytes()))
}

fn has_reason(record: &Record, reason: &str) -> bool {
    crate::broker::message::application_property_text(&record.message, "DeadLetterReason")
        .as_deref()
        == Some(reason)
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
        let mut harness = Harness::new(settings.clone());
        for operation in &operations {
            harness.step(operation)?;
        }
        // Recovery from the change records restores the same durable state, with every
        // lock released: what was locked is available again (or still deferred).
        let restored = EntityState::restore(
            settings.settings(),
            7,
            harness.now,
            harness.changes.iter().cloned(),
        );
        prop_assert_eq!(restored.log().fingerprint(), harness.state.log().fingerprint());
        prop_assert_eq!(restored.stored_bytes(), harness.state.stored_bytes());
        for sub_queue in [SubQueue::Main, SubQueue::DeadLetter] {
            for (number, record) in harness.state.log().records(sub_queue) {
                let available = restored.is_available(sub_queue, *number);
                let expected = record.state() == MessageState::Active;
                prop_assert_eq!(available, expected, "{:?} {} after recovery", sub_queue, number.0);
            }
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

fn deliveries(state: &mut EntityState) -> Vec<super::Delivery> {
    state
        .take_effects()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Deliver(delivery) => Some(delivery),
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
        test_message(1),
        TEST_REASON.to_string(),
        String::new(),
    );
    state.attach_receiver(START, receiver, SubQueue::DeadLetter, ReceiveMode::PeekLock);
    state.set_credit(START, receiver, 1, false);
    let first = deliveries(&mut state)
        .pop()
        .expect("delivered from the DLQ");
    let token = first.lock.expect("locked").token;
    let first = first.record;
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
        .settle(START, locked[0].1.expect("locked").token, dead_letter)
        .expect("dead-lettered again");
    state.set_credit(START, receiver, 2, false);
    let again = deliveries(&mut state);
    assert!(
        again
            .iter()
            .all(|record| record.state() == MessageState::Active),
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
        .enqueue(START, (1..=5).map(test_message).collect::<Vec<_>>())
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
    let accepted = state.enqueue(deadline, vec![test_message(1)]);
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
    message.set_header(crate::broker::message::HeaderFields {
        time_to_live: Some(Duration::from_secs(5)),
        ..message.header()
    });
    message.edit_extras(|extras| extras.scheduled_enqueue_time = Some(at));
    state.enqueue(START, vec![message]).expect("scheduled");
    // The timer fires 20 s late: the message materialised at `at` and expired at `at + 5 s`.
    state.advance(at.plus(Duration::from_secs(20)));
    // It expired before it could be seen, so it keeps its scheduling number.
    let activated = state
        .record(SubQueue::DeadLetter, SequenceNumber(1))
        .expect("dead-lettered under its scheduling number");
    assert_eq!(
        activated.enqueued_time(),
        at,
        "rule SCH-3: enqueued at its scheduled time"
    );
    assert_eq!(
        state.message_count(SubQueue::DeadLetter),
        1,
        "rule TTL-10: expired at scheduled time + TTL, so dead-lettered"
    );
}
