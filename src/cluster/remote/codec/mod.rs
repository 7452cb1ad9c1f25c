//! The bytes of the remote entity stream: frames of 4 bytes of length (big-endian) and a
//! body of at most [`MAX_FRAME`] bytes, the body a kind byte and its fields.
//!
//! Hand-written like the log's codec (`store::codec`), whose encoders it reuses for
//! messages and records: integers are LEB128 varints (zig-zag for signed), strings and byte
//! strings length-prefixed. Unlike the log's, this format lives only as long as a stream:
//! both ends run the same build, so it carries no version.
//!
//! A [`NotificationSender`] never crosses: a command carries the id of its sink instead
//! ([`SinkIds`] on the sending side, a lookup from id to a local sender on the receiving
//! side).

use crate::broker::entity::{Command, Notification, NotificationSender, RequestId};
use crate::broker::topic::TopicCommand;
use crate::broker::types::ReceiverId;
use crate::store::codec::{DecodeError, In, Out};

mod command;
mod notification;
mod topic;
mod values;

use command::{command, command_body};
use notification::{notification, notification_body};
use topic::{topic_command, topic_command_body};

/// The largest frame body either end writes or reads: a larger one ends the stream.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// Client to server: a command for an entity.
const KIND_COMMAND: u8 = 1;
/// Client to server: the client forgot a sink (its connection went away).
const KIND_SINK_CLOSED: u8 = 2;
/// Server to client: a notification for a sink.
const KIND_NOTIFICATION: u8 = 3;
/// Server to client: commands for an entity or a topic were handed to its actor or task
/// (window credit).
const KIND_ACK: u8 = 4;
/// Client to server: a command for a topic.
const KIND_TOPIC_COMMAND: u8 = 5;

/// What a path names on the stream: an entity (queue or subscription) or a topic. Windows
/// and forwarders are per kind and path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A queue's or subscription's actor ([`Command`]s).
    Entity,
    /// A topic's task ([`TopicCommand`]s).
    Topic,
}

/// Where a command's sinks get their wire ids (the sending side).
pub(crate) trait SinkIds {
    /// The wire id of `sink`, registering it when it is new.
    fn id(&mut self, sink: &NotificationSender) -> u64;
    /// The sink `sink` waits for the reply to `request`.
    fn waits(&mut self, _sink: u64, _request: RequestId) {}
    /// A receiver was attached with the sink `sink` (`session`: a session receiver, which
    /// waits for its session to be accepted or refused).
    fn attaches(&mut self, _sink: u64, _receiver: ReceiverId, _session: bool) {}
}

/// What a frame from the client holds.
#[derive(Debug)]
pub(crate) enum ClientFrame {
    /// A command for the entity at `path`.
    Command {
        /// The entity's path as the client named it.
        path: String,
        /// The command, its sinks the server's.
        command: Command,
    },
    /// A command for the topic at `path`.
    TopicCommand {
        /// The topic's path as the client named it.
        path: String,
        /// The command, its sinks the server's.
        command: TopicCommand,
    },
    /// The client's sink with this id is gone.
    SinkClosed(u64),
}

/// What a frame from the server holds.
#[derive(Debug)]
pub(crate) enum ServerFrame {
    /// A notification for the client's sink `sink`.
    Notification {
        /// The sink's id.
        sink: u64,
        /// The notification.
        notification: Notification,
    },
    /// `count` more commands for `path` were handed to its actor or task.
    Ack {
        /// Whether `path` is an entity's or a topic's.
        kind: Kind,
        /// The path as the client named it.
        path: String,
        /// How many.
        count: u64,
    },
}

/// Why a command was not encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unencodable {
    /// The command only makes sense inside one process (it carries a local channel or
    /// actor: a topic and its subscriptions are one placement group, on one node).
    #[error(
        "{0} does not cross nodes: it carries what only makes sense inside one process (a topic and its subscriptions are one placement group, on one node)"
    )]
    LocalOnly(&'static str),
    /// The frame would be too large.
    #[error(
        "{what} for '{path}' takes {size} bytes, more than the {MAX_FRAME} bytes a frame between nodes may hold"
    )]
    TooLarge {
        /// The command's name.
        what: &'static str,
        /// The entity.
        path: String,
        /// The frame's size.
        size: usize,
    },
}

/// A frame under way: the length is filled in by [`finish`].
fn start(kind: u8) -> Out {
    let mut out = Out(Vec::with_capacity(64));
    out.0.extend_from_slice(&[0; 4]);
    out.u8(kind);
    out
}

/// The frame's bytes with its length; `Err` with the body's size when it is larger than
/// [`MAX_FRAME`].
fn finish(out: Out) -> Result<Vec<u8>, usize> {
    let mut bytes = out.0;
    let body = bytes.len() - 4;
    if body > MAX_FRAME {
        return Err(body);
    }
    bytes[..4].copy_from_slice(&(body as u32).to_be_bytes());
    Ok(bytes)
}

