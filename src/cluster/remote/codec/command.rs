//! The entity commands on the stream ([`Command`]): a kind byte per command, then its
//! fields; a sink goes as its wire id.

use crate::broker::entity::{Command, NotificationSender, SessionOperation};
use crate::broker::types::{ReceiverId, SequenceNumber, Timestamp};
use crate::store::codec::{DecodeError, In, Out};

use super::values::{
    batch, entity_settings, exact_duration, forward_key, lock, lock_tokens, message_of,
    messages_of, numbers, opt_bytes, opt_receiver, opt_reply_to, read_batch, read_entity_settings,
    read_exact_duration, read_forward_key, read_list, read_lock, read_lock_token, read_message,
    read_numbers, read_opt_bytes, read_opt_receiver, read_opt_reply_to, read_receive_mode,
    read_record, read_reply_to, read_settlement, read_transaction_work, read_usize, receive_mode,
    record_of, reply_to, settlement, transaction_work,
};
use super::{SinkIds, Unencodable};

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

pub(super) fn command_body(
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

pub(super) fn command(
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
