//! Auto-forwarding is de-duplicated at the target (`docs/scale-out.md` §8 item 6): the source
//! keeps a message in its outbox until the target has stored it, and re-sends its outbox
//! after a restart. When the process dies after the target's commit but before the source
//! has recorded the message as forwarded, the re-sent entry must not be stored twice: the
//! target recorded the entry's key (source path, source sequence number) in the same record
//! as the message (a topic: in the one record of its publish, with every subscription's
//! copies), and answers the re-send "stored" without storing or publishing it again.

use std::sync::Arc;

use fe2o3_amqp::Sender;
use ferrobus::broker::entity::state::Change;
use ferrobus::broker::storage::Recovered;

use crate::harness::Broker;
use crate::publish_windows::{CrashingLog, crash, ids_until, with_id, writes};

const CONFIG: &str = r#"
[[queues]]
name = "source"
forward_to = "target"
[[queues]]
name = "target"
"#;

#[tokio::test]
async fn a_crash_before_the_source_records_a_forward_stores_it_once() {
    // rule FWD-1 across a crash
    let log = Arc::new(CrashingLog::default());
    let broker = Broker::start_with_log(CONFIG, log.clone(), Recovered::default()).await;
    // The target has stored the message; the source's record that it left the outbox is
    // in flight when the process dies.
    let crashed = log.arm(Box::new(|batch| {
        writes(batch, "source", |change| {
            matches!(change, Change::Forwarded { .. })
        })
    }));
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "source")
        .await
        .expect("sender attaches");
    sender.send(with_id("m1")).await.expect("accepted");
    crash(crashed).await;
    broker.shut_down();
    drop(broker);

    let kept = log.kept.recovered();
    let stored_at_target = kept.entities.get("target").map_or(0, |changes| {
        changes
            .iter()
            .filter(|change| matches!(change, Change::Put { .. }))
            .count()
    });
    assert_eq!(
        stored_at_target, 1,
        "the target committed m1 before the crash"
    );

    // The restarted source re-sends its outbox, then forwards the marker behind it.
    let broker = Broker::start_with_log(CONFIG, Arc::new(CrashingLog::default()), kept).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "source")
        .await
        .expect("sender attaches");
    sender.send(with_id("marker")).await.expect("accepted");
    let ids = ids_until(&broker, "target", "marker").await;
    assert_eq!(ids, ["m1"], "one copy of m1 at the target");
}

const TO_TOPIC: &str = r#"
[[queues]]
name = "source"
forward_to = "target"
[[topics]]
name = "target"
[[topics.subscriptions]]
name = "a"
"#;

#[tokio::test]
async fn a_crash_before_the_source_records_a_forward_to_a_topic_publishes_it_once() {
    // rule FWD-1 across a crash, to a topic: the key goes into the publish's one record
    let log = Arc::new(CrashingLog::default());
    let broker = Broker::start_with_log(TO_TOPIC, log.clone(), Recovered::default()).await;
    let crashed = log.arm(Box::new(|batch| {
        writes(batch, "source", |change| {
            matches!(change, Change::Forwarded { .. })
        })
    }));
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "source")
        .await
        .expect("sender attaches");
    sender.send(with_id("m1")).await.expect("accepted");
    crash(crashed).await;
    broker.shut_down();
    drop(broker);

    let kept = log.kept.recovered();
    let copies_in_subscription: usize = kept
        .entities
        .iter()
        .filter(|(key, _)| key.eq_ignore_ascii_case("target/Subscriptions/a"))
        .flat_map(|(_, changes)| changes)
        .filter(|change| matches!(change, Change::Put { .. }))
        .count();
    assert_eq!(
        copies_in_subscription, 1,
        "the topic published m1 to its subscription before the crash"
    );

    let broker = Broker::start_with_log(TO_TOPIC, Arc::new(CrashingLog::default()), kept).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "source")
        .await
        .expect("sender attaches");
    sender.send(with_id("marker")).await.expect("accepted");
    let ids = ids_until(&broker, "target/Subscriptions/a", "marker").await;
    assert_eq!(ids, ["m1"], "one copy of m1 in the subscription");
}
