//! Per-connection bounds and idle timeouts (issue 10, items 11 and 12): what one peer can
//! make the broker hold, and when silence ends a connection.

use std::time::Duration;

use fe2o3_amqp_types::definitions::Handle;
use fe2o3_amqp_types::performatives::{Begin, Performative};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::harness::Broker;
use crate::process::BrokerProcess;
use crate::raw::{close_condition, open_frame_with, open_frame_with_idle, read_frames};
use crate::raw_client::RawClient;

fn begin() -> Performative {
    Performative::Begin(Begin {
        remote_channel: None,
        next_outgoing_id: 1,
        incoming_window: 100,
        outgoing_window: 100,
        handle_max: Handle(10),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    })
}

fn attach(name: String, handle: u32, address: &str) -> Performative {
    crate::raw_client::receiver_attach(&name, address, handle, false)
}

#[tokio::test]
async fn a_begin_above_channel_max_closes_the_connection() {
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    let mut bytes = open_frame_with_idle(None);
    ferrobus::server::frame::write_performative(&mut bytes, 300, &begin()).expect("encodes");
    stream.write_all(&bytes).await.expect("write");
    let (performatives, _) = read_frames(&mut stream, Duration::from_secs(2)).await;
    let Some(Performative::Open(open)) = performatives.first() else {
        panic!("expected the broker's open: {performatives:?}");
    };
    assert_eq!(
        open.channel_max.0, 255,
        "a modest channel-max is advertised"
    );
    let condition = close_condition(&performatives).expect("closed");
    assert!(
        condition.contains("FramingError") && condition.contains("channel 300"),
        "{condition}"
    );
}

#[tokio::test]
async fn an_attach_above_handle_max_closes_the_connection_with_a_framing_error() {
    // AMQP 1.0 §2.7.2: a handle outside the advertised range is a framing error.
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let mut client = RawClient::connect(&broker, 100).await;
    client.send(attach("too-high".into(), 5_000, "q")).await;
    let condition = client.expect_close(Duration::from_secs(5)).await;
    assert!(
        condition.contains("FramingError") && condition.contains("handle-max of 1023"),
        "{condition}"
    );
}

#[tokio::test]
async fn refused_attaches_keep_nothing_and_huge_names_are_refused() {
    // Issue 10 item 11: 200 refused attaches with 1 MB names cost +216 MiB before.
    let broker = BrokerProcess::start(
        "[server]\nmax_frame_size = 2097152\n[[auth.keys]]\nname = \"k\"\nkey = \"secret\"\nrights = [\"Manage\"]\n[[queues]]\nname = \"q\"\n",
        &[],
    );
    let before = broker.resident_kib();
    let mut client = RawClient::connect_to(broker.address, 1000).await;
    // Unauthenticated attaches with names just under the limit are refused, one by one.
    for handle in 0..200 {
        client
            .send(attach(
                format!("{handle:04}{}", "n".repeat(2_000)),
                handle,
                "q",
            ))
            .await;
        client
            .expect(|performative| matches!(performative, Performative::Detach(_)))
            .await;
    }
    // A 1 MB name is refused outright: the connection closes.
    for _ in 0..20 {
        let mut client = RawClient::connect_to(broker.address, 1000).await;
        client.send(attach("n".repeat(1 << 20), 0, "q")).await;
        let condition = client.expect_close(Duration::from_secs(5)).await;
        assert!(
            condition.contains("ResourceLimitExceeded") && condition.contains("link name"),
            "{condition}"
        );
    }
    let grown = broker.resident_kib().saturating_sub(before);
    assert!(
        grown < 20 * 1024,
        "refused attaches cost {grown} KiB of resident memory"
    );
}

