//! Entity commands carried to another node (`docs/scale-out.md` §4, "Client routing", 1:
//! proxying): the node that keeps a client's connection reaches an entity led elsewhere
//! through an ordinary [`EntityHandle`] whose commands travel over one byte stream to the
//! entity's node, and whose notifications come back over the same stream.
//!
//! * Client side, [`Proxy`]: [`Proxy::handle`] gives a handle per entity path, its bounded
//!   channel as deep as a local actor's inbox; [`Proxy::topic_handle`] a [`TopicHandle`]
//!   per topic path, as deep as a local topic task's inbox (topic commands are frames of
//!   their own kind, with windows and forwarders of their own). A task per path writes its commands as
//!   frames `(path, command)`, each [`NotificationSender`] a command carries replaced by a
//!   sink id (the same channel, the same id). Notification frames `(sink id,
//!   notification)` go to the sink's sender; a sink whose receiver is gone (its connection
//!   went away) is forgotten and the server told (`SinkClosed`).
//! * Server side, [`serve`]: commands are rebuilt with local senders (one per remote sink,
//!   drained into notification frames) and handed to the entity's actor by a task per path
//!   with its own queue, so one slow entity never holds up commands for the others. The
//!   client may have at most [`WINDOW`] commands per path that the server has not handed
//!   on yet (the server acknowledges them as it does): backpressure from a busy actor
//!   reaches the client's handle, as it reaches a connection locally.
//! * A closed or failed stream: the client answers every request still waiting with
//!   [`EntityError::Timeout`] (`com.microsoft:timeout`, which the SDKs retry), tells
//!   receivers attached through it that their entity moved ([`Notification::Moved`]: the
//!   connection detaches the link with `amqp:link:detach-forced`, which the SDKs retry;
//!   a session receiver holding its session loses it, one waiting is refused with the
//!   timeout), and answers later commands the same way; the server drops its senders, so actors see those sinks closed exactly as
//!   they see a local connection go.
//!
//! Await order: as locally, a connection awaits the handle (bounded), the entity only
//! pushes into unbounded sinks. Neither end's reader awaits its writer: window
//! acknowledgements and sink closings go through an unbounded queue (bounded by the
//! commands and sinks in flight), so two nodes writing to each other cannot wait on each
//! other.
//!
//! What never crosses, answered with an error naming it: [`Command::Stage`] (a topic and
//! its subscriptions are one placement group, on one node) and
//! [`TopicCommand::AddSubscription`] (it carries the new subscription's actor). Every
//! other entity and topic command crosses, and so does every reply (a topic's rules
//! as their definitions, compiled again on arrival).
//!
//! A proxy made by [`Proxy::connecting`] opens a new stream (to whichever node runs the
//! entities now) for the first command after one is lost or [`Proxy::reset`]; the
//! handles it gave stay valid.

mod client;
mod codec;
#[cfg(test)]
mod codec_tests;
#[cfg(test)]
mod connection_tests;
#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod proxy_tests;
#[cfg(test)]
mod receiver_tests;
mod server;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod topic_tests;

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use crate::broker::entity::{Command, EntityHandle};
use crate::broker::topic::{TopicCommand, TopicHandle};
use crate::broker::types::EntityError;
use codec::{Kind, SinkIds, Unencodable};

pub use client::{CONNECT_TIMEOUT, Proxy, RECONNECT_BACKOFF};
pub use codec::MAX_FRAME;
pub use server::serve;

/// The depth of a remote entity's handle channel: a local actor's inbox
/// (`broker::entity::actor`'s `COMMAND_CAPACITY`).
pub const COMMAND_CAPACITY: usize = 1024;

/// The depth of a remote topic's handle channel: a local topic task's inbox (the 1024 of
/// `broker::topic::spawn`).
pub const TOPIC_CAPACITY: usize = 1024;

/// What the server hands a path's commands to: an entity's actor or a topic's task.
#[derive(Debug, Clone)]
pub enum Target {
    /// A queue's or subscription's actor: takes [`Command`]s.
    Entity(EntityHandle),
    /// A topic's task: takes [`TopicCommand`]s.
    Topic(TopicHandle),
}

impl From<EntityHandle> for Target {
    fn from(handle: EntityHandle) -> Target {
        Target::Entity(handle)
    }
}

