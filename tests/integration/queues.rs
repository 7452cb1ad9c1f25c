//! Queue behaviour through a generic AMQP 1.0 client (fe2o3-amqp): sequence numbers,
//! settlement outcomes, dead-lettering and receive-and-delete.

use std::time::Duration;

use fe2o3_amqp::types::messaging::{Body, Message, Modified};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Delivery, Receiver, Sender};
use fe2o3_amqp_types::definitions::{self, SenderSettleMode};

use crate::harness::{Broker, annotation, receive};

const CONFIG: &str = r#"
[[queues]]
name = "orders"
lock_duration = "5s"
max_delivery_count = 2
"#;

fn sequence_number(delivery: &Delivery<Body<Value>>) -> i64 {
    match annotation(delivery, "x-opt-sequence-number") {
        Some(Value::Long(number)) => number,
        other => panic!("x-opt-sequence-number missing or not a long: {other:?}"),
    }
}

fn delivery_count(delivery: &Delivery<Body<Value>>) -> u32 {
    delivery
        .message()
        .header
        .as_ref()
        .map(|header| header.delivery_count)
        .unwrap_or(0)
}

#[tokio::test]
async fn sequence_numbers_start_at_one_and_have_no_gaps() {
    // rule SEQ-1, SEQ-3
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("attach sender");
    for index in 0..5 {
        sender
            .send(format!("message {index}"))
            .await
            .expect("accepted");
    }
    let mut receiver = Receiver::attach(&mut session, "receiver", "orders")
        .await
        .expect("attach receiver");
    for expected in 1..=5 {
        let delivery = receive(&mut receiver).await;
        assert_eq!(sequence_number(&delivery), expected);
        assert!(matches!(
            annotation(&delivery, "x-opt-enqueued-time"),
            Some(Value::Timestamp(_))
        ));
        assert!(matches!(
            annotation(&delivery, "x-opt-locked-until"),
            Some(Value::Timestamp(_))
        ));
        assert!(
            delivery
                .message()
                .properties
                .as_ref()
                .and_then(|p| p.message_id.as_ref())
                .is_some(),
            "every delivered message carries a message-id"
        );
        receiver.accept(&delivery).await.expect("accept");
    }
}

#[tokio::test]
async fn released_messages_return_without_counting_a_delivery() {
    // Python's prefetch-0 receivers release buffered messages; that is not a delivery attempt.
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("attach sender");
    sender.send("payload").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "orders")
        .await
        .expect("attach receiver");
    let first = receive(&mut receiver).await;
    receiver.release(&first).await.expect("release");
    let second = receive(&mut receiver).await;
    assert_eq!(sequence_number(&second), 1);
    assert_eq!(delivery_count(&second), 0);
    receiver.accept(&second).await.expect("accept");
}

#[tokio::test]
async fn abandons_count_deliveries_until_the_message_is_dead_lettered() {
    // rule LCK-2, DLQ-3: modified(delivery-failed) is an abandon.
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("attach sender");
    sender.send("payload").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "orders")
        .await
        .expect("attach receiver");
    let failed = Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: None,
    };
    let first = receive(&mut receiver).await;
    assert_eq!(delivery_count(&first), 0);
    receiver
        .modify(&first, failed.clone())
        .await
        .expect("abandon");
    let second = receive(&mut receiver).await;
    assert_eq!(delivery_count(&second), 1);
    receiver.modify(&second, failed).await.expect("abandon");
    let mut dead_letters = Receiver::attach(&mut session, "dlq", "orders/$DeadLetterQueue")
        .await
        .expect("attach dead-letter receiver");
    let dead = receive(&mut dead_letters).await;
    assert_eq!(
        sequence_number(&dead),
        1,
        "a dead-lettered message keeps its sequence number"
    );
    let reason = dead
        .message()
        .application_properties
        .as_ref()
        .and_then(|properties| properties.0.get("DeadLetterReason").cloned());
    assert_eq!(
        reason,
        Some(fe2o3_amqp::types::primitives::SimpleValue::String(
            "MaxDeliveryCountExceeded".into()
        ))
    );
    dead_letters.accept(&dead).await.expect("complete from DLQ");
}

#[tokio::test]
async fn rejected_messages_are_dead_lettered_with_the_reason() {
    // rule DLQ-4
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("attach sender");
    sender.send("payload").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "orders")
        .await
        .expect("attach receiver");
    let delivery = receive(&mut receiver).await;
    let mut info = fe2o3_amqp::types::definitions::Fields::new();
    info.insert("DeadLetterReason".into(), Value::String("bad-order".into()));
    info.insert(
        "DeadLetterErrorDescription".into(),
        Value::String("no such product".into()),
    );
    let error = definitions::Error::new(
        definitions::ErrorCondition::Custom("com.microsoft:dead-letter".into()),
        None,
        Some(info),
    );
    receiver.reject(&delivery, error).await.expect("reject");
    let mut dead_letters = Receiver::attach(&mut session, "dlq", "orders/$DeadLetterQueue")
        .await
        .expect("attach dead-letter receiver");
    let dead = receive(&mut dead_letters).await;
    let properties = dead
        .message()
        .application_properties
        .clone()
        .expect("properties");
    assert_eq!(
        properties.0.get("DeadLetterReason"),
        Some(&fe2o3_amqp::types::primitives::SimpleValue::String(
            "bad-order".into()
        ))
    );
    assert_eq!(
        properties.0.get("DeadLetterErrorDescription"),
        Some(&fe2o3_amqp::types::primitives::SimpleValue::String(
            "no such product".into()
        ))
    );
}

