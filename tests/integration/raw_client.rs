//! A minimal AMQP 1.0 client on a raw socket for tests that need to send what no client
//! library would (or to withhold what every client does: reading, credit, windows).

use std::time::Duration;

use bytes::BytesMut;
use fe2o3_amqp::Sender;
use fe2o3_amqp_types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::{Header, Source, Target};
use fe2o3_amqp_types::performatives::{
    Attach, Begin, ChannelMax, Flow, MaxFrameSize, Open, Performative,
};
use ferrobus::server::frame::{self, AMQP_HEADER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::Broker;

/// A minimal AMQP client on a raw socket: no SASL, one session on channel 0.
pub struct RawClient {
    stream: TcpStream,
    input: BytesMut,
}

/// An `attach` of a receiver link (the broker sends), peek-lock unless `settled`.
pub fn receiver_attach(name: &str, address: &str, handle: u32, settled: bool) -> Performative {
    Performative::Attach(Attach {
        name: name.into(),
        handle: Handle(handle),
        role: Role::Receiver,
        snd_settle_mode: if settled {
            SenderSettleMode::Settled
        } else {
            SenderSettleMode::Unsettled
        },
        rcv_settle_mode: ReceiverSettleMode::First,
        source: Some(Box::new(Source::builder().address(address).build())),
        target: Some(Box::new(Target::builder().build().into())),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: None,
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    })
}

/// A performative the broker sent, with the payload that followed it (transfers).
pub type Received = (Performative, bytes::Bytes);

impl RawClient {
    /// Connects, opens and begins a session with `incoming_window`.
    pub async fn connect(broker: &Broker, incoming_window: u32) -> RawClient {
        RawClient::connect_to(broker.address, incoming_window).await
    }

    /// Connects to a broker at `address` (e.g. a broker process), opens and begins.
    pub async fn connect_to(address: std::net::SocketAddr, incoming_window: u32) -> RawClient {
        let stream = TcpStream::connect(address).await.expect("connect");
        let mut client = RawClient {
            stream,
            input: BytesMut::new(),
        };
        let mut bytes = BytesMut::new();
        bytes.extend_from_slice(&AMQP_HEADER);
        client.stream.write_all(&bytes).await.expect("header");
        client
            .send(Performative::Open(Open {
                container_id: "raw-flow".into(),
                hostname: None,
                max_frame_size: MaxFrameSize(65536),
                channel_max: ChannelMax(8),
                idle_time_out: None,
                outgoing_locales: None,
                incoming_locales: None,
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }))
            .await;
        client
            .send(Performative::Begin(Begin {
                remote_channel: None,
                next_outgoing_id: 1,
                incoming_window,
                outgoing_window: 1000,
                handle_max: Handle(16),
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }))
            .await;
        let mut header = [0u8; 8];
        client
            .stream
            .read_exact(&mut header)
            .await
            .expect("protocol header");
        client
            .expect(|performative| matches!(performative, Performative::Begin(_)))
            .await;
        client
    }

    pub async fn send(&mut self, performative: Performative) {
        let mut bytes = BytesMut::new();
        frame::write_performative(&mut bytes, 0, &performative).expect("encodes");
        self.stream.write_all(&bytes).await.expect("write");
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Attaches a receiver link (peek-lock unless `settled`) on `handle`.
    pub async fn attach_receiver(&mut self, name: &str, address: &str, handle: u32, settled: bool) {
        self.send(receiver_attach(name, address, handle, settled))
            .await;
        self.expect(|performative| matches!(performative, Performative::Attach(_)))
            .await;
    }

    /// Attaches a sender link (the client sends) to `address` on `handle`.
    pub async fn attach_sender(&mut self, name: &str, address: &str, handle: u32) {
        self.send(Performative::Attach(Attach {
            name: name.into(),
            handle: Handle(handle),
            role: Role::Sender,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(Source::builder().build())),
            target: Some(Box::new(Target::builder().address(address).build().into())),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }))
        .await;
        self.expect(|performative| matches!(performative, Performative::Attach(_)))
            .await;
    }

    /// Sends one unsettled transfer carrying `payload` (encoded message sections).
    pub async fn transfer(&mut self, handle: u32, delivery_id: u32, format: u32, payload: &[u8]) {
        self.transfer_frame(handle, delivery_id, format, payload, false)
            .await;
    }

    /// Sends one transfer frame; `more` says further frames of the delivery follow.
    pub async fn transfer_frame(
        &mut self,
        handle: u32,
        delivery_id: u32,
        format: u32,
        payload: &[u8],
        more: bool,
    ) {
        let bytes = transfer_frame_bytes(handle, delivery_id, format, payload, more);
        self.stream.write_all(&bytes).await.expect("write");
    }

    /// Waits for the broker's disposition of a transfer and returns its state.
    pub async fn outcome(&mut self) -> fe2o3_amqp_types::messaging::DeliveryState {
        let (performative, _) = self
            .expect(|performative| matches!(performative, Performative::Disposition(_)))
            .await;
        let Performative::Disposition(disposition) = performative else {
            unreachable!()
        };
        disposition
            .state
            .expect("the disposition carries an outcome")
    }

    /// The outcomes of the next `count` deliveries the broker settles, by delivery id (one
    /// disposition may settle a range).
    pub async fn outcomes(
        &mut self,
        count: usize,
    ) -> std::collections::BTreeMap<u32, fe2o3_amqp_types::messaging::DeliveryState> {
        let mut outcomes = std::collections::BTreeMap::new();
        while outcomes.len() < count {
            let (performative, _) = self
                .expect(|performative| matches!(performative, Performative::Disposition(_)))
                .await;
            let Performative::Disposition(disposition) = performative else {
                unreachable!()
            };
            let state = disposition
                .state
                .expect("the disposition carries an outcome");
            for id in disposition.first..=disposition.last.unwrap_or(disposition.first) {
                assert!(
                    outcomes.insert(id, state.clone()).is_none(),
                    "delivery {id} settled twice"
                );
            }
        }
        outcomes
    }

    /// A flow granting `credit` on `handle`, with the session window `incoming_window`.
    pub async fn flow(&mut self, handle: u32, credit: u32, incoming_window: u32) {
        self.send(Performative::Flow(Flow {
            next_incoming_id: Some(1),
            incoming_window,
            next_outgoing_id: 1,
            outgoing_window: 1000,
            handle: Some(Handle(handle)),
            delivery_count: Some(0),
            link_credit: Some(credit),
            available: None,
            drain: false,
            echo: false,
            properties: None,
        }))
        .await;
    }

    /// A flow asking the broker to drain `handle`'s credit, counting `delivery_count`
    /// deliveries received on it; the broker answers with a flow once the entity has
    /// handled everything sent to it before.
    pub async fn drain(&mut self, handle: u32, delivery_count: u32, credit: u32) {
        self.send(Performative::Flow(Flow {
            next_incoming_id: Some(1),
            incoming_window: 1000,
            next_outgoing_id: 1,
            outgoing_window: 1000,
            handle: Some(Handle(handle)),
            delivery_count: Some(delivery_count),
            link_credit: Some(credit),
            available: None,
            drain: true,
            echo: false,
            properties: None,
        }))
        .await;
    }

    /// The next frame (skipping heartbeats), or `None` after `within` or at EOF.
    pub async fn next(&mut self, within: Duration) -> Option<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Ok(Some(raw)) = frame::take_frame(&mut self.input, 1 << 20) {
                if raw.body.is_empty() {
                    continue;
                }
                if let Ok(received) = frame::decode_performative(&raw.body) {
                    return Some(received);
                }
            }
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.input)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Reads until a frame matches, failing the test after 5 s.
    pub async fn expect(&mut self, wanted: impl Fn(&Performative) -> bool) -> Received {
        loop {
            match self.next(Duration::from_secs(5)).await {
                Some(received) if wanted(&received.0) => return received,
                Some(_) => {}
                None => panic!("the expected frame did not arrive within 5 s"),
            }
        }
    }

    /// Reads until the broker's `close`, returning its condition and description.
    pub async fn expect_close(&mut self, within: Duration) -> String {
        while let Some((performative, _)) = self.next(within).await {
            if let Performative::Close(close) = performative {
                return close
                    .error
                    .map(|error| format!("{:?} {:?}", error.condition, error.description))
                    .unwrap_or_default();
            }
        }
        panic!("no close frame within {within:?}");
    }
}

