//! Unit tests of settling in the pure entity core with explicit times: the locks one client
//! disposition names settled together (issue 16), and the effects list the actor gives back.

use super::state::EntityState;
use super::state_tests::{
    RECEIVER, START, dead_letter, deliveries, entity, with_peek_lock_receiver,
};
use crate::broker::types::{SequenceNumber, Settlement, SubQueue};

#[test]
fn settling_locks_together_is_settling_each_in_turn() {
    // Issue 16: the locks of one client disposition are settled in one command; each is
    // settled as if alone (rules LCK-1, LCK-3, LCK-4, DLQ-4), a lost one refused alone.
    let settlements = [
        Settlement::Complete,
        Settlement::Release,
        Settlement::Abandon {
            properties: Vec::new(),
        },
        dead_letter("why"),
    ];
    for settlement in settlements {
        // Two entities alike (the same seed: the same lock tokens), settled each way.
        let mut one_by_one = entity(|_| {});
        let mut together = entity(|_| {});
        let mut tokens = Vec::new();
        for state in [&mut one_by_one, &mut together] {
            with_peek_lock_receiver(state, &["a", "b", "c", "d"]);
            state.set_credit(START, RECEIVER, 3, false);
            tokens = deliveries(state)
                .iter()
                .map(|delivery| delivery.lock.expect("locked").token)
                .collect();
        }
        assert_eq!(tokens.len(), 3);
        // The first lock twice: settled already the second time, so lost.
        let named = [tokens[0], tokens[2], tokens[0], tokens[1]];
        let refused_one_by_one = named
            .iter()
            .filter(|&&token| one_by_one.settle(START, token, settlement.clone()).is_err())
            .count();
        let refused_together = together.settle_all(START, &named, &settlement);
        assert_eq!(
            (refused_one_by_one, refused_together),
            (1, 1),
            "{settlement:?}"
        );
        // Afterwards both hold, and hand out, the same messages in the same states.
        let after = |state: &mut EntityState| {
            let held = |state: &mut EntityState, sub_queue| {
                state
                    .peek(START, sub_queue, SequenceNumber(1), 10, None)
                    .iter()
                    .map(|(record, lock)| {
                        (
                            record.sequence_number.0,
                            record.delivery_count(),
                            lock.is_some(),
                        )
                    })
                    .collect::<Vec<_>>()
            };
            let main = held(state, SubQueue::Main);
            let dead = held(state, SubQueue::DeadLetter);
            state.set_credit(START, RECEIVER, 10, false);
            let next: Vec<i64> = deliveries(state)
                .iter()
                .map(|delivery| delivery.record.sequence_number.0)
                .collect();
            (main, dead, next)
        };
        let expected = after(&mut one_by_one);
        assert_eq!(after(&mut together), expected, "{settlement:?}");
        // And what each settlement means: completed or dead-lettered, the three are gone
        // from the queue and only d is handed out; released or abandoned, all four are.
        let (main, dead, next) = expected;
        match settlement {
            Settlement::Complete | Settlement::DeadLetter { .. } => {
                assert_eq!(next, vec![4], "{settlement:?}");
                assert_eq!(main.len(), 1);
            }
            _ => assert_eq!(next, vec![1, 2, 3, 4], "{settlement:?}"),
        }
        let dead_lettered = matches!(settlement, Settlement::DeadLetter { .. });
        assert_eq!(dead.len(), if dead_lettered { 3 } else { 0 });
    }
}

#[test]
fn a_recycled_effects_list_brings_back_none_of_its_effects() {
    // Issue 16: the actor gives the emptied list back for its room only.
    let mut state = entity(|_| {});
    with_peek_lock_receiver(&mut state, &["a", "b"]);
    state.set_credit(START, RECEIVER, 1, false);
    let first = state.take_effects();
    assert_eq!(first.len(), 1, "one delivery");
    // Given back as it is (not drained): its delivery must not come out again.
    state.recycle_effects(first);
    assert!(state.take_effects().is_empty());
    state.set_credit(START, RECEIVER, 2, false);
    let second = deliveries(&mut state);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].record.sequence_number, SequenceNumber(2));
}
