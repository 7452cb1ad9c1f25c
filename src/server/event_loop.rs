//! The turns of a connection's event loop: the peer's frames read and handled in arrival
//! order, entity notifications, heartbeats, the idle and token timers, and the drain at
//! shutdown. Everything a turn writes is flushed with one `write`, and reading pauses while
//! the peer does not read what it is owed.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use fe2o3_amqp_types::performatives::{Close, Open, Performative};
use tokio::sync::{mpsc, watch};

use super::connection::{CHANNEL_MAX, Connection, ConnectionError, close_with};
use super::frame::{self, FRAME_TYPE_AMQP, FRAME_TYPE_SASL, RawFrame};
use super::transport::RawStream;
use crate::amqp::errors;
use crate::broker::entity::Notification;

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

/// Output bytes above which we stop reading the peer's frames until it reads ours: a peer
/// that sends but never reads cannot make the broker buffer without limit.
const OUTPUT_READ_PAUSE: usize = 8 * 1024 * 1024;

/// How long a cluster leader holds a connection's output while its lease does not hold
/// before it closes the connection (a leader cut off from its majority never gets it back;
/// one that was only slow to hear from it does within a heartbeat or two).
const LEASE_WAIT: Duration = Duration::from_secs(2);

/// How long a draining connection with nothing unsettled waits without a frame from its
/// client before it closes: a request the client sent just before the close would be lost
/// in flight, and some SDKs do not retry a request lost that way.
const DRAIN_QUIET: Duration = Duration::from_millis(200);

/// How often held output looks at the lease again.
const LEASE_POLL: Duration = Duration::from_millis(20);

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

/// Runs the connection's turns until the peer closes, the broker has drained it at
/// shutdown, or an error ends it (the caller writes the `close` for a protocol error).
pub(super) async fn event_loop<S: RawStream>(
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
    let mut lease_blocked_since: Option<tokio::time::Instant> = None;
    loop {
        if drain_deadline.is_some()
            && connection.nothing_unsettled()
            && last_heard.elapsed() >= DRAIN_QUIET
        {
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
        // In a cluster, nothing leaves while the leader's lease does not hold: a leader cut
        // off from its majority must not answer from state a newer leader has changed.
        let lease_blocked = connection.output_len() > 0
            && connection
                .context
                .lease
                .as_ref()
                .is_some_and(|lease| !lease.held());
        if lease_blocked {
            let since = *lease_blocked_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= LEASE_WAIT {
                connection.output.clear();
                connection.output_ahead.clear();
                connection.output_ahead_len = 0;
                tracing::debug!("closing a connection: this node's leader lease ran out");
                return Err(ConnectionError::Closed);
            }
        } else {
            lease_blocked_since = None;
            if flush_now(stream, connection)? {
                connection.accepted_run = None;
                if heartbeat_period.is_some() {
                    last_sent = tokio::time::Instant::now();
                }
            }
        }
        connection.unblock_receivers().await;
        let reading = connection.output_len() < OUTPUT_READ_PAUSE;
        let writing = connection.output_len() > 0 && !lease_blocked;
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
            () = tokio::time::sleep(LEASE_POLL), if lease_blocked => {}
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
            () = tokio::time::sleep_until(last_heard + DRAIN_QUIET),
                if drain_deadline.is_some() && connection.nothing_unsettled() => {}
            () = drain_timer => {
                close_forced(connection)?;
                return Ok(());
            }
        }
    }
}

impl Connection {
    /// The entity path of the receiver link `handle` on `channel` (empty when there is no
    /// such link).
    fn receiver_path(&self, channel: u16, handle: u32) -> String {
        self.sessions
            .get(&channel)
            .and_then(|session| session.links.get(&handle))
            .and_then(|link| match &link.kind {
                super::links::LinkKind::EntityReceiver { entity, .. } => {
                    Some(entity.path.to_string())
                }
                _ => None,
            })
            .unwrap_or_default()
    }

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
                let failure = errors::entity_not_found(&self.receiver_path(channel, handle));
                self.detach_with_error(channel, handle, failure.to_error())
                    .await
            }
            Notification::Moved { receiver } => {
                let Some(&(channel, handle)) = self.receivers.get(&receiver) else {
                    return Ok(());
                };
                let failure = errors::entity_moved(&self.receiver_path(channel, handle));
                self.detach_with_error(channel, handle, failure.to_error())
                    .await?;
                // The stream that carried its deliveries is gone: none will come back to be
                // returned, and no `ReceiverDetached` either.
                self.detached_receivers.remove(&receiver);
                Ok(())
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
