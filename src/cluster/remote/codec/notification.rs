//! The notifications on the stream ([`Notification`]): deliveries, receivers' and
//! sessions' news, and the replies (answers and entity errors) to requests.

use crate::broker::entity::{Delivery, EntityCounts, Notification, Reply, RequestId};
use crate::broker::partitions::PARTITIONS;
use crate::broker::types::{EntityError, ReceiverId, Timestamp};
use crate::store::codec::{DecodeError, In, Out};

use super::topic::{read_rule, rule};
use super::values::{
    lock, numbers, opt_bytes, opt_receiver, read_list, read_lock, read_numbers, read_opt_bytes,
    read_opt_receiver, read_record, read_usize, record_of,
};

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

pub(super) fn notification_body(out: &mut Out, notification: &Notification) {
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

pub(super) fn notification(input: &mut In<'_>) -> Result<Notification, DecodeError> {
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
