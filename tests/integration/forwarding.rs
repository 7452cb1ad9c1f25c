//! Auto-forwarding (rules FWD-1..4) through a generic AMQP client.

use std::time::Duration;

use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use fe2o3_amqp::{Receiver, Sender};
use fe2o3_amqp_types::definitions;

use crate::harness::{Broker, annotation, property, receive};

const CONFIG: &str = r#"
[[queues]]
name = "source"
forward_to = "sink"
[[queues]]
name = "sink"

[[queues]]
name = "hop1"
forward_to = "hop2"
[[queues]]
name = "hop2"
forward_to = "hop3"
[[queues]]
name = "hop3"
forward_to = "hop4"
[[queues]]
name = "hop4"
forward_to = "hop5"
[[queues]]
name = "hop5"
forward_to = "hop6"
[[queues]]
name = "hop6"

[[queues]]
name = "dl-source"
max_delivery_count = 1
forward_dead_lettered_messages_to = "dl-sink"
[[queues]]
name = "dl-sink"

[[queues]]
name = "to-ephemeral"
forward_to = "ephemeral"
[[queues]]
name = "ephemeral"
auto_delete_on_idle = "300ms"

[[queues]]
name = "to-sessions"
forward_to = "sessions"
[[queues]]
name = "sessions"
requires_session = true

[[topics]]
name = "fan"
[[topics.subscriptions]]
name = "onward"
forward_to = "sink-from-topic"
[[queues]]
name = "sink-from-topic"

[[queues]]
name = "to-send-disabled"
forward_to = "send-disabled"
[[queues]]
name = "send-disabled"
status = "SendDisabled"
[[queues]]
name = "disabled"
status = "Disabled"
"#;

#[tokio::test]
async fn forwarded_messages_arrive_at_the_target_with_their_original_sequence_number() {
    // rule FWD-1
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "source")
        .await
        .expect("attach");
    sender.send("first").await.expect("accepted");
    sender.send("second").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "sink")
        .await
        .expect("attach");
    let first = receive(&mut receiver).await;
    assert_eq!(
        annotation(&first, "x-opt-enqueue-sequence-number"),
        Some(Value::Long(1))
    );
    assert_eq!(
        annotation(&first, "x-opt-sequence-number"),
        Some(Value::Long(1))
    );
    let second = receive(&mut receiver).await;
    assert_eq!(
        annotation(&second, "x-opt-enqueue-sequence-number"),
        Some(Value::Long(2))
    );
}

#[tokio::test]
async fn more_than_four_hops_dead_letters_the_message() {
    // rule FWD-2: hop1→2→3→4→5 are four hops; hop5 may not forward again.
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "hop1")
        .await
        .expect("attach");
    sender.send("travelling").await.expect("accepted");
    let mut dead_letters = Receiver::attach(&mut session, "dlq", "hop5/$DeadLetterQueue")
        .await
        .expect("attach");
    let dead = receive(&mut dead_letters).await;
    assert_eq!(
        property(&dead, "DeadLetterReason"),
        Some(SimpleValue::String("MaxTransferHopCountExceeded".into()))
    );
    let mut last = Receiver::attach(&mut session, "last", "hop6")
        .await
        .expect("attach");
    let nothing =
        tokio::time::timeout(Duration::from_millis(300), last.recv::<Body<Value>>()).await;
    assert!(nothing.is_err(), "the message never reaches hop6");
}

#[tokio::test]
async fn dead_letters_are_forwarded_with_their_source_and_reason() {
    // rule FWD-1 (forward_dead_lettered_messages_to)
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "dl-source")
        .await
        .expect("attach");
    sender.send("poison").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "dl-source")
        .await
        .expect("attach");
    let delivery = receive(&mut receiver).await;
    let mut info = definitions::Fields::new();
    info.insert("DeadLetterReason".into(), Value::String("poisoned".into()));
    let error = definitions::Error::new(
        definitions::ErrorCondition::Custom("com.microsoft:dead-letter".into()),
        None,
        Some(info),
    );
    receiver.reject(&delivery, error).await.expect("reject");
    let mut sink = Receiver::attach(&mut session, "sink", "dl-sink")
        .await
        .expect("attach");
    let forwarded = receive(&mut sink).await;
    assert_eq!(
        annotation(&forwarded, "x-opt-deadletter-source"),
        Some(Value::String("dl-source".into()))
    );
    assert_eq!(
        property(&forwarded, "DeadLetterReason"),
        Some(SimpleValue::String("poisoned".into()))
    );
}

#[tokio::test]
async fn a_deleted_target_sends_messages_to_the_transfer_dead_letter_queue() {
    // rule FWD-3, IDL-1
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    // Let "ephemeral" delete itself for idleness, then forward to it.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut sender = Sender::attach(&mut session, "sender", "to-ephemeral")
        .await
        .expect("attach");
    sender.send("orphan").await.expect("accepted by the source");
    let mut transfer_dead_letters = Receiver::attach(
        &mut session,
        "tdlq",
        "to-ephemeral/$Transfer/$DeadLetterQueue",
    )
    .await
    .expect("attach");
    let orphan = receive(&mut transfer_dead_letters).await;
    assert!(
        matches!(orphan.body(), Body::Value(value) if value.0 == Value::String("orphan".into()))
    );
    assert!(property(&orphan, "DeadLetterErrorDescription").is_some());
}

