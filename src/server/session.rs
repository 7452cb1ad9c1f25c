//! AMQP sessions: `begin`/`end`, session flow control (transfer windows), and the
//! per-session delivery bookkeeping (outgoing delivery ids and their locks).

use crate::broker::entity::state::{FastMap, SequenceMap};
use std::collections::VecDeque;

use fe2o3_amqp_types::definitions::Handle;
use fe2o3_amqp_types::performatives::{Begin, End, Flow, Performative};

use super::connection::{Connection, ConnectionError};
use super::links::Link;
use crate::amqp::errors;
use crate::broker::types::LockToken;

/// The highest link handle a peer may use on a session: 1,024 links (the SDKs open a
/// handful per session; each link costs memory).
pub const HANDLE_MAX: u32 = 1023;

/// The incoming window we advertise; re-opened whenever half of it is used.
pub const INCOMING_WINDOW: u32 = 65_536;

/// An outgoing delivery the client has not settled yet.
#[derive(Debug, Clone)]
pub struct Unsettled {
    /// The link (peer handle) it went out on.
    pub handle: u32,
    /// The lock it carries.
    pub token: LockToken,
}

/// A transfer waiting for the peer's session window to open.
#[derive(Debug)]
pub struct QueuedTransfer {
    /// Encoded transfer frames ready to write.
    pub frames: bytes::Bytes,
    /// Window units it consumes.
    pub units: u32,
}

/// One session.
#[derive(Debug)]
pub struct Session {
    /// Links by the peer's handle (ours is the same number).
    pub links: FastMap<u32, Link>,
    /// Our next outgoing transfer id.
    pub next_outgoing_id: u32,
    /// The next transfer id we expect from the peer.
    pub next_incoming_id: u32,
    /// Transfers we may still send before the peer's window closes.
    pub remote_incoming_window: i64,
    /// Transfers the peer may still send before our window closes.
    pub incoming_window: u32,
    /// Next delivery id for our outgoing transfers.
    pub next_delivery_id: u32,
    /// Our unsettled outgoing deliveries by delivery id.
    pub unsettled: SequenceMap<u32, Unsettled>,
    /// Transfers held back by the peer's window.
    pub queued: VecDeque<QueuedTransfer>,
    /// The entity this session's transactional sends go through (cross-entity transactions).
    pub via: super::transaction_via::SessionVia,
}

impl Session {
    /// Whether a transfer may go out now: the peer's window is open and nothing is queued
    /// ahead of it.
    pub fn may_send_now(&self) -> bool {
        self.queued.is_empty() && self.remote_incoming_window > 0
    }

    /// Counts `units` transfer frames as sent against the peer's window.
    pub fn count_sent(&mut self, units: u32) {
        self.remote_incoming_window -= units as i64;
        self.next_outgoing_id = self.next_outgoing_id.wrapping_add(units);
    }
}

impl Connection {
    pub(super) fn begin(&mut self, channel: u16, begin: Begin) -> Result<(), ConnectionError> {
        // A channel above the negotiated channel-max never gets here (`handle_frame`).
        if self.sessions.contains_key(&channel) {
            return Err(ConnectionError::protocol(
                "amqp:illegal-state",
                format!("channel {channel} already has a session"),
            ));
        }
        let session = Session {
            links: FastMap::default(),
            next_outgoing_id: 1,
            next_incoming_id: begin.next_outgoing_id,
            remote_incoming_window: begin.incoming_window as i64,
            incoming_window: INCOMING_WINDOW,
            next_delivery_id: 0,
            unsettled: SequenceMap::default(),
            queued: VecDeque::new(),
            via: Default::default(),
        };
        self.sessions.insert(channel, session);
        self.write(
            channel,
            Performative::Begin(Begin {
                remote_channel: Some(channel),
                next_outgoing_id: 1,
                incoming_window: INCOMING_WINDOW,
                outgoing_window: u32::MAX,
                handle_max: Handle(HANDLE_MAX),
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }),
        )
    }

