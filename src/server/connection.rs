//! One AMQP connection: its state (output buffers, sessions, requests waiting for
//! entities, rights), its life from the handshake to the last bytes written, and the
//! `close` it ends with. The handshake is in `handshake.rs`, the turns of the event loop in
//! `event_loop.rs`.
//!
//! Frames are processed in arrival order (clients pipeline `open`, `begin` and `attach`).
//! Everything written during one turn of the loop is flushed with one `write`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::Error as AmqpError;
use fe2o3_amqp_types::performatives::{Close, Performative};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use super::Context;
use super::event_loop::event_loop;
use super::frame::{self, FrameError};
use super::handshake::{Admission, handshake, our_open, unsupported_idle_time_out};
use super::log_text::LogText;
use super::session::Session;
use super::transport::RawStream;
use crate::amqp::errors;
use crate::amqp::sas::{Grant, Rights};
use crate::broker::entity::state::FastMap;
use crate::broker::entity::{Notification, NotificationSender, RequestId};
use crate::broker::types::ReceiverId;

/// The highest channel a peer may use: 256 sessions per connection (the SDKs use one or a
/// few; each session costs memory, so a peer cannot open 65,536).
pub const CHANNEL_MAX: u16 = 255;

/// Why a connection ends.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// Socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Bad framing or an undecodable performative.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer broke the protocol; we close with this error.
    #[error("{description}")]
    Protocol {
        /// AMQP condition.
        condition: &'static str,
        /// What went wrong.
        description: String,
    },
    /// The peer went away or finished.
    #[error("closed")]
    Closed,
}

impl ConnectionError {
    /// A protocol violation to report in `close`.
    pub fn protocol(condition: &'static str, description: impl Into<String>) -> Self {
        ConnectionError::Protocol {
            condition,
            description: description.into(),
        }
    }
}

/// Where a request's answer goes.
#[derive(Debug)]
pub enum Pending {
    /// A client transfer waiting for the entity to store it.
    Enqueue {
        /// Session (remote channel).
        channel: u16,
        /// The transfer's delivery id.
        delivery_id: u32,
    },
    /// A client disposition waiting for the entity to settle.
    Settle {
        /// Session (remote channel).
        channel: u16,
        /// The delivery id settled.
        delivery_id: u32,
        /// The outcome to echo on success.
        echo: fe2o3_amqp_types::messaging::DeliveryState,
    },
    /// A `$management` request waiting for its entity.
    Management(crate::amqp::management::PendingResponse),
    /// A transaction's commit waiting for its entity.
    Discharge {
        /// Session (remote channel).
        channel: u16,
        /// The discharge's delivery id.
        delivery_id: u32,
        /// Whether the controller settled it (then nothing is answered).
        settled: bool,
        /// Our deliveries the transaction settles: settled for good once it commits.
        deliveries: Vec<(u16, u32)>,
    },
}

/// Per-connection state.
pub struct Connection {
    /// Shared broker context.
    pub(super) context: Arc<Context>,
    /// Frames waiting to be flushed (after `output_ahead`).
    pub(super) output: BytesMut,
    /// Output frozen ahead of `output`, written first and in order: when a delivery needs
    /// more room than `output` has left while the socket still owes part of it, that part
    /// moves here whole instead of being copied to the buffer's front or into a grown one
    /// (issue 16: those copies moved more bytes than the deliveries themselves).
    pub(super) output_ahead: VecDeque<Bytes>,
    /// Bytes in `output_ahead`.
    pub(super) output_ahead_len: usize,
    /// The peer's max-frame-size.
    pub(super) peer_max_frame_size: u32,
    /// The highest channel either side may use: the lower of our [`CHANNEL_MAX`] and the
    /// peer's `open.channel-max`. A frame on a higher channel is a framing error.
    pub(super) channel_max: u16,
    /// Sessions by the peer's channel (our channel is the same number).
    pub(super) sessions: FastMap<u16, Session>,
    /// Where entities send this connection's notifications.
    pub(super) notifications: NotificationSender,
    /// Receiver id → (channel, handle) of the link it belongs to.
    pub(super) receivers: FastMap<ReceiverId, (u16, u32)>,
    /// Requests waiting for entity replies.
    pub(super) pending: FastMap<RequestId, Pending>,
    /// Staged sends waiting for their queue's answer: their request ids carry where the
    /// answer goes (`incoming::send_request`), so they are counted, not kept in `pending`.
    pub(super) sends_unanswered: usize,
    /// Next request id.
    pub(super) next_request_id: u64,
    /// Rights from SASL PLAIN, covering every entity.
    pub(super) sasl_rights: Option<Rights>,
    /// Rights from CBS tokens.
    pub(super) grants: Vec<Grant>,
    /// The peer's container id, for logs.
    pub(super) container_id: String,
    /// Entities of receivers detached by this connection: deliveries still in flight to
    /// them are returned to the entity.
    pub(super) detached_receivers: HashMap<ReceiverId, crate::broker::entity::EntityHandle>,
    /// The broker is shutting down: no new messages in or out; receivers may settle.
    pub(super) draining: bool,
    /// Bytes held in unfinished multi-frame deliveries across the connection's links.
    pub(super) partial_bytes: usize,
    /// Some receiver link is held back (see `outgoing.rs`).
    pub(super) receivers_blocked: bool,
    /// Attach replies of session receivers waiting for the entity to lock a session.
    pub(super) deferred_attaches: HashMap<ReceiverId, fe2o3_amqp_types::performatives::Attach>,
    /// Open transactions (see `transactions.rs`).
    pub(super) transactions: super::transactions::Transactions,
    /// The accepted disposition last written, while it is the end of `output` (see
    /// `Connection::write_accepted`).
    pub(super) accepted_run: Option<super::dispositions::AcceptedRun>,
    /// The time read once for a batch of notifications (the delivery latency metric counts
    /// whole milliseconds: a clock read per delivery was 1 % of the CPU, issue 16).
    pub(super) batch_now: Option<crate::broker::types::Timestamp>,
    /// Sends to one queue taken from the frames of this read, not yet handed to it (see
    /// `incoming.rs`).
    pub(super) staged: Option<super::incoming::StagedSends>,
}

