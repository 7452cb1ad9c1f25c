//! Pipelined transfers (issue 16): a connection hands the consecutive sends of what it read
//! to a queue in one command. Each transfer still has its own outcome, and every queue
//! keeps the order the client sent in (rules SEQ-1, SEQ-2).

use fe2o3_amqp::Receiver;
use fe2o3_amqp::types::messaging::{AmqpValue, Body};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp_types::messaging::DeliveryState;

use crate::harness::{Broker, receive};
use crate::raw_client::{RawClient, described, text_message, transfer_bytes};

/// The texts of the next `count` messages on `queue`, completed as they come.
async fn texts(broker: &Broker, queue: &str, count: usize) -> Vec<String> {
    let (_connection, mut session) = broker.connect().await;
    let mut receiver = Receiver::attach(&mut session, "check", queue)
        .await
        .expect("attach");
    let mut texts = Vec::new();
    for _ in 0..count {
        let delivery = receive(&mut receiver).await;
        match delivery.body() {
            Body::Value(AmqpValue(Value::String(text))) => texts.push(text.clone()),
            other => panic!("unexpected body {other:?}"),
        }
        receiver.accept(&delivery).await.expect("completes");
    }
    texts
}

/// Writes twenty sends of ~10 KiB and a small one to `address` at once, on a broker whose
/// memory budget is 100 KiB: the first few are accepted, every later large one refused with
/// the budget's error, the small one after them accepted. Returns the texts kept, in order.
async fn pipelined_past_the_budget(broker: &Broker, address: &str) -> Vec<String> {
    let mut client = RawClient::connect(broker, 10_000).await;
    client.attach_sender("pipelined", address, 0).await;
    // The budget holds nine or so.
    let text = |index: u32| format!("m{index:02}-{}", "x".repeat(10 * 1024));
    let mut bytes = Vec::new();
    for index in 0..20 {
        bytes.extend_from_slice(&transfer_bytes(
            0,
            index,
            0,
            &text_message(&text(index)),
            false,
            false,
        ));
    }
    bytes.extend_from_slice(&transfer_bytes(
        0,
        20,
        0,
        &text_message("small"),
        false,
        false,
    ));
    client.send_raw(&bytes).await;

    let outcomes = client.outcomes(21).await;
    let accepted = |id: u32| matches!(outcomes[&id], DeliveryState::Accepted(_));
    let kept = (0..20).take_while(|id| accepted(*id)).count() as u32;
    assert!(
        (5..=10).contains(&kept),
        "about 100 KiB of 10 KiB messages fit: {kept} ({outcomes:?})"
    );
    for id in kept..20 {
        let DeliveryState::Rejected(rejected) = &outcomes[&id] else {
            panic!("send {id} after the budget was full: {:?}", outcomes[&id]);
        };
        let error = rejected.error.as_ref().expect("an error");
        let text = format!("{:?} {:?}", error.condition, error.description);
        assert!(
            text.contains("ResourceLimitExceeded") && text.contains("memory budget"),
            "{text}"
        );
    }
    assert!(accepted(20), "the small send after them fits: {outcomes:?}");
    let mut kept_texts: Vec<String> = (0..kept).map(text).collect();
    kept_texts.push("small".into());
    kept_texts
}

/// Every answered send was accepted, and none of the pre-settled ones (every `every`th
/// delivery id) was answered.
fn assert_accepted_but_pre_settled(
    outcomes: &std::collections::BTreeMap<u32, DeliveryState>,
    every: u32,
) {
    assert!(
        outcomes
            .values()
            .all(|state| matches!(state, DeliveryState::Accepted(_))),
        "{outcomes:?}"
    );
    assert!(
        outcomes.keys().all(|id| id % every != 0),
        "pre-settled sends are not answered: {outcomes:?}"
    );
}

#[tokio::test]
async fn pipelined_sends_past_the_memory_budget_are_refused_one_by_one_and_the_rest_kept_in_order()
{
    let broker =
        Broker::start("[server]\nmemory_budget = \"100KiB\"\n[[queues]]\nname = \"q\"\n").await;
    let expected = pipelined_past_the_budget(&broker, "q").await;
    assert_eq!(texts(&broker, "q", expected.len()).await, expected);
}

