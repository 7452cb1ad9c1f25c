//! Unit tests of the pure entity core with explicit times.

use std::time::Duration;

use bytes::Bytes;

use super::settings::EntitySettings;
use super::state::{Effect, EntityState, MAX_DELIVERY_COUNT_EXCEEDED, TTL_EXPIRED};
use crate::broker::message::{HeaderFields, Message};
use crate::broker::types::{
    EntityError, MessageState, OutboxTarget, ReceiveMode, ReceiverId, SequenceNumber, Settlement,
    SubQueue, Timestamp,
};

pub(super) const START: Timestamp = Timestamp(1_700_000_000_000);
pub(super) const RECEIVER: ReceiverId = ReceiverId(1);

pub(super) fn message(body: &str) -> Message {
    Message::with_body(&Bytes::from(body.as_bytes().to_vec()))
}

pub(super) fn entity(configure: impl FnOnce(&mut EntitySettings)) -> EntityState {
    let mut settings = EntitySettings::with_defaults("q");
    settings.lock_duration = Duration::from_secs(30);
    settings.max_delivery_count = 3;
    configure(&mut settings);
    EntityState::new(settings, 7, START)
}

pub(super) fn deliveries(state: &mut EntityState) -> Vec<super::state::Delivery> {
    state
        .take_effects()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Deliver(delivery) => Some(delivery),
            _ => None,
        })
        .collect()
}

pub(super) fn receive_one(
    state: &mut EntityState,
    now: Timestamp,
    credit_limit: &mut u32,
) -> Option<super::state::Delivery> {
    *credit_limit += 1;
    state.set_credit(now, RECEIVER, *credit_limit, false);
    let mut delivered = deliveries(state);
    if delivered.is_empty() {
        *credit_limit -= 1;
        state.set_credit(now, RECEIVER, *credit_limit, false);
    }
    delivered.pop()
}

/// Enqueues one message ("a") and delivers it, peek-locked, to [`RECEIVER`].
/// Dead-lettering with this reason, no description, no properties changed.
pub(super) fn dead_letter(reason: &str) -> Settlement {
    Settlement::DeadLetter {
        reason: Some(reason.to_string()),
        description: None,
        properties: Vec::new(),
    }
}

/// Enqueues messages of these bodies and attaches a peek-lock receiver (no credit yet).
pub(super) fn with_peek_lock_receiver(state: &mut EntityState, bodies: &[&str]) {
    let messages: Vec<_> = bodies.iter().map(|body| message(body)).collect();
    state.enqueue(START, messages).expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
}

fn one_locked(state: &mut EntityState, credit: &mut u32) -> super::state::Delivery {
    with_peek_lock_receiver(state, &["a"]);
    receive_one(state, START, credit).expect("delivered")
}

#[test]
fn sequence_numbers_are_gapless_from_one() {
    // rule SEQ-1, SEQ-3
    let mut state = entity(|_| {});
    let numbers = state
        .enqueue(START, vec![message("a"), message("b"), message("c")])
        .expect("accepted");
    assert_eq!(
        numbers[..],
        [SequenceNumber(1), SequenceNumber(2), SequenceNumber(3)]
    );
    let record = state
        .record(SubQueue::Main, SequenceNumber(2))
        .expect("stored");
    assert_eq!(record.enqueued_time(), START);
}

#[test]
fn quota_refuses_messages_beyond_the_entity_size() {
    // Each message costs its bytes plus the per-message overhead (issue 10, item 9).
    let mut state = entity(|settings| settings.max_size_bytes = 3000);
    let big = "x".repeat(1500);
    state
        .enqueue(START, vec![message(&big)])
        .expect("first fits");
    let refused = state.enqueue(START, vec![message(&big)]);
    assert!(
        matches!(refused, Err(EntityError::QuotaExceeded { .. })),
        "{refused:?}"
    );
    assert_eq!(state.message_count(SubQueue::Main), 1);
}

#[test]
fn lock_expiry_counts_a_delivery_and_invalidates_the_token() {
    // rule LCK-2, LCK-3
    let (mut state, mut credit) = (entity(|_| {}), 0);
    let first = one_locked(&mut state, &mut credit);
    let token = first.lock.expect("locked").token;
    assert_eq!(
        first.lock.map(|lock| lock.until),
        Some(START.plus(Duration::from_secs(30)))
    );
    let later = START.plus(Duration::from_secs(31));
    assert_eq!(
        state.settle(later, token, Settlement::Complete),
        Err(EntityError::LockLost)
    );
    let second = receive_one(&mut state, later, &mut credit).expect("redelivered");
    assert_eq!(second.delivery_count(), 1);
    assert_ne!(second.lock.map(|lock| lock.token), Some(token));
}

