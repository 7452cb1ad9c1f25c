//! Service Bus parity details (issue 15): batch delete through `$management`
//! (`com.microsoft:batch-delete-messages`, the SDKs' deleteMessages / purgeMessages) and
//! the lock token in the `x-opt-lock-token` delivery annotation of peek-lock deliveries.

use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Timestamp, Value};
use fe2o3_amqp::{Receiver, Sender};

use crate::auth::Node;
use crate::harness::{Broker, annotation, receive};

const CONFIG: &str = r#"
[[queues]]
name = "orders"

[[queues]]
name = "sessions"
requires_session = true
"#;

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

fn delete_request(count: Value, before: i64, session: Option<&str>) -> Value {
    let mut body = OrderedMap::new();
    body.insert(Value::String("message-count".into()), count);
    body.insert(
        Value::String("enqueued-time-utc".into()),
        Value::Timestamp(Timestamp::from_milliseconds(before)),
    );
    if let Some(session) = session {
        body.insert(
            Value::String("session-id".into()),
            Value::String(session.into()),
        );
    }
    Value::Map(body)
}

fn deleted_count(body: &Option<Value>) -> Option<i64> {
    let Some(Value::Map(map)) = body else {
        return None;
    };
    match map.get(&Value::String("message-count".into())) {
        Some(Value::Int(count)) => Some(i64::from(*count)),
        Some(Value::Long(count)) => Some(*count),
        _ => None,
    }
}

const OPERATION: &str = "com.microsoft:batch-delete-messages";

#[tokio::test]
async fn batch_delete_removes_the_oldest_unlocked_messages_up_to_the_count() {
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "s", "orders")
        .await
        .expect("sender");
    for index in 0..6 {
        sender.send(format!("m{index}")).await.expect("accepted");
    }
    // A receiver holds the first one: batch delete leaves locked messages alone.
    let mut receiver = Receiver::builder()
        .name("r")
        .source("orders")
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .expect("receiver");
    receiver.set_credit(1).await.expect("credit");
    let held = receive(&mut receiver).await;
    let mut node = Node::attach(&mut session, "orders/$management", "mgmt").await;
    let operation = [("operation", SimpleValue::String(OPERATION.into()))];
    let later = now_millis() + 3_600_000;
    let (status, description, body) = node
        .request_full(&operation, delete_request(Value::Int(3), later, None))
        .await;
    assert_eq!(status, 200, "{description}");
    assert_eq!(deleted_count(&body), Some(3));
    // Messages enqueued after the cut-off time stay.
    let (status, _, body) = node
        .request_full(&operation, delete_request(Value::Int(100), 0, None))
        .await;
    assert_eq!((status, deleted_count(&body)), (200, Some(0)));
    let (status, _, body) = node
        .request_full(&operation, delete_request(Value::Int(100), later, None))
        .await;
    assert_eq!(
        (status, deleted_count(&body)),
        (200, Some(2)),
        "the two left unlocked; the held one is the receiver's"
    );
    receiver
        .accept(&held)
        .await
        .expect("the holder completes it");
    // Bad counts are named.
    let (status, description, _) = node
        .request_full(&operation, delete_request(Value::Int(0), later, None))
        .await;
    assert_eq!(status, 400);
    assert!(description.contains("message-count"), "{description}");
    node.close().await;
    receiver.close().await.ok();
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

#[tokio::test]
async fn batch_delete_on_a_session_takes_only_that_sessions_messages() {
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "s", "sessions")
        .await
        .expect("sender");
    for group in ["a", "a", "b"] {
        let message = fe2o3_amqp::types::messaging::Message::builder()
            .properties(
                fe2o3_amqp::types::messaging::Properties::builder()
                    .group_id(group.to_string())
                    .build(),
            )
            .value(group.to_string())
            .build();
        sender.send(message).await.expect("accepted");
    }
    let mut node = Node::attach(&mut session, "sessions/$management", "mgmt").await;
    let operation = [("operation", SimpleValue::String(OPERATION.into()))];
    let later = now_millis() + 3_600_000;
    let (status, _, body) = node
        .request_full(&operation, delete_request(Value::Int(10), later, Some("a")))
        .await;
    assert_eq!((status, deleted_count(&body)), (200, Some(2)));
    let (status, _, body) = node
        .request_full(&operation, delete_request(Value::Int(10), later, None))
        .await;
    assert_eq!(
        (status, deleted_count(&body)),
        (200, Some(1)),
        "b's message"
    );
    node.close().await;
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

