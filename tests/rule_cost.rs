//! Rule evaluation stalls nobody else (issue 41, item 1), tried as an attacker with Listen
//! rights would: four rules added at run time through `$management`, each
//! `p LIKE '%aaa…a b'` with a pattern of about 1,000 characters, then two messages whose
//! string property `p` is 200 KB. A client that only sends to and receives from an unrelated
//! queue keeps its round trips short while they are filtered, and the subscription whose
//! rules run past the configured budget dead-letters the message naming the rule.
//!
//! A test binary of its own, so that it runs alone: the round trips it measures are the
//! broker's, not those of other tests sharing the two cores. The broker is the real
//! process (a multi-threaded runtime, as users run it).

// The integration binary's process helper; this test uses part of it.
#[path = "integration/process.rs"]
#[allow(dead_code)]
mod process;

use std::time::{Duration, Instant};

use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, Properties};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Value};
use fe2o3_amqp::{Receiver, Sender};

use process::BrokerProcess;

/// Steps a subscription's rules may take on one message. Each rule's `LIKE` costs the text's
/// bytes times 16 state words (about 3.2 million steps on 200 KB): the first two rules fit,
/// the third does not.
const BUDGET: u64 = 8_000_000;

const CONFIG: &str = r#"
[server]
filter_evaluation_budget = 8000000

[[queues]]
name = "unrelated"

[[topics]]
name = "t"
[[topics.subscriptions]]
name = "attacked"
[[topics.subscriptions]]
name = "other"
"#;

/// Round trips on the unrelated queue may take this long at the 99th percentile.
const ROUND_TRIP_P99: Duration = Duration::from_millis(50);

async fn connect(broker: &BrokerProcess, name: &str) -> (Connection, SessionHandle<()>) {
    // Without TCP_NODELAY (fe2o3 leaves it off) each round trip waits out a delayed ACK.
    let stream = tokio::net::TcpStream::connect(broker.address)
        .await
        .expect("connects");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let mut connection = fe2o3_amqp::Connection::builder()
        .container_id(name)
        .hostname("127.0.0.1")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open_with_stream(stream)
        .await
        .expect("connection opens");
    let session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session begins");
    (connection, session)
}

type Connection = fe2o3_amqp::connection::ConnectionHandle<()>;

/// Adds a SQL rule through the subscription's `$management` node, as the SDKs' rule
/// managers do; returns the status code.
async fn add_rule(session: &mut SessionHandle<()>, path: &str, name: &str, sql: &str) -> i32 {
    let address = format!("{path}/$management");
    let mut sender = Sender::attach(session, format!("rules-{name}"), address.as_str())
        .await
        .expect("request link");
    let reply_to = format!("reply-{name}");
    let mut receiver = Receiver::builder()
        .name(format!("rules-{name}-responses"))
        .source(address.as_str())
        .target(reply_to.as_str())
        .attach(session)
        .await
        .expect("response link");
    let mut filter = OrderedMap::new();
    filter.insert(
        Value::String("expression".into()),
        Value::String(sql.into()),
    );
    let mut description = OrderedMap::new();
    description.insert(Value::String("sql-filter".into()), Value::Map(filter));
    let mut body = OrderedMap::new();
    body.insert(
        Value::String("rule-name".into()),
        Value::String(name.into()),
    );
    body.insert(
        Value::String("rule-description".into()),
        Value::Map(description),
    );
    let request = Message::builder()
        .properties(
            Properties::builder()
                .message_id(format!("add-{name}"))
                .reply_to(reply_to)
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("operation", "com.microsoft:add-rule")
                .build(),
        )
        .value(Value::Map(body))
        .build();
    sender.send(request).await.expect("request accepted");
    let response = tokio::time::timeout(Duration::from_secs(10), receiver.recv::<Body<Value>>())
        .await
        .expect("a response within 10 s")
        .expect("response received");
    receiver.accept(&response).await.expect("settled");
    let status = response
        .message()
        .application_properties
        .as_ref()
        .and_then(|properties| properties.0.get("statusCode").cloned());
    let _ = sender.close().await;
    let _ = receiver.close().await;
    match status {
        Some(SimpleValue::Int(code)) => code,
        other => panic!("no status code: {other:?}"),
    }
}

/// An application property of a received message, as text.
fn text_property(message: &Message<Body<Value>>, key: &str) -> Option<String> {
    match message.application_properties.as_ref()?.0.get(key)? {
        SimpleValue::String(text) => Some(text.clone()),
        _ => None,
    }
}

async fn receive(receiver: &mut Receiver) -> fe2o3_amqp::link::delivery::Delivery<Body<Value>> {
    let delivery = tokio::time::timeout(Duration::from_secs(60), receiver.recv::<Body<Value>>())
        .await
        .expect("a message within 60 s")
        .expect("receive succeeds");
    receiver.accept(&delivery).await.expect("settled");
    delivery
}