#[test]
fn a_lock_token_settles_only_the_record_it_was_issued_for() {
    // rule LCK-1, LCK-3: the token names its record; a forged or altered one is lost
    let mut state = entity(|_| {});
    state
        .enqueue(START, vec![message("a"), message("b")])
        .expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    let mut credit = 0;
    let first = receive_one(&mut state, START, &mut credit).expect("delivered");
    let second = receive_one(&mut state, START, &mut credit).expect("delivered");
    let (first_token, second_token) = (
        first.lock.expect("locked").token,
        second.lock.expect("locked").token,
    );
    assert_ne!(first_token, second_token);
    // The first token's unguessable half with the second record's place: not a lock.
    let mut mixed = second_token;
    mixed.0[..8].copy_from_slice(&first_token.0[..8]);
    // A bit flipped in the unguessable half, and a place no sub-queue has.
    let mut flipped = first_token;
    flipped.0[3] ^= 0x10;
    let mut nowhere = first_token;
    nowhere.0[8] = 0x83;
    for forged in [mixed, flipped, nowhere] {
        assert_eq!(
            state.settle(START, forged, Settlement::Complete),
            Err(EntityError::LockLost),
            "{forged:?}"
        );
    }
    assert_eq!(state.message_count(SubQueue::Main), 2);
    state
        .settle(START, second_token, Settlement::Complete)
        .expect("completed");
    state
        .settle(START, first_token, Settlement::Complete)
        .expect("completed");
    assert_eq!(state.message_count(SubQueue::Main), 0);
    // A settled record's token is spent.
    assert_eq!(
        state.settle(START, first_token, Settlement::Complete),
        Err(EntityError::LockLost)
    );
}

#[test]
fn a_dead_letter_lock_settles_the_dead_lettered_record() {
    // rule DLQ-4: locks on the dead-letter sub-queue name it
    let (mut state, mut credit) = (entity(|_| {}), 0);
    let delivered = one_locked(&mut state, &mut credit);
    state
        .settle(
            START,
            delivered.lock.expect("locked").token,
            dead_letter("bad"),
        )
        .expect("dead-lettered");
    let dead_receiver = ReceiverId(2);
    state.attach_receiver(
        START,
        dead_receiver,
        SubQueue::DeadLetter,
        ReceiveMode::PeekLock,
    );
    state.set_credit(START, dead_receiver, 1, false);
    let dead = deliveries(&mut state)
        .pop()
        .expect("delivered from the dead-letter queue");
    assert_eq!(dead.sub_queue, SubQueue::DeadLetter);
    let token = dead.lock.expect("locked").token;
    let mut in_main = token;
    in_main.0[8] = 0x80;
    assert_eq!(
        state.settle(START, in_main, Settlement::Complete),
        Err(EntityError::LockLost)
    );
    state
        .settle(START, token, Settlement::Complete)
        .expect("completed");
    assert_eq!(state.message_count(SubQueue::DeadLetter), 0);
}

#[test]
fn the_timer_follows_the_locks_still_held_through_settles_and_renewals() {
    // rule LCK-2, LCK-4: settled and renewed locks leave no earlier wake-up behind
    let mut state = entity(|_| {});
    with_peek_lock_receiver(&mut state, &["a", "b", "c"]);
    let mut credit = 0;
    let tokens: Vec<_> = (0..3)
        .map(|_| {
            receive_one(&mut state, START, &mut credit)
                .and_then(|delivery| delivery.lock)
                .expect("locked")
                .token
        })
        .collect();
    let lapse = START.plus(Duration::from_secs(30));
    assert_eq!(state.next_deadline(), Some(lapse));
    state
        .settle(START, tokens[0], Settlement::Complete)
        .expect("completed");
    state
        .settle(START, tokens[2], Settlement::Complete)
        .expect("completed");
    assert_eq!(state.next_deadline(), Some(lapse));
    let renewed_at = START.plus(Duration::from_secs(10));
    let until = state.renew_lock(renewed_at, tokens[1]).expect("renewed");
    assert_eq!(until, START.plus(Duration::from_secs(40)));
    assert_eq!(state.next_deadline(), Some(until));
    // Held past its first lapse, then lost at the renewed one (a failed delivery).
    state.advance(START.plus(Duration::from_secs(35)));
    assert!(deliveries(&mut state).is_empty());
    state.advance(until);
    assert_eq!(
        state.settle(until, tokens[1], Settlement::Complete),
        Err(EntityError::LockLost)
    );
    let again = receive_one(&mut state, until, &mut credit).expect("redelivered");
    assert_eq!(again.sequence_number, SequenceNumber(2));
    assert_eq!(again.delivery_count(), 1);
}

