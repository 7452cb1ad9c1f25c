//! The values that commands, topic commands and notifications share: messages and records
//! with what they carry in transit, reply addresses, batches, locks, durations, settlements
//! and settings.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::entity::settings::EntitySettings;
use crate::broker::entity::state::{ForwardKey, Lock};
use crate::broker::entity::{
    BatchedSend, NotificationSender, Record, ReplyTo, RequestId, TransactionWork,
};
use crate::broker::message::Message;
use crate::broker::types::{
    LockToken, ReceiveMode, ReceiverId, SequenceNumber, Settlement, Timestamp,
};
use crate::config::EntityStatus;
use crate::store::codec::{DecodeError, In, Out};

use super::SinkIds;

pub(super) fn entity_status(out: &mut Out, status: EntityStatus) {
    out.u8(match status {
        EntityStatus::Active => 0,
        EntityStatus::Disabled => 1,
        EntityStatus::SendDisabled => 2,
        EntityStatus::ReceiveDisabled => 3,
    });
}

pub(super) fn read_entity_status(input: &mut In<'_>) -> Result<EntityStatus, DecodeError> {
    Ok(match input.u8()? {
        0 => EntityStatus::Active,
        1 => EntityStatus::Disabled,
        2 => EntityStatus::SendDisabled,
        3 => EntityStatus::ReceiveDisabled,
        _ => return input.fail("unknown entity status"),
    })
}

pub(super) fn reply_to(out: &mut Out, reply: &ReplyTo, sinks: &mut impl SinkIds) {
    let id = sinks.id(&reply.sink);
    out.u64(id);
    out.u64(reply.request.0);
    sinks.waits(id, reply.request);
}

pub(super) fn opt_reply_to(out: &mut Out, reply: Option<&ReplyTo>, sinks: &mut impl SinkIds) {
    match reply {
        Some(reply) => {
            out.u8(1);
            reply_to(out, reply, sinks);
        }
        None => out.u8(0),
    }
}

