//! A topic's publish is one durable record (`docs/scale-out.md` §8): the topic's changes —
//! the message id it remembers for duplicate detection, the scheduled message it removes
//! once published — and every subscription's copies are kept together by a crash, or none
//! of them. Each test crashes the log at the write that holds the topic's change (nothing
//! from that write on becomes durable, as when the process dies with it in flight), starts
//! a broker on what the log kept, and counts the copies a subscription ends up with. When
//! the copies and the topic's change were separate writes, the copies survived without the
//! change: the resend after the crash was not recognised as a duplicate (two copies), and the
//! scheduled message was published again at the restart (two copies).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fe2o3_amqp::types::messaging::{AmqpValue, Message, MessageAnnotations, Properties};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Timestamp, Value};
use fe2o3_amqp::{Receiver, Sender};
use ferrobus::broker::entity::state::Change;
use ferrobus::broker::storage::{Durable, DurableLog, MemoryLog, Recovered};
use tokio::sync::watch;

use crate::harness::{Broker, receive, string_message_id};

/// Decides whether an append is the one the log crashes at.
pub(crate) type CrashPoint = Box<dyn Fn(&[(String, Vec<Change>)]) -> bool + Send + Sync>;

/// A log in memory that crashes at the first append `crash_point` picks: that append and
/// every later write never become durable and are never answered.
#[derive(Default)]
pub(crate) struct CrashingLog {
    /// What became durable.
    pub(crate) kept: MemoryLog,
    crash_point: Mutex<Option<CrashPoint>>,
    crashed: AtomicBool,
    /// Turns true at the crash.
    crash_seen: Mutex<Option<watch::Sender<bool>>>,
}

impl std::fmt::Debug for CrashingLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("CrashingLog")
            .finish_non_exhaustive()
    }
}

impl CrashingLog {
    /// Crashes at the first append `point` picks; returns what turns true then.
    pub(crate) fn arm(&self, point: CrashPoint) -> watch::Receiver<bool> {
        let (seen, crashed) = watch::channel(false);
        *self.crash_point.lock().expect("lock") = Some(point);
        *self.crash_seen.lock().expect("lock") = Some(seen);
        crashed
    }

    /// Whether this write never happens.
    fn lost(&self, batch: Option<&[(String, Vec<Change>)]>) -> bool {
        if self.crashed.load(Ordering::SeqCst) {
            return true;
        }
        let hit = match (batch, &*self.crash_point.lock().expect("lock")) {
            (Some(batch), Some(point)) => point(batch),
            _ => false,
        };
        if hit {
            self.crashed.store(true, Ordering::SeqCst);
            if let Some(seen) = &*self.crash_seen.lock().expect("lock") {
                seen.send_replace(true);
            }
        }
        hit
    }
}

impl DurableLog for CrashingLog {
    fn append(&self, batch: Vec<(String, Vec<Change>)>) -> Durable<'_> {
        if self.lost(Some(&batch)) {
            return Box::pin(std::future::pending());
        }
        self.kept.append(batch)
    }

    fn drop_entity(&self, entity: &str) -> Durable<'_> {
        if self.lost(None) {
            return Box::pin(std::future::pending());
        }
        self.kept.drop_entity(entity)
    }

    fn checkpoint(&self, entity: &str, epoch: u64, changes: Vec<Change>) -> Durable<'_> {
        if self.lost(None) {
            return Box::pin(std::future::pending());
        }
        self.kept.checkpoint(entity, epoch, changes)
    }

    fn save_namespace(&self, text: String) -> Durable<'_> {
        self.kept.save_namespace(text)
    }

    fn has_room(&self) -> bool {
        true
    }

    fn full_error(&self) -> String {
        String::new()
    }

    fn register(&self, _entity: &str) {}

    fn unregister(&self, _entity: &str) {}

    fn epochs(&self) -> watch::Receiver<u64> {
        self.kept.epochs()
    }
}

/// Whether `batch` writes `change` for `entity`.
pub(crate) fn writes(
    batch: &[(String, Vec<Change>)],
    entity: &str,
    change: fn(&Change) -> bool,
) -> bool {
    batch
        .iter()
        .any(|(name, changes)| name == entity && changes.iter().any(change))
}

pub(crate) fn with_id(id: &str) -> Message<AmqpValue<String>> {
    Message::builder()
        .properties(Properties::builder().message_id(id.to_string()).build())
        .value(id.to_string())
        .build()
}

/// Starts a broker on `log`, from what `recovered` holds.
async fn start(config: &str, log: Arc<CrashingLog>, recovered: Recovered) -> Broker {
    Broker::start_with_log(config, log, recovered).await
}

/// Receives from `address` until the message `last` and returns the ids before it.
pub(crate) async fn ids_until(broker: &Broker, address: &str, last: &str) -> Vec<String> {
    let (_connection, mut session) = broker.connect().await;
    let mut receiver = Receiver::attach(&mut session, "count", address)
        .await
        .expect("receiver attaches");
    let mut ids = Vec::new();
    loop {
        let delivery = receive(&mut receiver).await;
        receiver.accept(&delivery).await.expect("settled");
        let id = string_message_id(&delivery);
        if id == last {
            return ids;
        }
        ids.push(id);
    }
}

