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

use std::sync::Arc;
use std::time::Duration;

use crate::broker::entity::settings::EntitySettings;
use crate::broker::entity::state::{ForwardKey, Lock};
use crate::broker::entity::{
    BatchedSend, Command, Delivery, EntityCounts, Notification, NotificationSender, Record, Reply,
    ReplyTo, RequestId, SessionOperation, TransactionWork,
};
use crate::broker::message::Message;
use crate::broker::partitions::PARTITIONS;
use crate::broker::rules::{FilterDefinition, Rule, RuleDefinition};
use crate::broker::topic::{RuleOperation, TopicCommand};
use crate::broker::types::{
    EntityError, LockToken, ReceiveMode, ReceiverId, SequenceNumber, Settlement, Timestamp,
};
use crate::config::{EntityStatus, ParameterValue};
use crate::store::codec::{DecodeError, In, Out};

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

// ---- commands ----

const COMMIT: u8 = 1;
const SEND: u8 = 2;
const SEND_BATCH: u8 = 3;
const DEAD_LETTER_ON_ARRIVAL: u8 = 5;
const SEND_FORWARDED: u8 = 6;
const FORWARDED: u8 = 7;
const FORWARD_FAILED: u8 = 8;
const RETURN: u8 = 9;
const ATTACH_RECEIVER: u8 = 10;
const ATTACH_SESSION_RECEIVER: u8 = 11;
const SESSION: u8 = 12;
const LIST_SESSIONS: u8 = 13;
const DETACH_RECEIVER: u8 = 14;
const FENCE: u8 = 15;
const CREDIT: u8 = 16;
const SETTLE: u8 = 17;
const SETTLE_ALL: u8 = 18;
const PEEK: u8 = 19;
const RECEIVE_DEFERRED: u8 = 20;
const TAKE: u8 = 21;
const PURGE: u8 = 22;
const CANCEL_SCHEDULED: u8 = 23;
const RENEW_LOCKS: u8 = 24;
const UPDATE_SETTINGS: u8 = 25;
const DESCRIBE: u8 = 26;
const DELETE: u8 = 27;

fn command_body(
    out: &mut Out,
    command: &Command,
    sinks: &mut impl SinkIds,
) -> Result<(), Unencodable> {
    match command {
        Command::Commit { work, reply } => {
            out.u8(COMMIT);
            transaction_work(out, work);
            reply_to(out, reply, sinks);
        }
        Command::Send { messages, reply } => {
            out.u8(SEND);
            messages_of(out, messages.iter());
            opt_reply_to(out, reply.as_ref(), sinks);
        }
        Command::SendBatch { sends, sink } => {
            out.u8(SEND_BATCH);
            batch(out, sends, sink, sinks);
        }
        Command::Stage { .. } => return Err(Unencodable::LocalOnly("Stage")),
        Command::DeadLetterOnArrival { messages } => {
            out.u8(DEAD_LETTER_ON_ARRIVAL);
            out.u64(messages.len() as u64);
            for (message, reason, description) in messages {
                message_of(out, message);
                out.str(reason);
                out.str(description);
            }
        }
        Command::SendForwarded {
            message,
            key,
            floor,
            reply,
        } => {
            out.u8(SEND_FORWARDED);
            message_of(out, message);
            forward_key(out, key);
            out.i64(floor.0);
            reply_to(out, reply, sinks);
        }
        Command::Forwarded { sequence_number } => {
            out.u8(FORWARDED);
            out.i64(sequence_number.0);
        }
        Command::ForwardFailed {
            sequence_number,
            reason,
            description,
        } => {
            out.u8(FORWARD_FAILED);
            out.i64(sequence_number.0);
            out.str(reason);
            out.str(description);
        }
        Command::Return {
            receiver,
            sub_queue,
            record,
            lock: held,
        } => {
            out.u8(RETURN);
            opt_receiver(out, *receiver);
            out.sub_queue(*sub_queue);
            record_of(out, record);
            lock(out, held.as_ref());
        }
        Command::AttachReceiver {
            receiver,
            sub_queue,
            mode,
            sink,
        } => {
            out.u8(ATTACH_RECEIVER);
            out.u64(receiver.0);
            out.sub_queue(*sub_queue);
            receive_mode(out, *mode);
            let id = sinks.id(sink);
            out.u64(id);
            sinks.attaches(id, *receiver, false);
        }
        Command::AttachSessionReceiver {
            receiver,
            mode,
            session_id,
            wait,
            sink,
        } => {
            out.u8(ATTACH_SESSION_RECEIVER);
            out.u64(receiver.0);
            receive_mode(out, *mode);
            out.opt_str(session_id.as_deref());
            exact_duration(out, *wait);
            let id = sinks.id(sink);
            out.u64(id);
            sinks.attaches(id, *receiver, true);
        }
        Command::Session {
            session_id,
            operation,
            reply,
        } => {
            out.u8(SESSION);
            out.str(session_id);
            match operation {
                SessionOperation::RenewLock => out.u8(0),
                SessionOperation::SetState(state) => {
                    out.u8(1);
                    opt_bytes(out, state.as_deref());
                }
                SessionOperation::GetState => out.u8(2),
            }
            reply_to(out, reply, sinks);
        }
        Command::ListSessions {
            last_updated,
            skip,
            top,
            reply,
        } => {
            out.u8(LIST_SESSIONS);
            out.i64(*last_updated);
            out.u64(*skip as u64);
            out.u64(*top as u64);
            reply_to(out, reply, sinks);
        }
        Command::DetachReceiver { receiver } => {
            out.u8(DETACH_RECEIVER);
            out.u64(receiver.0);
        }
        Command::Fence { receiver } => {
            out.u8(FENCE);
            out.u64(receiver.0);
        }
        Command::Credit {
            receiver,
            delivery_count,
            link_credit,
            drain,
        } => {
            out.u8(CREDIT);
            out.u64(receiver.0);
            match delivery_count {
                Some(count) => {
                    out.u8(1);
                    out.u64(u64::from(*count));
                }
                None => out.u8(0),
            }
            out.u64(u64::from(*link_credit));
            out.u8(u8::from(*drain));
        }
        Command::Settle {
            token,
            settlement: outcome,
            reply,
        } => {
            out.u8(SETTLE);
            out.0.extend_from_slice(&token.0);
            settlement(out, outcome);
            opt_reply_to(out, reply.as_ref(), sinks);
        }
        Command::SettleAll {
            tokens,
            settlement: outcome,
        } => {
            out.u8(SETTLE_ALL);
            lock_tokens(out, tokens);
            settlement(out, outcome);
        }
        Command::Peek {
            sub_queue,
            from,
            count,
            session_id,
            reply,
        } => {
            out.u8(PEEK);
            out.sub_queue(*sub_queue);
            out.i64(from.0);
            out.u64(*count as u64);
            out.opt_str(session_id.as_deref());
            reply_to(out, reply, sinks);
        }
        Command::ReceiveDeferred {
            sub_queue,
            sequence_numbers,
            mode,
            reply,
        }
        | Command::Take {
            sub_queue,
            sequence_numbers,
            mode,
            reply,
        } => {
            out.u8(match command {
                Command::Take { .. } => TAKE,
                _ => RECEIVE_DEFERRED,
            });
            out.sub_queue(*sub_queue);
            numbers(out, sequence_numbers);
            receive_mode(out, *mode);
            reply_to(out, reply, sinks);
        }
        Command::Purge {
            sub_queue,
            before,
            session_id,
            max,
            reply,
        } => {
            out.u8(PURGE);
            out.sub_queue(*sub_queue);
            out.opt_i64(before.map(|at| at.0));
            out.opt_str(session_id.as_deref());
            out.u64(*max as u64);
            reply_to(out, reply, sinks);
        }
        Command::CancelScheduled {
            sequence_numbers,
            reply,
        } => {
            out.u8(CANCEL_SCHEDULED);
            numbers(out, sequence_numbers);
            reply_to(out, reply, sinks);
        }
        Command::RenewLocks { tokens, reply } => {
            out.u8(RENEW_LOCKS);
            lock_tokens(out, tokens);
            reply_to(out, reply, sinks);
        }
        Command::UpdateSettings { settings, reply } => {
            out.u8(UPDATE_SETTINGS);
            entity_settings(out, settings);
            reply_to(out, reply, sinks);
        }
        Command::Describe { reply } => {
            out.u8(DESCRIBE);
            reply_to(out, reply, sinks);
        }
        Command::Delete { reply } => {
            out.u8(DELETE);
            reply_to(out, reply, sinks);
        }
    }
    Ok(())
}