pub(super) fn read_reply_to(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<ReplyTo, DecodeError> {
    let id = input.u64()?;
    Ok(ReplyTo {
        sink: sink(id),
        request: RequestId(input.u64()?),
    })
}

pub(super) fn read_opt_reply_to(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<Option<ReplyTo>, DecodeError> {
    match input.u8()? {
        0 => Ok(None),
        _ => read_reply_to(input, sink).map(Some),
    }
}

/// A list's length as read, trusted only as far as room goes (the items are read one by
/// one: a false length fails at the end of the input).
pub(super) fn read_list<T>(
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

pub(super) fn read_usize(input: &mut In<'_>) -> Result<usize, DecodeError> {
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

pub(super) fn message_of(out: &mut Out, message: &Message) {
    out.message(message);
    transit_extras(out, message);
}

pub(super) fn read_message(input: &mut In<'_>) -> Result<Message, DecodeError> {
    let mut message = input.message()?;
    read_transit_extras(input, &mut message)?;
    Ok(message)
}

pub(super) fn messages_of<'a>(out: &mut Out, messages: impl ExactSizeIterator<Item = &'a Message>) {
    out.u64(messages.len() as u64);
    for message in messages {
        message_of(out, message);
    }
}

pub(super) fn record_of(out: &mut Out, record: &Record) {
    out.record(record);
    transit_extras(out, &record.message);
}

pub(super) fn read_record(input: &mut In<'_>) -> Result<Record, DecodeError> {
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
pub(super) fn batch(
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

pub(super) fn read_batch(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<(Vec<BatchedSend>, NotificationSender), DecodeError> {
    let sink = sink(input.u64()?);
    Ok((read_batched_sends(input)?, sink))
}

pub(super) fn forward_key(out: &mut Out, key: &ForwardKey) {
    out.str(&key.source);
    out.i64(key.sequence_number.0);
    out.i64(key.enqueued_time.0);
}

pub(super) fn read_forward_key(input: &mut In<'_>) -> Result<ForwardKey, DecodeError> {
    Ok(ForwardKey {
        source: input.string()?,
        sequence_number: SequenceNumber(input.i64()?),
        enqueued_time: Timestamp(input.i64()?),
    })
}

pub(super) fn transaction_work(out: &mut Out, work: &TransactionWork) {
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

pub(super) fn read_transaction_work(input: &mut In<'_>) -> Result<TransactionWork, DecodeError> {
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

pub(super) fn opt_receiver(out: &mut Out, receiver: Option<ReceiverId>) {
    match receiver {
        Some(receiver) => {
            out.u8(1);
            out.u64(receiver.0);
        }
        None => out.u8(0),
    }
}

pub(super) fn read_opt_receiver(input: &mut In<'_>) -> Result<Option<ReceiverId>, DecodeError> {
    Ok(match input.u8()? {
        0 => None,
        _ => Some(ReceiverId(input.u64()?)),
    })
}

pub(super) fn lock(out: &mut Out, lock: Option<&Lock>) {
    match lock {
        Some(lock) => {
            out.u8(1);
            out.0.extend_from_slice(&lock.token.0);
            out.i64(lock.until.0);
        }
        None => out.u8(0),
    }
}

pub(super) fn read_lock(input: &mut In<'_>) -> Result<Option<Lock>, DecodeError> {
    Ok(match input.u8()? {
        0 => None,
        _ => Some(Lock {
            token: read_lock_token(input)?,
            until: Timestamp(input.i64()?),
        }),
    })
}

pub(super) fn read_lock_token(input: &mut In<'_>) -> Result<LockToken, DecodeError> {
    Ok(LockToken(read_16_bytes(input)?))
}

/// A lock token's or a GUID's sixteen bytes, as they stand.
pub(super) fn read_16_bytes(input: &mut In<'_>) -> Result<[u8; 16], DecodeError> {
    let mut bytes = [0u8; 16];
    for byte in &mut bytes {
        *byte = input.u8()?;
    }
    Ok(bytes)
}

pub(super) fn lock_tokens(out: &mut Out, tokens: &[LockToken]) {
    out.u64(tokens.len() as u64);
    for token in tokens {
        out.0.extend_from_slice(&token.0);
    }
}

pub(super) fn numbers(out: &mut Out, numbers: &[SequenceNumber]) {
    out.u64(numbers.len() as u64);
    for number in numbers {
        out.i64(number.0);
    }
}

pub(super) fn read_numbers(input: &mut In<'_>) -> Result<Vec<SequenceNumber>, DecodeError> {
    read_list(input, |input| Ok(SequenceNumber(input.i64()?)))
}

pub(super) fn receive_mode(out: &mut Out, mode: ReceiveMode) {
    out.u8(match mode {
        ReceiveMode::PeekLock => 0,
        ReceiveMode::ReceiveAndDelete => 1,
    });
}

pub(super) fn read_receive_mode(input: &mut In<'_>) -> Result<ReceiveMode, DecodeError> {
    match input.u8()? {
        0 => Ok(ReceiveMode::PeekLock),
        1 => Ok(ReceiveMode::ReceiveAndDelete),
        _ => input.fail("unknown receive mode"),
    }
}

pub(super) fn exact_duration(out: &mut Out, duration: Duration) {
    out.u64(duration.as_secs());
    out.u64(u64::from(duration.subsec_nanos()));
}

pub(super) fn read_exact_duration(input: &mut In<'_>) -> Result<Duration, DecodeError> {
    let seconds = input.u64()?;
    let nanos = input.u64()?;
    if nanos >= 1_000_000_000 {
        return input.fail("nanoseconds out of range");
    }
    Ok(Duration::new(seconds, nanos as u32))
}

pub(super) fn opt_duration(out: &mut Out, duration: Option<Duration>) {
    match duration {
        Some(duration) => {
            out.u8(1);
            exact_duration(out, duration);
        }
        None => out.u8(0),
    }
}

pub(super) fn read_opt_duration(input: &mut In<'_>) -> Result<Option<Duration>, DecodeError> {
    match input.u8()? {
        0 => Ok(None),
        _ => read_exact_duration(input).map(Some),
    }
}

pub(super) fn opt_bytes(out: &mut Out, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) => {
            out.u8(1);
            out.bytes(bytes);
        }
        None => out.u8(0),
    }
}

pub(super) fn read_opt_bytes(input: &mut In<'_>) -> Result<Option<Vec<u8>>, DecodeError> {
    match input.u8()? {
        0 => Ok(None),
        _ => Ok(Some(input.slice()?.to_vec())),
    }
}

pub(super) fn settlement(out: &mut Out, settlement: &Settlement) {
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

pub(super) fn read_settlement(input: &mut In<'_>) -> Result<Settlement, DecodeError> {
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

pub(super) fn entity_settings(out: &mut Out, settings: &EntitySettings) {
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

pub(super) fn read_entity_settings(input: &mut In<'_>) -> Result<EntitySettings, DecodeError> {
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