impl Connection {
    /// Bytes written for the peer and not yet taken by the socket.
    pub(super) fn output_len(&self) -> usize {
        self.output_ahead_len + self.output.len()
    }

    /// Room for `needed` more bytes at the end of `output`, without copying what it holds.
    pub(super) fn output_room(&mut self, needed: usize) {
        if self.output.capacity() - self.output.len() >= needed {
            return;
        }
        if !self.output.is_empty() {
            self.output_ahead_len += self.output.len();
            self.output_ahead.push_back(self.output.split().freeze());
            // Its offsets were in the part moved ahead.
            self.accepted_run = None;
        }
        self.output.reserve(needed);
    }

    /// Completes the request `request` with the entity's reply: a staged send's (its id
    /// says where the answer goes) or one registered in `pending` (none: already answered
    /// or given up).
    pub(super) fn answer(
        &mut self,
        request: RequestId,
        result: Result<crate::broker::entity::Reply, crate::broker::types::EntityError>,
    ) -> Result<(), ConnectionError> {
        if let Some((channel, delivery_id)) = super::incoming::sent_to(request) {
            self.sends_unanswered = self.sends_unanswered.saturating_sub(1);
            return self.reply(
                Pending::Enqueue {
                    channel,
                    delivery_id,
                },
                result,
            );
        }
        match self.pending.remove(&request) {
            Some(pending) => self.reply(pending, result),
            None => Ok(()),
        }
    }

    /// A fresh request id registered as waiting for `pending`.
    pub fn register(&mut self, pending: Pending) -> RequestId {
        self.next_request_id += 1;
        let request = RequestId(self.next_request_id);
        self.pending.insert(request, pending);
        request
    }

    /// Appends a performative to the output.
    pub fn write(
        &mut self,
        channel: u16,
        performative: Performative,
    ) -> Result<(), ConnectionError> {
        frame::write_performative(&mut self.output, channel, &performative)?;
        Ok(())
    }
}

