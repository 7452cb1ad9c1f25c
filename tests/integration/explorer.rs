//! The explorer's JSON API (issue 13) against the real broker: what the page does — send,
//! browse, dead-letter, resubmit, purge — checked with an AMQP client (fe2o3-amqp) on the
//! other side, HTTP Basic with keys, and a purge that survives `kill -9`.

use std::net::SocketAddr;
use std::time::Duration;

use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use fe2o3_amqp::{Receiver, Sender};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{Broker, property, receive};
use crate::http_guard::{header, raw};
use crate::process::BrokerProcess;

/// One HTTP/1.1 request (connection closed after it); returns the status and the body.
pub(crate) async fn http(
    address: SocketAddr,
    method: &str,
    target: &str,
    body: Option<&Json>,
    credentials: Option<(&str, &str)>,
) -> (u16, String) {
    use base64::Engine as _;
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    let body = body.map(Json::to_string).unwrap_or_default();
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some((name, key)) = credentials {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{key}"));
        request.push_str(&format!("Authorization: Basic {encoded}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request written");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("answered within 10 s")
        .expect("response read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

pub(crate) async fn api(
    address: SocketAddr,
    method: &str,
    route: &str,
    body: Option<Json>,
) -> (u16, Json) {
    let (status, text) = http(
        address,
        method,
        &format!("/explorer/api/{route}"),
        body.as_ref(),
        None,
    )
    .await;
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("JSON from {route}: {error}: {text}"));
    (status, value)
}

pub(crate) fn counts(entities: &Json, path: &str) -> Json {
    entities["entities"]
        .as_array()
        .expect("entities")
        .iter()
        .find(|entity| entity["path"] == path)
        .unwrap_or_else(|| panic!("{path} listed"))["counts"]
        .clone()
}

/// Polls the entity list until `path`'s count `name` is `expected` (settlements from a
/// client are fire-and-forget on the wire), failing after 5 s.
pub(crate) async fn wait_for_count(address: SocketAddr, path: &str, name: &str, expected: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, entities) = api(address, "GET", "entities", None).await;
        let count = counts(&entities, path)[name].as_u64();
        if count == Some(expected) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} {name} stayed {count:?}, expected {expected}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const CONFIG: &str = r#"
[[queues]]
name = "orders"
max_delivery_count = 1

[[topics]]
name = "events"

[[topics.subscriptions]]
name = "red"
[[topics.subscriptions.rules]]
name = "red"
sql_filter = "colour = 'red'"
"#;

#[tokio::test]
async fn dead_letters_are_browsed_and_resubmitted_to_a_waiting_receiver() {
    let broker = Broker::start(CONFIG).await;
    let (mut connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "s", "orders")
        .await
        .expect("sender");
    for body in ["one", "two", "three"] {
        let message = fe2o3_amqp::types::messaging::Message::builder()
            .application_properties(
                fe2o3_amqp::types::messaging::ApplicationProperties::builder()
                    .insert("body", body)
                    .build(),
            )
            .value(body.to_string())
            .build();
        sender.send(message).await.expect("accepted");
    }
    // Abandoned once with max_delivery_count = 1: dead-lettered (rule LCK-2).
    let mut receiver = Receiver::attach(&mut session, "r", "orders")
        .await
        .expect("receiver");
    for _ in 0..3 {
        let delivery = receive(&mut receiver).await;
        let failed = fe2o3_amqp::types::messaging::Modified {
            delivery_failed: Some(true),
            undeliverable_here: None,
            message_annotations: None,
        };
        receiver.modify(&delivery, failed).await.expect("abandoned");
    }
    wait_for_count(broker.address, "orders", "dead_letter", 3).await;
    let (_, entities) = api(broker.address, "GET", "entities", None).await;
    assert_eq!(counts(&entities, "orders")["active"], 0);

    let (status, page) = api(
        broker.address,
        "GET",
        "messages?path=orders&queue=dlq&property=body&value=two",
        None,
    )
    .await;
    assert_eq!(status, 200);
    let found = page["messages"].as_array().expect("messages");
    assert_eq!(found.len(), 1, "{page}");
    assert_eq!(found[0]["dead_letter_reason"], "MaxDeliveryCountExceeded");
    let two = found[0]["sequence_number"].as_i64().expect("number");
    let (_, detail) = api(
        broker.address,
        "GET",
        &format!("message?path=orders&queue=dlq&seq={two}"),
        None,
    )
    .await;
    assert_eq!(detail["body"]["text"], "two");
    assert_eq!(detail["properties"]["body"], "two");
    assert_eq!(
        detail["system"]["DeadLetterReason"],
        "MaxDeliveryCountExceeded"
    );

    // Resubmit all: the receiver still attached gets them back as new messages.
    let (status, answer) = api(
        broker.address,
        "POST",
        "resubmit",
        Some(json!({"path": "orders", "queue": "dlq", "all": true})),
    )
    .await;
    assert_eq!((status, answer["resubmitted"].as_i64()), (200, Some(3)));
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let delivery = receive(&mut receiver).await;
        assert_eq!(
            delivery.message().header.as_ref().map(|h| h.delivery_count),
            Some(0),
            "a resubmitted message starts its delivery count afresh"
        );
        assert_eq!(property(&delivery, "DeadLetterReason"), None);
        bodies.push(property(&delivery, "body"));
        receiver.accept(&delivery).await.expect("completed");
    }
    bodies.sort_by_key(|value| format!("{value:?}"));
    assert_eq!(
        bodies,
        vec![
            Some(SimpleValue::String("one".into())),
            Some(SimpleValue::String("three".into())),
            Some(SimpleValue::String("two".into())),
        ]
    );
    wait_for_count(broker.address, "orders", "dead_letter", 0).await;
    wait_for_count(broker.address, "orders", "active", 0).await;
    receiver.close().await.ok();
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

#[tokio::test]
async fn sent_messages_reach_clients_and_actions_settle_by_sequence_number() {
    let broker = Broker::start(CONFIG).await;
    // Through the topic: the subscription's SQL filter sees the form's properties.
    let (status, sent) = api(
        broker.address,
        "POST",
        "send",
        Some(
            json!({"path": "events", "body": "{\"n\": 1}", "content_type": "application/json",
                    "properties": {"colour": "red", "size": 3}, "message_id": "m-1"}),
        ),
    )
    .await;
    assert_eq!((status, sent["sent"].as_i64()), (200, Some(1)), "{sent}");
    api(
        broker.address,
        "POST",
        "send",
        Some(json!({"path": "events", "body": "blue", "properties": {"colour": "blue"}})),
    )
    .await;
    let (mut connection, mut session) = broker.connect().await;
    let mut receiver = Receiver::attach(&mut session, "r", "events/Subscriptions/red")
        .await
        .expect("receiver");
    let delivery = receive(&mut receiver).await;
    assert_eq!(
        property(&delivery, "colour"),
        Some(SimpleValue::String("red".into()))
    );
    assert_eq!(property(&delivery, "size"), Some(SimpleValue::Long(3)));
    let properties = delivery.message().properties.clone().expect("properties");
    assert_eq!(
        properties.content_type.map(|kind| kind.to_string()),
        Some("application/json".to_string())
    );
    match delivery.body() {
        Body::Data(data) => {
            let bytes: Vec<u8> = data.iter().flat_map(|chunk| chunk.0.to_vec()).collect();
            assert_eq!(bytes, b"{\"n\": 1}");
        }
        other => panic!("a data body, got {other:?}"),
    }
    receiver.accept(&delivery).await.expect("completed");
    receiver.close().await.ok();

    // Ten into the queue, then actions on numbers: defer two, dead-letter one, receive one.
    let (_, sent) = api(
        broker.address,
        "POST",
        "send",
        Some(json!({"path": "orders", "body": "x", "count": 10})),
    )
    .await;
    assert_eq!(sent["sent"], 10);
    let (_, page) = api(broker.address, "GET", "messages?path=orders&count=10", None).await;
    let numbers: Vec<i64> = page["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|message| message["sequence_number"].as_i64().expect("number"))
        .collect();
    assert_eq!(numbers.len(), 10);
    for (action, chosen) in [
        ("defer", &numbers[0..2]),
        ("dead-letter", &numbers[2..3]),
        ("receive", &numbers[3..4]),
    ] {
        let (status, answer) = api(
            broker.address,
            "POST",
            "action",
            Some(
                json!({"path": "orders", "queue": "main", "sequence_numbers": chosen,
                        "action": action, "reason": "Checked"}),
            ),
        )
        .await;
        assert_eq!(
            (status, answer["done"].as_u64()),
            (200, Some(chosen.len() as u64))
        );
    }
    let (_, entities) = api(broker.address, "GET", "entities", None).await;
    let orders = counts(&entities, "orders");
    assert_eq!(orders["deferred"], 2);
    assert_eq!(orders["dead_letter"], 1);
    assert_eq!(
        orders["active"], 8,
        "6 active and 2 deferred (counted as active)"
    );
    let (_, deferred) = api(
        broker.address,
        "GET",
        "messages?path=orders&state=deferred",
        None,
    )
    .await;
    assert_eq!(deferred["messages"].as_array().map(Vec::len), Some(2));
    let (_, dead) = api(
        broker.address,
        "GET",
        "messages?path=orders&queue=dlq",
        None,
    )
    .await;
    assert_eq!(dead["messages"][0]["dead_letter_reason"], "Checked");

    // A message a receiver holds is not the explorer's to settle.
    let mut receiver = Receiver::attach(&mut session, "r2", "orders")
        .await
        .expect("receiver");
    let held = receive(&mut receiver).await;
    let held_number = match crate::harness::annotation(&held, "x-opt-sequence-number") {
        Some(Value::Long(number)) => number,
        other => panic!("sequence number annotation, got {other:?}"),
    };
    let (status, answer) = api(
        broker.address,
        "POST",
        "action",
        Some(json!({"path": "orders", "sequence_numbers": [held_number], "action": "complete"})),
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    assert!(
        answer["error"].as_str().unwrap_or("").contains("locked"),
        "{answer}"
    );
    receiver
        .accept(&held)
        .await
        .expect("the holder completes it");
    receiver.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

#[tokio::test]
async fn entity_definitions_are_created_changed_and_deleted() {
    let broker = Broker::start(CONFIG).await;
    let (status, created) = api(
        broker.address,
        "POST",
        "entities",
        Some(json!({"definition": "[[queues]]\nname = \"audit\"\nmax_delivery_count = 4\n"})),
    )
    .await;
    assert_eq!((status, created["path"].as_str()), (201, Some("audit")));
    let (_, detail) = api(broker.address, "GET", "entity?path=audit", None).await;
    let definition = detail["definition"].as_str().expect("definition");
    assert!(
        definition.contains("max_delivery_count = 4"),
        "{definition}"
    );
    let changed = definition.replace("max_delivery_count = 4", "max_delivery_count = 9");
    let (status, detail) = api(
        broker.address,
        "PUT",
        "entity?path=audit",
        Some(json!({ "definition": changed })),
    )
    .await;
    assert_eq!(status, 200, "{detail}");
    assert!(
        detail["definition"]
            .as_str()
            .unwrap_or("")
            .contains("max_delivery_count = 9")
    );
    // Mistakes are named.
    let (status, answer) = api(
        broker.address,
        "POST",
        "entities",
        Some(json!({"definition": "[[queues]]\nname = \"audit\"\n"})),
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    let (status, answer) = api(
        broker.address,
        "POST",
        "entities",
        Some(json!({"definition": "[[queues]]\nname = \"x\"\nlock_duration = \"forever\"\n"})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or("")
            .contains("lock_duration"),
        "{answer}"
    );
    // A subscription added to an existing topic.
    let (status, created) = api(
        broker.address,
        "POST",
        "entities",
        Some(json!({"definition": "[[topics]]\nname = \"events\"\n[[topics.subscriptions]]\nname = \"all\"\n"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["path"], "events/Subscriptions/all");
    let (status, _) = api(broker.address, "DELETE", "entity?path=audit", None).await;
    assert_eq!(status, 200);
    let (status, answer) = api(broker.address, "GET", "entity?path=audit", None).await;
    assert_eq!(status, 404);
    assert!(answer["error"].as_str().unwrap_or("").contains("audit"));
    // Purge needs the path repeated.
    let (status, answer) = api(
        broker.address,
        "POST",
        "purge",
        Some(json!({"path": "orders", "confirm": "order"})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(answer["error"].as_str().unwrap_or("").contains("confirm"));
}

#[tokio::test]
async fn with_keys_the_explorer_needs_a_manage_key() {
    let broker = Broker::start(&format!(
        r#"
[[auth.keys]]
name = "root"
key = "root-secret"
rights = ["Manage"]
[[auth.keys]]
name = "sender"
key = "send-secret"
rights = ["Send"]
{CONFIG}"#
    ))
    .await;
    let (status, _) = http(broker.address, "GET", "/explorer/", None, None).await;
    assert_eq!(status, 401);
    let (status, _) = http(
        broker.address,
        "GET",
        "/explorer/api/entities",
        None,
        Some(("root", "wrong")),
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = http(
        broker.address,
        "GET",
        "/explorer/api/entities",
        None,
        Some(("sender", "send-secret")),
    )
    .await;
    assert_eq!(status, 403);
    assert!(body.contains("Manage"), "{body}");
    let (status, body) = http(
        broker.address,
        "GET",
        "/explorer/api/entities",
        None,
        Some(("root", "root-secret")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"orders\""));
}

/// The quoted values that follow `prefix` in `text` (`src="`, `from "./`).
fn quoted_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.split(prefix)
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(value, _)| value))
        .collect()
}

/// The page loads its script as a module, and each module the others it imports: every one
/// of them, found by following the page's references and the imports, is served as
/// JavaScript (browsers refuse a module of any other type) under the page's policy.
#[tokio::test]
async fn every_script_module_the_page_loads_is_served() {
    let broker = Broker::start(CONFIG).await;
    let host = [("Host", "localhost")];
    let (status, _, page) = raw(broker.address, "GET", "/explorer/", &host, "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains(r#"<script type="module" src="app.js">"#),
        "{page}"
    );
    let mut wanted: Vec<String> = quoted_after(&page, "src=\"")
        .into_iter()
        .chain(quoted_after(&page, "href=\""))
        .filter(|name| name.ends_with(".js"))
        .map(str::to_string)
        .collect();
    let mut served = std::collections::BTreeSet::new();
    let mut imported = 0;
    while let Some(name) = wanted.pop() {
        if !served.insert(name.clone()) {
            continue;
        }
        let target = format!("/explorer/{name}");
        let (status, head, script) = raw(broker.address, "GET", &target, &host, "").await;
        assert_eq!(status, 200, "{target}");
        assert_eq!(
            header(&head, "content-type"),
            Some("text/javascript; charset=utf-8"),
            "{target}"
        );
        assert!(
            header(&head, "content-security-policy")
                .is_some_and(|policy| policy.starts_with("default-src 'self';")),
            "{target}: {head}"
        );
        for module in quoted_after(&script, "from \"./") {
            imported += 1;
            wanted.push(module.to_string());
        }
    }
    assert!(imported > 0, "app.js imports the page's other modules");
    assert!(served.contains("app.js") && served.len() > 1, "{served:?}");
}

#[tokio::test]
async fn a_purge_survives_kill_9() {
    let data = std::env::temp_dir().join(format!("ferrobus-explorer-purge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let data_arg = data.display().to_string();
    let config = "[[queues]]\nname = \"orders\"\n";
    let mut first = BrokerProcess::start(config, &["--data-dir", &data_arg]);
    let (_, sent) = api(
        first.address,
        "POST",
        "send",
        Some(json!({"path": "orders", "body": "x", "count": 50})),
    )
    .await;
    assert_eq!(sent["sent"], 50);
    let (_, answer) = api(
        first.address,
        "POST",
        "purge",
        Some(json!({"path": "orders", "confirm": "orders"})),
    )
    .await;
    assert_eq!(answer["deleted"], 50);
    let (_, sent) = api(
        first.address,
        "POST",
        "send",
        Some(json!({"path": "orders", "body": "kept", "count": 2})),
    )
    .await;
    assert_eq!(sent["sent"], 2);
    first.child.kill().expect("kill -9");
    first.child.wait().expect("reaped");
    let second = BrokerProcess::start(config, &["--data-dir", &data_arg]);
    let (_, entities) = api(second.address, "GET", "entities", None).await;
    assert_eq!(
        counts(&entities, "orders")["active"],
        2,
        "the purge was acknowledged, so it holds after a crash; the later sends too"
    );
    drop(second);
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn a_deleted_entity_leaves_the_metrics() {
    let broker = Broker::start("[[queues]]\nname = \"short-lived\"\n").await;
    let (mut connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "s", "short-lived")
        .await
        .expect("sender");
    sender.send("x").await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "r", "short-lived")
        .await
        .expect("receiver");
    let delivery = receive(&mut receiver).await;
    receiver.accept(&delivery).await.expect("completed");
    let series = "ferrobus_delivery_latency_seconds_count{entity=\"short-lived\"} 1";
    let (_, metrics) = http(broker.address, "GET", "/metrics", None, None).await;
    assert!(metrics.contains(series), "{metrics}");
    receiver.close().await.ok();
    sender.close().await.ok();
    let (status, _) = api(broker.address, "DELETE", "entity?path=short-lived", None).await;
    assert_eq!(status, 200);
    let (_, metrics) = http(broker.address, "GET", "/metrics", None, None).await;
    assert!(
        !metrics.contains("entity=\"short-lived\""),
        "no series of the deleted queue is left: {metrics}"
    );
    session.end().await.ok();
    connection.close().await.ok();
}
