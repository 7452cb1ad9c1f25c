//! Connection-level behaviour seen on a raw socket: heartbeats, the connection limit and
//! malformed input (a clear error and a closed connection, never a hang or a crash).

use std::time::Duration;

use bytes::BytesMut;
use fe2o3_amqp_types::performatives::{ChannelMax, MaxFrameSize, Open, Performative};
use ferrobus::server::frame::{self, AMQP_HEADER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::Broker;

fn open_frame() -> BytesMut {
    open_frame_with_idle(None)
}

/// The protocol header and an `open` advertising `idle_time_out` (milliseconds).
pub(crate) fn open_frame_with_idle(idle_time_out: Option<u32>) -> BytesMut {
    open_frame_with(8, idle_time_out)
}

/// The protocol header and an `open` advertising `channel_max` and `idle_time_out`.
pub(crate) fn open_frame_with(channel_max: u16, idle_time_out: Option<u32>) -> BytesMut {
    let mut output = BytesMut::new();
    output.extend_from_slice(&AMQP_HEADER);
    let open = Open {
        container_id: "raw-test".into(),
        hostname: None,
        max_frame_size: MaxFrameSize(65536),
        channel_max: ChannelMax(channel_max),
        idle_time_out,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    frame::write_performative(&mut output, 0, &Performative::Open(open)).expect("encodes");
    output
}

/// Reads frames until `deadline`, returning every performative seen and the number of
/// empty (heartbeat) frames; stops early at EOF.
pub(crate) async fn read_frames(
    stream: &mut TcpStream,
    within: Duration,
) -> (Vec<Performative>, usize) {
    let mut input = BytesMut::new();
    let mut header = [0u8; 8];
    let _ = tokio::time::timeout(within, stream.read_exact(&mut header)).await;
    let deadline = tokio::time::Instant::now() + within;
    let (mut performatives, mut heartbeats) = (Vec::new(), 0);
    loop {
        while let Ok(Some(raw)) = frame::take_frame(&mut input, 1 << 20) {
            if raw.body.is_empty() {
                heartbeats += 1;
            } else if let Ok((performative, _)) = frame::decode_performative(&raw.body) {
                performatives.push(performative);
            }
        }
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut input)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return (performatives, heartbeats),
            Ok(Ok(_)) => {}
        }
    }
}

pub(crate) fn close_condition(performatives: &[Performative]) -> Option<String> {
    performatives
        .iter()
        .find_map(|performative| match performative {
            Performative::Close(close) => Some(
                close
                    .error
                    .as_ref()
                    .map(|error| format!("{:?} {:?}", error.condition, error.description))
                    .unwrap_or_default(),
            ),
            _ => None,
        })
}

#[tokio::test]
async fn the_broker_sends_heartbeats_at_half_the_peers_idle_timeout() {
    // AMQP 1.0 §2.4.5: the peer's idle-time-out says how often it must hear from us.
    let broker = Broker::start("[server]\nidle_timeout = \"30s\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    stream
        .write_all(&open_frame_with_idle(Some(400)))
        .await
        .expect("write");
    let (performatives, heartbeats) = read_frames(&mut stream, Duration::from_millis(1100)).await;
    let Some(Performative::Open(open)) = performatives.first() else {
        panic!("expected the broker's open, got {performatives:?}");
    };
    assert_eq!(open.idle_time_out, Some(30_000), "ours is advertised");
    assert!(
        heartbeats >= 3,
        "about 5 heartbeats in 1.1 s at 200 ms, saw {heartbeats}"
    );
}

#[tokio::test]
async fn connections_beyond_max_connections_are_closed_with_an_error() {
    let broker = Broker::start("[server]\nmax_connections = 1\n").await;
    let mut first = TcpStream::connect(broker.address).await.expect("connect");
    first.write_all(&open_frame()).await.expect("write");
    let (performatives, _) = read_frames(&mut first, Duration::from_millis(300)).await;
    assert!(matches!(performatives.first(), Some(Performative::Open(_))));
    assert!(
        close_condition(&performatives).is_none(),
        "the first connection stays open"
    );
    let mut second = TcpStream::connect(broker.address).await.expect("connect");
    second.write_all(&open_frame()).await.expect("write");
    let (performatives, _) = read_frames(&mut second, Duration::from_millis(1000)).await;
    let condition = close_condition(&performatives).expect("the second connection is closed");
    assert!(
        condition.contains("resource-limit-exceeded")
            || condition.contains("ResourceLimitExceeded"),
        "{condition}"
    );
    assert!(condition.contains("limit of 1 connections"), "{condition}");
}

#[tokio::test]
async fn a_malformed_frame_closes_the_connection_with_a_decode_error() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    let mut bytes = open_frame();
    // A frame whose body is not a performative: a described type with an unknown code.
    bytes.extend_from_slice(&[0, 0, 0, 14, 2, 0, 0, 0, 0x00, 0x53, 0x7f, 0xc0, 0x01, 0x00]);
    stream.write_all(&bytes).await.expect("write");
    let (performatives, _) = read_frames(&mut stream, Duration::from_millis(1000)).await;
    let condition = close_condition(&performatives).expect("the broker closes the connection");
    assert!(condition.contains("DecodeError"), "{condition}");
    // The broker still serves others.
    let (_connection, mut session) = broker.connect().await;
    let mut sender = fe2o3_amqp::Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach");
    sender.send("still serving").await.expect("accepted");
}

#[tokio::test]
async fn a_frame_larger_than_the_advertised_maximum_is_refused() {
    let broker = Broker::start("[server]\nmax_frame_size = 4096\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    let mut bytes = open_frame();
    bytes.extend_from_slice(&[0, 1, 0, 0, 2, 0, 0, 0]);
    stream.write_all(&bytes).await.expect("write");
    let (performatives, _) = read_frames(&mut stream, Duration::from_millis(1000)).await;
    let condition = close_condition(&performatives).expect("closed with an error");
    assert!(
        condition.contains("FramingError") && condition.contains("65536"),
        "{condition}"
    );
}
