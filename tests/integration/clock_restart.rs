//! The broker's clock never runs backwards across a restart (`docs/scale-out.md` §6.6): when
//! the system clock was stepped back while the broker was down, messages sent after the
//! restart are stamped no earlier than the latest time the log recorded.

use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::types::messaging::{AmqpValue, Message, Properties};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};
use ferrobus::broker::entity::state::Change;
use ferrobus::broker::storage::{MemoryLog, Recovered};

use crate::harness::{Broker, annotation, receive, string_message_id};

const CONFIG: &str = r#"
[[queues]]
name = "q"
"#;

/// How far the system clock went back between the two runs.
const STEPPED_BACK: Duration = Duration::from_secs(3600);

fn with_id(id: &str) -> Message<AmqpValue<String>> {
    Message::builder()
        .properties(Properties::builder().message_id(id.to_string()).build())
        .value(id.to_string())
        .build()
}

fn enqueued_time(
    delivery: &fe2o3_amqp::Delivery<fe2o3_amqp::types::messaging::Body<Value>>,
) -> i64 {
    match annotation(delivery, "x-opt-enqueued-time") {
        Some(Value::Timestamp(time)) => time.milliseconds(),
        other => panic!("x-opt-enqueued-time, got {other:?}"),
    }
}

#[tokio::test]
async fn enqueued_times_do_not_run_backwards_when_the_clock_was_set_back() {
    // rule SEQ-3 across a restart
    let log = Arc::new(MemoryLog::default());
    let broker = Broker::start_with_log(CONFIG, log.clone(), Recovered::default()).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "before", "q")
        .await
        .expect("sender attaches");
    sender.send(with_id("before")).await.expect("accepted");
    broker.shut_down();
    drop(broker);

    // The first run's clock read an hour later than the second run's will: its recorded
    // times are an hour ahead of the system clock at the restart.
    let mut recovered = log.recovered();
    let mut shifted = 0;
    for change in recovered.entities.values_mut().flatten() {
        if let Change::Put { record, .. } = change {
            record.set_enqueued_time(record.enqueued_time().plus(STEPPED_BACK));
            shifted += 1;
        }
    }
    assert_eq!(shifted, 1, "the first run stored one message");

    let broker = Broker::start_with_log(CONFIG, Arc::new(MemoryLog::default()), recovered).await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "after", "q")
        .await
        .expect("sender attaches");
    sender.send(with_id("after")).await.expect("accepted");
    let mut receiver = Receiver::attach(&mut session, "receiver", "q")
        .await
        .expect("receiver attaches");
    let mut times = Vec::new();
    for expected in ["before", "after"] {
        let delivery = receive(&mut receiver).await;
        assert_eq!(string_message_id(&delivery), expected);
        times.push(enqueued_time(&delivery));
        receiver.accept(&delivery).await.expect("settled");
    }
    assert!(
        times[1] >= times[0],
        "the message sent after the restart is stamped {} ms before the one recovered",
        times[0] - times[1]
    );
}