#[test]
fn thousands_of_locks_settled_behind_one_held_lock_still_lapse_in_time() {
    // rule LCK-2: the held lock lapses on time, every settled one is gone
    let mut state = entity(|_| {});
    let messages: Vec<_> = (0..5_000).map(|n| message(&n.to_string())).collect();
    state.enqueue(START, messages).expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    let mut held = None;
    let mut credit = 0;
    for step in 0..5_000u64 {
        let now = START.plus(Duration::from_millis(step));
        let delivery = receive_one(&mut state, now, &mut credit).expect("delivered");
        let token = delivery.lock.expect("locked").token;
        if step == 0 {
            held = Some(token);
        } else {
            state
                .settle(now, token, Settlement::Complete)
                .expect("completed");
        }
    }
    assert_eq!(state.message_count(SubQueue::Main), 1);
    assert_eq!(
        state.next_deadline(),
        Some(START.plus(Duration::from_secs(30)))
    );
    state.advance(START.plus(Duration::from_secs(30)));
    assert_eq!(
        state.settle(
            START.plus(Duration::from_secs(30)),
            held.expect("held"),
            Settlement::Complete
        ),
        Err(EntityError::LockLost)
    );
    assert_eq!(state.next_deadline(), None);
}

#[test]
fn abandon_at_max_delivery_count_dead_letters() {
    // rule LCK-2, DLQ-3
    let mut state = entity(|_| {});
    state.enqueue(START, vec![message("a")]).expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    let mut credit = 0;
    for attempt in 0..3 {
        let record = receive_one(&mut state, START, &mut credit).expect("delivered");
        assert_eq!(record.delivery_count(), attempt);
        let token = record.lock.expect("locked").token;
        state
            .settle(
                START,
                token,
                Settlement::Abandon {
                    properties: Vec::new(),
                },
            )
            .expect("abandoned");
    }
    assert_eq!(state.message_count(SubQueue::Main), 0);
    let dead = state
        .record(SubQueue::DeadLetter, SequenceNumber(1))
        .expect("dead-lettered");
    assert_eq!(
        crate::broker::message::application_property_text(&dead.message, "DeadLetterReason")
            .as_deref(),
        Some(MAX_DELIVERY_COUNT_EXCEEDED)
    );
}

#[test]
fn release_does_not_count_a_delivery() {
    let (mut state, mut credit) = (entity(|_| {}), 0);
    let record = one_locked(&mut state, &mut credit);
    state
        .settle(
            START,
            record.lock.expect("locked").token,
            Settlement::Release,
        )
        .expect("released");
    let again = receive_one(&mut state, START, &mut credit).expect("redelivered");
    assert_eq!(again.delivery_count(), 0);
}

#[test]
fn deferred_messages_are_not_delivered_again() {
    // rule LCK-4
    let (mut state, mut credit) = (entity(|_| {}), 0);
    let record = one_locked(&mut state, &mut credit);
    state
        .settle(
            START,
            record.lock.expect("locked").token,
            Settlement::Defer {
                properties: Vec::new(),
            },
        )
        .expect("deferred");
    assert!(receive_one(&mut state, START, &mut credit).is_none());
    let deferred = state
        .record(SubQueue::Main, SequenceNumber(1))
        .expect("kept");
    assert_eq!(deferred.state(), MessageState::Deferred);
}

#[test]
fn a_default_time_to_live_of_a_year_expires_to_the_millisecond() {
    // rule TTL-1, TTL-2: a default longer than a record keeps inline (issue 16) is kept
    // exactly, and a message's own shorter time to live still wins.
    let year = Duration::from_millis(365 * 24 * 3600 * 1000 + 7);
    let mut state = entity(|settings| {
        settings.default_message_time_to_live = Some(year);
    });
    let mut own = message("own");
    own.set_header(HeaderFields {
        time_to_live: Some(Duration::from_secs(5)),
        ..HeaderFields::default()
    });
    state
        .enqueue(START, vec![message("default"), own])
        .expect("accepted");
    let first = state
        .record(SubQueue::Main, SequenceNumber(1))
        .expect("stored");
    assert_eq!(first.time_to_live(), Some(year));
    assert_eq!(first.expires_at(), Some(START.plus(year)));
    let second = state
        .record(SubQueue::Main, SequenceNumber(2))
        .expect("stored");
    assert_eq!(second.time_to_live(), Some(Duration::from_secs(5)));
    state.advance(START.plus(year - Duration::from_millis(1)));
    assert!(
        state.record(SubQueue::Main, SequenceNumber(1)).is_some(),
        "not expired a millisecond early"
    );
    state.advance(START.plus(year));
    assert!(
        state.record(SubQueue::Main, SequenceNumber(1)).is_none(),
        "expired at the millisecond"
    );
}