#[tokio::test]
async fn unfinished_deliveries_are_bounded_per_connection() {
    let broker =
        Broker::start("[[queues]]\nname = \"q\"\nmax_message_size_in_kilobytes = 1024\n").await;
    let mut client = RawClient::connect(&broker, u32::MAX).await;
    let chunk = vec![0x41u8; 60_000];
    // Three links each hold 0.9 MB of an unfinished delivery: 2.7 MB > 2 × 1 MiB.
    for handle in 0..3 {
        client
            .attach_sender(&format!("partial-{handle}"), "q", handle)
            .await;
    }
    let mut condition = None;
    'sending: for handle in 0..3 {
        for _ in 0..15 {
            client.transfer_frame(handle, handle, 0, &chunk, true).await;
            if let Some((Performative::Close(close), _)) =
                client.next(Duration::from_millis(1)).await
            {
                condition = Some(format!("{:?}", close.error));
                break 'sending;
            }
        }
    }
    let condition = match condition {
        Some(condition) => condition,
        None => client.expect_close(Duration::from_secs(5)).await,
    };
    assert!(
        condition.contains("ResourceLimitExceeded") && condition.contains("unfinished"),
        "{condition}"
    );
}

#[tokio::test]
async fn a_silent_peer_is_closed_after_twice_our_idle_timeout() {
    // AMQP 1.0 §2.4.5: the advertised idle-time-out is half the actual threshold (and the
    // wire contract, §1.4: never enforce it tighter than 2×).
    let broker = Broker::start("[server]\nidle_timeout = \"1s\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    stream
        .write_all(&open_frame_with_idle(None))
        .await
        .expect("write");
    let started = tokio::time::Instant::now();
    let (performatives, _) = read_frames(&mut stream, Duration::from_secs(5)).await;
    let condition = close_condition(&performatives).expect("closed for silence");
    assert!(
        condition.contains("ResourceLimitExceeded") && condition.contains("idle"),
        "{condition}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_millis(3500),
        "closed after {waited:?}, expected about 2 s"
    );
}

#[tokio::test]
async fn a_peer_trickling_one_frame_byte_by_byte_is_still_timed_out() {
    // Only complete frames count as activity: a byte every 300 ms of a frame that never
    // completes does not keep the connection (or its buffered frame) alive.
    let broker = Broker::start("[server]\nidle_timeout = \"1s\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    stream
        .write_all(&open_frame_with_idle(None))
        .await
        .expect("write");
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        // A frame header announcing 4,096 bytes, then its body one byte at a time.
        let _ = writer.write_all(&[0, 0, 16, 0, 2, 0, 0, 0]).await;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if writer.write_all(&[0x40]).await.is_err() {
                break;
            }
        }
    });
    let started = tokio::time::Instant::now();
    let mut input = bytes::BytesMut::new();
    let mut header = [0u8; 8];
    use tokio::io::AsyncReadExt;
    reader.read_exact(&mut header).await.expect("header");
    let deadline = started + Duration::from_secs(5);
    let mut closed = None;
    while closed.is_none() {
        while let Ok(Some(raw)) = ferrobus::server::frame::take_frame(&mut input, 1 << 20) {
            if let Ok((Performative::Close(close), _)) =
                ferrobus::server::frame::decode_performative(&raw.body)
            {
                closed = Some(format!("{close:?}"));
            }
        }
        match tokio::time::timeout_at(deadline, reader.read_buf(&mut input)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(_)) => {}
        }
    }
    trickle.abort();
    let closed = closed.expect("closed although bytes kept arriving");
    assert!(closed.contains("idle"), "{closed}");
    assert!(started.elapsed() < Duration::from_millis(3500));
}

