//! Topic behaviour that the SDK suites do not reach: duplicate detection before fan-out and
//! a topic deleting itself when idle.

use std::time::Duration;

use fe2o3_amqp::link::SenderAttachError;
use fe2o3_amqp::types::messaging::{AmqpValue, Body, Message, Properties};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};

use crate::harness::{Broker, receive};

const CONFIG: &str = r#"
[[topics]]
name = "deduplicated"
requires_duplicate_detection = true
duplicate_detection_history_time_window = "10s"
[[topics.subscriptions]]
name = "a"
[[topics.subscriptions]]
name = "b"

[[topics]]
name = "ephemeral"
auto_delete_on_idle = "300ms"
[[topics.subscriptions]]
name = "s"

[[topics]]
name = "fanout"
[[topics.subscriptions]]
name = "a"
[[topics.subscriptions]]
name = "b"
[[topics.subscriptions]]
name = "even"
[[topics.subscriptions.rules]]
name = "even"
sql_filter = "n % 2 = 0"

[[topics]]
name = "watched"
auto_delete_on_idle = "300ms"
[[topics.subscriptions]]
name = "s"

[[topics]]
name = "labelled"
[[topics.subscriptions]]
name = "plain"
[[topics.subscriptions]]
name = "relabel"
[[topics.subscriptions.rules]]
name = "relabel"
sql_filter = "1 = 1"
sql_action = "SET sys.Label = 'relabelled'"
"#;

fn with_id(id: &str, body: &str) -> Message<AmqpValue<String>> {
    Message::builder()
        .properties(Properties::builder().message_id(id.to_string()).build())
        .value(body.to_string())
        .build()
}

#[tokio::test]
async fn a_topic_drops_a_duplicate_message_id_before_fan_out() {
    // duplicate detection on a topic: accepted, not copied again to any subscription
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "deduplicated")
        .await
        .expect("attach");
    sender
        .send(with_id("order-1", "first"))
        .await
        .expect("accepted");
    sender
        .send(with_id("order-1", "again"))
        .await
        .expect("a duplicate is accepted too");
    sender
        .send(with_id("order-2", "second"))
        .await
        .expect("accepted");
    for subscription in ["a", "b"] {
        // A session per subscription: the client cannot reuse one after a cancelled receive.
        let mut session = fe2o3_amqp::Session::begin(&mut connection)
            .await
            .expect("session");
        let address = format!("deduplicated/Subscriptions/{subscription}");
        let mut receiver = Receiver::attach(&mut session, subscription, address.as_str())
            .await
            .expect("attach");
        for expected in ["first", "second"] {
            let delivery = receive(&mut receiver).await;
            assert!(
                matches!(delivery.body(), Body::Value(value) if value.0 == Value::String(expected.into())),
                "{subscription}: expected {expected}, got {:?}",
                delivery.body()
            );
            receiver.accept(&delivery).await.expect("complete");
        }
        let nothing =
            tokio::time::timeout(Duration::from_millis(300), receiver.recv::<Body<Value>>()).await;
        assert!(
            nothing.is_err(),
            "{subscription}: the duplicate was not delivered"
        );
    }
}

#[tokio::test]
async fn an_idle_topic_and_its_subscriptions_are_deleted() {
    // rule IDL-1 for a topic
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "early", "ephemeral")
        .await
        .expect("attach");
    sender.send("while alive").await.expect("accepted");
    tokio::time::sleep(Duration::from_millis(900)).await;
    let late = Sender::attach(&mut session, "late", "ephemeral").await;
    let Err(error) = late else {
        panic!("the idle topic should be gone")
    };
    assert!(
        matches!(&error, SenderAttachError::RemoteClosedWithError(e) if e.description.as_deref().unwrap_or("").contains("could not be found")),
        "unexpected error {error:?}"
    );
    let receiver = Receiver::attach(&mut session, "sub", "ephemeral/Subscriptions/s").await;
    assert!(receiver.is_err(), "its subscriptions are gone with it");
}