#[test]
fn expired_messages_are_dead_lettered_by_the_timer() {
    // rule TTL-1, TTL-6, TTL-8
    let mut state = entity(|settings| {
        settings.default_message_time_to_live = Some(Duration::from_secs(10));
        settings.dead_lettering_on_message_expiration = true;
    });
    state.enqueue(START, vec![message("a")]).expect("accepted");
    assert_eq!(
        state.next_deadline(),
        Some(START.plus(Duration::from_secs(10)))
    );
    state.advance(START.plus(Duration::from_secs(10)));
    let dead = state
        .record(SubQueue::DeadLetter, SequenceNumber(1))
        .expect("dead-lettered");
    assert_eq!(
        crate::broker::message::application_property_text(&dead.message, "DeadLetterReason")
            .as_deref(),
        Some(TTL_EXPIRED)
    );
    state.advance(START.plus(Duration::from_secs(1_000_000)));
    assert_eq!(
        state.message_count(SubQueue::DeadLetter),
        1,
        "DLQ messages never expire"
    );
}

#[test]
fn drain_consumes_remaining_credit_after_delivering() {
    let mut state = entity(|_| {});
    state.enqueue(START, vec![message("a")]).expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    state.set_credit(START, RECEIVER, 5, true);
    let effects = state.take_effects();
    assert!(matches!(effects.first(), Some(Effect::Deliver(_))));
    assert!(matches!(
        effects.last(),
        Some(Effect::Drained {
            delivery_count: 5,
            ..
        })
    ));
}

#[test]
fn a_fence_follows_every_delivery_made_before_it() {
    // Rule SEQ-4: a connection that held its receiver back gives credit again only after
    // the fence, so deliveries still on their way cannot overtake the ones it returned.
    let mut state = entity(|_| {});
    state
        .enqueue(START, vec![message("a"), message("b")])
        .expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    state.set_credit(START, RECEIVER, 5, false);
    state.set_credit(START, RECEIVER, 0, false);
    state.fence(RECEIVER);
    state.enqueue(START, vec![message("c")]).expect("accepted");
    let effects = state.take_effects();
    let kinds: Vec<&str> = effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Deliver(_) => Some("deliver"),
            Effect::Fenced { receiver } if *receiver == RECEIVER => Some("fenced"),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["deliver", "deliver", "fenced"]);
}

#[test]
fn a_receive_and_delete_delivery_that_never_reached_its_link_is_restored() {
    // No message loss: the link detached while the delivery was in flight.
    let mut state = entity(|_| {});
    state.enqueue(START, vec![message("a")]).expect("accepted");
    state.attach_receiver(
        START,
        RECEIVER,
        SubQueue::Main,
        ReceiveMode::ReceiveAndDelete,
    );
    let mut credit = 0;
    let record = receive_one(&mut state, START, &mut credit).expect("delivered");
    assert_eq!(state.message_count(SubQueue::Main), 0);
    state.detach_receiver(START, RECEIVER);
    state.return_undelivered(START, None, SubQueue::Main, record.record, record.lock);
    let restored = state
        .record(SubQueue::Main, SequenceNumber(1))
        .expect("restored");
    assert_eq!(restored.delivery_count(), 0);
    let other = ReceiverId(2);
    state.attach_receiver(START, other, SubQueue::Main, ReceiveMode::PeekLock);
    state.set_credit(START, other, 1, false);
    assert_eq!(deliveries(&mut state).len(), 1, "deliverable again");
}

#[test]
fn next_available_hands_out_each_of_ten_thousand_sessions_once_in_arrival_order() {
    // rules SES-1, SES-2: next-available takes the unlocked session with the oldest message;
    // selection is an index lookup, so 10,000 sessions and receivers stay cheap.
    let mut state = entity(|settings| settings.requires_session = true);
    let sessions = 10_000u64;
    for index in 0..sessions {
        let mut with_session = Message::with_body(&Bytes::from(format!("m{index}")));
        let system = with_session.system().with(
            crate::broker::message::SystemField::SessionId,
            (Some(format!("session-{index}"))).as_deref(),
        );
        with_session.set_system(system);
        state.enqueue(START, vec![with_session]).expect("accepted");
    }
    for index in 0..sessions {
        let receiver = ReceiverId(index + 1);
        state.attach_session_receiver(
            START,
            receiver,
            ReceiveMode::PeekLock,
            None,
            Duration::from_secs(1),
        );
        let accepted = state
            .take_effects()
            .into_iter()
            .find_map(|effect| match effect {
                Effect::SessionAccepted { session_id, .. } => Some(session_id),
                _ => None,
            });
        assert_eq!(accepted, Some(format!("session-{index}")));
    }
    let late = ReceiverId(sessions + 1);
    state.attach_session_receiver(
        START,
        late,
        ReceiveMode::PeekLock,
        None,
        Duration::from_secs(1),
    );
    assert!(
        state.take_effects().is_empty(),
        "every session is locked: the receiver waits"
    );
    state.advance(START.plus(Duration::from_secs(1)));
    assert!(
        state.take_effects().iter().any(|effect| matches!(
            effect,
            Effect::SessionRefused {
                error: EntityError::Timeout(_),
                ..
            }
        )),
        "the wait ends with a timeout"
    );
}