#[tokio::test]
async fn a_peer_that_sends_heartbeats_within_our_timeout_stays_connected() {
    // The peer advertises 1 s; we advertise 1 s. It sends an empty frame every 500 ms.
    let broker = Broker::start("[server]\nidle_timeout = \"1s\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    stream
        .write_all(&open_frame_with_idle(Some(1_000)))
        .await
        .expect("write");
    let (mut reader, mut writer) = stream.into_split();
    let heartbeats = tokio::spawn(async move {
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            writer
                .write_all(&[0, 0, 0, 8, 2, 0, 0, 0])
                .await
                .expect("heartbeat");
        }
        writer
    });
    let mut input = bytes::BytesMut::new();
    let mut received_heartbeats = 0;
    let mut closed = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    use tokio::io::AsyncReadExt;
    let mut header = [0u8; 8];
    reader.read_exact(&mut header).await.expect("header");
    loop {
        while let Ok(Some(raw)) = ferrobus::server::frame::take_frame(&mut input, 1 << 20) {
            if raw.body.is_empty() {
                received_heartbeats += 1;
            } else if let Ok((Performative::Close(close), _)) =
                ferrobus::server::frame::decode_performative(&raw.body)
            {
                closed = Some(format!("{close:?}"));
            }
        }
        match tokio::time::timeout_at(deadline, reader.read_buf(&mut input)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed.get_or_insert_with(|| "socket closed".into());
                break;
            }
            Err(_) => break,
            Ok(Ok(_)) => {}
        }
    }
    let _writer = heartbeats.await.expect("heartbeats sent");
    assert_eq!(closed, None, "a compliant peer is not dropped");
    assert!(
        received_heartbeats >= 4,
        "heartbeats at half of the peer's 1 s: {received_heartbeats} in 3 s"
    );
}

#[tokio::test]
async fn an_idle_timeout_of_zero_means_none() {
    let broker = Broker::start("[server]\nidle_timeout = \"0s\"\n").await;
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    stream
        .write_all(&open_frame_with_idle(None))
        .await
        .expect("write");
    let (performatives, heartbeats) = read_frames(&mut stream, Duration::from_millis(1500)).await;
    let Some(Performative::Open(open)) = performatives.first() else {
        panic!("expected the broker's open: {performatives:?}");
    };
    assert_eq!(open.idle_time_out, None, "no idle timeout advertised");
    assert_eq!(
        heartbeats, 0,
        "no heartbeats when neither side asks for them"
    );
    assert!(
        close_condition(&performatives).is_none(),
        "not closed for silence"
    );
}

/// Connects, sends `open` and returns the stream with what came back within `wait_ms`.
async fn open_connection(
    address: std::net::SocketAddr,
    wait_ms: u64,
) -> (TcpStream, Vec<Performative>) {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(&open_frame_with_idle(None))
        .await
        .expect("write");
    let (performatives, _) = read_frames(&mut stream, Duration::from_millis(wait_ms)).await;
    (stream, performatives)
}

#[tokio::test]
async fn connections_past_the_descriptor_limit_are_refused_not_left_hanging() {
    // Issue 10 item 13: run with 64 descriptors and open 80 connections.
    let mut broker = BrokerProcess::start_with(
        "[[queues]]\nname = \"q\"\n",
        &["--log-level", "info"],
        "ulimit -n 64;",
    );
    assert!(
        broker
            .wait_for_line(
                "max_connections is 10000 but the process may open only 64",
                Duration::from_secs(2)
            )
            .await
            .is_some(),
        "the start-up warns about the limit: {:?}",
        broker.lines()
    );
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..80 {
        let (stream, performatives) = open_connection(broker.address, 150).await;
        match close_condition(&performatives) {
            Some(condition) => {
                assert!(
                    condition.contains("ResourceLimitExceeded")
                        && condition.contains("file descriptors"),
                    "{condition}"
                );
                refused += 1;
            }
            None => {
                assert!(
                    matches!(performatives.first(), Some(Performative::Open(_))),
                    "every connection is answered, none left hanging: {performatives:?}"
                );
                open.push(stream);
            }
        }
    }
    assert!(refused > 0, "some of 80 connections exceed 64 descriptors");
    assert!(
        open.len() > 20,
        "most descriptors serve connections: {}",
        open.len()
    );
    drop(open);
    assert!(broker.alive());
    // Descriptors come back: a fresh client is served once the broker has seen the closes
    // (until then it may still be refused, with the same clear condition).
    let mut served = false;
    for _ in 0..50 {
        let (_, performatives) = open_connection(broker.address, 200).await;
        if close_condition(&performatives).is_none()
            && matches!(performatives.first(), Some(Performative::Open(_)))
        {
            served = true;
            break;
        }
    }
    assert!(served, "a fresh client is served after the others closed");
    let mut client = RawClient::connect_to(broker.address, 100).await;
    client.attach_receiver("after", "q", 0, true).await;
}

