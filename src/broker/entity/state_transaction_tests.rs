//! Unit tests of transactions in the pure entity core (rules TXN-1 to TXN-4): settlements,
//! sends and via sends committed together or not at all.

use bytes::Bytes;

use super::state::{Effect, EntityState};
use super::state_tests::{RECEIVER, START, dead_letter, entity, message, receive_one};
use crate::broker::message::Message;
use crate::broker::types::{
    EntityError, OutboxTarget, ReceiveMode, SequenceNumber, Settlement, SubQueue,
};

/// Two messages locked by `RECEIVER`: their tokens.
fn two_locked(state: &mut EntityState) -> (super::state::Delivery, super::state::Delivery) {
    state
        .enqueue(START, vec![message("in-1"), message("in-2")])
        .expect("accepted");
    state.attach_receiver(START, RECEIVER, SubQueue::Main, ReceiveMode::PeekLock);
    let mut credit = 0;
    let first = receive_one(state, START, &mut credit).expect("delivered");
    let second = receive_one(state, START, &mut credit).expect("delivered");
    (first, second)
}

#[test]
fn a_transaction_commits_its_settlements_sends_and_via_sends_in_one_record() {
    // rule TXN-1, TXN-3: complete + dead-letter + a send + a send-via, all in one commit
    let mut state = entity(|_| {});
    let (first, second) = two_locked(&mut state);
    state.set_journaling(true);
    let work = super::TransactionWork {
        sends: vec![message("out-here")],
        via: vec![("elsewhere".into(), message("out-there"))],
        settlements: vec![
            (first.lock.expect("locked").token, Settlement::Complete),
            (second.lock.expect("locked").token, dead_letter("r")),
        ],
    };
    let numbers = state.commit_transaction(START, work).expect("committed");
    assert_eq!(numbers[..], [SequenceNumber(3)]);
    assert!(
        state
            .record(SubQueue::Main, first.record.sequence_number)
            .is_none()
    );
    assert!(
        state
            .record(SubQueue::DeadLetter, second.record.sequence_number)
            .is_some()
    );
    assert!(state.record(SubQueue::Main, SequenceNumber(3)).is_some());
    let via: Vec<_> = state
        .take_effects()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Forward {
                message, target, ..
            } => Some((Bytes::copy_from_slice(message.body()), target)),
            _ => None,
        })
        .collect();
    assert_eq!(
        via,
        vec![(
            Bytes::from_static(b"out-there"),
            OutboxTarget::Via("elsewhere".into())
        )]
    );
    assert_eq!(
        state.log().outbox().len(),
        1,
        "held until the destination has it"
    );
    // The whole commit is one turn's changes: restoring them reproduces it.
    let changes = state.take_changes();
    let restored = EntityState::restore(state.settings().clone(), 9, START, changes);
    assert_eq!(restored.log().outbox().len(), 1);
    assert!(restored.record(SubQueue::Main, SequenceNumber(3)).is_some());
}

#[test]
fn a_transaction_with_a_lost_lock_changes_nothing() {
    // rule TXN-2: one settlement whose lock lapsed fails the whole commit
    let mut state = entity(|_| {});
    let (first, second) = two_locked(&mut state);
    // The second lock is settled outside the transaction first: its token is gone.
    let second_token = second.lock.expect("locked").token;
    state
        .settle(START, second_token, Settlement::Complete)
        .expect("settled");
    state.set_journaling(true);
    let stored_before = state.stored_bytes();
    let work = super::TransactionWork {
        sends: vec![message("out")],
        via: vec![("elsewhere".into(), message("via"))],
        settlements: vec![
            (first.lock.expect("locked").token, Settlement::Complete),
            (second_token, Settlement::Complete),
        ],
    };
    assert_eq!(
        state.commit_transaction(START, work),
        Err(EntityError::LockLost)
    );
    assert!(state.take_changes().is_empty(), "nothing recorded");
    assert_eq!(state.stored_bytes(), stored_before);
    assert!(state.log().outbox().is_empty());
    assert!(
        state
            .record(SubQueue::Main, first.record.sequence_number)
            .is_some(),
        "the first message is still there"
    );
    // ... and still locked by its receiver: it can be completed outside the transaction.
    assert_eq!(
        state.settle(
            START,
            first.lock.expect("locked").token,
            Settlement::Complete
        ),
        Ok(())
    );
}

#[test]
fn a_transaction_that_does_not_fit_changes_nothing() {
    // rule TXN-2: the quota counts sends and via sends together
    let big = Message::with_body(&Bytes::from(vec![0u8; 1200]));
    // Room for the two sends alone, not beside the two messages already stored.
    let limit = 2 * big.size() as u64;
    let mut state = entity(|settings| settings.max_size_bytes = limit);
    let (first, _) = two_locked(&mut state);
    let work = super::TransactionWork {
        sends: vec![big.clone()],
        via: vec![("elsewhere".into(), big)],
        settlements: vec![(first.lock.expect("locked").token, Settlement::Complete)],
    };
    assert!(matches!(
        state.commit_transaction(START, work),
        Err(EntityError::QuotaExceeded { .. })
    ));
    assert!(
        state
            .record(SubQueue::Main, first.record.sequence_number)
            .is_some()
    );
    assert_eq!(state.message_count(SubQueue::Main), 2);
}

#[test]
fn a_transaction_settling_one_lock_twice_is_refused_whole() {
    // rule TXN-2
    let mut state = entity(|_| {});
    let (first, _) = two_locked(&mut state);
    let token = first.lock.expect("locked").token;
    let work = super::TransactionWork {
        settlements: vec![
            (token, Settlement::Complete),
            (
                token,
                Settlement::Defer {
                    properties: Vec::new(),
                },
            ),
        ],
        ..Default::default()
    };
    assert_eq!(
        state.commit_transaction(START, work),
        Err(EntityError::LockLost)
    );
    assert_eq!(state.message_count(SubQueue::Main), 2);
}