/// The name of a command in errors and logs.
pub(crate) fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Commit { .. } => "Commit",
        Command::Send { .. } => "Send",
        Command::SendBatch { .. } => "SendBatch",
        Command::Stage { .. } => "Stage",
        Command::DeadLetterOnArrival { .. } => "DeadLetterOnArrival",
        Command::SendForwarded { .. } => "SendForwarded",
        Command::Forwarded { .. } => "Forwarded",
        Command::ForwardFailed { .. } => "ForwardFailed",
        Command::Return { .. } => "Return",
        Command::AttachReceiver { .. } => "AttachReceiver",
        Command::AttachSessionReceiver { .. } => "AttachSessionReceiver",
        Command::Session { .. } => "Session",
        Command::ListSessions { .. } => "ListSessions",
        Command::DetachReceiver { .. } => "DetachReceiver",
        Command::Fence { .. } => "Fence",
        Command::Credit { .. } => "Credit",
        Command::Settle { .. } => "Settle",
        Command::SettleAll { .. } => "SettleAll",
        Command::Peek { .. } => "Peek",
        Command::ReceiveDeferred { .. } => "ReceiveDeferred",
        Command::Take { .. } => "Take",
        Command::Purge { .. } => "Purge",
        Command::CancelScheduled { .. } => "CancelScheduled",
        Command::RenewLocks { .. } => "RenewLocks",
        Command::UpdateSettings { .. } => "UpdateSettings",
        Command::Describe { .. } => "Describe",
        Command::Delete { .. } => "Delete",
    }
}

/// The name of a topic command in errors and logs.
pub(crate) fn topic_command_name(command: &TopicCommand) -> &'static str {
    match command {
        TopicCommand::Publish { .. } => "Publish",
        TopicCommand::PublishForwarded { .. } => "PublishForwarded",
        TopicCommand::PublishBatch { .. } => "PublishBatch",
        TopicCommand::Schedule { .. } => "Schedule",
        TopicCommand::CancelScheduled { .. } => "CancelScheduled",
        TopicCommand::AddSubscription { .. } => "AddSubscription",
        TopicCommand::RemoveSubscription { .. } => "RemoveSubscription",
        TopicCommand::Update { .. } => "Update",
        TopicCommand::Describe { .. } => "Describe",
        TopicCommand::Delete { .. } => "Delete",
        TopicCommand::Rules { .. } => "Rules",
    }
}

/// A command frame for the topic at `path`; its sinks are named through `sinks`.
pub(crate) fn encode_topic_command(
    path: &str,
    command: &TopicCommand,
    sinks: &mut impl SinkIds,
) -> Result<Vec<u8>, Unencodable> {
    let mut out = start(KIND_TOPIC_COMMAND);
    out.str(path);
    topic_command_body(&mut out, command, sinks)?;
    finish(out).map_err(|size| Unencodable::TooLarge {
        what: topic_command_name(command),
        path: path.to_string(),
        size,
    })
}

/// A command frame for the entity at `path`; its sinks are named through `sinks`.
pub(crate) fn encode_command(
    path: &str,
    command: &Command,
    sinks: &mut impl SinkIds,
) -> Result<Vec<u8>, Unencodable> {
    let mut out = start(KIND_COMMAND);
    out.str(path);
    command_body(&mut out, command, sinks)?;
    finish(out).map_err(|size| Unencodable::TooLarge {
        what: command_name(command),
        path: path.to_string(),
        size,
    })
}

/// The frame telling the server that the client's sink `sink` is gone.
pub(crate) fn encode_sink_closed(sink: u64) -> Vec<u8> {
    let mut out = start(KIND_SINK_CLOSED);
    out.u64(sink);
    finish(out).unwrap_or_default()
}

/// The frame giving the client `count` more commands of window for `path` (of `kind`).
pub(crate) fn encode_ack(kind: Kind, path: &str, count: u64) -> Vec<u8> {
    let mut out = start(KIND_ACK);
    out.u8(match kind {
        Kind::Entity => 0,
        Kind::Topic => 1,
    });
    out.str(path);
    out.u64(count);
    // A path is far below the bound (the client sent it in a frame of its own).
    finish(out).unwrap_or_default()
}

/// A notification frame for the client's sink `sink`; `Err` with the frame's size when it
/// is larger than [`MAX_FRAME`].
pub(crate) fn encode_notification(
    sink: u64,
    notification: &Notification,
) -> Result<Vec<u8>, usize> {
    let mut out = start(KIND_NOTIFICATION);
    out.u64(sink);
    notification_body(&mut out, notification);
    finish(out)
}

/// Reads a frame body the client wrote; `sink` gives the local sender for a wire id.
pub(crate) fn decode_client_frame(
    body: &[u8],
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<ClientFrame, DecodeError> {
    let mut input = In { bytes: body, at: 0 };
    let frame = match input.u8()? {
        KIND_COMMAND => {
            let path = input.string()?;
            let command = command(&mut input, sink)?;
            ClientFrame::Command { path, command }
        }
        KIND_TOPIC_COMMAND => {
            let path = input.string()?;
            let command = topic_command(&mut input, sink)?;
            ClientFrame::TopicCommand { path, command }
        }
        KIND_SINK_CLOSED => ClientFrame::SinkClosed(input.u64()?),
        kind => return input.fail(&format!("unknown client frame kind {kind}")),
    };
    done(&input)?;
    Ok(frame)
}

/// Reads a frame body the server wrote.
pub(crate) fn decode_server_frame(body: &[u8]) -> Result<ServerFrame, DecodeError> {
    let mut input = In { bytes: body, at: 0 };
    let frame = match input.u8()? {
        KIND_NOTIFICATION => ServerFrame::Notification {
            sink: input.u64()?,
            notification: notification(&mut input)?,
        },
        KIND_ACK => ServerFrame::Ack {
            kind: match input.u8()? {
                0 => Kind::Entity,
                1 => Kind::Topic,
                _ => return input.fail("unknown acknowledged kind"),
            },
            path: input.string()?,
            count: input.u64()?,
        },
        kind => return input.fail(&format!("unknown server frame kind {kind}")),
    };
    done(&input)?;
    Ok(frame)
}

fn done(input: &In<'_>) -> Result<(), DecodeError> {
    if input.at != input.bytes.len() {
        return Err(DecodeError(format!(
            "{} bytes left over after the frame",
            input.bytes.len() - input.at
        )));
    }
    Ok(())
}
