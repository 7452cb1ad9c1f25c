//! Tests of the record codec: every record and change round-trips through its bytes.

use super::*;
use crate::broker::entity::state::MessageLog;
use crate::broker::message::SystemProperties;

fn sample_record(sequence_number: i64) -> Record {
    let mut message = Message::from_parts(
        [b"\xa3\x03abc\x41", b"\x00\x53\x73\x45", b"", &[9u8; 300]],
        [None; 8],
    );
    message.set_header(HeaderFields {
        durable: true,
        priority: 7,
        time_to_live: Some(Duration::from_millis(1234)),
    });
    message.set_system(SystemProperties::new([
        Some("id-1"),
        None,
        None,
        None,
        None,
        Some("s"),
        None,
        Some("application/json"),
    ]));
    message.set_hop_count(2);
    message.edit_extras(|extras| {
        *extras = Extras {
            scheduled_enqueue_time: Some(Timestamp(1_700_000_000_000)),
            original_sequence_number: Some(-5),
            user_properties: vec![("k".into(), PropertyValue::Double(1.5))],
            dead_letter_source: Some("q".into()),
            extra_properties: vec![("x".into(), PropertyValue::Uuid([3; 16]))],
            topic_sequence: None,
            partition_key: None,
        }
    });
    let mut record = Record::new(
        message,
        SequenceNumber(sequence_number),
        Timestamp(1_700_000_000_001),
        Some(Duration::from_millis(2500)),
    );
    record.set_expires(true);
    record.set_delivery_count(3);
    record.set_state(MessageState::Deferred);
    record
        .message
        .merge_application_properties(&property_changes());
    record
}

fn property_changes() -> Vec<(String, PropertyValue)> {
    vec![
        ("a".into(), PropertyValue::Null),
        ("b".into(), PropertyValue::Bool(true)),
        ("c".into(), PropertyValue::Long(i64::MIN)),
        ("d".into(), PropertyValue::String("é".into())),
        ("e".into(), PropertyValue::Timestamp(-1)),
        ("f".into(), PropertyValue::Binary(vec![0, 255])),
    ]
}

fn every_change() -> Vec<Change> {
    vec![
        Change::Put {
            sub_queue: SubQueue::Main,
            record: Box::new(sample_record(1)),
        },
        Change::Put {
            sub_queue: SubQueue::TransferDeadLetter,
            record: Box::new(sample_record(2)),
        },
        Change::Update {
            sub_queue: SubQueue::Main,
            sequence_number: SequenceNumber(1),
            delivery_count: 4,
            state: MessageState::Active,
            enqueued_time: Timestamp(5),
            expires_at: None,
            property_changes: vec![("z".into(), PropertyValue::Long(1))],
        },
        Change::Move {
            from: SubQueue::Main,
            to: SubQueue::DeadLetter,
            sequence_number: SequenceNumber(1),
        },
        Change::Remove {
            sub_queue: SubQueue::TransferDeadLetter,
            sequence_number: SequenceNumber(2),
        },
        Change::NextSequence(10),
        Change::SessionState {
            session_id: "s".into(),
            state: Some(vec![1, 2, 3]),
        },
        Change::SessionState {
            session_id: "t".into(),
            state: None,
        },
        Change::Outbox {
            record: Box::new(sample_record(3)),
            target: OutboxTarget::DeadLetters,
        },
        Change::Outbox {
            record: Box::new(sample_record(4)),
            target: OutboxTarget::Forward,
        },
        Change::Outbox {
            record: Box::new(sample_record(5)),
            target: OutboxTarget::Via("queue-b".into()),
        },
        Change::Forwarded {
            sequence_number: SequenceNumber(4),
        },
        Change::Received {
            key: crate::broker::entity::state::ForwardKey {
                source: "source".into(),
                sequence_number: SequenceNumber(7),
                enqueued_time: Timestamp(1_000),
            },
        },
        Change::Received {
            key: crate::broker::entity::state::ForwardKey {
                source: "source".into(),
                sequence_number: SequenceNumber(9),
                enqueued_time: Timestamp(1_001),
            },
        },
        Change::ForgetReceived {
            source: "source".into(),
            below: SequenceNumber(8),
        },
    ]
}

