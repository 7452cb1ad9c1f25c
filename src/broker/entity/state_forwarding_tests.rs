//! Forwarded arrivals at their target (`docs/scale-out.md` §8 item 6): an outbox entry is
//! stored once however often its source sends it, its key survives a checkpoint and a
//! replay, and the keys a source has committed as forwarded are forgotten.

use super::state::{Change, EntityState, ForwardKey};
use super::state_tests::{START, entity, message};
use crate::broker::types::{SequenceNumber, SubQueue, Timestamp};

fn key(sequence_number: i64) -> ForwardKey {
    ForwardKey {
        source: "source".into(),
        sequence_number: SequenceNumber(sequence_number),
        enqueued_time: Timestamp(1_000 + sequence_number),
    }
}

/// Stores the forwarded entry `key` unless it is already here (what the actor does).
fn arrive(state: &mut EntityState, key: ForwardKey, floor: i64) {
    if !state.forwarded_already(&key, SequenceNumber(floor)) {
        state.enqueue(START, vec![message("m")]).expect("accepted");
        state.received_forwarded(key);
    }
}

#[test]
fn a_resent_outbox_entry_is_stored_once_even_after_a_replay() {
    // rule FWD-1
    let mut target = entity(|_| {});
    target.set_journaling(true);
    arrive(&mut target, key(1), 1);
    let journal = target.take_changes();
    assert!(
        matches!(
            journal.as_slice(),
            [Change::Put { .. }, Change::Received { .. }]
        ),
        "the key goes into the same turn's record as the message: {journal:?}"
    );

    // The source crashed before it recorded the forward and sends the entry again.
    arrive(&mut target, key(1), 1);
    assert_eq!(target.message_count(SubQueue::Main), 1);

    // The target restarted from its log (and a checkpoint of it).
    let mut settings = crate::broker::entity::settings::EntitySettings::with_defaults("q");
    settings.lock_duration = std::time::Duration::from_secs(30);
    let replayed = EntityState::restore(settings.clone(), 8, START, journal);
    let checkpointed = EntityState::restore(settings, 9, START, replayed.log().checkpoint());
    for mut state in [replayed, checkpointed] {
        arrive(&mut state, key(1), 1);
        assert_eq!(state.message_count(SubQueue::Main), 1);
        // The same number from a later incarnation of the source is a new entry.
        let mut later = key(1);
        later.enqueued_time = Timestamp(5_000);
        arrive(&mut state, later, 1);
        assert_eq!(state.message_count(SubQueue::Main), 2);
    }
}

#[test]
fn keys_below_the_sources_outbox_floor_are_forgotten() {
    let mut target = entity(|_| {});
    target.set_journaling(true);
    for number in 1..=3 {
        arrive(&mut target, key(number), 1);
    }
    assert_eq!(target.log().received_count(), 3);
    target.take_changes();
    // Entries 1..=3 left the source's outbox: its next forward says so.
    arrive(&mut target, key(4), 4);
    assert_eq!(
        target.log().received_count(),
        1,
        "only the newest key is kept"
    );
    assert!(
        target
            .take_changes()
            .iter()
            .any(|change| matches!(change, Change::ForgetReceived { below, .. } if *below == SequenceNumber(4))),
        "the forgetting is durable too"
    );
}