#[test]
fn twenty_thousand_idle_receivers_cost_nothing_per_send() {
    // Issue 10 item 3: dispatch looks only at receivers that can take a message.
    let mut state = entity(|_| {});
    for index in 0..20_000u64 {
        let receiver = ReceiverId(100 + index);
        state.attach_receiver(START, receiver, SubQueue::Main, ReceiveMode::PeekLock);
        // Half have no credit; half wait on the dead-letter sub-queue, which stays empty.
        if index % 2 == 1 {
            state.detach_receiver(START, receiver);
            state.attach_receiver(START, receiver, SubQueue::DeadLetter, ReceiveMode::PeekLock);
            state.set_credit(START, receiver, 10, false);
        }
    }
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    state.set_credit(START, RECEIVER, 1_000, false);
    let before = state.dispatch_visits();
    for index in 0..100 {
        state
            .enqueue(START, vec![message(&format!("m{index}"))])
            .expect("stored");
    }
    assert_eq!(deliveries(&mut state).len(), 100);
    let visits = state.dispatch_visits() - before;
    assert!(
        visits <= 200,
        "100 sends looked at {visits} receivers; idle ones must not be visited"
    );
}

#[test]
fn receivers_with_credit_take_turns() {
    let mut state = entity(|_| {});
    let receivers = [ReceiverId(11), ReceiverId(12), ReceiverId(13)];
    for receiver in receivers {
        state.attach_receiver(
            START,
            receiver,
            SubQueue::Main,
            ReceiveMode::ReceiveAndDelete,
        );
        state.set_credit(START, receiver, 2, false);
    }
    for index in 0..6 {
        state
            .enqueue(START, vec![message(&format!("m{index}"))])
            .expect("stored");
    }
    let order: Vec<ReceiverId> = state
        .take_effects()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Deliver(delivery) => delivery.receiver,
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        vec![
            receivers[0],
            receivers[1],
            receivers[2],
            receivers[0],
            receivers[1],
            receivers[2]
        ]
    );
    // Credit is used up: a seventh message waits.
    state.enqueue(START, vec![message("m6")]).expect("stored");
    assert!(deliveries(&mut state).is_empty());
}

#[test]
fn credit_of_two_to_the_thirty_one_or_more_is_credit() {
    // Issue 10 item 2: link-credit is a uint (AMQP 1.0 §2.7.4).
    let mut state = entity(|_| {});
    state.attach_receiver(
        START,
        RECEIVER,
        SubQueue::Main,
        ReceiveMode::ReceiveAndDelete,
    );
    state.grant_credit(START, RECEIVER, Some(0), u32::MAX, false);
    state.enqueue(START, vec![message("a")]).expect("stored");
    state.grant_credit(START, RECEIVER, Some(0), 1 << 31, false);
    state.enqueue(START, vec![message("b")]).expect("stored");
    assert_eq!(deliveries(&mut state).len(), 2);
}

#[test]
fn the_quota_counts_the_overhead_of_empty_messages() {
    // Issue 10 item 9: a 10 MiB queue once held 143 MiB of empty messages.
    let mut state = entity(|settings| settings.max_size_bytes = 100 * 1024);
    let mut accepted = 0;
    while state.enqueue(START, vec![message("")]).is_ok() {
        accepted += 1;
        assert!(accepted < 1_000, "the quota must bound empty messages");
    }
    assert!(
        accepted <= 100 * 1024 / crate::broker::message::MESSAGE_OVERHEAD,
        "{accepted} empty messages in 100 KiB"
    );
}

fn session_message(body: &str, session: &str) -> Message {
    let mut message = Message::with_body(&Bytes::from(body.as_bytes().to_vec()));
    let system = message.system().with(
        crate::broker::message::SystemField::SessionId,
        (Some(session.to_string())).as_deref(),
    );
    message.set_system(system);
    message
}