/// The bytes of one unsettled transfer frame on channel 0 carrying `payload`.
pub fn transfer_frame_bytes(
    handle: u32,
    delivery_id: u32,
    format: u32,
    payload: &[u8],
    more: bool,
) -> BytesMut {
    transfer_bytes(handle, delivery_id, format, payload, more, false)
}

/// The bytes of one transfer frame on channel 0 carrying `payload`, pre-settled if
/// `settled`.
pub fn transfer_bytes(
    handle: u32,
    delivery_id: u32,
    format: u32,
    payload: &[u8],
    more: bool,
    settled: bool,
) -> BytesMut {
    let transfer = Performative::Transfer(fe2o3_amqp_types::performatives::Transfer {
        handle: Handle(handle),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(serde_bytes::ByteBuf::from(
            delivery_id.to_be_bytes().to_vec(),
        )),
        message_format: Some(format),
        settled: Some(settled),
        more,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    });
    let mut bytes = BytesMut::new();
    frame::write_performative(&mut bytes, 0, &transfer).expect("encodes");
    bytes.extend_from_slice(payload);
    let size = (bytes.len() as u32).to_be_bytes();
    bytes[..4].copy_from_slice(&size);
    bytes
}

/// A described value: descriptor `code` (a small ulong), then `value`'s encoding.
pub fn described(code: u8, value: Vec<u8>) -> Vec<u8> {
    let mut bytes = vec![0x00, 0x53, code];
    bytes.extend_from_slice(&value);
    bytes
}