#[tokio::test]
async fn pipelined_sends_to_two_queues_keep_each_queues_order_settled_or_not() {
    let broker = Broker::start("[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n").await;
    let mut client = RawClient::connect(&broker, 10_000).await;
    client.attach_sender("to-a", "a", 0).await;
    client.attach_sender("to-b", "b", 1).await;
    // Runs of three to each queue in turn; every fifth is pre-settled.
    let mut bytes = Vec::new();
    let (mut to_a, mut to_b) = (Vec::new(), Vec::new());
    let mut unsettled = 0;
    for index in 0..90u32 {
        let (handle, name, sent) = if (index / 3) % 2 == 0 {
            (0, "a", &mut to_a)
        } else {
            (1, "b", &mut to_b)
        };
        let text = format!("{name}-{index}");
        let settled = index % 5 == 0;
        unsettled += usize::from(!settled);
        bytes.extend_from_slice(&transfer_bytes(
            handle,
            index,
            0,
            &text_message(&text),
            false,
            settled,
        ));
        sent.push(text);
    }
    client.send_raw(&bytes).await;

    let outcomes = client.outcomes(unsettled).await;
    assert_accepted_but_pre_settled(&outcomes, 5);
    assert_eq!(texts(&broker, "a", to_a.len()).await, to_a);
    assert_eq!(texts(&broker, "b", to_b.len()).await, to_b);
}

/// A message with the application property `n` (an int) and the text body `text`.
fn numbered_message(n: i32, text: &str) -> Vec<u8> {
    // map8: size, count 2, key str8 "n", value int.
    let mut map = vec![0xc1, 9, 2, 0xa1, 1, b'n', 0x71];
    map.extend_from_slice(&n.to_be_bytes());
    let mut bytes = described(0x74, map);
    bytes.extend_from_slice(&text_message(text));
    bytes
}

/// The texts of the next `count` messages on a subscription, completed as they come.
async fn subscription_texts(broker: &Broker, topic: &str, name: &str, count: usize) -> Vec<String> {
    texts(broker, &format!("{topic}/subscriptions/{name}"), count).await
}

#[tokio::test]
async fn pipelined_sends_to_a_topic_reach_each_subscription_in_order_between_sends_to_a_queue() {
    let broker = Broker::start(
        r#"
[[queues]]
name = "q"
[[topics]]
name = "t"
[[topics.subscriptions]]
name = "all"
[[topics.subscriptions]]
name = "even"
[[topics.subscriptions.rules]]
name = "even"
sql_filter = "n % 2 = 0"
[[topics.subscriptions]]
name = "small"
[[topics.subscriptions.rules]]
name = "small"
sql_filter = "n < 10"
"#,
    )
    .await;
    let mut client = RawClient::connect(&broker, 10_000).await;
    client.attach_sender("to-t", "t", 0).await;
    client.attach_sender("to-q", "q", 1).await;
    // Runs of four to the topic and two to the queue in turn, written at once; every
    // seventh is pre-settled.
    let mut bytes = Vec::new();
    let (mut to_topic, mut to_queue) = (Vec::new(), Vec::new());
    let mut unsettled = 0;
    for index in 0..60u32 {
        let settled = index % 7 == 0;
        unsettled += usize::from(!settled);
        let (handle, payload) = if index % 6 < 4 {
            let n = to_topic.len() as i32;
            let text = format!("t-{n}");
            to_topic.push((n, text.clone()));
            (0, numbered_message(n, &text))
        } else {
            let text = format!("q-{index}");
            to_queue.push(text.clone());
            (1, text_message(&text))
        };
        bytes.extend_from_slice(&transfer_bytes(handle, index, 0, &payload, false, settled));
    }
    client.send_raw(&bytes).await;

    let outcomes = client.outcomes(unsettled).await;
    assert_accepted_but_pre_settled(&outcomes, 7);
    let wanted = |keep: fn(i32) -> bool| -> Vec<String> {
        to_topic
            .iter()
            .filter(|(n, _)| keep(*n))
            .map(|(_, text)| text.clone())
            .collect()
    };
    let all = wanted(|_| true);
    let even = wanted(|n| n % 2 == 0);
    let small = wanted(|n| n < 10);
    assert_eq!(
        subscription_texts(&broker, "t", "all", all.len()).await,
        all
    );
    assert_eq!(
        subscription_texts(&broker, "t", "even", even.len()).await,
        even
    );
    assert_eq!(
        subscription_texts(&broker, "t", "small", small.len()).await,
        small
    );
    assert_eq!(texts(&broker, "q", to_queue.len()).await, to_queue);
}

#[tokio::test]
async fn pipelined_sends_to_a_topic_past_the_memory_budget_are_refused_one_by_one() {
    let broker = Broker::start(
        "[server]\nmemory_budget = \"100KiB\"\n[[topics]]\nname = \"t\"\n\
         [[topics.subscriptions]]\nname = \"s\"\n",
    )
    .await;
    let expected = pipelined_past_the_budget(&broker, "t").await;
    assert_eq!(
        subscription_texts(&broker, "t", "s", expected.len()).await,
        expected
    );
}