#[test]
fn session_state_and_messages_are_rebuilt_from_change_records() {
    // issue 11: session state goes through the log; a restart releases the session lock
    let mut state = entity(|settings| settings.requires_session = true);
    state.set_journaling(true);
    state
        .enqueue(
            START,
            vec![session_message("a1", "a"), session_message("a2", "a")],
        )
        .expect("accepted");
    state.attach_session_receiver(
        START,
        RECEIVER,
        ReceiveMode::PeekLock,
        Some("a".to_string()),
        Duration::ZERO,
    );
    state.set_credit(START, RECEIVER, 1, false);
    state
        .set_session_state(START, "a", Some(b"progress-1".to_vec()))
        .expect("the session is held");
    let held = deliveries(&mut state);
    assert_eq!(held.len(), 1, "one message locked in the session");
    let changes = state.take_changes();
    assert!(changes.iter().any(|change| matches!(
        change,
        super::state::Change::SessionState { session_id, state: Some(bytes) }
            if session_id == "a" && bytes == b"progress-1"
    )));

    let mut restored = EntityState::restore(state.settings().clone(), 9, START, changes);
    assert_eq!(restored.log().fingerprint(), state.log().fingerprint());
    assert_eq!(
        restored.log().session_state("a").map(Vec::as_slice),
        Some(&b"progress-1"[..])
    );
    // The lock held before the restart is gone: both messages are there for a new holder.
    restored.attach_session_receiver(
        START,
        RECEIVER,
        ReceiveMode::PeekLock,
        Some("a".to_string()),
        Duration::ZERO,
    );
    restored.set_credit(START, RECEIVER, 5, false);
    let bodies: Vec<Vec<u8>> = deliveries(&mut restored)
        .iter()
        .map(|delivery| delivery.message.body().to_vec())
        .collect();
    assert_eq!(bodies, vec![b"a1".to_vec(), b"a2".to_vec()]);
}

#[test]
fn the_forwarding_outbox_keeps_a_message_until_its_target_has_it() {
    // rule FWD-1, issue 11: a forwarded message leaves the source only on Forwarded; after a
    // restart what the outbox held is sent again
    let mut state = entity(|settings| {
        settings.forward_to = Some("target".to_string());
        settings.forwards = true;
    });
    state.set_journaling(true);
    let numbers = state
        .enqueue(START, vec![message("onward")])
        .expect("accepted");
    let forwarded: Vec<_> = state
        .take_effects()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Forward {
                message,
                sequence_number,
                target: OutboxTarget::Forward,
            } => Some((message, sequence_number)),
            _ => None,
        })
        .collect();
    assert_eq!(forwarded.len(), 1);
    assert_eq!(forwarded[0].1, numbers[0]);
    assert_eq!(forwarded[0].0.hop_count(), 1);
    assert_eq!(
        state.log().outbox().len(),
        1,
        "kept until the target has it"
    );
    assert!(
        state.stored_bytes() > 0,
        "the outbox counts against the quota"
    );
    let changes = state.take_changes();

    // A crash before the target confirmed: the restored source sends it again.
    let mut restored = EntityState::restore(state.settings().clone(), 9, START, changes);
    let resent: Vec<_> = restored
        .take_effects()
        .into_iter()
        .filter(|effect| matches!(effect, Effect::Forward { sequence_number, .. } if *sequence_number == numbers[0]))
        .collect();
    assert_eq!(resent.len(), 1);

    state.forwarded(START, numbers[0]);
    assert!(state.log().outbox().is_empty());
    assert_eq!(state.stored_bytes(), 0);
    assert!(matches!(
        state.take_changes().as_slice(),
        [super::state::Change::Forwarded { .. }]
    ));
    // The next number is not reused.
    let next = state
        .enqueue(START, vec![message("next")])
        .expect("accepted");
    assert_eq!(next[..], [SequenceNumber(numbers[0].0 + 1)]);
}

#[test]
fn receive_disabled_keeps_messages_back_until_active_again() {
    // Entity status (issue 15 item 4): ReceiveDisabled holds messages, drains are still answered.
    let mut state =
        entity(|settings| settings.status = crate::config::EntityStatus::ReceiveDisabled);
    state.enqueue(START, vec![message("a")]).expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    state.set_credit(START, RECEIVER, 5, true);
    let effects = state.take_effects();
    assert!(
        !effects
            .iter()
            .any(|effect| matches!(effect, Effect::Deliver(_))),
        "nothing is delivered while receiving is disabled"
    );
    assert!(matches!(
        effects.last(),
        Some(Effect::Drained {
            delivery_count: 5,
            ..
        })
    ));
    state.set_credit(START, RECEIVER, 10, false);
    assert!(deliveries(&mut state).is_empty());

    let mut active = state.settings().clone();
    active.status = crate::config::EntityStatus::Active;
    state.update_settings(START, active);
    let delivered = deliveries(&mut state);
    assert_eq!(
        delivered.len(),
        1,
        "the held message goes out once the queue is Active"
    );
}