#[tokio::test]
async fn a_receiver_on_a_subscription_keeps_its_idle_topic_alive() {
    // rule IDL-1/IDL-2 for a topic: its subscriptions' receivers and activity count
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut receiver = Receiver::attach(&mut session, "watcher", "watched/Subscriptions/s")
        .await
        .expect("attach");
    // Three idle periods with nothing sent to the topic.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let mut sender = Sender::attach(&mut session, "still", "watched")
        .await
        .expect("the topic is still there while its subscription has a receiver");
    sender.send("kept").await.expect("accepted");
    let delivery = receiver
        .recv::<fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>>()
        .await
        .expect("delivered");
    receiver.accept(&delivery).await.expect("completed");
    sender.close().await.ok();
    receiver.close().await.ok();
    // Once nothing keeps it, it goes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match Sender::attach(&mut session, "late", "watched").await {
            Err(_) => break,
            Ok(sender) => {
                sender.close().await.ok();
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the idle topic should be deleted"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_subscription_holds_at_most_two_thousand_rules() {
    // Issue 10 item 3: every rule is evaluated for every message; the count is bounded.
    use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue};
    let mut config =
        String::from("[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n");
    for index in 0..2_000 {
        config.push_str(&format!(
            "[[topics.subscriptions.rules]]\nname = \"r{index}\"\nsql_filter = \"n = {index}\"\n"
        ));
    }
    let broker = Broker::start(&config).await;
    let (_connection, mut session) = broker.connect().await;
    let mut management =
        crate::auth::Node::attach(&mut session, "t/Subscriptions/s/$management", "rules").await;
    let mut filter = OrderedMap::new();
    filter.insert(
        Value::String("expression".into()),
        Value::String("n = -1".into()),
    );
    let mut description = OrderedMap::new();
    description.insert(Value::String("sql-filter".into()), Value::Map(filter));
    let mut body = OrderedMap::new();
    body.insert(
        Value::String("rule-name".into()),
        Value::String("one-too-many".into()),
    );
    body.insert(
        Value::String("rule-description".into()),
        Value::Map(description),
    );
    let status = management
        .request(
            &[(
                "operation",
                SimpleValue::String("com.microsoft:add-rule".into()),
            )],
            Value::Map(body),
        )
        .await;
    assert_eq!(
        status, 403,
        "the 2,001st rule is refused with a quota error"
    );
}

#[tokio::test]
async fn pipelined_publishes_are_all_answered_and_every_subscription_keeps_their_order() {
    // issue 16: the topic takes the next publish before the last one's copies are stored;
    // rule SEQ-1 (topics) and per-subscription order must hold, every sender hears back
    use fe2o3_amqp::types::messaging::ApplicationProperties;
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "many", "fanout")
        .await
        .expect("attach");
    let mut outcomes = Vec::new();
    for n in 0..400i64 {
        let message = Message::builder()
            .application_properties(ApplicationProperties::builder().insert("n", n).build())
            .value(format!("m{n}"))
            .build();
        outcomes.push(sender.send_batchable(message).await.expect("sent"));
    }
    for outcome in outcomes {
        let outcome = outcome.await.expect("settled");
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    for (subscription, expected) in [
        ("a", (0..400).collect::<Vec<i64>>()),
        ("b", (0..400).collect()),
        ("even", (0..400).step_by(2).collect()),
    ] {
        let mut receiver = Receiver::attach(
            &mut session,
            format!("r-{subscription}"),
            format!("fanout/Subscriptions/{subscription}"),
        )
        .await
        .expect("attach");
        let mut numbers = Vec::new();
        let mut sequence_numbers = Vec::new();
        for _ in 0..expected.len() {
            let delivery = receive(&mut receiver).await;
            let Body::Value(AmqpValue(Value::String(text))) = delivery.body() else {
                panic!("a string body");
            };
            numbers.push(text[1..].parse::<i64>().expect("a number"));
            if let Some(Value::Long(number)) =
                crate::harness::annotation(&delivery, "x-opt-sequence-number")
            {
                sequence_numbers.push(number);
            }
            receiver.accept(&delivery).await.expect("completed");
        }
        assert_eq!(numbers, expected, "{subscription} in order");
        assert_eq!(
            sequence_numbers.len(),
            expected.len(),
            "every copy numbered"
        );
        assert!(
            sequence_numbers.windows(2).all(|pair| pair[0] < pair[1]),
            "{subscription}: the topic's numbers rise"
        );
        receiver.close().await.ok();
    }
}

#[tokio::test]
async fn every_copy_of_a_publish_without_an_id_carries_the_one_id_assigned_to_it() {
    // The broker assigns a message sent without an id one GUID, kept beside the message
    // and written into its properties section on the way out (issue 16): each
    // subscription's copy carries it, a copy a rule action changed (a system property set:
    // the section decoded and written again) included.
    let broker = Broker::start(CONFIG).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "labelled")
        .await
        .expect("attach");
    let message = Message::builder()
        .properties(Properties::builder().subject("original").build())
        .value("no id".to_string())
        .build();
    sender.send(message).await.expect("accepted");
    let mut seen = Vec::new();
    for (subscription, label) in [("plain", "original"), ("relabel", "relabelled")] {
        let mut receiver = Receiver::attach(
            &mut session,
            format!("r-{subscription}"),
            format!("labelled/Subscriptions/{subscription}"),
        )
        .await
        .expect("attach");
        let delivery = receive(&mut receiver).await;
        let properties = delivery.message().properties.clone().expect("properties");
        assert_eq!(properties.subject.as_deref(), Some(label), "{subscription}");
        seen.push(crate::harness::string_message_id(&delivery));
        receiver.accept(&delivery).await.expect("completed");
        receiver.close().await.expect("detached");
    }
    assert!(
        ferrobus::encoding::ids::parse_guid_text(&seen[0]).is_some(),
        "a GUID: {}",
        seen[0]
    );
    assert_eq!(seen[0], seen[1], "one id for every copy");
}
