//! Tests of [`super`]'s pure core.

use std::time::Duration;

use super::*;

const START: Timestamp = Timestamp(1_700_000_000_000);

fn codec() -> TopicCodec {
    TopicCodec {
        rewrite: std::sync::Arc::new(|message, _, _| message.clone()),
        decode_properties: std::sync::Arc::new(|_| Vec::new()),
        evaluation_budget: crate::broker::filter::DEFAULT_EVALUATION_BUDGET,
    }
}

fn topic() -> TopicState {
    let subscriptions = ["first", "second"]
        .into_iter()
        .map(|name| SubscriptionRules {
            name: name.to_string(),
            rules: vec![
                rules::compile(&crate::config::RuleConfig::default_rule(), 0)
                    .expect("the default rule compiles"),
            ],
            dead_letter_on_filter_errors: false,
            requires_session: false,
        })
        .collect();
    let mut state = TopicState::new(
        "t".to_string(),
        subscriptions,
        Some(DuplicateDetector::new(Duration::from_secs(60))),
        codec(),
    );
    state.set_journaling(true);
    state
}

fn message(id: &str, at: Option<Timestamp>) -> Message {
    let mut message = Message::default();
    let system = message.system().with(
        crate::broker::message::SystemField::MessageId,
        (Some(id.to_string())).as_deref(),
    );
    message.set_system(system);
    message.edit_extras(|extras| extras.scheduled_enqueue_time = at);
    message
}

/// A topic whose "costly" subscription has a cheap rule and a LIKE over a long text,
/// beside a subscription with the default rule; rules may take `budget` steps.
fn costly_topic(budget: u64) -> TopicState {
    let rule = |name: &str, sql: String| {
        rules::compile(
            &crate::config::RuleConfig {
                name: name.to_string(),
                filter: crate::config::FilterConfig::Sql(sql),
                action: None,
                parameters: Vec::new(),
            },
            0,
        )
        .expect("compiles")
    };
    let costly = SubscriptionRules {
        name: "costly".to_string(),
        rules: vec![
            rule("cheap", "EXISTS(p)".to_string()),
            rule("long-like", format!("p LIKE '%{} b'", "a".repeat(900))),
        ],
        dead_letter_on_filter_errors: true,
        requires_session: false,
    };
    let plain = SubscriptionRules {
        name: "plain".to_string(),
        rules: vec![
            rules::compile(&crate::config::RuleConfig::default_rule(), 0)
                .expect("the default rule compiles"),
        ],
        dead_letter_on_filter_errors: true,
        requires_session: false,
    };
    let codec = TopicCodec {
        evaluation_budget: budget,
        ..codec()
    };
    TopicState::new("t".to_string(), vec![costly, plain], None, codec)
}

fn with_long_property(id: &str) -> Message {
    let mut message = message(id, None);
    let text = crate::broker::types::PropertyValue::String("a".repeat(200_000));
    message.edit_extras(|extras| extras.user_properties = vec![("p".to_string(), text)]);
    message
}

#[test]
fn rules_past_the_budget_dead_letter_the_message_from_that_subscription_naming_the_rule() {
    // rule DLQ-3: a filter that cannot be evaluated (here: within its budget) dead-letters
    let mut state = costly_topic(1_000_000);
    let copies = state.publish(START, vec![with_long_property("m")]);
    // "cheap" matched, but no partial delivery: one dead letter, no copy.
    assert!(copies[0].accepted.is_empty());
    let [(_, reason, description)] = copies[0].dead_lettered.as_slice() else {
        panic!("one dead letter: {:?}", copies[0].dead_lettered.len());
    };
    assert_eq!(reason, "FilterEvaluationException");
    assert_eq!(
        description,
        "Rule 'long-like': evaluation exceeded its budget of 1000000 steps"
    );
    // The other subscription is not affected.
    assert_eq!(copies[1].accepted.len(), 1);
    assert!(copies[1].dead_lettered.is_empty());
    // Within a budget that covers the linear match (200,001 bytes x 15 words) the
    // message is filtered as usual: "cheap" matches, "long-like" does not.
    let mut state = costly_topic(4_000_000);
    let copies = state.publish(START, vec![with_long_property("m")]);
    assert_eq!(copies[0].accepted.len(), 1);
    assert!(copies[0].dead_lettered.is_empty());
}