    pub(super) async fn end(&mut self, channel: u16) -> Result<(), ConnectionError> {
        self.end_with(channel, None).await
    }

    /// Ends a session, releasing its links, with an optional error.
    pub(super) async fn end_with(
        &mut self,
        channel: u16,
        error: Option<fe2o3_amqp_types::definitions::Error>,
    ) -> Result<(), ConnectionError> {
        if let Some(session) = self.sessions.remove(&channel) {
            for (_, link) in session.links {
                self.release_link(link).await;
            }
        }
        self.write(channel, Performative::End(End { error }))
    }

    /// The session for `channel`, or a protocol error.
    pub(super) fn session(&mut self, channel: u16) -> Result<&mut Session, ConnectionError> {
        self.sessions
            .get_mut(&channel)
            .ok_or_else(|| no_session(channel))
    }

    /// A session flow frame carrying our current window state.
    pub(super) fn session_flow(&mut self, channel: u16) -> Result<Flow, ConnectionError> {
        let session = self.session(channel)?;
        Ok(Flow {
            next_incoming_id: Some(session.next_incoming_id),
            incoming_window: session.incoming_window,
            next_outgoing_id: session.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: None,
            delivery_count: None,
            link_credit: None,
            available: None,
            drain: false,
            echo: false,
            properties: None,
        })
    }

    /// Counts an incoming transfer frame against our window and re-opens it when half used.
    pub(super) fn count_incoming_transfer(&mut self, channel: u16) -> Result<(), ConnectionError> {
        let session = self.session(channel)?;
        session.next_incoming_id = session.next_incoming_id.wrapping_add(1);
        session.incoming_window = session.incoming_window.saturating_sub(1);
        if session.incoming_window < INCOMING_WINDOW / 2 {
            session.incoming_window = INCOMING_WINDOW;
            let flow = self.session_flow(channel)?;
            self.write(channel, Performative::Flow(flow))?;
        }
        Ok(())
    }

    /// Applies the session part of a peer `flow` and releases queued transfers.
    pub(super) fn session_flow_received(
        &mut self,
        channel: u16,
        flow: &Flow,
    ) -> Result<(), ConnectionError> {
        let session = self.session(channel)?;
        let next_incoming = flow.next_incoming_id.unwrap_or(1);
        session.remote_incoming_window =
            next_incoming as i64 + flow.incoming_window as i64 - session.next_outgoing_id as i64;
        self.flush_queued(channel)
    }

    /// Writes queued transfers while the peer's window allows.
    pub(super) fn flush_queued(&mut self, channel: u16) -> Result<(), ConnectionError> {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return Ok(());
        };
        while session.remote_incoming_window > 0 {
            let Some(queued) = session.queued.pop_front() else {
                break;
            };
            session.count_sent(queued.units);
            self.output.extend_from_slice(&queued.frames);
        }
        Ok(())
    }

    /// Sends (or queues, if the peer's window is closed) encoded transfer frames.
    pub(super) fn send_transfer_frames(
        &mut self,
        channel: u16,
        frames: bytes::Bytes,
        units: u32,
    ) -> Result<(), ConnectionError> {
        let session = self.session(channel)?;
        if session.may_send_now() {
            session.count_sent(units);
            self.output.extend_from_slice(&frames);
        } else {
            session.queued.push_back(QueuedTransfer { frames, units });
        }
        Ok(())
    }
}

/// Reports a frame for a channel with no session.
pub fn no_session(channel: u16) -> ConnectionError {
    ConnectionError::protocol(
        errors::FRAMING_ERROR,
        format!("channel {channel} has no session"),
    )
}

/// Reports an unknown handle.
pub fn unattached_handle(handle: u32) -> ConnectionError {
    ConnectionError::protocol(
        errors::UNATTACHED_HANDLE,
        format!("handle {handle} is not attached"),
    )
}