impl From<TopicHandle> for Target {
    fn from(handle: TopicHandle) -> Target {
        Target::Topic(handle)
    }
}

/// Commands per entity or topic path the client may have on the stream that the server has not
/// handed to the actor yet.
pub const WINDOW: usize = 256;

/// Command and notification frames queued for a stream's writer before producers wait.
const FRAME_QUEUE: usize = 256;

/// How often the client looks for sinks whose connection went away.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The server acknowledges at least every this many commands handed on.
const ACK_BATCH: u64 = 64;

/// Commands this process carried to another node (every [`Proxy`]'s, counted once each
/// is on its stream).
pub static COMMANDS_CARRIED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Commands other nodes carried to this process's entities (every [`serve`]'s, counted as
/// each is routed to its entity).
pub static COMMANDS_SERVED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Why a remote entity stream ended.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// Reading or writing the stream failed.
    #[error("remote entity stream: {0}")]
    Io(#[from] std::io::Error),
    /// The peer announced a frame larger than [`MAX_FRAME`].
    #[error("remote entity stream: a frame of {0} bytes, more than the {MAX_FRAME} allowed")]
    FrameTooLarge(u64),
    /// The peer sent bytes that are not a frame of this protocol.
    #[error("remote entity stream: malformed frame: {0}")]
    Malformed(String),
    /// The peer broke the protocol (more commands than its window, say).
    #[error("remote entity stream: {0}")]
    Protocol(String),
}

/// A command the stream carries: an entity's or a topic's.
pub(crate) trait Carried: std::fmt::Debug + Send + Sized + 'static {
    /// What its path names.
    const KIND: Kind;
    /// Its frame for `path`, its sinks named through `sinks`.
    fn encode(&self, path: &str, sinks: &mut impl SinkIds) -> Result<Vec<u8>, Unencodable>;
    /// Answers it with `error` (it will not reach its actor).
    fn refuse(self, error: EntityError);
}

impl Carried for Command {
    const KIND: Kind = Kind::Entity;

    fn encode(&self, path: &str, sinks: &mut impl SinkIds) -> Result<Vec<u8>, Unencodable> {
        codec::encode_command(path, self, sinks)
    }

    fn refuse(self, error: EntityError) {
        self.refuse_with(error);
    }
}

impl Carried for TopicCommand {
    const KIND: Kind = Kind::Topic;

    fn encode(&self, path: &str, sinks: &mut impl SinkIds) -> Result<Vec<u8>, Unencodable> {
        codec::encode_topic_command(path, self, sinks)
    }

    fn refuse(self, error: EntityError) {
        self.refuse_with(error);
    }
}

/// Reads one frame's body; `None` when the stream ended cleanly between frames.
async fn read_frame(input: &mut (impl AsyncRead + Unpin)) -> Result<Option<Vec<u8>>, RemoteError> {
    let mut length = [0u8; 4];
    let mut filled = 0;
    while filled < length.len() {
        let read = input.read(&mut length[filled..]).await?;
        if read == 0 {
            if filled == 0 {
                return Ok(None);
            }
            return Err(RemoteError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        filled += read;
    }
    let length = u32::from_be_bytes(length) as u64;
    if length > MAX_FRAME as u64 {
        return Err(RemoteError::FrameTooLarge(length));
    }
    let mut body = vec![0u8; length as usize];
    input.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Writes frames as they come, control frames first; every [`SWEEP_INTERVAL`] writes what
/// `tick` returns. Ends when the queues close or a write fails.
async fn write_frames(
    mut output: impl AsyncWrite + Unpin,
    mut control: mpsc::UnboundedReceiver<Vec<u8>>,
    mut data: mpsc::Receiver<Vec<u8>>,
    mut tick: impl FnMut() -> Vec<Vec<u8>>,
) -> Result<(), RemoteError> {
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let frames = tokio::select! {
            biased;
            frame = control.recv() => match frame {
                Some(frame) => vec![frame],
                None => return Ok(()),
            },
            frame = data.recv() => match frame {
                Some(frame) => vec![frame],
                None => return Ok(()),
            },
            _ = sweep.tick() => tick(),
        };
        for frame in frames {
            output.write_all(&frame).await?;
        }
        if control.is_empty() && data.is_empty() {
            output.flush().await?;
        }
    }
}

/// Waits until `stop` reads true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