#[test]
fn a_message_over_the_inline_bound_is_handed_back_with_nothing_applied() {
    let mut state = costly_topic(4_000_000);
    let mut copies: Vec<Copies> = (0..2).map(|_| Copies::default()).collect();
    let mut messages = vec![
        message("light", None),
        with_long_property("heavy"),
        message("after", None),
    ]
    .into_iter();
    let result = state.publish_into(START, &mut messages, &mut copies, Some(10_000));
    let Err(HeavyMessage(heavy)) = result else {
        panic!("the long LIKE is over the inline bound");
    };
    assert_eq!(heavy.system().message_id(), Some("heavy"));
    // The light message went through; the heavy one left nothing (no copy, no dead
    // letter, no sequence number); the one after it is still to come.
    assert_eq!(copies[0].accepted.len(), 0);
    assert_eq!(
        copies[1]
            .numbers
            .iter()
            .map(|(n, _)| n.0)
            .collect::<Vec<_>>(),
        [1]
    );
    assert!(copies.iter().all(|copies| copies.dead_lettered.is_empty()));
    assert_eq!(messages.len(), 1);
    // Evaluated away from the topic (on a snapshot of its rules), it takes the next
    // number; the message after it follows.
    let evaluated = state.evaluation().run(START, &heavy);
    state.publish_evaluated(START, &heavy, evaluated, &mut copies);
    assert!(
        state
            .publish_into(START, &mut messages, &mut copies, None)
            .is_ok()
    );
    assert_eq!(
        copies[0]
            .numbers
            .iter()
            .map(|(n, _)| n.0)
            .collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(
        copies[1]
            .numbers
            .iter()
            .map(|(n, _)| n.0)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[test]
fn rules_changed_at_run_time_survive_a_restore_and_a_checkpoint() {
    // issue 11: a rule manager's changes are durable and win over the configured rules
    let mut state = topic();
    let rule = rules::compile(
        &crate::config::RuleConfig {
            name: "red".to_string(),
            filter: crate::config::FilterConfig::Sql("color = 'red'".to_string()),
            action: None,
            parameters: Vec::new(),
        },
        0,
    )
    .expect("compiles");
    state
        .manage_rules(START, "first", RuleOperation::Add(Box::new(rule)))
        .expect("added");
    state
        .manage_rules(
            START,
            "first",
            RuleOperation::Remove("$Default".to_string()),
        )
        .expect("removed");
    let changes = state.take_changes();
    let names = |state: &mut TopicState| match state.manage_rules(
        START,
        "first",
        RuleOperation::Enumerate { skip: 0, top: 10 },
    ) {
        Ok(Reply::Rules(rules)) => rules
            .iter()
            .map(|rule| rule.name.clone())
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let mut restored = topic();
    restored.restore(START, changes);
    assert_eq!(names(&mut restored), vec!["red".to_string()]);
    // A message without the property no longer reaches "first"; "second" still has
    // its configured $Default rule.
    let copies = restored.publish(START, vec![message("plain", None)]);
    assert!(copies[0].accepted.is_empty());
    assert_eq!(copies[1].accepted.len(), 1);
    // A checkpoint carries the changed rule set (and only that subscription's).
    let checkpoint = restored.checkpoint();
    let sets: Vec<_> = checkpoint
        .iter()
        .filter_map(|change| match change {
            Change::RulesSet {
                subscription,
                rules,
            } => Some((subscription.clone(), rules.len())),
            _ => None,
        })
        .collect();
    assert_eq!(sets, vec![("first".to_string(), 1)]);
    let mut again = topic();
    again.restore(START, checkpoint);
    assert_eq!(names(&mut again), vec!["red".to_string()]);
}

#[test]
fn scheduled_messages_counter_and_duplicates_survive_a_restore() {
    // rules SCH-2, SCH-3, SCH-4, DUP-1, SEQ-1 through the topic's change records
    let mut state = topic();
    let due = START.plus(Duration::from_secs(10));
    let numbers = state.schedule(
        START,
        vec![message("a", Some(due)), message("b", Some(due))],
    );
    assert_eq!(numbers, vec![SequenceNumber(1), SequenceNumber(2)]);
    state.cancel(&[numbers[1]]);
    let copies = state.publish(START, vec![message("p", None)]);
    assert_eq!(copies.len(), 2, "one set of copies per subscription");
    assert!(copies.iter().all(|copies| copies.accepted.len() == 1));
    // The topic numbers the message; both subscriptions' copies carry it (rule SEQ-1).
    assert!(
        copies
            .iter()
            .all(|copies| copies.numbers == vec![(SequenceNumber(3), START)])
    );
    // Carried beside the copies, not in them: a stored copy keeps no rare fields.
    assert!(
        copies
            .iter()
            .all(|copies| copies.accepted[0].extras().topic_sequence.is_none())
    );
    let changes = state.take_changes();

    let mut restored = topic();
    restored.restore(START, changes);
    // The published message's number lives in the subscriptions' records: at start the
    // shell raises the counter past them (the copies carried 3).
    assert_eq!(restored.log().next_sequence_number(), 3);
    restored.raise_sequence_number(4);
    assert_eq!(restored.log().fingerprint(), state.log().fingerprint());
    assert_eq!(restored.next_activation(), Some(due));
    assert!(restored.take_due(START).is_none(), "not before its time");
    let (number, activated) = restored.take_due(due).expect("due");
    assert_eq!(
        (number, activated.system().message_id()),
        (numbers[0], Some("a"))
    );
    restored.published(number);
    assert!(!restored.has_scheduled());
    // The duplicate history came back; the counter goes on past the published one.
    let again = restored.publish(due, vec![message("p", None)]);
    assert!(again.iter().all(|copies| copies.accepted.is_empty()));
    assert_eq!(
        restored.schedule(due, vec![message("c", Some(due))]),
        vec![SequenceNumber(4)]
    );
}

fn forward_key(sequence_number: i64) -> ForwardKey {
    ForwardKey {
        source: "source".to_string(),
        sequence_number: SequenceNumber(sequence_number),
        enqueued_time: Timestamp(1_000 + sequence_number),
    }
}

/// Publishes the forwarded entry `key` unless it was published here already (what the
/// topic's task does); returns the copies each subscription got.
fn arrive(state: &mut TopicState, key: ForwardKey, floor: i64, id: &str) -> usize {
    if state.forwarded_already(&key, SequenceNumber(floor)) {
        return 0;
    }
    let copies = state.publish(START, vec![message(id, None)]);
    state.received_forwarded(key);
    copies.iter().map(|copies| copies.accepted.len()).sum()
}

#[test]
fn a_resent_outbox_entry_is_published_once_even_after_a_restore() {
    // rule FWD-1, to a topic
    let mut state = topic();
    assert_eq!(arrive(&mut state, forward_key(1), 1, "m1"), 2);
    let changes = state.take_changes();
    assert!(
        matches!(
            changes.as_slice(),
            [Change::Remembered { .. }, Change::Received { key }] if *key == forward_key(1)
        ),
        "the key is among the changes the publish's record carries: {changes:?}"
    );
    // The source crashed before it recorded the forward and sends the entry again.
    assert_eq!(arrive(&mut state, forward_key(1), 1, "m1"), 0);

    // The topic restarted from its log, and from a checkpoint of it.
    let mut replayed = topic();
    replayed.restore(START, changes);
    let mut checkpointed = topic();
    checkpointed.restore(START, replayed.checkpoint());
    for mut state in [replayed, checkpointed] {
        assert_eq!(state.log().received_count(), 1);
        assert_eq!(arrive(&mut state, forward_key(1), 1, "m1"), 0);
        // The same number from a later incarnation of the source is a new entry (another
        // message id: the topic's duplicate detection is on).
        let mut later = forward_key(1);
        later.enqueued_time = Timestamp(5_000);
        assert_eq!(arrive(&mut state, later, 1, "m1 again"), 2);
    }
}

#[test]
fn keys_below_the_sources_outbox_floor_are_forgotten_by_the_topic() {
    let mut state = topic();
    for number in 1..=3 {
        arrive(&mut state, forward_key(number), 1, &format!("m{number}"));
    }
    assert_eq!(state.log().received_count(), 3);
    state.take_changes();
    // Entries 1..=3 left the source's outbox: its next forward says so.
    arrive(&mut state, forward_key(4), 4, "m4");
    assert_eq!(
        state.log().received_count(),
        1,
        "only the newest key is kept"
    );
    let changes = state.take_changes();
    assert!(
        changes.iter().any(|change| matches!(
            change,
            Change::ForgetReceived { below, .. } if *below == SequenceNumber(4)
        )),
        "the forgetting is durable too: {changes:?}"
    );
    // The kept key still answers a re-send of its entry.
    assert!(state.forwarded_already(&forward_key(4), SequenceNumber(4)));
}