/// Sends to and receives from the unrelated queue until `stop` turns true, counting round
/// trips in `done`; returns the durations of those that began once `measuring` was true.
async fn round_trips(
    broker: &BrokerProcess,
    done: tokio::sync::watch::Sender<usize>,
    measuring: tokio::sync::watch::Receiver<bool>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<Duration> {
    let (mut connection, mut session) = connect(broker, "unrelated-client").await;
    // Pre-settled: a round trip is the message stored and delivered. (An fe2o3 0.14 sender
    // that waits for its disposition can lose it on a loaded CPU: it writes the transfer
    // before it records the delivery as unsettled, and a disposition handled in between is
    // dropped, so its send never completes. Not what this test measures.)
    let mut sender = Sender::builder()
        .name("unrelated-sender")
        .target("unrelated")
        .sender_settle_mode(fe2o3_amqp::types::definitions::SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .expect("sender attaches");
    let mut receiver = Receiver::attach(&mut session, "unrelated-receiver", "unrelated")
        .await
        .expect("receiver attaches");
    let mut measured = Vec::new();
    let started = Instant::now();
    // Bounded: the filtering ends well within a minute on any build.
    while !*stop.borrow() && started.elapsed() < Duration::from_secs(120) {
        let counted = *measuring.borrow();
        let begun = Instant::now();
        sender
            .send(Message::builder().value("ping".to_string()).build())
            .await
            .expect("sent");
        receive(&mut receiver).await;
        if counted {
            measured.push(begun.elapsed());
        }
        done.send_modify(|count| *count += 1);
    }
    let _ = sender.close().await;
    let _ = receiver.close().await;
    let _ = session.end().await;
    let _ = connection.close().await;
    measured
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_rule_evaluation_stalls_no_other_entity_and_stops_at_the_budget() {
    // rule DLQ-3 (filter evaluation errors dead-letter, here past the budget)
    let broker = BrokerProcess::start(CONFIG, &["--memory"]);
    let (mut connection, mut session) = connect(&broker, "attacker").await;
    let pattern = format!("%{} b", "a".repeat(995));
    for index in 1..=4 {
        let status = add_rule(
            &mut session,
            "t/Subscriptions/attacked",
            &format!("like-{index}"),
            &format!("p LIKE '{pattern}'"),
        )
        .await;
        assert_eq!(status, 200, "rule {index} added");
    }
    let (measuring_sender, measuring) = tokio::sync::watch::channel(false);
    let (stop_sender, stop) = tokio::sync::watch::channel(false);
    let (done, mut round_trips_done) = tokio::sync::watch::channel(0usize);
    let pinger = round_trips(&broker, done, measuring, stop);
    let attack = async {
        // The unrelated client is under way before the two messages are sent.
        round_trips_done
            .wait_for(|count| *count >= 3)
            .await
            .expect("the unrelated client runs");
        measuring_sender.send_replace(true);
        let mut sender = Sender::attach(&mut session, "attack", "t")
            .await
            .expect("sender attaches");
        for index in 0..2 {
            let message = Message::builder()
                .properties(
                    Properties::builder()
                        .message_id(format!("heavy-{index}"))
                        .build(),
                )
                .application_properties(
                    ApplicationProperties::builder()
                        .insert("p", "a".repeat(200_000))
                        .build(),
                )
                .value("heavy".to_string())
                .build();
            sender.send(message).await.expect("published");
        }
        // Both messages reached the subscription with the default rule: both were
        // filtered for every subscription.
        let mut other = Receiver::attach(&mut session, "other", "t/Subscriptions/other")
            .await
            .expect("receiver attaches");
        for _ in 0..2 {
            receive(&mut other).await;
        }
        stop_sender.send_replace(true);
        let mut dead = Receiver::attach(
            &mut session,
            "attacked-dead",
            "t/Subscriptions/attacked/$DeadLetterQueue",
        )
        .await
        .expect("receiver attaches");
        let mut reasons = Vec::new();
        for _ in 0..2 {
            let delivery = receive(&mut dead).await;
            reasons.push((
                text_property(delivery.message(), "DeadLetterReason"),
                text_property(delivery.message(), "DeadLetterErrorDescription"),
            ));
        }
        reasons
    };
    let Ok((measured, reasons)) = tokio::time::timeout(Duration::from_secs(180), async {
        tokio::join!(pinger, attack)
    })
    .await
    else {
        panic!("the scenario did not end: {:#?}", broker.lines());
    };
    let description = format!("Rule 'like-3': evaluation exceeded its budget of {BUDGET} steps");
    for reason in &reasons {
        assert_eq!(
            reason,
            &(
                Some("FilterEvaluationException".to_string()),
                Some(description.clone())
            )
        );
    }
    let mut sorted = measured.clone();
    sorted.sort();
    assert!(
        sorted.len() >= 5,
        "round trips went on while the messages were filtered: {sorted:?}"
    );
    let p99 = sorted[(sorted.len() * 99).div_ceil(100) - 1];
    println!(
        "{} round trips while filtering: median {:?}, p99 {p99:?}, max {:?}",
        sorted.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    assert!(
        p99 < ROUND_TRIP_P99,
        "an unrelated queue's round trips waited for the filters: p99 {p99:?} over {} round trips",
        sorted.len()
    );
    let _ = connection.close().await;
}