#[tokio::test]
async fn receive_and_delete_removes_messages_on_delivery() {
    // rule LCK-5
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("attach sender");
    sender.send("one").await.expect("accepted");
    sender.send("two").await.expect("accepted");
    let mut receiver = Receiver::builder()
        .name("destructive")
        .source("orders")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .expect("attach receive-and-delete receiver");
    let first = receive(&mut receiver).await;
    assert_eq!(sequence_number(&first), 1);
    assert!(
        annotation(&first, "x-opt-locked-until").is_none(),
        "no lock in receive-and-delete"
    );
    let second = receive(&mut receiver).await;
    assert_eq!(sequence_number(&second), 2);
    receiver.close().await.expect("close");
    let mut peek_lock = Receiver::attach(&mut session, "after", "orders")
        .await
        .expect("attach");
    let nothing =
        tokio::time::timeout(Duration::from_millis(300), peek_lock.recv::<Body<Value>>()).await;
    assert!(nothing.is_err(), "both messages were removed on delivery");
}

#[tokio::test]
async fn bodies_and_properties_arrive_as_sent() {
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("attach sender");
    let message = Message::builder()
        .properties(
            fe2o3_amqp::types::messaging::Properties::builder()
                .message_id(String::from("order-17"))
                .subject("created")
                .correlation_id(String::from("c-1"))
                .build(),
        )
        .application_properties(
            fe2o3_amqp::types::messaging::ApplicationProperties::builder()
                .insert("region", "eu")
                .insert("amount", 42i64)
                .build(),
        )
        .value(Value::String("a body".into()))
        .build();
    sender.send(message).await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "orders")
        .await
        .expect("attach receiver");
    let delivery = receive(&mut receiver).await;
    let properties = delivery.message().properties.clone().expect("properties");
    assert_eq!(properties.subject.as_deref(), Some("created"));
    assert_eq!(
        format!("{:?}", properties.message_id),
        format!(
            "{:?}",
            Some(fe2o3_amqp::types::messaging::MessageId::String(
                "order-17".into()
            ))
        )
    );
    let application = delivery
        .message()
        .application_properties
        .clone()
        .expect("application properties");
    assert_eq!(application.0.len(), 2);
    assert!(
        matches!(delivery.body(), Body::Value(value) if value.0 == Value::String("a body".into()))
    );
}

#[tokio::test]
async fn a_message_sent_without_a_header_is_delivered_with_priority_4() {
    // AMQP 1.0 §3.2.1: a header's priority defaults to 4 (the broker delivered 0).
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("attach sender");
    sender.send("no header").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "orders")
        .await
        .expect("attach receiver");
    let delivery = receive(&mut receiver).await;
    let header = delivery.message().header.clone().expect("a header");
    assert_eq!(header.priority.0, 4);
    assert!(!header.durable);
    receiver.accept(&delivery).await.expect("complete");
}

#[tokio::test]
async fn a_message_without_an_id_gets_one_and_keeps_its_other_properties() {
    // The broker writes the assigned id in front of the fields the client sent (issue 16:
    // found from the section's lengths, not by reading every field again).
    use fe2o3_amqp::types::messaging::{MessageId, Properties};
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "orders")
        .await
        .expect("attach sender");
    let with_fields = Message::builder()
        .properties(
            Properties::builder()
                .subject("created")
                .correlation_id(MessageId::Ulong(42))
                .to("orders")
                .content_type("application/json")
                .reply_to_group_id(Some(String::from("g-1")))
                .build(),
        )
        .value(Value::String("with fields".into()))
        .build();
    sender.send(with_fields).await.expect("accepted");
    sender.send("bare").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "orders")
        .await
        .expect("attach receiver");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let delivery = receive(&mut receiver).await;
        let properties = delivery.message().properties.clone().expect("properties");
        let id = crate::harness::string_message_id(&delivery);
        assert!(
            ferrobus::encoding::ids::parse_guid_text(&id).is_some(),
            "a GUID's text: {id}"
        );
        if matches!(delivery.body(), Body::Value(value) if value.0 == Value::String("with fields".into()))
        {
            assert_eq!(properties.subject.as_deref(), Some("created"));
            assert_eq!(
                format!("{:?}", properties.correlation_id),
                format!("{:?}", Some(MessageId::Ulong(42)))
            );
            assert_eq!(properties.to.as_deref(), Some("orders"));
            assert_eq!(
                properties
                    .content_type
                    .as_ref()
                    .map(|symbol| symbol.0.as_str()),
                Some("application/json")
            );
            assert_eq!(properties.reply_to_group_id.as_deref(), Some("g-1"));
        }
        ids.push(id);
        receiver.accept(&delivery).await.expect("accept");
    }
    assert_ne!(ids[0], ids[1], "each message gets its own id");
}
