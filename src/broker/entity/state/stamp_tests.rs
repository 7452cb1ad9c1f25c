use std::time::Duration;

use super::*;
use crate::broker::entity::state::Record;
use crate::broker::entity::state::packed::MAX_DELIVERY_COUNT;
use crate::broker::message::HeaderFields;
use crate::broker::types::SequenceNumber;

/// A message whose `header.ttl` is `ttl`.
fn message_with_ttl(ttl: Option<Duration>) -> Message {
    let mut message = Message::with_body(b"x");
    message.set_header(HeaderFields {
        time_to_live: ttl,
        ..HeaderFields::default()
    });
    message
}

/// 2026-11-29 in Unix milliseconds.
const NOW: Timestamp = Timestamp(1_795_910_400_000);

#[test]
fn a_record_is_24_bytes() {
    // Issue 43: the message, the sequence number and the stamp.
    assert_eq!(std::mem::size_of::<Stamp>(), 8);
    assert_eq!(std::mem::size_of::<Record>(), 24);
}

#[test]
fn every_value_reads_back_in_either_form() {
    let own = Duration::from_millis(90_000);
    let times = [
        Timestamp(0),
        Timestamp(1),
        NOW,
        Timestamp(TIME_LIMIT - 1),
        Timestamp(TIME_LIMIT),
        Timestamp(-1),
        Timestamp(i64::MIN),
        Timestamp(i64::MAX),
    ];
    let ttls = [
        None,
        Some(own),
        Some(Duration::from_secs(60)),
        Some(Duration::from_millis(
            super::super::packed::LONGEST_INLINE + 1,
        )),
        Some(Duration::from_millis(u64::MAX)),
    ];
    let states = [
        MessageState::Active,
        MessageState::Deferred,
        MessageState::Scheduled,
    ];
    let counts = [
        0,
        1,
        COMPACT_COUNT_LIMIT,
        COMPACT_COUNT_LIMIT + 1,
        MAX_DELIVERY_COUNT,
    ];
    for message in [message_with_ttl(None), message_with_ttl(Some(own))] {
        for time in times {
            for ttl in ttls {
                for state in states {
                    for expires in [false, true] {
                        for count in counts {
                            let mut stamp = Stamp::new(time, ttl, &message);
                            assert_eq!(stamp.state(), MessageState::Active);
                            assert!(!stamp.expires());
                            assert_eq!(stamp.delivery_count(), 0);
                            stamp.set_delivery_count(count, &message);
                            stamp.set_expires(expires);
                            stamp.set_state(state);
                            let values = |stamp: &Stamp| {
                                (
                                    stamp.enqueued_time(),
                                    stamp.time_to_live(&message),
                                    stamp.state(),
                                    stamp.expires(),
                                    stamp.delivery_count(),
                                )
                            };
                            let expected = (time, ttl, state, expires, count);
                            assert_eq!(values(&stamp), expected, "{stamp:?}");
                            let in_range = (0..TIME_LIMIT).contains(&time.0);
                            if !in_range || count > COMPACT_COUNT_LIMIT {
                                assert!(!stamp.is_compact(), "{stamp:?}");
                            }
                            if in_range && count <= COMPACT_COUNT_LIMIT && ttl != Some(own) {
                                // None, or the process's table (which has room here).
                                assert!(stamp.is_compact() || ttl.is_some(), "{stamp:?}");
                            }
                            let copy = stamp.clone();
                            drop(stamp);
                            assert_eq!(values(&copy), expected, "a clone: {copy:?}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_plain_record_is_compact() {
    let plain = message_with_ttl(None);
    assert!(Stamp::new(NOW, None, &plain).is_compact());
    let own = Duration::from_secs(30);
    let with_ttl = message_with_ttl(Some(own));
    let stamp = Stamp::new(NOW, Some(own), &with_ttl);
    assert!(stamp.is_compact(), "the message's own time to live");
    assert_eq!(stamp.time_to_live(&with_ttl), Some(own));
    let mut delivered = Stamp::new(NOW, None, &plain);
    delivered.set_delivery_count(COMPACT_COUNT_LIMIT, &plain);
    delivered.set_enqueued_time(Timestamp(TIME_LIMIT - 1), &plain);
    assert!(delivered.is_compact());
}

#[test]
fn a_stamp_widens_when_a_value_outgrows_it_and_keeps_the_others() {
    let own = Duration::from_millis(1_500);
    let message = message_with_ttl(Some(own));
    let mut stamp = Stamp::new(NOW, Some(own), &message);
    stamp.set_state(MessageState::Deferred);
    stamp.set_expires(true);
    stamp.set_delivery_count(7, &message);
    assert!(stamp.is_compact());
    stamp.set_delivery_count(COMPACT_COUNT_LIMIT + 1, &message);
    assert!(!stamp.is_compact());
    assert_eq!(stamp.enqueued_time(), NOW);
    assert_eq!(stamp.time_to_live(&message), Some(own));
    assert_eq!(stamp.state(), MessageState::Deferred);
    assert!(stamp.expires());
    assert_eq!(stamp.delivery_count(), COMPACT_COUNT_LIMIT + 1);
    // A wide stamp takes every change.
    stamp.set_enqueued_time(Timestamp(-5), &message);
    stamp.set_time_to_live(None, &message);
    stamp.set_state(MessageState::Scheduled);
    stamp.set_expires(false);
    stamp.set_delivery_count(2, &message);
    assert_eq!(stamp.enqueued_time(), Timestamp(-5));
    assert_eq!(stamp.time_to_live(&message), None);
    assert_eq!(stamp.state(), MessageState::Scheduled);
    assert!(!stamp.expires());
    assert_eq!(stamp.delivery_count(), 2);
    // A compact one too, widening for a time out of its range.
    let mut early = Stamp::new(NOW, None, &message);
    early.set_enqueued_time(Timestamp(-1), &message);
    assert!(!early.is_compact());
    assert_eq!(early.enqueued_time(), Timestamp(-1));
}

#[test]
fn a_record_keeps_its_time_to_live_when_its_message_is_rebuilt() {
    // The effective time to live is the message's own (rule TTL-2): merging properties
    // into the message (a dead-letter reason) rebuilds it with the same header.
    let own = Duration::from_secs(45);
    let mut record = Record::new(
        message_with_ttl(Some(own)),
        SequenceNumber(1),
        NOW,
        Some(own),
    );
    record.message.merge_application_properties(&[(
        "DeadLetterReason".to_string(),
        crate::broker::types::PropertyValue::String("why".to_string()),
    )]);
    assert_eq!(record.time_to_live(), Some(own));
    assert_eq!(record.enqueued_time(), NOW);
}

#[test]
fn the_table_keeps_each_duration_once_and_refuses_past_its_limit() {
    let table = Table::new();
    let first = table.code(60_000).expect("room");
    assert_eq!(table.code(60_000), Some(first));
    assert_eq!(table.millis(first), 60_000);
    for millis in 1..TABLE_LIMIT as u64 {
        assert!(table.code(millis).is_some());
    }
    assert_eq!(table.code(u64::MAX), None, "full");
    assert_eq!(table.code(60_000), Some(first), "kept ones still code");
    assert_eq!(
        table.millis(TTL_TABLE + TABLE_LIMIT - 1),
        TABLE_LIMIT as u64 - 1
    );
}