/// Serves one TCP connection to its end, or refuses it after the handshake when it is not
/// admitted. Its `open` must have come by `handshake_deadline` (`server.handshake_timeout`
/// after the accept), or the socket is closed without a word.
pub async fn run<S: RawStream>(
    mut stream: S,
    context: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
    admission: Admission,
    handshake_deadline: tokio::time::Instant,
) {
    let mut input = BytesMut::with_capacity(64 * 1024);
    let mut output = BytesMut::with_capacity(64 * 1024);
    let mut amqp_started = false;
    let handshake = tokio::time::timeout_at(
        handshake_deadline,
        handshake(
            &mut stream,
            &mut input,
            &mut output,
            &context,
            &mut amqp_started,
        ),
    )
    .await;
    let (open, sasl_rights) = match handshake {
        Ok(Ok(done)) => done,
        Ok(Err(error)) => {
            tracing::info!(error = %LogText(&error.to_string()), "handshake failed");
            if amqp_started && let Some(error) = close_error(&error) {
                // A malformed `open`: answer with ours and a `close` naming the problem.
                let _ = frame::write_performative(
                    &mut output,
                    0,
                    &Performative::Open(our_open(&context)),
                );
                let _ = frame::write_performative(
                    &mut output,
                    0,
                    &Performative::Close(Close { error: Some(error) }),
                );
            }
            write_last(&mut stream, &output).await;
            return;
        }
        Err(_) => {
            tracing::info!("handshake timed out");
            return;
        }
    };
    let (notifications, mut inbox) = mpsc::unbounded_channel();
    let mut connection = Connection {
        context: context.clone(),
        output,
        output_ahead: VecDeque::new(),
        output_ahead_len: 0,
        peer_max_frame_size: open.max_frame_size.0.max(frame::MIN_MAX_FRAME_SIZE),
        channel_max: open.channel_max.0.min(CHANNEL_MAX),
        sessions: FastMap::default(),
        notifications,
        receivers: FastMap::default(),
        pending: FastMap::default(),
        sends_unanswered: 0,
        next_request_id: 0,
        sasl_rights,
        grants: Vec::new(),
        container_id: open.container_id.clone(),
        deferred_attaches: HashMap::new(),
        transactions: Default::default(),
        detached_receivers: HashMap::new(),
        receivers_blocked: false,
        draining: false,
        partial_bytes: 0,
        accepted_run: None,
        batch_now: None,
        staged: None,
    };
    tracing::debug!(container_id = %LogText(&open.container_id), "connection open");
    let our_open = our_open(&context);
    if connection.write(0, Performative::Open(our_open)).is_err() {
        return;
    }
    let refusal = match admission {
        Admission::Admitted => {
            unsupported_idle_time_out(&open).map(|description| (errors::NOT_ALLOWED, description))
        }
        Admission::TooManyConnections => Some((
            errors::RESOURCE_LIMIT_EXCEEDED,
            format!(
                "The broker's limit of {} connections is reached.",
                context.settings.max_connections
            ),
        )),
    };
    if let Some((condition, description)) = refusal {
        tracing::info!(description = %LogText(&description), "connection refused after open");
        let _ = close_with(
            &mut connection,
            Some(errors::amqp_error(condition, &description)),
        );
        write_remaining(&mut stream, &connection).await;
        return;
    }
    let result = event_loop(
        &mut connection,
        &mut stream,
        &mut input,
        &mut inbox,
        &mut shutdown,
        &open,
    )
    .await;
    match &result {
        Err(error @ (ConnectionError::Protocol { .. } | ConnectionError::Frame(_))) => {
            tracing::warn!(error = %LogText(&error.to_string()), "closing connection after a protocol error");
            let _ = close_with(&mut connection, close_error(error));
        }
        Err(ConnectionError::Io(error)) => tracing::debug!(%error, "connection i/o error"),
        Err(ConnectionError::Closed) | Ok(()) => {}
    }
    write_remaining(&mut stream, &connection).await;
    tracing::debug!(container_id = %LogText(&connection.container_id), "connection closed");
    connection.detach_all().await;
    // Deliveries that reached this connection but were never written go back untouched.
    inbox.close();
    while let Some(notification) = inbox.recv().await {
        if let Notification::Deliver(delivery) = notification {
            let _ = connection.deliver(delivery).await;
        }
    }
}

/// How long the last frames (a `close`) may take to reach a peer that is not reading.
const LAST_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes the last bytes of a connection, giving up after [`LAST_WRITE_TIMEOUT`].
async fn write_last<S: RawStream>(stream: &mut S, bytes: &[u8]) {
    let _ = tokio::time::timeout(LAST_WRITE_TIMEOUT, stream.write_all(bytes)).await;
}

/// [`write_last`] for everything a connection still owes the peer, in order.
async fn write_remaining<S: RawStream>(stream: &mut S, connection: &Connection) {
    let _ = tokio::time::timeout(LAST_WRITE_TIMEOUT, async {
        for chunk in &connection.output_ahead {
            stream.write_all(chunk).await?;
        }
        stream.write_all(&connection.output).await
    })
    .await;
}

/// The error a `close` carries for a connection error the peer caused.
fn close_error(error: &ConnectionError) -> Option<AmqpError> {
    match error {
        ConnectionError::Protocol {
            condition,
            description,
        } => Some(errors::amqp_error(condition, description)),
        ConnectionError::Frame(error @ FrameError::Decode(_)) => {
            Some(errors::amqp_error(errors::DECODE_ERROR, &error.to_string()))
        }
        ConnectionError::Frame(error) => Some(errors::amqp_error(
            errors::FRAMING_ERROR,
            &error.to_string(),
        )),
        ConnectionError::Io(_) | ConnectionError::Closed => None,
    }
}

/// Writes the `close` that ends the connection, with `error` if any.
pub(super) fn close_with(
    connection: &mut Connection,
    error: Option<AmqpError>,
) -> Result<(), ConnectionError> {
    connection.write(0, Performative::Close(Close { error }))
}