#[tokio::test]
async fn a_send_disabled_target_sends_messages_to_the_transfer_dead_letter_queue() {
    // rule FWD-3; entity status (issue 15 item 4)
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "to-send-disabled")
        .await
        .expect("attach");
    sender
        .send("blocked")
        .await
        .expect("accepted by the source");
    let mut transfer_dead_letters = Receiver::attach(
        &mut session,
        "tdlq",
        "to-send-disabled/$Transfer/$DeadLetterQueue",
    )
    .await
    .expect("attach");
    let blocked = receive(&mut transfer_dead_letters).await;
    assert!(
        matches!(blocked.body(), Body::Value(value) if value.0 == Value::String("blocked".into()))
    );
    let description = property(&blocked, "DeadLetterErrorDescription");
    assert!(
        matches!(&description, Some(SimpleValue::String(text)) if text.contains("disabled")),
        "the description names the status: {description:?}"
    );
}

#[tokio::test]
async fn links_to_a_disabled_queue_are_refused_with_entity_disabled() {
    // entity status (issue 15 item 4): Disabled refuses senders and receivers
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let refused = Sender::attach(&mut session, "sender", "disabled")
        .await
        .expect_err("a sender of a Disabled queue is refused");
    assert!(
        format!("{refused:?}").contains("com.microsoft:entity-disabled"),
        "{refused:?}"
    );
    let (_connection, mut session) = broker.connect().await;
    let refused = Receiver::attach(&mut session, "receiver", "disabled")
        .await
        .expect_err("a receiver of a Disabled queue is refused");
    assert!(
        format!("{refused:?}").contains("com.microsoft:entity-disabled"),
        "{refused:?}"
    );
    let (_connection, mut session) = broker.connect().await;
    Receiver::attach(&mut session, "receiver", "send-disabled")
        .await
        .expect("a SendDisabled queue still gives out messages");
}

#[tokio::test]
async fn session_less_messages_forwarded_into_a_session_queue_are_dead_lettered() {
    // rule SES-1, DLQ-3
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "to-sessions")
        .await
        .expect("attach");
    sender.send("no session").await.expect("accepted");
    let mut dead_letters = Receiver::attach(&mut session, "dlq", "sessions/$DeadLetterQueue")
        .await
        .expect("attach");
    let dead = receive(&mut dead_letters).await;
    assert_eq!(
        property(&dead, "DeadLetterReason"),
        Some(SimpleValue::String("Session ID is null.".into()))
    );
}

#[tokio::test]
async fn subscriptions_forward_their_copies() {
    // rule FWD-1 on a subscription
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "fan")
        .await
        .expect("attach");
    sender.send("published").await.expect("accepted");
    let mut sink = Receiver::attach(&mut session, "sink", "sink-from-topic")
        .await
        .expect("attach");
    let forwarded = receive(&mut sink).await;
    assert!(
        matches!(forwarded.body(), Body::Value(value) if value.0 == Value::String("published".into()))
    );
}

#[tokio::test]
async fn messages_forwarded_into_a_topic_match_its_filters_like_direct_sends() {
    // Issue 10 item 17: application properties are decoded by the topic itself.
    let broker = Broker::start(
        r#"
[[queues]]
name = "inbox"
forward_to = "events"
[[topics]]
name = "events"
[[topics.subscriptions]]
name = "red"
[[topics.subscriptions.rules]]
name = "red-only"
sql_filter = "color = 'red'"
[[topics.subscriptions]]
name = "eu"
[[topics.subscriptions.rules]]
name = "eu-only"
correlation_filter = { properties = { region = "eu" } }
"#,
    )
    .await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "inbox")
        .await
        .expect("attach");
    for (key, value, body) in [("color", "red", "red one"), ("region", "eu", "eu one")] {
        let message = fe2o3_amqp::types::messaging::Message::builder()
            .application_properties(
                fe2o3_amqp::types::messaging::ApplicationProperties::builder()
                    .insert(key, SimpleValue::String(value.into()))
                    .build(),
            )
            .value(body.to_string())
            .build();
        sender.send(message).await.expect("accepted");
    }
    for (subscription, expected) in [("red", "red one"), ("eu", "eu one")] {
        let (_connection, mut session) = broker.connect().await;
        let mut receiver = Receiver::attach(
            &mut session,
            "receiver",
            format!("events/Subscriptions/{subscription}").as_str(),
        )
        .await
        .expect("attach");
        let delivery = receive(&mut receiver).await;
        assert_eq!(
            delivery.body(),
            &Body::Value(fe2o3_amqp::types::messaging::AmqpValue(Value::String(
                expected.into()
            ))),
            "subscription {subscription}"
        );
        receiver.accept(&delivery).await.expect("completes");
        let more =
            tokio::time::timeout(Duration::from_millis(300), receiver.recv::<Body<Value>>()).await;
        assert!(
            more.is_err(),
            "subscription {subscription} got only its match"
        );
    }
}
