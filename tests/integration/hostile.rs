//! Input built to break decoders (issue 10, items 1 and 15): values nested 2,000 deep in
//! every place a peer can put one, messages with no body or an unknown format. Each is
//! refused with `amqp:decode-error` (or a clear rejection) and the broker keeps serving.

use std::time::Duration;

use fe2o3_amqp_types::messaging::DeliveryState;
use fe2o3_amqp_types::performatives::Performative;
use ferrobus::server::frame::{AMQP_HEADER, SASL_HEADER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::Broker;
use crate::raw_client::{RawClient, described};

/// How deep the hostile values nest: far past the limit of 32, and deep enough to
/// overflow a recursive decoder's stack.
const HOSTILE_DEPTH: usize = 2_000;

fn string(text: &str) -> Vec<u8> {
    let mut bytes = vec![0xa1, text.len() as u8];
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

fn symbol(text: &str) -> Vec<u8> {
    let mut bytes = vec![0xa3, text.len() as u8];
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

fn list(fields: &[Vec<u8>]) -> Vec<u8> {
    let content: Vec<u8> = fields.concat();
    let mut bytes = vec![0xd0];
    bytes.extend_from_slice(&((content.len() + 4) as u32).to_be_bytes());
    bytes.extend_from_slice(&(fields.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&content);
    bytes
}

fn map(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let content: Vec<u8> = entries
        .iter()
        .flat_map(|(key, value)| key.iter().chain(value.iter()).copied())
        .collect();
    let mut bytes = vec![0xd1];
    bytes.extend_from_slice(&((content.len() + 4) as u32).to_be_bytes());
    bytes.extend_from_slice(&((entries.len() * 2) as u32).to_be_bytes());
    bytes.extend_from_slice(&content);
    bytes
}

/// A map whose one value is a map whose one value is … `depth` levels down.
fn deep_map(depth: usize) -> Vec<u8> {
    let mut value = vec![0x40];
    for _ in 0..depth {
        value = map(&[(symbol("k"), value)]);
    }
    value
}

fn frame(frame_type: u8, body: &[u8]) -> Vec<u8> {
    let mut bytes = ((body.len() + 8) as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&[2, frame_type, 0, 0]);
    bytes.extend_from_slice(body);
    bytes
}

/// An `open` whose properties hold `properties`.
fn open_with_properties(properties: Vec<u8>) -> Vec<u8> {
    described(
        0x10,
        list(&[
            string("hostile"),
            vec![0x40],
            vec![0x70, 0, 1, 0, 0],
            vec![0x60, 0, 8],
            vec![0x40],
            vec![0x40],
            vec![0x40],
            vec![0x40],
            vec![0x40],
            properties,
        ]),
    )
}

/// Reads until `close` and returns its condition and description (Debug form).
async fn read_close(stream: &mut TcpStream) -> Option<String> {
    let mut input = bytes::BytesMut::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        while input.len() >= 8 && &input[..4] == b"AMQP" {
            let _ = input.split_to(8);
        }
        while let Ok(Some(raw)) = ferrobus::server::frame::take_frame(&mut input, 1 << 20) {
            if let Ok((Performative::Close(close), _)) =
                ferrobus::server::frame::decode_performative(&raw.body)
            {
                return Some(format!("{:?}", close.error));
            }
        }
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut input)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(_)) => {}
        }
    }
}

/// The broker still serves a well-behaved client: a message goes in and comes out.
async fn still_serving(broker: &Broker) {
    crate::raw_client::send_messages(broker, "q", 1).await;
    let (_connection, mut session) = broker.connect().await;
    let mut receiver = fe2o3_amqp::Receiver::attach(&mut session, "check", "q")
        .await
        .expect("attach");
    let delivery = crate::harness::receive(&mut receiver).await;
    receiver.accept(&delivery).await.expect("completes");
}

#[tokio::test]
async fn a_deeply_nested_open_before_sasl_is_closed_with_a_decode_error() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    let mut bytes = AMQP_HEADER.to_vec();
    bytes.extend_from_slice(&frame(0, &open_with_properties(deep_map(HOSTILE_DEPTH))));
    stream.write_all(&bytes).await.expect("write");
    let close = read_close(&mut stream)
        .await
        .expect("the broker answers with a close");
    assert!(
        close.contains("DecodeError") && close.contains("32 levels"),
        "{close}"
    );
    still_serving(&broker).await;
}

#[tokio::test]
async fn a_deeply_nested_sasl_init_is_refused_and_the_broker_stays_up() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    let init = described(
        0x41,
        list(&[symbol("PLAIN"), deep_map(HOSTILE_DEPTH), vec![0x40]]),
    );
    let mut bytes = SASL_HEADER.to_vec();
    bytes.extend_from_slice(&frame(1, &init));
    stream.write_all(&bytes).await.expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    // Header, mechanisms, then a sasl-outcome (0x44) refusing, then the socket closes.
    let outcome = answer
        .windows(3)
        .position(|window| window == [0x00, 0x53, 0x44])
        .expect("a sasl-outcome");
    assert!(
        answer[outcome + 3..]
            .windows(2)
            .any(|window| window == [0x50, 0x01]),
        "the outcome code is auth (1), not ok"
    );
    still_serving(&broker).await;
}

