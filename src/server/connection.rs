//! One AMQP connection: protocol headers, SASL, `open`/`close`, heartbeats, and the event
//! loop that interleaves frames from the peer with notifications from entities.
//!
//! Frames are processed in arrival order (clients pipeline `open`, `begin` and `attach`).
//! Everything written during one turn of the loop is flushed with one `write`.

use crate::broker::entity::state::FastMap;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::transport::RawStream;
use bytes::{Buf, Bytes, BytesMut};
use fe2o3_amqp_types::definitions::Error as AmqpError;
use fe2o3_amqp_types::performatives::{ChannelMax, Close, MaxFrameSize, Open, Performative};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::Context;
use super::frame::{self, FRAME_TYPE_AMQP, FRAME_TYPE_SASL, FrameError, RawFrame};
use super::log_text::LogText;
use super::sasl::{self, SaslResult};
use super::session::Session;
use crate::amqp::errors;
use crate::amqp::sas::{Grant, Rights};
use crate::broker::entity::{Notification, NotificationSender, RequestId};
use crate::broker::types::ReceiverId;

/// The highest channel a peer may use: 256 sessions per connection (the SDKs use one or a
/// few; each session costs memory, so a peer cannot open 65,536).
pub const CHANNEL_MAX: u16 = 255;

/// The shortest idle-time-out a peer may ask of us (AMQP 1.0 §2.4.5): we send a heartbeat
/// at half of it, so 100 ms means one every 50 ms at most. A shorter one is refused with a
/// `close` naming both values, as §2.4.5 says a peer that cannot support a proposed idle
/// timeout should, rather than silently heartbeating slower than the peer asked.
pub const MIN_PEER_IDLE_TIMEOUT: Duration = Duration::from_millis(100);

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

async fn read_more<S: RawStream>(
    stream: &mut S,
    input: &mut BytesMut,
) -> Result<(), ConnectionError> {
    if input.capacity() - input.len() < 4096 {
        input.reserve(64 * 1024);
    }
    let read = stream.read_buf(input).await?;
    if read == 0 {
        return Err(ConnectionError::Closed);
    }
    Ok(())
}

async fn read_exact_header<S: RawStream>(
    stream: &mut S,
    input: &mut BytesMut,
) -> Result<[u8; 8], ConnectionError> {
    while input.len() < 8 {
        read_more(stream, input).await?;
    }
    let mut header = [0u8; 8];
    header.copy_from_slice(&input.split_to(8));
    Ok(header)
}

async fn read_frame<S: RawStream>(
    stream: &mut S,
    input: &mut BytesMut,
    max_size: u32,
) -> Result<RawFrame, ConnectionError> {
    loop {
        if let Some(frame) = frame::take_frame(input, max_size)? {
            return Ok(frame);
        }
        read_more(stream, input).await?;
    }
}

/// Runs the handshake: headers, optional SASL, `open`. Returns the peer's `open`.
async fn handshake<S: RawStream>(
    stream: &mut S,
    input: &mut BytesMut,
    output: &mut BytesMut,
    context: &Context,
    amqp_started: &mut bool,
) -> Result<(Open, Option<Rights>), ConnectionError> {
    let mut header = read_exact_header(stream, input).await?;
    let mut sasl_rights = None;
    if header == frame::SASL_HEADER {
        sasl::write_mechanisms(output)?;
        stream.write_all(output).await?;
        output.clear();
        let init_frame = read_frame(stream, input, 64 * 1024).await?;
        if init_frame.frame_type != FRAME_TYPE_SASL {
            return Err(ConnectionError::protocol(
                errors::DECODE_ERROR,
                "expected sasl-init",
            ));
        }
        let init = match sasl::decode_init(&init_frame.body) {
            Ok(init) => init,
            Err(error) => {
                // No AMQP close exists yet: the SASL outcome refuses, then the socket closes.
                sasl::write_outcome(output, false)?;
                return Err(error.into());
            }
        };
        let result = sasl::authenticate(&init, &context.settings.keys);
        let ok = !matches!(result, SaslResult::Refused);
        sasl::write_outcome(output, ok)?;
        stream.write_all(output).await?;
        output.clear();
        match result {
            SaslResult::Refused => {
                tracing::info!(mechanism = %LogText(&init.mechanism.0), "SASL authentication refused");
                return Err(ConnectionError::Closed);
            }
            SaslResult::Key(rights) => sasl_rights = Some(rights),
            SaslResult::Anonymous => {}
        }
        header = read_exact_header(stream, input).await?;
    }
    if header != frame::AMQP_HEADER {
        output.extend_from_slice(&frame::SASL_HEADER);
        stream.write_all(output).await?;
        return Err(ConnectionError::protocol(
            errors::DECODE_ERROR,
            "unsupported protocol header",
        ));
    }
    output.extend_from_slice(&frame::AMQP_HEADER);
    // Some clients (fe2o3-amqp) wait for our header before sending `open`.
    stream.write_all(output).await?;
    output.clear();
    *amqp_started = true;
    let open_frame = read_frame(stream, input, context.settings.max_frame_size).await?;
    if open_frame.frame_type != FRAME_TYPE_AMQP {
        return Err(ConnectionError::protocol(
            errors::DECODE_ERROR,
            "expected an AMQP frame",
        ));
    }
    let (performative, _) = frame::decode_performative(&open_frame.body)?;
    let Performative::Open(open) = performative else {
        return Err(ConnectionError::protocol(
            errors::DECODE_ERROR,
            "expected open",
        ));
    };
    Ok((open, sasl_rights))
}