#[tokio::test]
async fn peek_lock_deliveries_carry_the_lock_token_annotation() {
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "s", "orders")
        .await
        .expect("sender");
    sender.send("locked").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "r", "orders")
        .await
        .expect("receiver");
    let delivery = receive(&mut receiver).await;
    let token = delivery
        .message()
        .delivery_annotations
        .as_ref()
        .and_then(|annotations| {
            annotations.0.iter().find_map(|(name, value)| {
                format!("{name:?}")
                    .contains("\"x-opt-lock-token\"")
                    .then(|| value.clone())
            })
        });
    let Some(Value::Uuid(token)) = token else {
        panic!(
            "x-opt-lock-token missing: {:?}",
            delivery.message().delivery_annotations
        );
    };
    assert!(
        annotation(&delivery, "x-opt-lock-token").is_none(),
        "a delivery annotation, not a message annotation"
    );
    // The delivery tag is the same GUID in .NET byte order (what the SDKs read).
    let tag = delivery.delivery_tag().as_ref().to_vec();
    let bytes = *token.as_inner();
    let dotnet = [
        bytes[3], bytes[2], bytes[1], bytes[0], bytes[5], bytes[4], bytes[7], bytes[6], bytes[8],
        bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15],
    ];
    assert_eq!(tag, dotnet.to_vec());
    receiver.accept(&delivery).await.expect("completed");
    receiver.close().await.ok();
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

const TOPIC_CONFIG: &str = r#"
[[topics]]
name = "events"

[[topics.subscriptions]]
name = "all"

[[topics.subscriptions]]
name = "red"
[[topics.subscriptions.rules]]
name = "red"
sql_filter = "colour = 'red'"
"#;

fn coloured(
    colour: &str,
) -> fe2o3_amqp::types::messaging::Message<fe2o3_amqp::types::messaging::AmqpValue<String>> {
    fe2o3_amqp::types::messaging::Message::builder()
        .application_properties(
            fe2o3_amqp::types::messaging::ApplicationProperties::builder()
                .insert("colour", colour)
                .build(),
        )
        .value(colour.to_string())
        .build()
}

fn sequence_and_time(
    delivery: &fe2o3_amqp::Delivery<fe2o3_amqp::types::messaging::Body<Value>>,
) -> (i64, i64) {
    let number = match annotation(delivery, "x-opt-sequence-number") {
        Some(Value::Long(number)) => number,
        other => panic!("x-opt-sequence-number, got {other:?}"),
    };
    let time = match annotation(delivery, "x-opt-enqueued-time") {
        Some(Value::Timestamp(time)) => time.milliseconds(),
        other => panic!("x-opt-enqueued-time, got {other:?}"),
    };
    (number, time)
}

async fn drain_numbers(
    session: &mut fe2o3_amqp::session::SessionHandle<()>,
    address: &str,
    count: usize,
) -> Vec<(i64, i64)> {
    let mut receiver = Receiver::attach(session, format!("r-{address}"), address)
        .await
        .expect("receiver");
    let mut numbers = Vec::new();
    for _ in 0..count {
        let delivery = receive(&mut receiver).await;
        numbers.push(sequence_and_time(&delivery));
        receiver.accept(&delivery).await.expect("completed");
    }
    receiver.close().await.ok();
    numbers
}