#[tokio::test]
async fn a_silent_peer_past_the_descriptor_limit_does_not_stall_the_next_refusal() {
    let broker = BrokerProcess::start_with(
        "[[queues]]\nname = \"q\"\n",
        &["--log-level", "info"],
        "ulimit -n 64;",
    );
    // Take every descriptor, until a connection is refused.
    let mut open = Vec::new();
    loop {
        assert!(
            open.len() < 80,
            "64 descriptors cannot serve 80 connections"
        );
        let mut stream = TcpStream::connect(broker.address).await.expect("connect");
        stream
            .write_all(&open_frame_with_idle(None))
            .await
            .expect("write");
        let (performatives, _) = read_frames(&mut stream, Duration::from_millis(150)).await;
        if close_condition(&performatives).is_some() {
            break;
        }
        open.push(stream);
    }
    // A peer past the limit that says nothing, then one that speaks.
    let mut silent = TcpStream::connect(broker.address).await.expect("connect");
    let mut next = TcpStream::connect(broker.address).await.expect("connect");
    next.write_all(&open_frame_with_idle(None))
        .await
        .expect("write");
    let started = tokio::time::Instant::now();
    let (performatives, _) = read_frames(&mut next, Duration::from_secs(3)).await;
    let condition = close_condition(&performatives)
        .expect("the next peer is answered while the silent one says nothing");
    assert!(condition.contains("file descriptors"), "{condition}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered promptly: {:?}",
        started.elapsed()
    );
    // The silent peer was answered too, without waiting for its handshake.
    let (performatives, _) = read_frames(&mut silent, Duration::from_secs(1)).await;
    let condition = close_condition(&performatives).expect("the silent peer is refused");
    assert!(condition.contains("file descriptors"), "{condition}");
    drop(open);
}

#[tokio::test]
async fn a_huge_terminus_address_closes_the_connection_before_anything_is_kept() {
    // An unauthenticated peer may attach `$cbs` links; the other terminus's address was
    // kept whole with the link (1 MB per link, a few thousand links per connection).
    let broker = Broker::start(
        "[[auth.keys]]\nname = \"k\"\nkey = \"secret\"\nrights = [\"Listen\"]\n[[queues]]\nname = \"q\"\n",
    )
    .await;
    let mut client = RawClient::connect(&broker, 100).await;
    let Performative::Attach(mut attach) =
        crate::raw_client::receiver_attach("cbs-reply", "$cbs", 0, false)
    else {
        unreachable!("receiver_attach builds an attach")
    };
    attach.target = Some(Box::new(
        fe2o3_amqp_types::messaging::Target::builder()
            .address("x".repeat(1_000_000))
            .build()
            .into(),
    ));
    client.send(Performative::Attach(attach)).await;
    let condition = client.expect_close(Duration::from_secs(5)).await;
    assert!(
        condition.contains("ResourceLimitExceeded") && condition.contains("address of 1000000"),
        "{condition}"
    );
}

