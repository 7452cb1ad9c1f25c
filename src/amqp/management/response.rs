//! Encoding `$management` responses: status properties and the body shapes each
//! operation's SDK code dereferences (wire contract §6.3, §6.4).

use bytes::{Bytes, BytesMut};

use super::rules::write_rule;
use super::{PendingResponse, ResponseKind};
use crate::amqp::errors::{self, Failure};
use crate::amqp::message::{self as amqp_message, DeliveryView};
use crate::amqp::request::{self, StatusKeys};
use crate::broker::entity::{Delivery, Reply};
use crate::broker::types::EntityError;
use crate::encoding::codec::Writer;

/// Writes an array32 of 8-byte values with the element constructor `code` (`0x81` long,
/// `0x83` timestamp).
fn write_array(writer: &mut Writer<'_>, code: u8, values: impl ExactSizeIterator<Item = i64>) {
    let count = values.len();
    writer.raw(&[0xf0]);
    writer.raw(&((count * 8 + 5) as u32).to_be_bytes());
    writer.raw(&(count as u32).to_be_bytes());
    writer.raw(&[code]);
    for value in values {
        writer.raw(&value.to_be_bytes());
    }
}

/// Encodes a failure response.
pub fn failure_response(correlation: Option<&Bytes>, failure: &Failure) -> Bytes {
    request::response(
        correlation,
        StatusKeys::Management,
        failure.status_code,
        &failure.description,
        Some(failure.condition),
        None,
    )
}

/// A 204 response: nothing to return.
fn no_content(correlation: Option<&Bytes>, description: &str) -> Bytes {
    request::response(
        correlation,
        StatusKeys::Management,
        204,
        description,
        None,
        None,
    )
}

/// The body `{ key: value }` with the value written by `write_value`.
fn single_entry(key: &str, write_value: impl FnOnce(&mut Writer<'_>)) -> BytesMut {
    let mut body = BytesMut::new();
    let mut writer = Writer::new(&mut body);
    let mut map = writer.start_map();
    writer.string(key);
    write_value(&mut writer);
    map.count = 2;
    writer.finish_compound(map);
    body
}

/// Writes a list whose elements `write_element` writes, one per item.
fn write_list<T>(
    writer: &mut Writer<'_>,
    items: &[T],
    mut write_element: impl FnMut(&mut Writer<'_>, &T),
) {
    let mut list = writer.start_list();
    for item in items {
        write_element(writer, item);
        list.count += 1;
    }
    writer.finish_compound(list);
}

/// Writes `{ [lock-token,] message }` for a delivered or peeked message.
fn write_message_entry(writer: &mut Writer<'_>, delivery: &Delivery, with_lock_token: bool) {
    let lock = delivery.lock.map(|lock| (lock.token, lock.until));
    let mut encoded = BytesMut::new();
    amqp_message::encode_delivery(
        DeliveryView {
            record: &delivery.record,
            lock,
            lock_token: with_lock_token,
        },
        &mut encoded,
    );
    let mut entry = writer.start_map();
    if let (true, Some((token, _))) = (with_lock_token, lock) {
        writer.string("lock-token");
        writer.uuid(&token.0);
        entry.count += 2;
    }
    writer.string("message");
    writer.binary(&encoded);
    entry.count += 2;
    writer.finish_compound(entry);
}

/// Encodes the response to an entity reply.
pub fn reply_response(pending: &PendingResponse, result: Result<Reply, EntityError>) -> Bytes {
    let correlation = pending.correlation.as_ref();
    let reply = match result {
        Ok(reply) => reply,
        Err(error) => return failure_response(correlation, &errors::entity_failure(&error)),
    };
    let body = match (pending.kind, reply) {
        (ResponseKind::Expirations, Reply::Expirations(expirations)) => {
            single_entry("expirations", |writer| {
                write_array(writer, 0x83, expirations.iter().map(|at| at.0))
            })
        }
        (ResponseKind::SequenceNumbers, Reply::SequenceNumbers(numbers)) => {
            single_entry("sequence-numbers", |writer| {
                write_array(writer, 0x81, numbers.iter().map(|number| number.0))
            })
        }
        (ResponseKind::SessionExpiration, Reply::Expirations(expirations)) => {
            single_entry("expiration", |writer| {
                writer.timestamp(expirations.first().map(|at| at.0).unwrap_or(0))
            })
        }
        (ResponseKind::SessionState, Reply::SessionState(state)) => {
            single_entry("session-state", |writer| match &state {
                Some(bytes) => writer.binary(bytes),
                None => writer.null(),
            })
        }
        (ResponseKind::SessionIds, Reply::Sessions(sessions)) => {
            single_entry("sessions-ids", |writer| {
                write_list(writer, &sessions, |writer, session| writer.string(session))
            })
        }
        (ResponseKind::MessageCount, Reply::Count(count)) => {
            single_entry("message-count", |writer| {
                writer.int(i32::try_from(count).unwrap_or(i32::MAX))
            })
        }
        (ResponseKind::Rules, Reply::Rules(rules)) if rules.is_empty() => {
            return no_content(correlation, "No rules");
        }
        (ResponseKind::Rules, Reply::Rules(rules)) => single_entry("rules", |writer| {
            write_list(writer, &rules, |writer, rule| {
                let mut entry = writer.start_map();
                writer.string("rule-description");
                write_rule(writer, rule);
                entry.count = 2;
                writer.finish_compound(entry);
            })
        }),
        (ResponseKind::Peeked, Reply::Messages(messages)) if messages.is_empty() => {
            return no_content(correlation, "No messages");
        }
        (kind @ (ResponseKind::Peeked | ResponseKind::Deferred), Reply::Messages(messages)) => {
            single_entry("messages", |writer| {
                write_list(writer, &messages, |writer, delivery| {
                    write_message_entry(writer, delivery, matches!(kind, ResponseKind::Deferred))
                })
            })
        }
        _ => {
            let mut body = BytesMut::new();
            let mut writer = Writer::new(&mut body);
            let map = writer.start_map();
            writer.finish_compound(map);
            body
        }
    };
    request::response(
        correlation,
        StatusKeys::Management,
        200,
        "OK",
        None,
        Some(&body),
    )
}