#[tokio::test]
async fn subscriptions_carry_the_topics_sequence_number_and_enqueued_time() {
    // rule SEQ-1: numbers are the topic's; a filtered subscription sees gaps.
    let broker = Broker::start(TOPIC_CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "s", "events")
        .await
        .expect("sender");
    for colour in ["red", "blue", "red"] {
        sender.send(coloured(colour)).await.expect("accepted");
    }
    let all = drain_numbers(&mut session, "events/Subscriptions/all", 3).await;
    let red = drain_numbers(&mut session, "events/Subscriptions/red", 2).await;
    let all_numbers: Vec<i64> = all.iter().map(|(number, _)| *number).collect();
    let red_numbers: Vec<i64> = red.iter().map(|(number, _)| *number).collect();
    assert_eq!(all_numbers, vec![1, 2, 3]);
    assert_eq!(
        red_numbers,
        vec![1, 3],
        "the blue message's number is not reused"
    );
    assert_eq!(red[0].1, all[0].1, "the same enqueued time on every copy");
    assert_eq!(red[1].1, all[2].1);
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

#[tokio::test]
async fn the_topics_numbers_go_on_after_kill_9() {
    let data = std::env::temp_dir().join(format!("ferrobus-topic-numbers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let data_arg = data.display().to_string();
    let connect = |address: std::net::SocketAddr| async move {
        let mut connection = fe2o3_amqp::Connection::builder()
            .container_id("parity")
            .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
            .open(format!("amqp://{address}").as_str())
            .await
            .expect("connection opens");
        let session = fe2o3_amqp::Session::begin(&mut connection)
            .await
            .expect("session");
        (connection, session)
    };
    let mut first = crate::process::BrokerProcess::start(TOPIC_CONFIG, &["--data-dir", &data_arg]);
    {
        let (_connection, mut session) = connect(first.address).await;
        let mut sender = Sender::attach(&mut session, "s", "events")
            .await
            .expect("sender");
        for colour in ["blue", "blue", "red"] {
            sender.send(coloured(colour)).await.expect("accepted");
        }
        // Numbers 1 and 2 leave the "all" subscription; 3 stays in both.
        let consumed = drain_numbers(&mut session, "events/Subscriptions/all", 2).await;
        assert_eq!(
            consumed.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }
    // Completions are not acknowledged on the wire: wait until the broker counts them
    // (its answer comes after they are on disk) before the kill.
    crate::explorer::wait_for_count(first.address, "events/Subscriptions/all", "active", 1).await;
    first.child.kill().expect("kill -9");
    first.child.wait().expect("reaped");
    let second = crate::process::BrokerProcess::start(TOPIC_CONFIG, &["--data-dir", &data_arg]);
    let (mut connection, mut session) = connect(second.address).await;
    let mut sender = Sender::attach(&mut session, "s", "events")
        .await
        .expect("sender");
    sender.send(coloured("red")).await.expect("accepted");
    let all = drain_numbers(&mut session, "events/Subscriptions/all", 2).await;
    let red = drain_numbers(&mut session, "events/Subscriptions/red", 2).await;
    assert_eq!(all.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(red.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![3, 4]);
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
    drop(second);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn strict_mode_holds_run_time_entities_to_the_clouds_rules() {
    let broker = Broker::start("[server]\nstrict = true\n[[queues]]\nname = \"orders\"\n").await;
    // Entities created at run time are held to the same rules as the file's.
    let (status, answer) = crate::explorer::api(
        broker.address,
        "POST",
        "entities",
        Some(serde_json::json!({"definition": "[[queues]]\nname = \"long\"\nlock_duration = \"10m\"\n"})),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    let text = answer["error"].as_str().unwrap_or("");
    assert!(
        text.contains("lock_duration") && text.contains("strict"),
        "{text}"
    );
    let (status, answer) = crate::explorer::api(
        broker.address,
        "POST",
        "entities",
        Some(serde_json::json!({"definition": "[[queues]]\nname = \"fine\"\nlock_duration = \"5m\"\n"})),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    // Without strict the same definition is taken.
    let relaxed = Broker::start("[[queues]]\nname = \"orders\"\n").await;
    let (status, answer) = crate::explorer::api(
        relaxed.address,
        "POST",
        "entities",
        Some(serde_json::json!({"definition": "[[queues]]\nname = \"long\"\nlock_duration = \"10m\"\n"})),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
}