#[test]
fn dead_lettering_is_counted_once_by_reason() {
    // rule LCK-2, DLQ-3, DLQ-4: the metrics' dead-lettered totals
    let mut state = entity(|settings| settings.max_delivery_count = 1);
    state
        .enqueue(START, vec![message("a"), message("b")])
        .expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    let mut credit = 0;
    let first = receive_one(&mut state, START, &mut credit).expect("delivered");
    state
        .settle(
            START,
            first.lock.expect("locked").token,
            Settlement::Abandon {
                properties: Vec::new(),
            },
        )
        .expect("abandoned");
    let second = receive_one(&mut state, START, &mut credit).expect("delivered");
    state
        .settle(
            START,
            second.lock.expect("locked").token,
            dead_letter("poison"),
        )
        .expect("dead-lettered");
    state.enqueue_dead_lettered(
        START,
        message("c"),
        super::state::SESSION_ID_IS_NULL.to_string(),
        "no session".to_string(),
    );
    let totals = state.counts().totals;
    assert_eq!(totals.dead_lettered, 3);
    let by_reason = totals.dead_lettered_by_reason;
    assert_eq!(by_reason.max_delivery_count_exceeded, 1);
    assert_eq!(by_reason.application, 1);
    assert_eq!(by_reason.session_id_is_null, 1);
    assert_eq!(state.message_count(SubQueue::DeadLetter), 3);
}

#[test]
fn explorer_takes_messages_by_sequence_number_and_skips_locked_ones() {
    // The explorer's single-message actions: active and deferred messages are taken by
    // number, locked ones are refused whole (rule LCK-1: a lock belongs to its holder).
    let mut state = entity(|_| {});
    with_peek_lock_receiver(&mut state, &["a", "b", "c"]);
    let mut credit = 0;
    let held = receive_one(&mut state, START, &mut credit).expect("delivered");
    assert_eq!(held.sequence_number, SequenceNumber(1));
    let refused = state.take_by_sequence(
        START,
        SubQueue::Main,
        &[SequenceNumber(1), SequenceNumber(2)],
        ReceiveMode::PeekLock,
    );
    assert!(matches!(refused, Err(EntityError::MessageNotFound(_))));
    let taken = state
        .take_by_sequence(
            START,
            SubQueue::Main,
            &[SequenceNumber(3), SequenceNumber(2)],
            ReceiveMode::PeekLock,
        )
        .expect("taken");
    let numbers: Vec<i64> = taken
        .iter()
        .map(|(record, _)| record.sequence_number.0)
        .collect();
    assert_eq!(numbers, vec![2, 3]);
    let (_, lock) = &taken[0];
    let token = lock.expect("locked").token;
    state
        .settle(START, token, Settlement::Complete)
        .expect("settled with the explorer's lock");
    assert!(state.record(SubQueue::Main, SequenceNumber(2)).is_none());
    // Taken messages are not delivered to the attached receiver meanwhile.
    assert!(receive_one(&mut state, START, &mut credit).is_none());
    let removed = state.take_by_sequence(
        START,
        SubQueue::Main,
        &[SequenceNumber(1)],
        ReceiveMode::ReceiveAndDelete,
    );
    assert!(
        removed.is_err(),
        "the receiver's lock still holds message 1"
    );
}

#[test]
fn purge_deletes_unlocked_messages_of_every_state() {
    let mut state = entity(|_| {});
    let mut scheduled = Message::with_body(&Bytes::from_static(b"later"));
    scheduled.edit_extras(|extras| {
        extras.scheduled_enqueue_time = Some(START.plus(Duration::from_secs(3600)))
    });
    state
        .enqueue(
            START,
            vec![message("a"), message("b"), message("c"), scheduled],
        )
        .expect("accepted");
    assert_eq!(state.counts().scheduled, 1);
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    let mut credit = 0;
    let held = receive_one(&mut state, START, &mut credit).expect("delivered");
    let deleted = state.purge(START, SubQueue::Main, None, None, usize::MAX);
    assert_eq!(deleted, 3, "b, c and the scheduled one; a is locked");
    let counts = state.counts();
    assert_eq!((counts.active, counts.scheduled), (1, 0));
    // The scheduled message's activation is gone with it.
    let later = START.plus(Duration::from_secs(7200));
    state
        .settle(
            later.min(START),
            held.lock.expect("locked").token,
            Settlement::Complete,
        )
        .expect("completed");
    state.advance(later);
    assert_eq!(state.counts().active, 0);
    assert_eq!(
        state.purge(later, SubQueue::DeadLetter, None, None, usize::MAX),
        0
    );
}

fn keyed(body: &str, key: &str) -> Message {
    let mut message = Message::with_body(&Bytes::from(body.as_bytes().to_vec()));
    message.edit_extras(|extras| extras.partition_key = Some(key.into()));
    message
}

