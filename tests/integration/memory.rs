//! What the broker holds in memory is bounded by what it counts (issue 10, items 9 and 10):
//! kept sections do not pin the transfers they came in, the process-wide budget refuses
//! sends whatever mix of entities fills it, and identifiers are no longer than Service Bus
//! allows.

use std::time::Duration;

use fe2o3_amqp::types::messaging::{Body, Message, Properties};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};
use fe2o3_amqp_types::messaging::DeliveryState;

use crate::harness::{Broker, receive};
use crate::process::BrokerProcess;
use crate::raw_client::{RawClient, described};

fn refusal(
    result: Result<fe2o3_amqp::types::messaging::Outcome, fe2o3_amqp::link::SendError>,
) -> Option<String> {
    match result {
        Ok(fe2o3_amqp::types::messaging::Outcome::Accepted(_)) => None,
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test]
async fn the_memory_budget_spans_every_entity() {
    let broker = Broker::start(
        "[server]\nmemory_budget = \"200KiB\"\n[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n",
    )
    .await;
    let (_connection, mut session) = broker.connect().await;
    let mut to_a = Sender::attach(&mut session, "to-a", "a")
        .await
        .expect("attach");
    let mut to_b = Sender::attach(&mut session, "to-b", "b")
        .await
        .expect("attach");
    let body = "x".repeat(30 * 1024);
    let mut accepted = 0;
    let refused = loop {
        let sender = if accepted % 2 == 0 {
            &mut to_a
        } else {
            &mut to_b
        };
        match refusal(sender.send(body.clone()).await) {
            None => accepted += 1,
            Some(error) => break error,
        }
        assert!(accepted < 100, "the budget must refuse at some point");
    };
    assert!(
        refused.contains("ResourceLimitExceeded") && refused.contains("memory budget"),
        "{refused}"
    );
    assert!(
        (5..=7).contains(&accepted),
        "about 200 KiB of 31 KiB messages across both queues: {accepted}"
    );
    // Taking messages out makes room again.
    let mut receiver = Receiver::attach(&mut session, "from-a", "a")
        .await
        .expect("attach");
    for _ in 0..2 {
        let delivery = receive(&mut receiver).await;
        receiver.accept(&delivery).await.expect("completes");
    }
    assert_eq!(refusal(to_b.send(body.clone()).await), None, "room again");
}

#[tokio::test]
async fn identifiers_longer_than_128_characters_are_refused() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach");
    let with = |message_id: String, group_id: Option<String>| {
        Message::builder()
            .properties(Properties {
                message_id: Some(message_id.into()),
                group_id,
                ..Default::default()
            })
            .value("x".to_string())
            .build()
    };
    assert_eq!(
        refusal(sender.send(with("m".repeat(128), None)).await),
        None
    );
    let refused = refusal(sender.send(with("m".repeat(129), None)).await).expect("refused");
    assert!(
        refused.contains("message-id is 129 characters"),
        "{refused}"
    );
    let refused =
        refusal(sender.send(with("ok".into(), Some("s".repeat(129)))).await).expect("refused");
    assert!(
        refused.contains("session-id is 129 characters"),
        "{refused}"
    );
}

#[tokio::test]
async fn system_properties_beyond_64_kib_of_text_are_refused() {
    // A stored message keeps its system properties' text with 16-bit offsets (issue 16);
    // Service Bus allows at most 64 KB of message header anyway.
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach");
    let with_subject = |subject: String| {
        Message::builder()
            .properties(Properties {
                message_id: Some("id".to_string().into()),
                subject: Some(subject),
                ..Default::default()
            })
            .value("x".to_string())
            .build()
    };
    assert_eq!(
        refusal(sender.send(with_subject("s".repeat(65_000))).await),
        None
    );
    let refused = refusal(sender.send(with_subject("s".repeat(70_000))).await).expect("refused");
    assert!(
        refused.contains("70002 bytes of text; at most 65535"),
        "{refused}"
    );
    let mut receiver = Receiver::attach(&mut session, "receiver", "q")
        .await
        .expect("attach receiver");
    let delivery = receiver.recv::<Value>().await.expect("the accepted one");
    let subject = delivery
        .message()
        .properties
        .as_ref()
        .and_then(|properties| properties.subject.clone());
    assert_eq!(subject.map(|subject| subject.len()), Some(65_000));
    receiver.accept(&delivery).await.expect("accept");
}

/// A message with ~400 KB of delivery annotations (dropped on arrival) and a tiny body.
fn heavily_annotated_message() -> Vec<u8> {
    let value = vec![b'a'; 400 * 1024];
    let mut map_content = vec![0xa3, 1, b'k', 0xb1];
    map_content.extend_from_slice(&(value.len() as u32).to_be_bytes());
    map_content.extend_from_slice(&value);
    let mut map = vec![0xd1];
    map.extend_from_slice(&((map_content.len() + 4) as u32).to_be_bytes());
    map.extend_from_slice(&2u32.to_be_bytes());
    map.extend_from_slice(&map_content);
    let mut payload = described(0x71, map);
    payload.extend_from_slice(&described(0x77, vec![0xa1, 2, b'h', b'i']));
    payload
}

#[tokio::test]
async fn stored_messages_do_not_pin_the_transfers_they_came_in() {
    // Issue 10 item 9: a 1 MiB queue once held 133 MiB this way.
    let broker = BrokerProcess::start(
        "[[queues]]\nname = \"q\"\nmax_message_size_in_kilobytes = 1024\n",
        &[],
    );
    let before = broker.resident_kib();
    let mut client = RawClient::connect_to(broker.address, u32::MAX).await;
    client.attach_sender("annotated", "q", 0).await;
    let payload = heavily_annotated_message();
    for delivery_id in 0..200 {
        client.transfer(0, delivery_id, 0, &payload).await;
        assert!(matches!(client.outcome().await, DeliveryState::Accepted(_)));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let grown = broker.resident_kib().saturating_sub(before);
    assert!(
        grown < 40 * 1024,
        "200 stored messages of 2 bytes each grew the broker by {grown} KiB (80 MB of transfers)"
    );
    // And they are all there.
    let (_connection, mut session) = {
        let url = format!("amqp://{}", broker.address);
        let mut connection = fe2o3_amqp::Connection::open("check", url.as_str())
            .await
            .expect("connects");
        let session = fe2o3_amqp::Session::begin(&mut connection)
            .await
            .expect("session");
        (connection, session)
    };
    let mut receiver = Receiver::attach(&mut session, "check", "q")
        .await
        .expect("attach");
    let delivery = receive(&mut receiver).await;
    assert_eq!(
        delivery.body(),
        &Body::Value(fe2o3_amqp::types::messaging::AmqpValue(Value::String(
            "hi".into()
        )))
    );
}