#[tokio::test]
async fn a_delivery_larger_than_the_receivers_frame_size_arrives_in_several_frames() {
    // The broker encodes a delivery straight into its output behind the transfer and splits
    // it afterwards when it outgrows the peer's max-frame-size (issue 16): the receiver gets
    // the whole message, the small one first, in order.
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = fe2o3_amqp::Sender::attach(&mut session, "sender", "q")
        .await
        .expect("attach sender");
    let large: Vec<u8> = (0..20_000u32).map(|index| (index % 251) as u8).collect();
    sender
        .send(fe2o3_amqp::types::primitives::Binary::from(
            b"small".to_vec(),
        ))
        .await
        .expect("small accepted");
    sender
        .send(fe2o3_amqp::types::primitives::Binary::from(large.clone()))
        .await
        .expect("large accepted");
    let mut small_frames = fe2o3_amqp::Connection::builder()
        .container_id("small-frames")
        .max_frame_size(1024)
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Anonymous)
        .open(broker.url().as_str())
        .await
        .expect("connection with 1 KiB frames");
    let mut small_session = fe2o3_amqp::Session::begin(&mut small_frames)
        .await
        .expect("session");
    let mut receiver = fe2o3_amqp::Receiver::attach(&mut small_session, "receiver", "q")
        .await
        .expect("attach receiver");
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let delivery: fe2o3_amqp::Delivery<fe2o3_amqp::types::primitives::Binary> =
            tokio::time::timeout(std::time::Duration::from_secs(5), receiver.recv())
                .await
                .expect("a delivery within 5 s")
                .expect("a delivery");
        bodies.push(delivery.body().to_vec());
        receiver.accept(&delivery).await.expect("accept");
    }
    assert_eq!(bodies[0], b"small".to_vec());
    assert_eq!(bodies[1].len(), large.len());
    assert_eq!(bodies[1], large);
}

/// A `flow` for link `handle` (the frame's channel decides which session it is for).
fn flow(handle: u32) -> Performative {
    Performative::Flow(fe2o3_amqp_types::performatives::Flow {
        next_incoming_id: Some(1),
        incoming_window: 100,
        next_outgoing_id: 1,
        outgoing_window: 100,
        handle: Some(Handle(handle)),
        delivery_count: Some(0),
        link_credit: Some(10),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    })
}

/// Sends `bytes` and returns the condition and description of the `close` that follows.
async fn close_after(broker: &Broker, bytes: &[u8]) -> Option<String> {
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    stream.write_all(bytes).await.expect("write");
    let (performatives, _) = read_frames(&mut stream, Duration::from_secs(5)).await;
    close_condition(&performatives)
}

#[tokio::test]
async fn every_frame_above_the_negotiated_channel_max_closes_the_connection() {
    // AMQP 1.0 §2.7.1: channel-max is the highest channel usable on the connection, the
    // lower of both peers' values. The peer says 3: channel 4 and above are framing errors,
    // whatever the frame (a `begin`, or a frame for a session that could never exist).
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let framed = |channel: u16, performative: Performative| {
        let mut bytes = open_frame_with(3, None);
        ferrobus::server::frame::write_performative(&mut bytes, channel, &performative)
            .expect("encodes");
        bytes
    };
    let mut transfer_on_channel_4 = open_frame_with(3, None);
    let mut transfer = crate::raw_client::transfer_frame_bytes(
        0,
        0,
        0,
        &crate::raw_client::text_message("hi"),
        false,
    );
    transfer[6..8].copy_from_slice(&4u16.to_be_bytes());
    transfer_on_channel_4.extend_from_slice(&transfer);
    let cases = [
        ("begin on channel 5", framed(5, begin()), 5),
        (
            "attach on channel 4",
            framed(4, attach("above".into(), 0, "q")),
            4,
        ),
        ("flow on channel 200", framed(200, flow(0)), 200),
        ("transfer on channel 4", transfer_on_channel_4, 4),
    ];
    for (case, bytes, channel) in cases {
        let condition = close_after(&broker, &bytes)
            .await
            .unwrap_or_else(|| panic!("{case}: the connection is closed with an error"));
        assert!(
            condition.contains("FramingError")
                && condition.contains(&format!("channel {channel} "))
                && condition.contains("channel-max of 3"),
            "{case}: {condition}"
        );
    }
    // Channel 3 itself is within bounds: its session begins.
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    stream.write_all(&framed(3, begin())).await.expect("write");
    let (performatives, _) = read_frames(&mut stream, Duration::from_millis(500)).await;
    assert!(
        performatives
            .iter()
            .any(|performative| matches!(performative, Performative::Begin(_))),
        "{performatives:?}"
    );
    assert_eq!(close_condition(&performatives), None);
}