#[test]
fn a_partitioned_entity_numbers_per_partition_and_interleaves_partitions() {
    // rule PRT-1, PRT-2
    use crate::broker::partitions::{PARTITIONS, partition_of_key, partition_of_number};
    let mut state = entity(|settings| settings.partitions = PARTITIONS);
    state.set_journaling(true);
    // Two keys in two different partitions.
    let (a, b) = (0..100)
        .map(|index| format!("key-{index}"))
        .find_map(|candidate| {
            (partition_of_key(&candidate, PARTITIONS) != partition_of_key("key-a", PARTITIONS))
                .then(|| ("key-a".to_string(), candidate))
        })
        .expect("another partition");
    let (pa, pb) = (
        partition_of_key(&a, PARTITIONS),
        partition_of_key(&b, PARTITIONS),
    );
    let numbers = state
        .enqueue(
            START,
            vec![
                keyed("a1", &a),
                keyed("a2", &a),
                keyed("a3", &a),
                keyed("b1", &b),
                keyed("b2", &b),
            ],
        )
        .expect("accepted");
    let low = |number: &SequenceNumber| number.0 & ((1 << 48) - 1);
    assert_eq!(
        numbers
            .iter()
            .map(|n| partition_of_number(n.0))
            .collect::<Vec<_>>(),
        vec![pa, pa, pa, pb, pb]
    );
    assert_eq!(
        numbers.iter().map(low).collect::<Vec<_>>(),
        vec![1, 2, 3, 1, 2],
        "gapless from 1 within each partition"
    );
    // Receivers get both partitions interleaved by their counts, each in order.
    state.attach_receiver(
        START,
        RECEIVER,
        SubQueue::Main,
        ReceiveMode::ReceiveAndDelete,
    );
    state.set_credit(START, RECEIVER, 5, false);
    let order: Vec<String> = deliveries(&mut state)
        .iter()
        .map(|delivery| String::from_utf8_lossy(delivery.record.message.body()).to_string())
        .collect();
    let first_two: std::collections::BTreeSet<_> = order[..2].iter().cloned().collect();
    assert_eq!(
        first_two,
        ["a1".to_string(), "b1".to_string()].into_iter().collect(),
        "{order:?}"
    );
    let of = |prefix: char| {
        order
            .iter()
            .filter(|body| body.starts_with(prefix))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(of('a'), ["a1", "a2", "a3"]);
    assert_eq!(of('b'), ["b1", "b2"]);
    // The counters survive a restore from the change records and from a checkpoint.
    let changes = state.take_changes();
    let mut restored = EntityState::restore(state.settings().clone(), 9, START, changes);
    let next = restored
        .enqueue(START, vec![keyed("a4", &a)])
        .expect("accepted");
    assert_eq!(low(&next[0]), 4);
    assert_eq!(partition_of_number(next[0].0), pa);
    let checkpoint = restored.checkpoint();
    let mut again = EntityState::restore(state.settings().clone(), 9, START, checkpoint);
    let next = again
        .enqueue(START, vec![keyed("b3", &b)])
        .expect("accepted");
    assert_eq!(
        low(&next[0]),
        3,
        "partition b's counter came through the checkpoint"
    );
}

#[test]
fn properties_the_broker_merges_are_counted_while_stored_and_released_with_the_record() {
    // Issue 16: a record's property changes live in its message; the quota counts them.
    let (mut state, mut credit) = (entity(|_| {}), 0);
    let record = one_locked(&mut state, &mut credit);
    let alone = state.stored_bytes();
    let properties = vec![(
        "note".to_string(),
        crate::broker::types::PropertyValue::String("x".repeat(100)),
    )];
    state
        .settle(
            START,
            record.lock.expect("locked").token,
            Settlement::Abandon { properties },
        )
        .expect("abandoned");
    assert!(
        state.stored_bytes() >= alone + 100,
        "{} bytes counted, {alone} before",
        state.stored_bytes()
    );
    let again = receive_one(&mut state, START, &mut credit).expect("redelivered");
    assert_eq!(
        crate::broker::message::application_property_text(&again.message, "note").as_deref(),
        Some("x".repeat(100).as_str())
    );
    state
        .settle(START, again.lock.expect("locked").token, dead_letter("why"))
        .expect("dead-lettered");
    state.attach_receiver(
        START,
        ReceiverId(2),
        SubQueue::DeadLetter,
        ReceiveMode::ReceiveAndDelete,
    );
    state.set_credit(START, ReceiverId(2), 1, false);
    let dead = deliveries(&mut state)
        .pop()
        .expect("delivered from the dead-letter queue");
    assert_eq!(
        crate::broker::message::application_property_text(&dead.message, "DeadLetterReason")
            .as_deref(),
        Some("why")
    );
    assert_eq!(state.stored_bytes(), 0, "what was counted is released");
}