/// Every change kind survives encoding: replaying the decoded changes rebuilds the
/// same log as replaying the originals.
#[test]
fn changes_round_trip_through_their_bytes() {
    let changes = every_change();
    let bytes = encode(&LogRecord::Changes {
        entity: "topic/Subscriptions/sub".into(),
        changes: changes.clone(),
    });
    let LogRecord::Changes {
        entity,
        changes: decoded,
    } = decode(&bytes).expect("decodes")
    else {
        panic!("wrong kind");
    };
    assert_eq!(entity, "topic/Subscriptions/sub");
    let mut original = MessageLog::new(false);
    let mut replayed = MessageLog::new(false);
    for change in changes {
        original.apply(change);
    }
    for change in decoded {
        replayed.apply(change);
    }
    assert_eq!(original.fingerprint(), replayed.fingerprint());
    assert!(original.fingerprint().contains("DeadLetter"));
    assert!(
        original
            .fingerprint()
            .contains(r#"received {"source": {SequenceNumber(9): Timestamp(1001)}}"#),
        "the key below the forgotten number is gone, the other kept: {}",
        original.fingerprint()
    );
}

#[test]
fn a_record_written_with_its_property_changes_beside_the_message_reads_them_into_it() {
    // Builds before issue 16's fourth pass kept a record's property changes after its
    // other fields; they come back merged into the message's application properties.
    let record = sample_record(7);
    let mut old = Out(Vec::new());
    old.record_with_changes(
        &record,
        &[(
            "DeadLetterReason".into(),
            PropertyValue::String("old".into()),
        )],
    );
    let decoded = In {
        bytes: &old.0,
        at: 0,
    }
    .record()
    .expect("decodes");
    let text = |name| crate::broker::message::application_property_text(&decoded.message, name);
    assert_eq!(text("DeadLetterReason").as_deref(), Some("old"));
    assert_eq!(text("d").as_deref(), Some("é"), "the merged ones stay");
    assert_eq!(decoded.delivery_count(), record.delivery_count());
}

#[test]
fn rule_changes_round_trip_through_their_bytes() {
    use crate::broker::rules::{FilterDefinition, RuleDefinition};
    let rules = vec![
        RuleDefinition {
            name: "sql".into(),
            filter: FilterDefinition::Sql("color = 'red' AND amount > 10".into()),
            action: Some("SET sys.Label = 'big'".into()),
            filter_parameters: Vec::new(),
            action_parameters: Vec::new(),
            created_at: 1_700_000_000_000,
        },
        RuleDefinition {
            name: "parameters".into(),
            filter: FilterDefinition::Sql(
                "s = @s AND i = @i AND l = @l AND d = @d AND b = @b AND t = @t AND g = @g".into(),
            ),
            action: Some("SET span = @span".into()),
            filter_parameters: vec![
                ("@s".into(), ParameterValue::String("é".into())),
                ("@i".into(), ParameterValue::Int(-7)),
                ("l".into(), ParameterValue::Long(1 << 40)),
                ("@D".into(), ParameterValue::Double(2.5)),
                ("@b".into(), ParameterValue::Bool(true)),
                (
                    "@t".into(),
                    ParameterValue::DateTime(17_149_792_891_234_567),
                ),
                ("@g".into(), ParameterValue::Guid([0x3c; 16])),
            ],
            action_parameters: vec![("@span".into(), ParameterValue::Duration(-15))],
            created_at: 9,
        },
        RuleDefinition {
            name: "correlation".into(),
            filter: FilterDefinition::Correlation {
                fields: [
                    Some("c".into()),
                    None,
                    Some("to".into()),
                    None,
                    Some("label".into()),
                    None,
                    None,
                    Some("application/json".into()),
                ],
                properties: vec![("region".into(), PropertyValue::String("eu".into()))],
            },
            action: None,
            filter_parameters: Vec::new(),
            action_parameters: Vec::new(),
            created_at: 5,
        },
        RuleDefinition {
            name: "$Default".into(),
            filter: FilterDefinition::True,
            action: None,
            filter_parameters: Vec::new(),
            action_parameters: Vec::new(),
            created_at: 0,
        },
    ];
    let changes = vec![
        Change::RuleAdded {
            subscription: "s".into(),
            rule: Box::new(rules[0].clone()),
        },
        Change::RuleRemoved {
            subscription: "s".into(),
            name: "$Default".into(),
        },
        Change::RulesSet {
            subscription: "s".into(),
            rules: rules.clone(),
        },
    ];
    let bytes = encode(&LogRecord::Changes {
        entity: "t".into(),
        changes,
    });
    let LogRecord::Changes { changes, .. } = decode(&bytes).expect("decodes") else {
        panic!("wrong kind");
    };
    match &changes[..] {
        [
            Change::RuleAdded { rule, .. },
            Change::RuleRemoved { name, .. },
            Change::RulesSet { rules: set, .. },
        ] => {
            assert_eq!(rule.as_ref(), &rules[0]);
            assert_eq!(name, "$Default");
            assert_eq!(set, &rules);
            for definition in set {
                let compiled = definition.compile().expect("compiles again");
                assert_eq!(&RuleDefinition::of(&compiled), definition);
            }
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rules_written_before_parameters_existed_read_unchanged() {
    // A RuleAdded change as builds before issue 45 wrote it: entity "t", rule "r" with
    // filter `a = 1`, action `SET b = 2`, created at 3.
    let mut old = vec![
        KIND_CHANGES,
        1,
        b't',
        1,
        CHANGE_RULE_ADDED,
        1,
        b's',
        1,
        b'r',
        2,
        5,
    ];
    old.extend_from_slice(b"a = 1");
    old.extend_from_slice(&[1, 9]);
    old.extend_from_slice(b"SET b = 2");
    old.push(6);
    let Ok(LogRecord::Changes { changes, .. }) = decode(&old) else {
        panic!("the old bytes decode");
    };
    let [Change::RuleAdded { rule, .. }] = &changes[..] else {
        panic!("{changes:?}");
    };
    let expected = RuleDefinition {
        name: "r".into(),
        filter: FilterDefinition::Sql("a = 1".into()),
        action: Some("SET b = 2".into()),
        filter_parameters: Vec::new(),
        action_parameters: Vec::new(),
        created_at: 3,
    };
    assert_eq!(rule.as_ref(), &expected);
    // And a rule without parameters is still written as those builds wrote it.
    let written = encode(&LogRecord::Changes {
        entity: "t".into(),
        changes: vec![Change::RuleAdded {
            subscription: "s".into(),
            rule: Box::new(expected),
        }],
    });
    assert_eq!(written, old);
}

#[test]
fn truncated_or_padded_bytes_are_refused() {
    let bytes = encode(&LogRecord::Changes {
        entity: "q".into(),
        changes: every_change(),
    });
    for cut in [1, bytes.len() / 2, bytes.len() - 1] {
        assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut padded = bytes.clone();
    padded.push(0);
    assert!(decode(&padded).is_err());
    assert!(decode(&[9]).is_err());
}

#[test]
fn checkpoints_and_drops_keep_their_flags() {
    let bytes = encode(&LogRecord::Checkpoint {
        entity: "q".into(),
        first: false,
        last: true,
        changes: vec![Change::NextSequence(3)],
    });
    match decode(&bytes).expect("decodes") {
        LogRecord::Checkpoint {
            entity,
            first,
            last,
            changes,
        } => {
            assert_eq!(entity, "q");
            assert!(!first && last);
            assert_eq!(changes.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    let bytes = encode(&LogRecord::Dropped { entity: "q".into() });
    assert!(matches!(decode(&bytes), Ok(LogRecord::Dropped { entity }) if entity == "q"));
}

#[test]
fn a_batch_of_several_entities_round_trips_and_refuses_a_count_past_its_bytes() {
    let changes = |number: i64| vec![Change::NextSequence(number)];
    let bytes = encode(&LogRecord::Batch {
        entries: vec![
            ("t".into(), changes(3)),
            ("t/subscriptions/a".into(), changes(7)),
        ],
    });
    let Ok(LogRecord::Batch { entries }) = decode(&bytes) else {
        panic!("a batch decodes as one");
    };
    let names: Vec<_> = entries.iter().map(|(entity, _)| entity.as_str()).collect();
    assert_eq!(names, ["t", "t/subscriptions/a"]);
    assert!(matches!(entries[1].1.as_slice(), [Change::NextSequence(7)]));
    // A count of 2^40 entries in a few bytes is malformed, not an allocation.
    let mut forged = vec![KIND_BATCH];
    let mut out = Out(Vec::new());
    out.u64(1 << 40);
    forged.extend(out.0);
    assert!(decode(&forged).is_err());
}

#[test]
fn the_namespaces_text_round_trips_and_a_cut_one_is_refused() {
    let text = "[[queues]]\nname = \"made-at-run-time\"\nlock_duration = \"45s\"\n";
    let bytes = encode(&LogRecord::Namespace { text: text.into() });
    assert_eq!(bytes[0], KIND_NAMESPACE);
    assert!(!is_raft(&bytes), "an entity-level record, not a Raft one");
    assert!(matches!(decode(&bytes), Ok(LogRecord::Namespace { text: read }) if read == text));
    assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    let empty = encode(&LogRecord::Namespace {
        text: String::new(),
    });
    assert!(matches!(decode(&empty), Ok(LogRecord::Namespace { text }) if text.is_empty()));
}