fn command(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<Command, DecodeError> {
    Ok(match input.u8()? {
        COMMIT => Command::Commit {
            work: Box::new(read_transaction_work(input)?),
            reply: read_reply_to(input, sink)?,
        },
        SEND => Command::Send {
            messages: read_list(input, read_message)?.into(),
            reply: read_opt_reply_to(input, sink)?,
        },
        SEND_BATCH => {
            let (sends, sink) = read_batch(input, sink)?;
            Command::SendBatch { sends, sink }
        }
        DEAD_LETTER_ON_ARRIVAL => Command::DeadLetterOnArrival {
            messages: read_list(input, |input| {
                Ok((read_message(input)?, input.string()?, input.string()?))
            })?,
        },
        SEND_FORWARDED => Command::SendForwarded {
            message: read_message(input)?,
            key: read_forward_key(input)?,
            floor: SequenceNumber(input.i64()?),
            reply: read_reply_to(input, sink)?,
        },
        FORWARDED => Command::Forwarded {
            sequence_number: SequenceNumber(input.i64()?),
        },
        FORWARD_FAILED => Command::ForwardFailed {
            sequence_number: SequenceNumber(input.i64()?),
            reason: input.string()?,
            description: input.string()?,
        },
        RETURN => Command::Return {
            receiver: read_opt_receiver(input)?,
            sub_queue: input.sub_queue()?,
            record: Box::new(read_record(input)?),
            lock: read_lock(input)?,
        },
        ATTACH_RECEIVER => Command::AttachReceiver {
            receiver: ReceiverId(input.u64()?),
            sub_queue: input.sub_queue()?,
            mode: read_receive_mode(input)?,
            sink: sink(input.u64()?),
        },
        ATTACH_SESSION_RECEIVER => Command::AttachSessionReceiver {
            receiver: ReceiverId(input.u64()?),
            mode: read_receive_mode(input)?,
            session_id: input.opt_string()?,
            wait: read_exact_duration(input)?,
            sink: sink(input.u64()?),
        },
        SESSION => Command::Session {
            session_id: input.string()?,
            operation: match input.u8()? {
                0 => SessionOperation::RenewLock,
                1 => SessionOperation::SetState(read_opt_bytes(input)?),
                2 => SessionOperation::GetState,
                _ => return input.fail("unknown session operation"),
            },
            reply: read_reply_to(input, sink)?,
        },
        LIST_SESSIONS => Command::ListSessions {
            last_updated: input.i64()?,
            skip: read_usize(input)?,
            top: read_usize(input)?,
            reply: read_reply_to(input, sink)?,
        },
        DETACH_RECEIVER => Command::DetachReceiver {
            receiver: ReceiverId(input.u64()?),
        },
        FENCE => Command::Fence {
            receiver: ReceiverId(input.u64()?),
        },
        CREDIT => Command::Credit {
            receiver: ReceiverId(input.u64()?),
            delivery_count: match input.u8()? {
                0 => None,
                _ => Some(input.u32()?),
            },
            link_credit: input.u32()?,
            drain: input.u8()? != 0,
        },
        SETTLE => Command::Settle {
            token: read_lock_token(input)?,
            settlement: read_settlement(input)?,
            reply: read_opt_reply_to(input, sink)?,
        },
        SETTLE_ALL => Command::SettleAll {
            tokens: read_list(input, read_lock_token)?,
            settlement: read_settlement(input)?,
        },
        PEEK => Command::Peek {
            sub_queue: input.sub_queue()?,
            from: SequenceNumber(input.i64()?),
            count: read_usize(input)?,
            session_id: input.opt_string()?,
            reply: read_reply_to(input, sink)?,
        },
        kind @ (RECEIVE_DEFERRED | TAKE) => {
            let sub_queue = input.sub_queue()?;
            let sequence_numbers = read_numbers(input)?;
            let mode = read_receive_mode(input)?;
            let reply = read_reply_to(input, sink)?;
            if kind == TAKE {
                Command::Take {
                    sub_queue,
                    sequence_numbers,
                    mode,
                    reply,
                }
            } else {
                Command::ReceiveDeferred {
                    sub_queue,
                    sequence_numbers,
                    mode,
                    reply,
                }
            }
        }
        PURGE => Command::Purge {
            sub_queue: input.sub_queue()?,
            before: input.opt_i64()?.map(Timestamp),
            session_id: input.opt_string()?,
            max: read_usize(input)?,
            reply: read_reply_to(input, sink)?,
        },
        CANCEL_SCHEDULED => Command::CancelScheduled {
            sequence_numbers: read_numbers(input)?,
            reply: read_reply_to(input, sink)?,
        },
        RENEW_LOCKS => Command::RenewLocks {
            tokens: read_list(input, read_lock_token)?,
            reply: read_reply_to(input, sink)?,
        },
        UPDATE_SETTINGS => Command::UpdateSettings {
            settings: Box::new(read_entity_settings(input)?),
            reply: read_reply_to(input, sink)?,
        },
        DESCRIBE => Command::Describe {
            reply: read_reply_to(input, sink)?,
        },
        DELETE => Command::Delete {
            reply: read_reply_to(input, sink)?,
        },
        kind => return input.fail(&format!("unknown command {kind}")),
    })
}

// ---- topic commands ----

const PUBLISH: u8 = 1;
const PUBLISH_FORWARDED: u8 = 2;
const PUBLISH_BATCH: u8 = 3;
const SCHEDULE: u8 = 4;
const TOPIC_CANCEL_SCHEDULED: u8 = 5;
const REMOVE_SUBSCRIPTION: u8 = 7;
const UPDATE: u8 = 8;
const TOPIC_DESCRIBE: u8 = 9;
const TOPIC_DELETE: u8 = 10;
const RULES: u8 = 11;

fn topic_command_body(
    out: &mut Out,
    command: &TopicCommand,
    sinks: &mut impl SinkIds,
) -> Result<(), Unencodable> {
    match command {
        TopicCommand::Publish { messages, reply } => {
            out.u8(PUBLISH);
            messages_of(out, messages.iter());
            opt_reply_to(out, reply.as_ref(), sinks);
        }
        TopicCommand::PublishForwarded {
            message,
            key,
            floor,
            reply,
        } => {
            out.u8(PUBLISH_FORWARDED);
            message_of(out, message);
            forward_key(out, key);
            out.i64(floor.0);
            reply_to(out, reply, sinks);
        }
        TopicCommand::PublishBatch { sends, sink } => {
            out.u8(PUBLISH_BATCH);
            batch(out, sends, sink, sinks);
        }
        TopicCommand::Schedule { messages, reply } => {
            out.u8(SCHEDULE);
            messages_of(out, messages.iter());
            reply_to(out, reply, sinks);
        }
        TopicCommand::CancelScheduled {
            sequence_numbers,
            reply,
        } => {
            out.u8(TOPIC_CANCEL_SCHEDULED);
            numbers(out, sequence_numbers);
            reply_to(out, reply, sinks);
        }
        TopicCommand::AddSubscription { .. } => {
            return Err(Unencodable::LocalOnly("AddSubscription"));
        }
        TopicCommand::RemoveSubscription { name, reply } => {
            out.u8(REMOVE_SUBSCRIPTION);
            out.str(name);
            reply_to(out, reply, sinks);
        }
        TopicCommand::Update {
            duplicate_detection,
            auto_delete_on_idle,
            status,
            reply,
        } => {
            out.u8(UPDATE);
            opt_duration(out, *duplicate_detection);
            opt_duration(out, *auto_delete_on_idle);
            entity_status(out, *status);
            reply_to(out, reply, sinks);
        }
        TopicCommand::Describe { reply } => {
            out.u8(TOPIC_DESCRIBE);
            reply_to(out, reply, sinks);
        }
        TopicCommand::Delete { reply } => {
            out.u8(TOPIC_DELETE);
            reply_to(out, reply, sinks);
        }
        TopicCommand::Rules {
            subscription,
            operation,
            reply,
        } => {
            out.u8(RULES);
            out.str(subscription);
            match operation {
                RuleOperation::Add(added) => {
                    out.u8(0);
                    rule(out, added);
                }
                RuleOperation::Remove(name) => {
                    out.u8(1);
                    out.str(name);
                }
                RuleOperation::Enumerate { skip, top } => {
                    out.u8(2);
                    out.u64(*skip as u64);
                    out.u64(*top as u64);
                }
            }
            reply_to(out, reply, sinks);
        }
    }
    Ok(())
}

fn topic_command(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<TopicCommand, DecodeError> {
    Ok(match input.u8()? {
        PUBLISH => TopicCommand::Publish {
            messages: read_list(input, read_message)?,
            reply: read_opt_reply_to(input, sink)?,
        },
        PUBLISH_FORWARDED => TopicCommand::PublishForwarded {
            message: read_message(input)?,
            key: read_forward_key(input)?,
            floor: SequenceNumber(input.i64()?),
            reply: read_reply_to(input, sink)?,
        },
        PUBLISH_BATCH => {
            let (sends, sink) = read_batch(input, sink)?;
            TopicCommand::PublishBatch { sends, sink }
        }
        SCHEDULE => TopicCommand::Schedule {
            messages: read_list(input, read_message)?,
            reply: read_reply_to(input, sink)?,
        },
        TOPIC_CANCEL_SCHEDULED => TopicCommand::CancelScheduled {
            sequence_numbers: read_numbers(input)?,
            reply: read_reply_to(input, sink)?,
        },
        REMOVE_SUBSCRIPTION => TopicCommand::RemoveSubscription {
            name: input.string()?,
            reply: read_reply_to(input, sink)?,
        },
        UPDATE => TopicCommand::Update {
            duplicate_detection: read_opt_duration(input)?,
            auto_delete_on_idle: read_opt_duration(input)?,
            status: read_entity_status(input)?,
            reply: read_reply_to(input, sink)?,
        },
        TOPIC_DESCRIBE => TopicCommand::Describe {
            reply: read_reply_to(input, sink)?,
        },
        TOPIC_DELETE => TopicCommand::Delete {
            reply: read_reply_to(input, sink)?,
        },
        RULES => TopicCommand::Rules {
            subscription: input.string()?,
            operation: match input.u8()? {
                0 => RuleOperation::Add(Box::new(read_rule(input)?)),
                1 => RuleOperation::Remove(input.string()?),
                2 => RuleOperation::Enumerate {
                    skip: read_usize(input)?,
                    top: read_usize(input)?,
                },
                _ => return input.fail("unknown rule operation"),
            },
            reply: read_reply_to(input, sink)?,
        },
        kind => return input.fail(&format!("unknown topic command {kind}")),
    })
}

/// A compiled rule goes as its definition (what `add-rule` gave) and is compiled again
/// on the other end, by the same build.
fn rule(out: &mut Out, rule: &Rule) {
    let definition = RuleDefinition::of(rule);
    out.str(&definition.name);
    match &definition.filter {
        FilterDefinition::True => out.u8(0),
        FilterDefinition::False => out.u8(1),
        FilterDefinition::Sql(expression) => {
            out.u8(2);
            out.str(expression);
        }
        FilterDefinition::Correlation { fields, properties } => {
            out.u8(3);
            for field in fields {
                out.opt_str(field.as_deref());
            }
            out.properties(properties);
        }
    }
    out.opt_str(definition.action.as_deref());
    parameters(out, &definition.filter_parameters);
    parameters(out, &definition.action_parameters);
    out.i64(definition.created_at);
}

fn read_rule(input: &mut In<'_>) -> Result<Rule, DecodeError> {
    let name = input.string()?;
    let filter = match input.u8()? {
        0 => FilterDefinition::True,
        1 => FilterDefinition::False,
        2 => FilterDefinition::Sql(input.string()?),
        3 => {
            let mut fields: [Option<String>; 8] = Default::default();
            for field in &mut fields {
                *field = input.opt_string()?;
            }
            FilterDefinition::Correlation {
                fields,
                properties: input.properties()?,
            }
        }
        _ => return input.fail("unknown filter kind"),
    };
    let definition = RuleDefinition {
        name,
        filter,
        action: input.opt_string()?,
        filter_parameters: read_parameters(input)?,
        action_parameters: read_parameters(input)?,
        created_at: input.i64()?,
    };
    definition
        .compile()
        .map_err(|error| DecodeError(format!("a rule that does not compile: {error}")))
}

fn parameters(out: &mut Out, parameters: &[(String, ParameterValue)]) {
    out.u64(parameters.len() as u64);
    for (name, value) in parameters {
        out.str(name);
        match value {
            ParameterValue::String(text) => {
                out.u8(0);
                out.str(text);
            }
            ParameterValue::Int(number) => {
                out.u8(1);
                out.i64(i64::from(*number));
            }
            ParameterValue::Long(number) => {
                out.u8(2);
                out.i64(*number);
            }
            ParameterValue::Double(number) => {
                out.u8(3);
                out.u64(number.to_bits());
            }
            ParameterValue::Bool(flag) => {
                out.u8(4);
                out.u8(u8::from(*flag));
            }
            ParameterValue::DateTime(ticks) => {
                out.u8(5);
                out.i64(*ticks);
            }
            ParameterValue::Duration(ticks) => {
                out.u8(6);
                out.i64(*ticks);
            }
            ParameterValue::Guid(guid) => {
                out.u8(7);
                out.0.extend_from_slice(guid);
            }
        }
    }
}

fn read_parameters(input: &mut In<'_>) -> Result<Vec<(String, ParameterValue)>, DecodeError> {
    read_list(input, |input| {
        let name = input.string()?;
        let value = match input.u8()? {
            0 => ParameterValue::String(input.string()?),
            1 => match i32::try_from(input.i64()?) {
                Ok(number) => ParameterValue::Int(number),
                Err(_) => return input.fail("an int parameter out of range"),
            },
            2 => ParameterValue::Long(input.i64()?),
            3 => ParameterValue::Double(f64::from_bits(input.u64()?)),
            4 => ParameterValue::Bool(input.u8()? != 0),
            5 => ParameterValue::DateTime(input.i64()?),
            6 => ParameterValue::Duration(input.i64()?),
            7 => ParameterValue::Guid(read_16_bytes(input)?),
            _ => return input.fail("unknown parameter type"),
        };
        Ok((name, value))
    })
}

fn entity_status(out: &mut Out, status: EntityStatus) {
    out.u8(match status {
        EntityStatus::Active => 0,
        EntityStatus::Disabled => 1,
        EntityStatus::SendDisabled => 2,
        EntityStatus::ReceiveDisabled => 3,
    });
}

fn read_entity_status(input: &mut In<'_>) -> Result<EntityStatus, DecodeError> {
    Ok(match input.u8()? {
        0 => EntityStatus::Active,
        1 => EntityStatus::Disabled,
        2 => EntityStatus::SendDisabled,
        3 => EntityStatus::ReceiveDisabled,
        _ => return input.fail("unknown entity status"),
    })
}

fn reply_to(out: &mut Out, reply: &ReplyTo, sinks: &mut impl SinkIds) {
    let id = sinks.id(&reply.sink);
    out.u64(id);
    out.u64(reply.request.0);
    sinks.waits(id, reply.request);
}

fn opt_reply_to(out: &mut Out, reply: Option<&ReplyTo>, sinks: &mut impl SinkIds) {
    match reply {
        Some(reply) => {
            out.u8(1);
            reply_to(out, reply, sinks);
        }
        None => out.u8(0),
    }
}

fn read_reply_to(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<ReplyTo, DecodeError> {
    let id = input.u64()?;
    Ok(ReplyTo {
        sink: sink(id),
        request: RequestId(input.u64()?),
    })
}

fn read_opt_reply_to(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<Option<ReplyTo>, DecodeError> {
    match input.u8()? {
        0 => Ok(None),
        _ => read_reply_to(input, sink).map(Some),
    }
}

// ---- values ----

/// A list's length as read, trusted only as far as room goes (the items are read one by
/// one: a false length fails at the end of the input).
fn read_list<T>(
    input: &mut In<'_>,
    mut item: impl FnMut(&mut In<'_>) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    let count = input.u64()?;
    let mut items = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        items.push(item(input)?);
    }
    Ok(items)
}

fn read_usize(input: &mut In<'_>) -> Result<usize, DecodeError> {
    let value = input.u64()?;
    usize::try_from(value).or_else(|_| input.fail("count out of range"))
}

/// What a message carries in transit but the log does not keep: the topic's number of a
/// copy and the partition key of a message on its way to a partitioned entity.
fn transit_extras(out: &mut Out, message: &Message) {
    let extras = message.extras();
    match extras.topic_sequence {
        Some((number, at)) => {
            out.u8(1);
            out.i64(number.0);
            out.i64(at.0);
        }
        None => out.u8(0),
    }
    out.opt_str(extras.partition_key.as_deref());
}

fn read_transit_extras(input: &mut In<'_>, message: &mut Message) -> Result<(), DecodeError> {
    let topic_sequence = match input.u8()? {
        0 => None,
        _ => Some((SequenceNumber(input.i64()?), Timestamp(input.i64()?))),
    };
    let partition_key = input.opt_string()?.map(Arc::<str>::from);
    if topic_sequence.is_some() || partition_key.is_some() {
        message.edit_extras(|extras| {
            extras.topic_sequence = topic_sequence;
            extras.partition_key = partition_key;
        });
    }
    Ok(())
}

fn message_of(out: &mut Out, message: &Message) {
    out.message(message);
    transit_extras(out, message);
}

fn read_message(input: &mut In<'_>) -> Result<Message, DecodeError> {
    let mut message = input.message()?;
    read_transit_extras(input, &mut message)?;
    Ok(message)
}

fn messages_of<'a>(out: &mut Out, messages: impl ExactSizeIterator<Item = &'a Message>) {
    out.u64(messages.len() as u64);
    for message in messages {
        message_of(out, message);
    }
}

fn record_of(out: &mut Out, record: &Record) {
    out.record(record);
    transit_extras(out, &record.message);
}

fn read_record(input: &mut In<'_>) -> Result<Record, DecodeError> {
    let mut record = input.record()?;
    read_transit_extras(input, &mut record.message)?;
    Ok(record)
}

fn batched_sends(out: &mut Out, sends: &[BatchedSend]) {
    out.u64(sends.len() as u64);
    for send in sends {
        messages_of(out, send.messages.iter());
        out.u64(send.numbers.len() as u64);
        for (number, at) in &send.numbers {
            out.i64(number.0);
            out.i64(at.0);
        }
        match send.request {
            Some(request) => {
                out.u8(1);
                out.u64(request.0);
            }
            None => out.u8(0),
        }
    }
}

fn read_batched_sends(input: &mut In<'_>) -> Result<Vec<BatchedSend>, DecodeError> {
    read_list(input, |input| {
        Ok(BatchedSend {
            messages: read_list(input, read_message)?.into(),
            numbers: read_list(input, |input| {
                Ok((SequenceNumber(input.i64()?), Timestamp(input.i64()?)))
            })?
            .into(),
            request: match input.u8()? {
                0 => None,
                _ => Some(RequestId(input.u64()?)),
            },
        })
    })
}

/// A batch of sends: its sink first, then the sends; the sink waits for each send's
/// answer that has a request.
fn batch(
    out: &mut Out,
    sends: &[BatchedSend],
    sink: &NotificationSender,
    sinks: &mut impl SinkIds,
) {
    let id = sinks.id(sink);
    out.u64(id);
    batched_sends(out, sends);
    for request in sends.iter().filter_map(|send| send.request) {
        sinks.waits(id, request);
    }
}

fn read_batch(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<(Vec<BatchedSend>, NotificationSender), DecodeError> {
    let sink = sink(input.u64()?);
    Ok((read_batched_sends(input)?, sink))
}

fn forward_key(out: &mut Out, key: &ForwardKey) {
    out.str(&key.source);
    out.i64(key.sequence_number.0);
    out.i64(key.enqueued_time.0);
}

fn read_forward_key(input: &mut In<'_>) -> Result<ForwardKey, DecodeError> {
    Ok(ForwardKey {
        source: input.string()?,
        sequence_number: SequenceNumber(input.i64()?),
        enqueued_time: Timestamp(input.i64()?),
    })
}

fn transaction_work(out: &mut Out, work: &TransactionWork) {
    messages_of(out, work.sends.iter());
    out.u64(work.via.len() as u64);
    for (destination, message) in &work.via {
        out.str(destination);
        message_of(out, message);
    }
    out.u64(work.settlements.len() as u64);
    for (token, outcome) in &work.settlements {
        out.0.extend_from_slice(&token.0);
        settlement(out, outcome);
    }
}

fn read_transaction_work(input: &mut In<'_>) -> Result<TransactionWork, DecodeError> {
    Ok(TransactionWork {
        sends: read_list(input, read_message)?,
        via: read_list(input, |input| {
            Ok((Arc::<str>::from(input.string()?), read_message(input)?))
        })?,
        settlements: read_list(input, |input| {
            Ok((read_lock_token(input)?, read_settlement(input)?))
        })?,
    })
}

fn opt_receiver(out: &mut Out, receiver: Option<ReceiverId>) {
    match receiver {
        Some(receiver) => {
            out.u8(1);
            out.u64(receiver.0);
        }
        None => out.u8(0),
    }
}

fn read_opt_receiver(input: &mut In<'_>) -> Result<Option<ReceiverId>, DecodeError> {
    Ok(match input.u8()? {
        0 => None,
        _ => Some(ReceiverId(input.u64()?)),
    })
}

fn lock(out: &mut Out, lock: Option<&Lock>) {
    match lock {
        Some(lock) => {
            out.u8(1);
            out.0.extend_from_slice(&lock.token.0);
            out.i64(lock.until.0);
        }
        None => out.u8(0),
    }
}

fn read_lock(input: &mut In<'_>) -> Result<Option<Lock>, DecodeError> {
    Ok(match input.u8()? {
        0 => None,
        _ => Some(Lock {
            token: read_lock_token(input)?,
            until: Timestamp(input.i64()?),
        }),
    })
}

fn read_lock_token(input: &mut In<'_>) -> Result<LockToken, DecodeError> {
    Ok(LockToken(read_16_bytes(input)?))
}

/// A lock token's or a GUID's sixteen bytes, as they stand.
fn read_16_bytes(input: &mut In<'_>) -> Result<[u8; 16], DecodeError> {
    let mut bytes = [0u8; 16];
    for byte in &mut bytes {
        *byte = input.u8()?;
    }
    Ok(bytes)
}

fn lock_tokens(out: &mut Out, tokens: &[LockToken]) {
    out.u64(tokens.len() as u64);
    for token in tokens {
        out.0.extend_from_slice(&token.0);
    }
}

fn numbers(out: &mut Out, numbers: &[SequenceNumber]) {
    out.u64(numbers.len() as u64);
    for number in numbers {
        out.i64(number.0);
    }
}

fn read_numbers(input: &mut In<'_>) -> Result<Vec<SequenceNumber>, DecodeError> {
    read_list(input, |input| Ok(SequenceNumber(input.i64()?)))
}

fn receive_mode(out: &mut Out, mode: ReceiveMode) {
    out.u8(match mode {
        ReceiveMode::PeekLock => 0,
        ReceiveMode::ReceiveAndDelete => 1,
    });
}

fn read_receive_mode(input: &mut In<'_>) -> Result<ReceiveMode, DecodeError> {
    match input.u8()? {
        0 => Ok(ReceiveMode::PeekLock),
        1 => Ok(ReceiveMode::ReceiveAndDelete),
        _ => input.fail("unknown receive mode"),
    }
}

fn exact_duration(out: &mut Out, duration: Duration) {
    out.u64(duration.as_secs());
    out.u64(u64::from(duration.subsec_nanos()));
}

fn read_exact_duration(input: &mut In<'_>) -> Result<Duration, DecodeError> {
    let seconds = input.u64()?;
    let nanos = input.u64()?;
    if nanos >= 1_000_000_000 {
        return input.fail("nanoseconds out of range");
    }
    Ok(Duration::new(seconds, nanos as u32))
}

fn opt_duration(out: &mut Out, duration: Option<Duration>) {
    match duration {
        Some(duration) => {
            out.u8(1);
            exact_duration(out, duration);
        }
        None => out.u8(0),
    }
}

fn read_opt_duration(input: &mut In<'_>) -> Result<Option<Duration>, DecodeError> {
    match input.u8()? {
        0 => Ok(None),
        _ => read_exact_duration(input).map(Some),
    }
}

fn opt_bytes(out: &mut Out, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) => {
            out.u8(1);
            out.bytes(bytes);
        }
        None => out.u8(0),
    }
}

fn read_opt_bytes(input: &mut In<'_>) -> Result<Option<Vec<u8>>, DecodeError> {
    match input.u8()? {
        0 => Ok(None),
        _ => Ok(Some(input.slice()?.to_vec())),
    }
}

fn settlement(out: &mut Out, settlement: &Settlement) {
    match settlement {
        Settlement::Complete => out.u8(0),
        Settlement::Abandon { properties } => {
            out.u8(1);
            out.properties(properties);
        }
        Settlement::Defer { properties } => {
            out.u8(2);
            out.properties(properties);
        }
        Settlement::DeadLetter {
            reason,
            description,
            properties,
        } => {
            out.u8(3);
            out.opt_str(reason.as_deref());
            out.opt_str(description.as_deref());
            out.properties(properties);
        }
        Settlement::Release => out.u8(4),
    }
}

fn read_settlement(input: &mut In<'_>) -> Result<Settlement, DecodeError> {
    Ok(match input.u8()? {
        0 => Settlement::Complete,
        1 => Settlement::Abandon {
            properties: input.properties()?,
        },
        2 => Settlement::Defer {
            properties: input.properties()?,
        },
        3 => Settlement::DeadLetter {
            reason: input.opt_string()?,
            description: input.opt_string()?,
            properties: input.properties()?,
        },
        4 => Settlement::Release,
        _ => return input.fail("unknown settlement"),
    })
}

fn entity_settings(out: &mut Out, settings: &EntitySettings) {
    out.str(&settings.path);
    exact_duration(out, settings.lock_duration);
    out.u64(u64::from(settings.max_delivery_count));
    opt_duration(out, settings.default_message_time_to_live);
    out.u8(u8::from(settings.dead_lettering_on_message_expiration));
    out.u64(settings.max_size_bytes);
    out.u8(u8::from(settings.requires_session));
    opt_duration(out, settings.duplicate_detection_window);
    opt_duration(out, settings.auto_delete_on_idle);
    out.u8(u8::from(settings.forwards));
    out.opt_str(settings.forward_to.as_deref());
    out.opt_str(settings.forward_dead_lettered_messages_to.as_deref());
    entity_status(out, settings.status);
    out.u64(u64::from(settings.partitions));
}

fn read_entity_settings(input: &mut In<'_>) -> Result<EntitySettings, DecodeError> {
    Ok(EntitySettings {
        path: input.string()?,
        lock_duration: read_exact_duration(input)?,
        max_delivery_count: input.u32()?,
        default_message_time_to_live: read_opt_duration(input)?,
        dead_lettering_on_message_expiration: input.u8()? != 0,
        max_size_bytes: input.u64()?,
        requires_session: input.u8()? != 0,
        duplicate_detection_window: read_opt_duration(input)?,
        auto_delete_on_idle: read_opt_duration(input)?,
        forwards: input.u8()? != 0,
        forward_to: input.opt_string()?,
        forward_dead_lettered_messages_to: input.opt_string()?,
        status: read_entity_status(input)?,
        partitions: {
            let partitions = input.u64()?;
            u16::try_from(partitions).or_else(|_| input.fail("partitions out of range"))?
        },
    })
}

// ---- notifications ----

const DELIVER: u8 = 1;
const FENCED: u8 = 2;
const DRAINED: u8 = 3;
const SESSION_ACCEPTED: u8 = 4;
const SESSION_REFUSED: u8 = 5;
const RECEIVER_DETACHED: u8 = 6;
const ENTITY_DELETED: u8 = 7;
const SESSION_LOST: u8 = 8;
const REPLY: u8 = 9;
const REPLIES: u8 = 10;
const MOVED: u8 = 11;

fn notification_body(out: &mut Out, notification: &Notification) {
    match notification {
        Notification::Deliver(delivered) => {
            out.u8(DELIVER);
            delivery(out, delivered);
        }
        Notification::Fenced { receiver } => {
            out.u8(FENCED);
            out.u64(receiver.0);
        }
        Notification::Drained {
            receiver,
            delivery_count,
        } => {
            out.u8(DRAINED);
            out.u64(receiver.0);
            out.u64(u64::from(*delivery_count));
        }
        Notification::SessionAccepted {
            receiver,
            session_id,
            locked_until,
        } => {
            out.u8(SESSION_ACCEPTED);
            out.u64(receiver.0);
            out.str(session_id);
            out.i64(locked_until.0);
        }
        Notification::SessionRefused { receiver, error } => {
            out.u8(SESSION_REFUSED);
            out.u64(receiver.0);
            entity_error(out, error);
        }
        Notification::ReceiverDetached { receiver } => {
            out.u8(RECEIVER_DETACHED);
            out.u64(receiver.0);
        }
        Notification::EntityDeleted { receiver } => {
            out.u8(ENTITY_DELETED);
            out.u64(receiver.0);
        }
        Notification::Moved { receiver } => {
            out.u8(MOVED);
            out.u64(receiver.0);
        }
        Notification::SessionLost { receiver } => {
            out.u8(SESSION_LOST);
            out.u64(receiver.0);
        }
        Notification::Reply { request, result } => {
            out.u8(REPLY);
            out.u64(request.0);
            reply_result(out, result);
        }
        Notification::Replies { replies } => {
            out.u8(REPLIES);
            out.u64(replies.len() as u64);
            for (request, result) in replies {
                out.u64(request.0);
                reply_result(out, result);
            }
        }
    }
}

fn notification(input: &mut In<'_>) -> Result<Notification, DecodeError> {
    Ok(match input.u8()? {
        DELIVER => Notification::Deliver(read_delivery(input)?),
        FENCED => Notification::Fenced {
            receiver: ReceiverId(input.u64()?),
        },
        DRAINED => Notification::Drained {
            receiver: ReceiverId(input.u64()?),
            delivery_count: input.u32()?,
        },
        SESSION_ACCEPTED => Notification::SessionAccepted {
            receiver: ReceiverId(input.u64()?),
            session_id: input.string()?,
            locked_until: Timestamp(input.i64()?),
        },
        SESSION_REFUSED => Notification::SessionRefused {
            receiver: ReceiverId(input.u64()?),
            error: read_entity_error(input)?,
        },
        RECEIVER_DETACHED => Notification::ReceiverDetached {
            receiver: ReceiverId(input.u64()?),
        },
        ENTITY_DELETED => Notification::EntityDeleted {
            receiver: ReceiverId(input.u64()?),
        },
        MOVED => Notification::Moved {
            receiver: ReceiverId(input.u64()?),
        },
        SESSION_LOST => Notification::SessionLost {
            receiver: ReceiverId(input.u64()?),
        },
        REPLY => Notification::Reply {
            request: RequestId(input.u64()?),
            result: read_reply_result(input)?,
        },
        REPLIES => Notification::Replies {
            replies: read_list(input, |input| {
                Ok((RequestId(input.u64()?), read_reply_result(input)?))
            })?,
        },
        kind => return input.fail(&format!("unknown notification {kind}")),
    })
}

fn delivery(out: &mut Out, delivery: &Delivery) {
    opt_receiver(out, delivery.receiver);
    out.sub_queue(delivery.sub_queue);
    record_of(out, &delivery.record);
    lock(out, delivery.lock.as_ref());
}

fn read_delivery(input: &mut In<'_>) -> Result<Delivery, DecodeError> {
    Ok(Delivery {
        receiver: read_opt_receiver(input)?,
        sub_queue: input.sub_queue()?,
        record: read_record(input)?,
        lock: read_lock(input)?,
    })
}

/// An answer.
fn reply_result(out: &mut Out, result: &Result<Reply, EntityError>) {
    let reply = match result {
        Ok(reply) => reply,
        Err(error) => {
            out.u8(1);
            entity_error(out, error);
            return;
        }
    };
    out.u8(0);
    match reply {
        Reply::Done => out.u8(0),
        Reply::SequenceNumbers(sequence_numbers) => {
            out.u8(1);
            numbers(out, sequence_numbers);
        }
        Reply::Expirations(expirations) => {
            out.u8(2);
            out.u64(expirations.len() as u64);
            for at in expirations {
                out.i64(at.0);
            }
        }
        Reply::Messages(deliveries) => {
            out.u8(3);
            out.u64(deliveries.len() as u64);
            for delivered in deliveries {
                delivery(out, delivered);
            }
        }
        Reply::SessionState(state) => {
            out.u8(4);
            opt_bytes(out, state.as_deref());
        }
        Reply::Sessions(sessions) => {
            out.u8(5);
            out.u64(sessions.len() as u64);
            for session in sessions {
                out.str(session);
            }
        }
        Reply::Counts(counts) => {
            out.u8(6);
            entity_counts(out, counts);
        }
        Reply::Count(count) => {
            out.u8(7);
            out.u64(*count as u64);
        }
        Reply::Rules(rules) => {
            out.u8(8);
            out.u64(rules.len() as u64);
            for each in rules {
                rule(out, each);
            }
        }
    }
}

fn read_reply_result(input: &mut In<'_>) -> Result<Result<Reply, EntityError>, DecodeError> {
    if input.u8()? != 0 {
        return Ok(Err(read_entity_error(input)?));
    }
    Ok(Ok(match input.u8()? {
        0 => Reply::Done,
        1 => Reply::SequenceNumbers(read_numbers(input)?.into()),
        2 => Reply::Expirations(read_list(input, |input| Ok(Timestamp(input.i64()?)))?),
        3 => Reply::Messages(read_list(input, read_delivery)?),
        4 => Reply::SessionState(read_opt_bytes(input)?),
        5 => Reply::Sessions(read_list(input, |input| input.string())?),
        6 => Reply::Counts(Box::new(read_entity_counts(input)?)),
        7 => Reply::Count(read_usize(input)?),
        8 => Reply::Rules(read_list(input, read_rule)?),
        _ => return input.fail("unknown reply"),
    }))
}

fn entity_counts(out: &mut Out, counts: &EntityCounts) {
    for value in [
        counts.active,
        counts.scheduled,
        counts.deferred,
        counts.dead_letter,
        counts.transfer,
        counts.transfer_dead_letter,
        counts.size_in_bytes,
    ] {
        out.u64(value);
    }
    let totals = &counts.totals;
    let reasons = &totals.dead_lettered_by_reason;
    for value in [
        totals.sent,
        totals.delivered,
        totals.completed,
        totals.abandoned,
        totals.dead_lettered,
        reasons.max_delivery_count_exceeded,
        reasons.ttl_expired,
        reasons.max_transfer_hop_count_exceeded,
        reasons.session_id_is_null,
        reasons.filter_evaluation,
        reasons.application,
        totals.expired,
        totals.scheduled,
    ] {
        out.u64(value);
    }
    out.i64(counts.next_sequence_number);
    out.i64(counts.last_activity.0);
    out.u8(u8::from(counts.kept_alive));
    for next in counts.next_sequence_numbers {
        out.i64(next);
    }
}

fn read_entity_counts(input: &mut In<'_>) -> Result<EntityCounts, DecodeError> {
    let mut counts = EntityCounts {
        active: input.u64()?,
        scheduled: input.u64()?,
        deferred: input.u64()?,
        dead_letter: input.u64()?,
        transfer: input.u64()?,
        transfer_dead_letter: input.u64()?,
        size_in_bytes: input.u64()?,
        ..Default::default()
    };
    let totals = &mut counts.totals;
    totals.sent = input.u64()?;
    totals.delivered = input.u64()?;
    totals.completed = input.u64()?;
    totals.abandoned = input.u64()?;
    totals.dead_lettered = input.u64()?;
    let reasons = &mut totals.dead_lettered_by_reason;
    reasons.max_delivery_count_exceeded = input.u64()?;
    reasons.ttl_expired = input.u64()?;
    reasons.max_transfer_hop_count_exceeded = input.u64()?;
    reasons.session_id_is_null = input.u64()?;
    reasons.filter_evaluation = input.u64()?;
    reasons.application = input.u64()?;
    totals.expired = input.u64()?;
    totals.scheduled = input.u64()?;
    counts.next_sequence_number = input.i64()?;
    counts.last_activity = Timestamp(input.i64()?);
    counts.kept_alive = input.u8()? != 0;
    for next in counts
        .next_sequence_numbers
        .iter_mut()
        .take(PARTITIONS as usize)
    {
        *next = input.i64()?;
    }
    Ok(counts)
}

fn entity_error(out: &mut Out, error: &EntityError) {
    let text = |out: &mut Out, tag: u8, text: &str| {
        out.u8(tag);
        out.str(text);
    };
    match error {
        EntityError::LockLost => out.u8(0),
        EntityError::QuotaExceeded {
            entity,
            size,
            limit,
        } => {
            out.u8(1);
            out.str(entity);
            out.u64(*size);
            out.u64(*limit);
        }
        EntityError::NotAllowed(message) => text(out, 2, message),
        EntityError::LimitExceeded(message) => text(out, 3, message),
        EntityError::MessageNotFound(message) => text(out, 4, message),
        EntityError::Argument(message) => text(out, 5, message),
        EntityError::AlreadyExists(message) => text(out, 6, message),
        EntityError::SessionCannotBeLocked(message) => text(out, 7, message),
        EntityError::SessionLockLost(message) => text(out, 8, message),
        EntityError::Timeout(message) => text(out, 9, message),
        EntityError::Disabled(message) => text(out, 10, message),
        EntityError::NotFound(path) => text(out, 11, path),
        EntityError::StorageFull(message) => text(out, 12, message),
        EntityError::StorageFailed(message) => text(out, 13, message),
    }
}

fn read_entity_error(input: &mut In<'_>) -> Result<EntityError, DecodeError> {
    Ok(match input.u8()? {
        0 => EntityError::LockLost,
        1 => EntityError::QuotaExceeded {
            entity: input.string()?,
            size: input.u64()?,
            limit: input.u64()?,
        },
        2 => EntityError::NotAllowed(input.string()?),
        3 => EntityError::LimitExceeded(input.string()?),
        4 => EntityError::MessageNotFound(input.string()?),
        5 => EntityError::Argument(input.string()?),
        6 => EntityError::AlreadyExists(input.string()?),
        7 => EntityError::SessionCannotBeLocked(input.string()?),
        8 => EntityError::SessionLockLost(input.string()?),
        9 => EntityError::Timeout(input.string()?),
        10 => EntityError::Disabled(input.string()?),
        11 => EntityError::NotFound(input.string()?),
        12 => EntityError::StorageFull(input.string()?),
        13 => EntityError::StorageFailed(input.string()?),
        _ => return input.fail("unknown entity error"),
    })
}
