//! Lock tokens do not survive a restart (`docs/scale-out.md` §4 "Locks are leader-local"):
//! a restart releases every lock, the message is delivered again under a new token, and
//! settling with the token taken before the restart fails with lock-lost (rule LCK-3)
//! while the new delivery's token settles it.

use std::sync::Arc;

use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::{SimpleValue, Uuid, Value};
use fe2o3_amqp::{Delivery, Receiver, Sender};
use ferrobus::broker::storage::{MemoryLog, Recovered};

use crate::auth::Node;
use crate::harness::{Broker, receive, string_message_id};
use crate::publish_windows::with_id;

const CONFIG: &str = r#"
[[queues]]
name = "q"
lock_duration = "5m"
"#;

/// The delivery's lock token (`x-opt-lock-token`).
fn lock_token(delivery: &Delivery<Body<Value>>) -> Uuid {
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
    match token {
        Some(Value::Uuid(token)) => token,
        other => panic!("x-opt-lock-token missing: {other:?}"),
    }
}

/// Runs `operation` on `q/$management` with a map body of `entries`: the status code and
/// description.
async fn request(
    management: &mut Node,
    operation: &str,
    entries: Vec<(&str, Value)>,
) -> (i32, String) {
    let mut body = fe2o3_amqp::types::primitives::OrderedMap::new();
    for (key, value) in entries {
        body.insert(Value::String(key.into()), value);
    }
    let (status, description, _) = management
        .request_full(
            &[("operation", SimpleValue::String(operation.into()))],
            Value::Map(body),
        )
        .await;
    (status, description)
}

/// Completes the message locked by `token` through `q/$management`; the status code.
async fn complete(management: &mut Node, token: Uuid) -> (i32, String) {
    let entries = vec![
        ("lock-tokens", Value::Array(vec![Value::Uuid(token)].into())),
        ("disposition-status", Value::String("completed".into())),
    ];
    request(management, "com.microsoft:update-disposition", entries).await
}

#[tokio::test]
async fn a_lock_taken_before_a_restart_is_lost_after_it() {
    // rules LCK-1, LCK-3 across a restart
    let log = Arc::new(MemoryLog::default());
    let broker = Broker::start_with_log(CONFIG, log.clone(), Recovered::default()).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("sender attaches");
    sender.send(with_id("m1")).await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "before", "q")
        .await
        .expect("receiver attaches");
    let before = receive(&mut receiver).await;
    let old_token = lock_token(&before);
    broker.shut_down();
    drop(broker);

    let broker =
        Broker::start_with_log(CONFIG, Arc::new(MemoryLog::default()), log.recovered()).await;
    let (_connection, mut session) = broker.connect().await;
    let mut receiver = Receiver::attach(&mut session, "after", "q")
        .await
        .expect("receiver attaches");
    let after = receive(&mut receiver).await;
    assert_eq!(
        string_message_id(&after),
        "m1",
        "the restart released the lock"
    );
    let new_token = lock_token(&after);
    assert_ne!(old_token, new_token, "a new delivery, a new token");

    let mut management = Node::attach(&mut session, "q/$management", "settle").await;
    let (status, description) = complete(&mut management, old_token).await;
    assert_eq!(
        status, 410,
        "the token from before the restart settles nothing: {description}"
    );
    let (status, description) = complete(&mut management, new_token.clone()).await;
    assert_eq!(status, 200, "the new delivery's lock holds: {description}");
    let (status, _) = complete(&mut management, new_token).await;
    assert_eq!(status, 410, "completed: the message is gone");
}

/// Peeks one message through `q/$management`: the status code and description.
async fn peek(management: &mut Node) -> (i32, String) {
    let entries = vec![
        ("from-sequence-number", Value::Long(1)),
        ("message-count", Value::Int(1)),
    ];
    request(management, "com.microsoft:peek-message", entries).await
}

#[tokio::test]
async fn a_draining_connection_refuses_new_work_as_busy_and_still_settles_what_it_holds() {
    // A planned stop (SIGTERM, or a cluster node handing its clients over): management
    // requests that would start new work get 503 com.microsoft:server-busy, which the SDKs
    // retry on a new connection, instead of being lost in flight when the connection
    // closes; settling a held lock is still served (rule LCK-1).
    let broker = Broker::start(
        "[server]\nshutdown_grace_period = \"30s\"\n[[queues]]\nname = \"q\"\nlock_duration = \"5m\"\n",
    )
    .await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("sender attaches");
    sender.send(with_id("m1")).await.expect("accepted");
    sender.send(with_id("m2")).await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "holder", "q")
        .await
        .expect("receiver attaches");
    let held = receive(&mut receiver).await;
    let token = lock_token(&held);
    let mut management = Node::attach(&mut session, "q/$management", "drain").await;
    let (status, _) = peek(&mut management).await;
    assert_eq!(status, 200, "served before the stop");

    broker.shut_down();
    let (status, description) = peek(&mut management).await;
    assert_eq!(
        status, 503,
        "new work is refused while draining: {description}"
    );
    assert!(
        description.contains("retry on a new connection"),
        "{description}"
    );
    let (status, description) = complete(&mut management, token).await;
    assert_eq!(status, 200, "the held lock still settles: {description}");
}