/// Waits for the crash (the broker stays up, its writes unanswered).
pub(crate) async fn crash(mut crashed: watch::Receiver<bool>) {
    tokio::time::timeout(
        Duration::from_secs(10),
        crashed.wait_for(|crashed| *crashed),
    )
    .await
    .expect("the log crashed within 10 s")
    .expect("crash signal");
}

#[tokio::test]
async fn a_crash_keeps_a_publish_and_its_remembered_id_together() {
    // rules DUP-1, DUP-2 across a crash
    const CONFIG: &str = r#"
[[topics]]
name = "t"
requires_duplicate_detection = true
duplicate_detection_history_time_window = "10m"
[[topics.subscriptions]]
name = "a"
[[topics.subscriptions]]
name = "b"
"#;
    let log = Arc::new(CrashingLog::default());
    let broker = start(CONFIG, log.clone(), Recovered::default()).await;
    let crashed = log.arm(Box::new(|batch| {
        writes(batch, "t", |change| {
            matches!(change, Change::Remembered { .. })
        })
    }));
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "publisher", "t")
        .await
        .expect("sender attaches");
    // The send is never acknowledged: the log crashed with its record in flight.
    let sending = tokio::spawn(async move {
        let _ = sender.send(with_id("m1")).await;
    });
    crash(crashed).await;
    sending.abort();
    broker.shut_down();
    drop(broker);

    // The process restarts on what the log kept, and the SDK resends what was not
    // acknowledged.
    let kept = log.kept.recovered();
    let broker = start(CONFIG, Arc::new(CrashingLog::default()), kept).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "publisher", "t")
        .await
        .expect("sender attaches");
    for id in ["m1", "marker"] {
        sender.send(with_id(id)).await.expect("accepted");
    }
    for subscription in ["a", "b"] {
        let ids = ids_until(
            &broker,
            &format!("t/Subscriptions/{subscription}"),
            "marker",
        )
        .await;
        assert_eq!(ids, ["m1"], "subscription {subscription}: one copy of m1");
    }
}

#[tokio::test]
async fn a_crash_publishes_a_scheduled_message_once() {
    // rules SCH-3 across a crash
    const CONFIG: &str = r#"
[[topics]]
name = "s"
[[topics.subscriptions]]
name = "a"
"#;
    let log = Arc::new(CrashingLog::default());
    let broker = start(CONFIG, log.clone(), Recovered::default()).await;
    // The activation removes the scheduled message from the topic's log.
    let crashed = log.arm(Box::new(|batch| {
        writes(batch, "s", |change| matches!(change, Change::Remove { .. }))
    }));
    // Scheduled through the topic's $management node, as the SDKs' schedule calls do: the
    // topic keeps it until its time, then publishes it.
    let (_connection, mut session) = broker.connect().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0);
    let scheduled = Message::builder()
        .properties(
            Properties::builder()
                .message_id("later".to_string())
                .build(),
        )
        .message_annotations(
            MessageAnnotations::builder()
                .insert(
                    "x-opt-scheduled-enqueue-time",
                    Timestamp::from_milliseconds(now + 300),
                )
                .build(),
        )
        .value("later".to_string())
        .build();
    let encoded = serde_amqp::to_vec(
        &fe2o3_amqp::types::messaging::message::__private::Serializable(scheduled),
    )
    .expect("encodes");
    let mut entry = OrderedMap::new();
    entry.insert(
        Value::String("message".into()),
        Value::Binary(serde_bytes::ByteBuf::from(encoded)),
    );
    entry.insert(
        Value::String("message-id".into()),
        Value::String("later".into()),
    );
    let mut body = OrderedMap::new();
    body.insert(
        Value::String("messages".into()),
        Value::List(vec![Value::Map(entry)]),
    );
    let mut management = crate::auth::Node::attach(&mut session, "s/$management", "schedule").await;
    let (status, description, _) = management
        .request_full(
            &[(
                "operation",
                SimpleValue::String("com.microsoft:schedule-message".into()),
            )],
            Value::Map(body),
        )
        .await;
    assert_eq!(status, 200, "scheduled: {description}");
    crash(crashed).await;
    broker.shut_down();
    drop(broker);

    let kept = log.kept.recovered();
    let broker = start(CONFIG, Arc::new(CrashingLog::default()), kept).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "marker", "s")
        .await
        .expect("sender attaches");
    // Scheduled messages that came due while the broker was down are published at its
    // start, before anything sent to it.
    sender.send(with_id("marker")).await.expect("accepted");
    let ids = ids_until(&broker, "s/Subscriptions/a", "marker").await;
    assert_eq!(ids, ["later"], "one copy of the scheduled message");
}