#[tokio::test]
async fn a_deeply_nested_attach_filter_closes_the_connection_with_a_decode_error() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut client = RawClient::connect(&broker, 100).await;
    let source = described(
        0x28,
        list(&[
            string("q"),
            vec![0x40],
            vec![0x40],
            vec![0x40],
            vec![0x40],
            vec![0x40],
            vec![0x40],
            deep_map(HOSTILE_DEPTH),
        ]),
    );
    let attach = described(
        0x12,
        list(&[
            string("deep"),
            vec![0x43],
            vec![0x41],
            vec![0x40],
            vec![0x40],
            source,
        ]),
    );
    client.send_raw(&frame(0, &attach)).await;
    let close = client.expect_close(Duration::from_secs(5)).await;
    assert!(close.contains("DecodeError"), "{close}");
    still_serving(&broker).await;
}

#[tokio::test]
async fn a_deeply_nested_disposition_state_closes_the_connection_with_a_decode_error() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut client = RawClient::connect(&broker, 100).await;
    // rejected { error { condition, description, info = deep map } }
    let error = described(
        0x1d,
        list(&[symbol("x:y"), vec![0x40], deep_map(HOSTILE_DEPTH)]),
    );
    let state = described(0x25, list(&[error]));
    let disposition = described(
        0x15,
        list(&[vec![0x41], vec![0x43], vec![0x40], vec![0x41], state]),
    );
    client.send_raw(&frame(0, &disposition)).await;
    let close = client.expect_close(Duration::from_secs(5)).await;
    assert!(close.contains("DecodeError"), "{close}");
    still_serving(&broker).await;
}

/// A message whose application properties nest `depth` deep, with an amqp-value body.
fn message_with_deep_properties(depth: usize) -> Vec<u8> {
    let mut payload = described(0x74, deep_map(depth));
    payload.extend_from_slice(&described(0x77, string("body")));
    payload
}

fn rejection(state: &DeliveryState) -> String {
    match state {
        DeliveryState::Rejected(rejected) => format!("{:?}", rejected.error),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn a_message_nested_too_deep_is_rejected_and_the_link_stays_usable() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut client = RawClient::connect(&broker, 100).await;
    client.attach_sender("sender", "q", 0).await;
    client
        .transfer(0, 0, 0, &message_with_deep_properties(HOSTILE_DEPTH))
        .await;
    let refused = rejection(&client.outcome().await);
    assert!(refused.contains("DecodeError"), "{refused}");
    // The same link takes a good message afterwards.
    client
        .transfer(0, 1, 0, &described(0x77, string("fine")))
        .await;
    assert!(matches!(client.outcome().await, DeliveryState::Accepted(_)));
}

#[tokio::test]
async fn messages_without_a_body_or_with_an_unknown_format_are_rejected() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut client = RawClient::connect(&broker, 100).await;
    client.attach_sender("sender", "q", 0).await;
    // Application properties only: no data, amqp-sequence or amqp-value section.
    let no_body = described(0x74, map(&[(string("k"), string("v"))]));
    client.transfer(0, 0, 0, &no_body).await;
    let refused = rejection(&client.outcome().await);
    assert!(
        refused.contains("DecodeError") && refused.contains("no body"),
        "{refused}"
    );
    client
        .transfer(0, 1, 5, &described(0x77, string("x")))
        .await;
    let refused = rejection(&client.outcome().await);
    assert!(refused.contains("message-format 5"), "{refused}");
    // Nothing was stored: a receiver finds the queue empty.
    let (_connection, mut session) = broker.connect().await;
    let mut receiver = fe2o3_amqp::Receiver::attach(&mut session, "check", "q")
        .await
        .expect("attach");
    let nothing = tokio::time::timeout(
        Duration::from_millis(500),
        receiver.recv::<fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>>(),
    )
    .await;
    assert!(nothing.is_err(), "the queue is empty");
}

#[tokio::test]
async fn a_management_request_nested_too_deep_is_rejected() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut client = RawClient::connect(&broker, 100).await;
    client.attach_sender("management", "q/$management", 0).await;
    let mut request = described(
        0x73,
        list(&[
            vec![0x40],
            vec![0x40],
            vec![0x40],
            vec![0x40],
            string("reply"),
        ]),
    );
    request.extend_from_slice(&described(
        0x74,
        map(&[(string("operation"), string("com.microsoft:peek-message"))]),
    ));
    request.extend_from_slice(&described(0x77, deep_map(HOSTILE_DEPTH)));
    client.transfer(0, 0, 0, &request).await;
    let refused = rejection(&client.outcome().await);
    assert!(refused.contains("DecodeError"), "{refused}");
    still_serving(&broker).await;
}

#[tokio::test]
async fn a_frame_body_that_is_not_a_described_performative_is_refused_before_decoding() {
    // Found by the coverage-guided `frame` target: a plain uint first, then a symbol whose
    // declared length is 3 GB; the decoder tried to allocate it (out of memory).
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut client = RawClient::connect(&broker, 100).await;
    let body = [
        0x52, 0x16, 0x00, 0xb3, 0xb3, 0x4a, 0xb3, 0xff, 0x01, 0xe9, 0x00, 0xad, 0xad, 0xad, 0x2e,
    ];
    client.send_raw(&frame(0, &body)).await;
    let close = client.expect_close(Duration::from_secs(5)).await;
    assert!(close.contains("DecodeError"), "{close}");
    still_serving(&broker).await;
}