/// A message whose body is the AMQP value `text` (str32: any length).
pub fn text_message(text: &str) -> Vec<u8> {
    let mut value = vec![0xb1];
    value.extend_from_slice(&(text.len() as u32).to_be_bytes());
    value.extend_from_slice(text.as_bytes());
    described(0x77, value)
}

pub fn is_transfer(performative: &Performative) -> bool {
    matches!(performative, Performative::Transfer(_))
}

/// The header's delivery-count of a delivered message.
pub fn delivery_count(payload: &[u8]) -> u32 {
    let header: Header = serde_amqp::from_slice(payload).expect("the message starts with a header");
    header.delivery_count
}

pub async fn send_messages(broker: &Broker, queue: &str, count: usize) {
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", queue)
        .await
        .expect("attach");
    for index in 0..count {
        sender
            .send(format!("message {index}"))
            .await
            .expect("accepted");
    }
    sender.close().await.expect("sender closes");
}

/// Sends one message to `queue` over a connection authenticated with SASL PLAIN.
pub async fn send_messages_with_key(broker: &Broker, queue: &str, name: &str, key: &str) {
    let mut connection = fe2o3_amqp::Connection::builder()
        .container_id("keyed-sender")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Plain {
            username: name.into(),
            password: key.into(),
        })
        .open(broker.url().as_str())
        .await
        .expect("PLAIN with a configured key authenticates");
    let mut session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session");
    let mut sender = Sender::attach(&mut session, "keyed-sender", queue)
        .await
        .expect("attach");
    sender.send("with a key").await.expect("accepted");
    sender.close().await.expect("closes");
}