#[tokio::test]
async fn an_idle_time_out_below_the_supported_minimum_is_refused_in_close() {
    // AMQP 1.0 §2.4.5: a peer that cannot support a proposed idle timeout SHOULD close the
    // connection with an error explaining why. Heartbeats every 2 ms are not supported.
    let broker = Broker::start("[[queues]]\nname = \"q\"\n").await;
    let condition = close_after(&broker, &open_frame_with(8, Some(5)))
        .await
        .expect("refused with a close");
    assert!(
        condition.contains("NotAllowed")
            && condition.contains("idle-time-out of 5 ms")
            && condition.contains("minimum of 100 ms"),
        "{condition}"
    );
    // The minimum itself is honoured: heartbeats at half of it, and no close.
    let mut stream = TcpStream::connect(broker.address).await.expect("connect");
    stream
        .write_all(&open_frame_with(8, Some(100)))
        .await
        .expect("write");
    let (performatives, heartbeats) = read_frames(&mut stream, Duration::from_millis(600)).await;
    assert_eq!(close_condition(&performatives), None, "{performatives:?}");
    assert!(
        heartbeats >= 5,
        "about 12 heartbeats in 600 ms at 50 ms, saw {heartbeats}"
    );
}

/// Reads until the broker closes the socket, returning what it sent; fails if it stays
/// open for `within`.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    tokio::time::timeout(within, stream.read_to_end(&mut received))
        .await
        .unwrap_or_else(|_| panic!("the broker kept the connection open for {within:?}"))
        .ok();
    received
}

#[tokio::test]
async fn an_unfinished_handshake_is_dropped_after_the_configured_handshake_timeout() {
    let broker = Broker::start("[server]\nhandshake_timeout = \"300ms\"\n").await;
    // A peer that sends nothing at all.
    let started = tokio::time::Instant::now();
    let mut silent = TcpStream::connect(broker.address).await.expect("connect");
    let received = read_until_closed(&mut silent, Duration::from_secs(5)).await;
    assert!(received.is_empty(), "{received:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "dropped after {waited:?}, before its handshake time was up"
    );
    // A peer that sends the protocol header and stops: it gets ours, then EOF.
    let started = tokio::time::Instant::now();
    let mut header_only = TcpStream::connect(broker.address).await.expect("connect");
    header_only
        .write_all(&ferrobus::server::frame::AMQP_HEADER)
        .await
        .expect("write");
    let received = read_until_closed(&mut header_only, Duration::from_secs(5)).await;
    assert_eq!(received, ferrobus::server::frame::AMQP_HEADER);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "dropped after {waited:?}"
    );
    // A peer that finishes its handshake in time is served past the timeout.
    let mut prompt = TcpStream::connect(broker.address).await.expect("connect");
    prompt
        .write_all(&open_frame_with_idle(None))
        .await
        .expect("write");
    let (performatives, _) = read_frames(&mut prompt, Duration::from_millis(800)).await;
    assert!(
        matches!(performatives.first(), Some(Performative::Open(_))),
        "{performatives:?}"
    );
    assert_eq!(close_condition(&performatives), None);
    let mut bytes = bytes::BytesMut::new();
    ferrobus::server::frame::write_performative(&mut bytes, 0, &begin()).expect("encodes");
    prompt.write_all(&bytes).await.expect("write");
    let mut answer = [0u8; 64];
    use tokio::io::AsyncReadExt;
    let read = tokio::time::timeout(Duration::from_secs(5), prompt.read(&mut answer))
        .await
        .expect("answered")
        .expect("read");
    assert!(read > 0, "the session is answered, the socket not closed");
}