/// The `open` the broker sends.
pub(super) fn our_open(context: &Context) -> Open {
    Open {
        container_id: "ferrobus".to_string(),
        hostname: None,
        max_frame_size: MaxFrameSize(context.settings.max_frame_size),
        channel_max: ChannelMax(CHANNEL_MAX),
        // "0s" in the configuration: no idle timeout at all (none advertised or enforced).
        idle_time_out: Some(
            context
                .settings
                .idle_timeout
                .as_millis()
                .min(u32::MAX as u128) as u32,
        )
        .filter(|millis| *millis > 0),
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// Whether a connection may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Served.
    Admitted,
    /// `max_connections` is reached: opened and closed at once with an error.
    TooManyConnections,
}

/// Our protocol header, `open` and `close` with `amqp:resource-limit-exceeded`: the whole
/// answer to a connection taken while the process is out of file descriptors. It is
/// written at once, without waiting for the peer's header, so the connection's descriptor
/// (the spare's) is free again at once.
pub fn out_of_descriptors_refusal(context: &Context) -> Vec<u8> {
    let mut output = BytesMut::new();
    output.extend_from_slice(&frame::AMQP_HEADER);
    let close = Close {
        error: Some(errors::amqp_error(
            errors::RESOURCE_LIMIT_EXCEEDED,
            "The broker has no file descriptors left for another connection.",
        )),
    };
    // Encoding our own open and close cannot fail; an empty answer would still close.
    let _ = frame::write_performative(&mut output, 0, &Performative::Open(our_open(context)));
    let _ = frame::write_performative(&mut output, 0, &Performative::Close(close));
    output.to_vec()
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

/// Why the peer's proposed idle-time-out cannot be honoured, if it cannot: below
/// [`MIN_PEER_IDLE_TIMEOUT`] (zero or absent asks for no heartbeats at all).
fn unsupported_idle_time_out(open: &Open) -> Option<String> {
    let millis = open.idle_time_out.filter(|millis| *millis > 0)?;
    let minimum = MIN_PEER_IDLE_TIMEOUT.as_millis();
    (u128::from(millis) < minimum).then(|| {
        format!(
            "The idle-time-out of {millis} ms in open is below the minimum of {minimum} ms this broker supports (it would have to send a heartbeat every {} ms); propose {minimum} ms or more, or 0 for none.",
            millis / 2
        )
    })
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

/// Closes the connection because the broker is shutting down.
fn close_forced(connection: &mut Connection) -> Result<(), ConnectionError> {
    close_with(
        connection,
        Some(errors::amqp_error(
            errors::CONNECTION_FORCED,
            "The broker is shutting down.",
        )),
    )
}

fn close_with(
    connection: &mut Connection,
    error: Option<AmqpError>,
) -> Result<(), ConnectionError> {
    connection.write(0, Performative::Close(Close { error }))
}

/// Output bytes above which we stop reading the peer's frames until it reads ours: a peer
/// that sends but never reads cannot make the broker buffer without limit.
const OUTPUT_READ_PAUSE: usize = 8 * 1024 * 1024;

/// Writes as much of the connection's output (`output_ahead`, then `output`) as the socket
/// takes now, without waiting. Returns whether anything was written.
fn flush_now<S: RawStream>(
    stream: &S,
    connection: &mut Connection,
) -> Result<bool, ConnectionError> {
    let mut wrote = false;
    loop {
        let chunk: &[u8] = match connection.output_ahead.front() {
            Some(front) => front,
            None if connection.output.is_empty() => break,
            None => &connection.output,
        };
        match stream.write_now(chunk) {
            Ok(0) => return Err(ConnectionError::Closed),
            Ok(written) => {
                wrote = true;
                match connection.output_ahead.front_mut() {
                    Some(front) => {
                        front.advance(written);
                        connection.output_ahead_len -= written;
                        if front.is_empty() {
                            connection.output_ahead.pop_front();
                        }
                    }
                    None => connection.output.advance(written),
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(error) => return Err(error.into()),
        }
    }
    Ok(wrote)
}

async fn event_loop<S: RawStream>(
    connection: &mut Connection,
    stream: &mut S,
    input: &mut BytesMut,
    inbox: &mut mpsc::UnboundedReceiver<Notification>,
    shutdown: &mut watch::Receiver<bool>,
    open: &Open,
) -> Result<(), ConnectionError> {
    // AMQP 1.0 §2.4.5: the peer's idle-time-out says how often it must hear from us (we
    // send an empty frame at half of it when otherwise silent); ours says how long we wait
    // for the peer before closing: twice the advertised value, since "to avoid spurious
    // timeouts, the value in idle-time-out SHOULD be half the peer's actual timeout
    // threshold" (and the SDK wire contract, §1.4: never tighter than 2×). Only complete
    // frames count as hearing from the peer, so a frame trickled byte by byte does not keep
    // the connection. Zero or absent means no such obligation.
    let peer_idle = open
        .idle_time_out
        .filter(|millis| *millis > 0)
        .map(|millis| Duration::from_millis(millis as u64));
    // Shorter than `MIN_PEER_IDLE_TIMEOUT` was refused after `open`, so half of it is kept.
    let heartbeat_period = peer_idle.map(|idle| idle / 2);
    let local_idle = Some(connection.context.settings.idle_timeout)
        .filter(|idle| !idle.is_zero())
        .map(|idle| idle * 2);
    let mut last_heard = tokio::time::Instant::now();
    let mut last_sent = last_heard;
    // Timers kept across turns and moved only when they fire (or, for a token, to an
    // earlier expiry): each fires no later than its deadline, finds whether the deadline
    // moved (a frame heard, a frame sent, a token renewed) and re-arms. A timer made or
    // reset on every turn was a registration with tokio's timer wheel per turn (issue 16).
    let far = Duration::from_secs(86_400 * 365);
    let heartbeat_timer = tokio::time::sleep_until(last_sent + heartbeat_period.unwrap_or(far));
    tokio::pin!(heartbeat_timer);
    let idle_timer = tokio::time::sleep_until(last_heard + local_idle.unwrap_or(far));
    tokio::pin!(idle_timer);
    let token_timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(token_timer);
    let mut token_armed: Option<i64> = None;
    let max_frame_size = connection.context.settings.max_frame_size;
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    loop {
        if drain_deadline.is_some() && connection.nothing_unsettled() {
            close_forced(connection)?;
            return Ok(());
        }
        // Frames already buffered (pipelined behind `open`, or several in one read), unless
        // the peer is not reading what we owe it.
        // The clock is read once per batch of frames, not once per frame (issue 16).
        // Sends to a queue are staged while the frames last and handed over together, also
        // when a frame ends the connection (what came before it is not lost).
        let mut heard = false;
        let finished = loop {
            if connection.output_len() >= OUTPUT_READ_PAUSE {
                break Ok(false);
            }
            let frame = match frame::take_frame(input, max_frame_size) {
                Ok(Some(frame)) => frame,
                Ok(None) => break Ok(false),
                Err(error) => break Err(error.into()),
            };
            heard = true;
            match connection.handle_frame(frame).await {
                Ok(false) => {}
                done => break done,
            }
        };
        let handed = connection.hand_over_sends().await;
        if finished? {
            return Ok(());
        }
        handed?;
        if heard {
            last_heard = tokio::time::Instant::now();
        }
        if flush_now(stream, connection)? {
            connection.accepted_run = None;
            if heartbeat_period.is_some() {
                last_sent = tokio::time::Instant::now();
            }
        }
        connection.unblock_receivers().await;
        let reading = connection.output_len() < OUTPUT_READ_PAUSE;
        let writing = connection.output_len() > 0;
        if let Some(until) = connection.next_authorization_expiry()
            && token_armed.is_none_or(|armed| until < armed)
        {
            let now = connection.context.clock.now().0;
            let wait = ((until + 1) * 1000 - now).max(0) as u64;
            token_timer
                .as_mut()
                .reset(tokio::time::Instant::now() + Duration::from_millis(wait));
            token_armed = Some(until);
        }
        let drain_timer = async {
            match drain_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            readable = stream.ready_to_read(), if reading => {
                readable?;
                // Room before the read, while the buffer holds at most a frame's unread
                // tail: growing it after a read would copy everything just read.
                if input.capacity() - input.len() < 4096 {
                    input.reserve(64 * 1024);
                }
                match stream.read_now(input) {
                    Ok(0) => return Err(ConnectionError::Closed),
                    Ok(_) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(error) => return Err(error.into()),
                }
            }
            writable = stream.ready_to_write(), if writing => writable?,
            notification = inbox.recv() => {
                if let Some(notification) = notification {
                    connection.batch_now = Some(connection.context.clock.now());
                    connection.handle_notification(notification).await?;
                    let mut budget = 256;
                    while let Ok(notification) = inbox.try_recv() {
                        connection.handle_notification(notification).await?;
                        budget -= 1;
                        if budget == 0 { break; }
                    }
                    connection.batch_now = None;
                }
            }
            () = &mut heartbeat_timer, if heartbeat_period.is_some() => {
                let period = heartbeat_period.unwrap_or(far);
                let now = tokio::time::Instant::now();
                if last_sent + period <= now {
                    frame::write_heartbeat(&mut connection.output);
                    last_sent = now;
                }
                heartbeat_timer.as_mut().reset(last_sent + period);
            }
            () = &mut idle_timer, if local_idle.is_some() => {
                let limit = local_idle.unwrap_or(far);
                if last_heard + limit <= tokio::time::Instant::now() {
                    return Err(ConnectionError::protocol(
                        errors::RESOURCE_LIMIT_EXCEEDED,
                        "local-idle-timeout expired",
                    ));
                }
                idle_timer.as_mut().reset(last_heard + limit);
            }
            _ = shutdown.changed(), if drain_deadline.is_none() => {
                drain_deadline = Some(
                    tokio::time::Instant::now() + connection.context.settings.shutdown_grace_period,
                );
                connection.start_draining().await;
            }
            () = &mut token_timer, if token_armed.is_some() => {
                token_armed = None;
                connection.expire_authorizations().await?;
            }
            () = drain_timer => {
                close_forced(connection)?;
                return Ok(());
            }
        }
    }
}

impl Connection {
    /// Handles one frame; returns true when the connection is closed.
    async fn handle_frame(&mut self, frame: RawFrame) -> Result<bool, ConnectionError> {
        if frame.frame_type != FRAME_TYPE_AMQP {
            let description = if frame.frame_type == FRAME_TYPE_SASL {
                "unexpected SASL frame after the SASL exchange".to_string()
            } else {
                format!(
                    "unknown frame type {} (AMQP frames are type 0, SASL frames type 1)",
                    frame.frame_type
                )
            };
            return Err(ConnectionError::protocol(
                errors::FRAMING_ERROR,
                description,
            ));
        }
        if frame.body.is_empty() {
            return Ok(false); // heartbeat
        }
        // AMQP 1.0 §2.7.1: channel-max is the highest channel usable on the connection. The
        // one check for every performative (`begin` included), before it is decoded.
        if frame.channel > self.channel_max {
            return Err(ConnectionError::protocol(
                errors::FRAMING_ERROR,
                format!(
                    "channel {} is above the negotiated channel-max of {} (this broker's {CHANNEL_MAX}, the lower of it and the peer's open)",
                    frame.channel, self.channel_max
                ),
            ));
        }
        if let Some((transfer, payload)) = frame::decode_transfer(&frame.body) {
            if !self.sessions.contains_key(&frame.channel) {
                return Ok(false);
            }
            self.transfer(frame.channel, transfer, payload).await?;
            return Ok(false);
        }
        // Anything else acts after the sends before it.
        self.hand_over_sends().await?;
        let (performative, payload) = frame::decode_performative(&frame.body)?;
        tracing::trace!(channel = frame.channel, ?performative, "frame received");
        let channel = frame.channel;
        let needs_session = !matches!(
            performative,
            Performative::Open(_) | Performative::Close(_) | Performative::Begin(_)
        );
        if needs_session && !self.sessions.contains_key(&channel) {
            // A frame racing our `end` (or for a session we never had): nothing to act on.
            tracing::debug!(channel, "frame for a channel without a session ignored");
            return Ok(false);
        }
        match performative {
            Performative::Open(_) => {
                return Err(ConnectionError::protocol(
                    "amqp:illegal-state",
                    "second open",
                ));
            }
            Performative::Close(_) => {
                self.write(0, Performative::Close(Close { error: None }))?;
                return Ok(true);
            }
            Performative::Begin(begin) => self.begin(channel, begin)?,
            Performative::End(_) => self.end(channel).await?,
            Performative::Attach(attach) => self.attach(channel, attach).await?,
            Performative::Detach(detach) => self.detach(channel, detach).await?,
            Performative::Flow(flow) => self.flow(channel, flow).await?,
            Performative::Transfer(transfer) => {
                let transfer = frame::IncomingTransfer {
                    handle: transfer.handle.0,
                    delivery_id: transfer.delivery_id,
                    message_format: transfer.message_format,
                    settled: transfer.settled,
                    more: transfer.more,
                    aborted: transfer.aborted,
                    txn_id: match transfer.state {
                        Some(fe2o3_amqp_types::messaging::DeliveryState::TransactionalState(
                            state,
                        )) => Some(bytes::Bytes::from(state.txn_id.into_vec())),
                        _ => None,
                    },
                };
                self.transfer(channel, transfer, payload).await?
            }
            Performative::Disposition(disposition) => {
                self.disposition(channel, disposition).await?
            }
        }
        Ok(false)
    }

    /// Handles one entity notification.
    async fn handle_notification(
        &mut self,
        notification: Notification,
    ) -> Result<(), ConnectionError> {
        match notification {
            Notification::Deliver(delivery) => self.deliver(delivery).await,
            Notification::Drained {
                receiver,
                delivery_count,
            } => self.drained(receiver, delivery_count),
            Notification::Fenced { receiver } => {
                self.fenced(receiver);
                Ok(())
            }
            Notification::SessionAccepted {
                receiver,
                session_id,
                locked_until,
            } => self.session_accepted(receiver, session_id, locked_until),
            Notification::SessionRefused { receiver, error } => {
                self.session_refused(receiver, error).await
            }
            Notification::ReceiverDetached { receiver } => {
                self.detached_receivers.remove(&receiver);
                Ok(())
            }
            Notification::EntityDeleted { receiver } => {
                let Some(&(channel, handle)) = self.receivers.get(&receiver) else {
                    return Ok(());
                };
                let path = self
                    .sessions
                    .get(&channel)
                    .and_then(|session| session.links.get(&handle))
                    .and_then(|link| match &link.kind {
                        super::links::LinkKind::EntityReceiver { entity, .. } => {
                            Some(entity.path.to_string())
                        }
                        _ => None,
                    })
                    .unwrap_or_default();
                let failure = errors::entity_not_found(&path);
                self.detach_with_error(channel, handle, failure.to_error())
                    .await
            }
            Notification::SessionLost { receiver } => {
                let Some(&(channel, handle)) = self.receivers.get(&receiver) else {
                    return Ok(());
                };
                let failure =
                    errors::entity_failure(&crate::broker::types::EntityError::SessionLockLost(
                        "The session lock has expired. Accept the session again.".to_string(),
                    ));
                self.detach_with_error(channel, handle, failure.to_error())
                    .await
            }
            Notification::Reply { request, result } => self.answer(request, result),
            Notification::Replies { replies } => {
                for (request, result) in replies {
                    self.answer(request, result)?;
                }
                Ok(())
            }
        }
    }
}
