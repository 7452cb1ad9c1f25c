//! The `$management` node: request parsing and response encoding for the operations the
//! SDKs call (wire contract §6). Each request becomes a plan the connection carries out
//! against the entity; the entity's reply is turned back into a response here.

use bytes::{Bytes, BytesMut};
use serde_amqp::Value;

use super::codec::Writer;
use super::errors::{self, Failure};
use super::message::{self as amqp_message, DeliveryView};
use super::request::{self, Request, StatusKeys};
use crate::broker::entity::{Reply, SessionOperation};
use crate::broker::filter::{CorrelationFilter, Filter, SqlFilter, SqlRuleAction};
use crate::broker::message::Message;
use crate::broker::rules::Rule;
use crate::broker::topic::RuleOperation;
use crate::broker::types::{
    EntityError, LockToken, PropertyChanges, PropertyValue, ReceiveMode, SequenceNumber, Settlement,
};

/// What the connection should do for a request.
#[derive(Debug)]
pub enum Plan {
    /// Extend these locks.
    RenewLocks(Vec<LockToken>),
    /// Settle these locks.
    Settle(Vec<LockToken>, Settlement),
    /// Browse from a sequence number.
    Peek {
        /// First sequence number.
        from: SequenceNumber,
        /// Most messages.
        count: usize,
        /// Only this session's messages (session receivers).
        session_id: Option<String>,
    },
    /// Schedule messages (each carries `x-opt-scheduled-enqueue-time`).
    Schedule(Vec<Message>),
    /// Cancel scheduled messages.
    Cancel(Vec<SequenceNumber>),
    /// Manage a subscription's rules.
    Rules(RuleOperation),
    /// Operate on a session.
    Session(String, SessionOperation),
    /// List sessions.
    ListSessions {
        /// Updated since (unix ms) or the "any" sentinel.
        last_updated: i64,
        /// Sessions to skip.
        skip: usize,
        /// Most sessions.
        top: usize,
    },
    /// Take deferred messages.
    ReceiveDeferred {
        /// Which messages.
        sequence_numbers: Vec<SequenceNumber>,
        /// Lock or remove.
        mode: ReceiveMode,
    },
}

impl Plan {
    /// The response shape this plan's reply becomes.
    pub fn response_kind(&self) -> ResponseKind {
        match self {
            Plan::RenewLocks(_) => ResponseKind::Expirations,
            Plan::Settle(..) | Plan::Cancel(_) => ResponseKind::Empty,
            Plan::Peek { .. } => ResponseKind::Peeked,
            Plan::Schedule(_) => ResponseKind::SequenceNumbers,
            Plan::ReceiveDeferred { .. } => ResponseKind::Deferred,
            Plan::Rules(RuleOperation::Enumerate { .. }) => ResponseKind::Rules,
            Plan::Rules(_) => ResponseKind::Empty,
            Plan::Session(_, SessionOperation::RenewLock) => ResponseKind::SessionExpiration,
            Plan::Session(_, SessionOperation::GetState) => ResponseKind::SessionState,
            Plan::Session(_, SessionOperation::SetState(_)) => ResponseKind::Empty,
            Plan::ListSessions { .. } => ResponseKind::SessionIds,
        }
    }
}

/// Which response shape a pending request expects.
#[derive(Debug, Clone, Copy)]
pub enum ResponseKind {
    /// `expirations` array of timestamps.
    Expirations,
    /// Empty 200.
    Empty,
    /// `messages` list of `{message}`; 204 when there are none.
    Peeked,
    /// `messages` list of `{lock-token, message}`.
    Deferred,
    /// `sequence-numbers` array of longs.
    SequenceNumbers,
    /// `rules` list of described rule descriptions; 204 when there are none.
    Rules,
    /// `expiration` timestamp.
    SessionExpiration,
    /// `session-state` binary or null.
    SessionState,
    /// `sessions-ids` array of strings.
    SessionIds,
}

/// A request waiting for its entity's reply.
#[derive(Debug)]
pub struct PendingResponse {
    /// Session the request came on.
    pub channel: u16,
    /// Where the response goes (`reply-to`).
    pub reply_to: Option<String>,
    /// The management node's entity path.
    pub path: String,
    /// The request's encoded message-id.
    pub correlation: Option<Bytes>,
    /// The response shape.
    pub kind: ResponseKind,
}

fn body_entry<'a>(body: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(map) = body else { return None };
    map.iter().find_map(|(name, value)| match name {
        Value::String(text) if text == key => Some(value),
        Value::Symbol(symbol) if symbol.0 == key => Some(value),
        _ => None,
    })
}

fn body_text(body: &Value, key: &str) -> Option<String> {
    match body_entry(body, key)? {
        Value::String(text) => Some(text.clone()),
        Value::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

fn values(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(array) => array.iter().collect(),
        Value::List(list) => list.iter().collect(),
        other => vec![other],
    }
}

fn lock_tokens(body: &Value) -> Result<Vec<LockToken>, Failure> {
    let entry =
        body_entry(body, "lock-tokens").ok_or_else(|| argument("lock-tokens is required"))?;
    values(entry)
        .into_iter()
        .map(|value| match value {
            Value::Uuid(uuid) => Ok(LockToken(*uuid.as_inner())),
            _ => Err(argument("lock-tokens must be uuids")),
        })
        .collect()
}

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Ubyte(number) => Some(*number as i64),
        Value::Ushort(number) => Some(*number as i64),
        Value::Uint(number) => Some(*number as i64),
        Value::Ulong(number) => i64::try_from(*number).ok(),
        Value::Byte(number) => Some(*number as i64),
        Value::Short(number) => Some(*number as i64),
        Value::Int(number) => Some(*number as i64),
        Value::Long(number) => Some(*number),
        _ => None,
    }
}

fn sequence_numbers(body: &Value) -> Result<Vec<SequenceNumber>, Failure> {
    let entry = body_entry(body, "sequence-numbers")
        .ok_or_else(|| argument("sequence-numbers is required"))?;
    values(entry)
        .into_iter()
        .map(|value| {
            integer(value)
                .map(SequenceNumber)
                .ok_or_else(|| argument("sequence-numbers must be longs"))
        })
        .collect()
}

/// The value of a map entry, looking through a described wrapper.
fn undescribed(value: &Value) -> &Value {
    match value {
        Value::Described(described) => &described.value,
        other => other,
    }
}

fn rule_from_request(body: &Value) -> Result<Rule, Failure> {
    let name = body_text(body, "rule-name").ok_or_else(|| argument("rule-name is required"))?;
    let description = body_entry(body, "rule-description")
        .map(undescribed)
        .ok_or_else(|| argument("rule-description is required"))?;
    let syntax = |error: crate::broker::filter::FilterSyntaxError| argument(&error.to_string());
    let filter = if let Some(sql) = body_entry(description, "sql-filter").map(undescribed) {
        let expression = body_text(sql, "expression")
            .ok_or_else(|| argument("sql-filter needs an expression"))?;
        Filter::Sql(SqlFilter::parse(&expression).map_err(syntax)?)
    } else if let Some(correlation) = body_entry(description, "correlation-filter").map(undescribed)
    {
        let field = |key: &str| body_text(correlation, key);
        let properties = property_changes(body_entry(correlation, "properties"))
            .into_iter()
            .map(|(key, value)| {
                let value = match value {
                    PropertyValue::Long(number) => {
                        crate::broker::filter::FilterValue::Integer(number)
                    }
                    PropertyValue::Double(number) => {
                        crate::broker::filter::FilterValue::Float(number)
                    }
                    PropertyValue::Bool(flag) => crate::broker::filter::FilterValue::Bool(flag),
                    PropertyValue::String(text) => crate::broker::filter::FilterValue::String(text),
                    PropertyValue::Timestamp(millis) => {
                        crate::broker::filter::FilterValue::Timestamp(millis)
                    }
                    PropertyValue::Uuid(bytes) => crate::broker::filter::FilterValue::Uuid(bytes),
                    _ => crate::broker::filter::FilterValue::Null,
                };
                (key, value)
            })
            .collect();
        Filter::Correlation(CorrelationFilter {
            correlation_id: field("correlation-id"),
            message_id: field("message-id"),
            to: field("to"),
            reply_to: field("reply-to"),
            label: field("label"),
            session_id: field("session-id"),
            reply_to_session_id: field("reply-to-session-id"),
            content_type: field("content-type"),
            properties,
        })
    } else {
        Filter::True
    };
    let action = match body_entry(description, "sql-rule-action").map(undescribed) {
        Some(action) => match body_text(action, "expression") {
            Some(expression) if !expression.trim().is_empty() => {
                Some(SqlRuleAction::parse(&expression).map_err(syntax)?)
            }
            _ => None,
        },
        None => None,
    };
    Ok(Rule {
        name,
        filter,
        action,
        created_at: 0,
    })
}

fn write_optional_text(writer: &mut Writer<'_>, value: &Option<String>) {
    match value {
        Some(text) => writer.string(text),
        None => writer.null(),
    }
}

/// Writes a rule description as the SDKs decode it (wire contract §6.4, numeric
/// descriptors).
fn write_rule(writer: &mut Writer<'_>, rule: &Rule) {
    writer.descriptor_ulong(0x0000_0137_0000_0004);
    let mut description = writer.start_list();
    match &rule.filter {
        Filter::True | Filter::False => {
            let (code, text) = match rule.filter {
                Filter::True => (0x0000_0013_7000_0007, "1=1"),
                _ => (0x0000_0013_7000_0008, "1=0"),
            };
            writer.descriptor_ulong(code);
            let mut list = writer.start_list();
            writer.string(text);
            writer.int(20);
            list.count = 2;
            writer.finish_compound(list);
        }
        Filter::Sql(filter) => {
            writer.descriptor_ulong(0x0000_0013_7000_0006);
            let mut list = writer.start_list();
            writer.string(filter.expression());
            writer.int(20);
            list.count = 2;
            writer.finish_compound(list);
        }
        Filter::Correlation(filter) => {
            writer.descriptor_ulong(0x0000_0013_7000_0009);
            let mut list = writer.start_list();
            for field in [
                &filter.correlation_id,
                &filter.message_id,
                &filter.to,
                &filter.reply_to,
                &filter.label,
                &filter.session_id,
                &filter.reply_to_session_id,
                &filter.content_type,
            ] {
                write_optional_text(writer, field);
            }
            let mut properties = writer.start_map();
            for (name, value) in &filter.properties {
                writer.string(name);
                let value = crate::broker::rules::property_value(value);
                super::message::write_property_value(writer, &value);
                properties.count += 2;
            }
            writer.finish_compound(properties);
            list.count = 9;
            writer.finish_compound(list);
        }
    }
    match &rule.action {
        Some(action) => {
            writer.descriptor_ulong(0x0000_0137_0000_0006);
            let mut list = writer.start_list();
            writer.string(action.expression());
            writer.int(20);
            list.count = 2;
            writer.finish_compound(list);
        }
        None => {
            writer.descriptor_ulong(0x0000_0137_0000_0005);
            let list = writer.start_list();
            writer.finish_compound(list);
        }
    }
    writer.string(&rule.name);
    writer.timestamp(rule.created_at);
    description.count = 4;
    writer.finish_compound(description);
}

fn session_id(body: &Value) -> Result<String, Failure> {
    body_text(body, "session-id").ok_or_else(|| argument("session-id is required"))
}

fn argument(description: &str) -> Failure {
    Failure::new(errors::ARGUMENT_ERROR, description, 400)
}

/// Converts an AMQP value into a property value (for properties-to-modify).
pub fn property_value(value: &Value) -> PropertyValue {
    match value {
        Value::Null => PropertyValue::Null,
        Value::Bool(flag) => PropertyValue::Bool(*flag),
        Value::Ubyte(number) => PropertyValue::Long(*number as i64),
        Value::Ushort(number) => PropertyValue::Long(*number as i64),
        Value::Uint(number) => PropertyValue::Long(*number as i64),
        Value::Ulong(number) => PropertyValue::Long(*number as i64),
        Value::Byte(number) => PropertyValue::Long(*number as i64),
        Value::Short(number) => PropertyValue::Long(*number as i64),
        Value::Int(number) => PropertyValue::Long(*number as i64),
        Value::Long(number) => PropertyValue::Long(*number),
        Value::Float(number) => PropertyValue::Double(f32::from(*number) as f64),
        Value::Double(number) => PropertyValue::Double(f64::from(*number)),
        Value::Timestamp(time) => PropertyValue::Timestamp(time.milliseconds()),
        Value::Uuid(uuid) => PropertyValue::Uuid(*uuid.as_inner()),
        Value::Binary(bytes) => PropertyValue::Binary(bytes.to_vec()),
        Value::String(text) => PropertyValue::String(text.clone()),
        Value::Symbol(symbol) => PropertyValue::String(symbol.0.clone()),
        other => PropertyValue::String(format!("{other:?}")),
    }
}

/// Converts a map of properties (string or symbol keys) into property changes.
pub fn property_changes(value: Option<&Value>) -> PropertyChanges {
    let Some(Value::Map(map)) = value else {
        return Vec::new();
    };
    map.iter()
        .filter_map(|(key, value)| {
            let name = match key {
                Value::String(text) => text.clone(),
                Value::Symbol(symbol) => symbol.0.clone(),
                _ => return None,
            };
            Some((name, property_value(value)))
        })
        .collect()
}

/// Turns a request into a plan, or a failure to answer at once.
pub fn plan(request: &Request) -> Result<Plan, Failure> {
    let operation = request.property_text("operation").unwrap_or("");
    let body = &request.body;
    match operation {
        "com.microsoft:renew-lock" => Ok(Plan::RenewLocks(lock_tokens(body)?)),
        "com.microsoft:update-disposition" => {
            let tokens = lock_tokens(body)?;
            let properties = property_changes(body_entry(body, "properties-to-modify"));
            let status = body_text(body, "disposition-status").unwrap_or_default();
            let settlement = match status.as_str() {
                "completed" => Settlement::Complete,
                "abandoned" => Settlement::Abandon { properties },
                "defered" | "deferred" => Settlement::Defer { properties },
                "suspended" => Settlement::DeadLetter {
                    reason: body_text(body, "deadletter-reason").filter(|text| !text.is_empty()),
                    description: body_text(body, "deadletter-description")
                        .filter(|text| !text.is_empty()),
                    properties,
                },
                other => return Err(argument(&format!("unknown disposition-status '{other}'"))),
            };
            Ok(Plan::Settle(tokens, settlement))
        }
        "com.microsoft:peek-message" => {
            let from = body_entry(body, "from-sequence-number")
                .and_then(integer)
                .unwrap_or(1);
            let count = body_entry(body, "message-count")
                .and_then(integer)
                .unwrap_or(1);
            Ok(Plan::Peek {
                from: SequenceNumber(from.max(0)),
                count: count.clamp(0, 1000) as usize,
                session_id: body_text(body, "session-id"),
            })
        }
        "com.microsoft:schedule-message" => {
            let entry =
                body_entry(body, "messages").ok_or_else(|| argument("messages is required"))?;
            let mut messages = Vec::new();
            for item in values(entry) {
                let Some(Value::Binary(bytes)) = body_entry(item, "message") else {
                    return Err(argument("each scheduled message needs a 'message' binary"));
                };
                let message = amqp_message::parse_message(Bytes::from(bytes.to_vec()))
                    .map_err(|error| argument(&error.to_string()))?;
                messages.push(message);
            }
            Ok(Plan::Schedule(messages))
        }
        "com.microsoft:cancel-scheduled-message" => Ok(Plan::Cancel(sequence_numbers(body)?)),
        "com.microsoft:receive-by-sequence-number" => {
            let mode = match body_entry(body, "receiver-settle-mode").and_then(integer) {
                Some(0) => ReceiveMode::ReceiveAndDelete,
                _ => ReceiveMode::PeekLock,
            };
            Ok(Plan::ReceiveDeferred {
                sequence_numbers: sequence_numbers(body)?,
                mode,
            })
        }
        "com.microsoft:renew-session-lock" => Ok(Plan::Session(
            session_id(body)?,
            SessionOperation::RenewLock,
        )),
        "com.microsoft:get-session-state" => {
            Ok(Plan::Session(session_id(body)?, SessionOperation::GetState))
        }
        "com.microsoft:set-session-state" => {
            let state = match body_entry(body, "session-state").map(undescribed) {
                Some(Value::Binary(bytes)) => Some(bytes.to_vec()),
                Some(Value::String(text)) => Some(text.as_bytes().to_vec()),
                _ => None,
            };
            Ok(Plan::Session(
                session_id(body)?,
                SessionOperation::SetState(state),
            ))
        }
        "com.microsoft:get-message-sessions" => {
            let last_updated = match body_entry(body, "last-updated-time") {
                Some(Value::Timestamp(time)) => time.milliseconds(),
                Some(other) => integer(other).unwrap_or(i64::MAX),
                None => i64::MAX,
            };
            let skip = body_entry(body, "skip")
                .and_then(integer)
                .unwrap_or(0)
                .max(0) as usize;
            let top = body_entry(body, "top")
                .and_then(integer)
                .unwrap_or(100)
                .max(0) as usize;
            Ok(Plan::ListSessions {
                last_updated,
                skip,
                top,
            })
        }
        "com.microsoft:add-rule" => Ok(Plan::Rules(RuleOperation::Add(Box::new(
            rule_from_request(body)?,
        )))),
        "com.microsoft:remove-rule" => {
            let name =
                body_text(body, "rule-name").ok_or_else(|| argument("rule-name is required"))?;
            Ok(Plan::Rules(RuleOperation::Remove(name)))
        }
        "com.microsoft:enumerate-rules" => {
            let skip = body_entry(body, "skip")
                .and_then(integer)
                .unwrap_or(0)
                .max(0) as usize;
            let top = body_entry(body, "top")
                .and_then(integer)
                .unwrap_or(100)
                .max(0) as usize;
            Ok(Plan::Rules(RuleOperation::Enumerate { skip, top }))
        }
        "" => Err(argument(
            "the request has no 'operation' application property",
        )),
        other => Err(Failure::new(
            errors::NOT_IMPLEMENTED,
            format!("The management operation '{other}' is not supported by this broker yet."),
            501,
        )),
    }
}

/// Writes an array32 of longs.
fn write_long_array(writer: &mut Writer<'_>, numbers: impl ExactSizeIterator<Item = i64>) {
    let count = numbers.len();
    writer.raw(&[0xf0]);
    writer.raw(&((count * 8 + 5) as u32).to_be_bytes());
    writer.raw(&(count as u32).to_be_bytes());
    writer.raw(&[0x81]);
    for number in numbers {
        writer.raw(&number.to_be_bytes());
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

/// Encodes the response to an entity reply.
pub fn reply_response(pending: &PendingResponse, result: Result<Reply, EntityError>) -> Bytes {
    let correlation = pending.correlation.as_ref();
    let reply = match result {
        Ok(reply) => reply,
        Err(error) => return failure_response(correlation, &errors::entity_failure(&error)),
    };
    let mut body = BytesMut::new();
    match (pending.kind, reply) {
        (ResponseKind::Expirations, Reply::Expirations(expirations)) => {
            let mut writer = Writer::new(&mut body);
            let mut map = writer.start_map();
            writer.string("expirations");
            // array32 of timestamps
            let mut array = BytesMut::new();
            for expiration in &expirations {
                array.extend_from_slice(&expiration.0.to_be_bytes());
            }
            writer.raw(&[0xf0]);
            writer.raw(&((array.len() + 5) as u32).to_be_bytes());
            writer.raw(&(expirations.len() as u32).to_be_bytes());
            writer.raw(&[0x83]);
            writer.raw(&array);
            map.count += 2;
            writer.finish_compound(map);
        }
        (ResponseKind::SequenceNumbers, Reply::SequenceNumbers(numbers)) => {
            let mut writer = Writer::new(&mut body);
            let mut map = writer.start_map();
            writer.string("sequence-numbers");
            write_long_array(&mut writer, numbers.iter().map(|number| number.0));
            map.count += 2;
            writer.finish_compound(map);
        }
        (ResponseKind::SessionExpiration, Reply::Expirations(expirations)) => {
            let mut writer = Writer::new(&mut body);
            let mut map = writer.start_map();
            writer.string("expiration");
            writer.timestamp(expirations.first().map(|at| at.0).unwrap_or(0));
            map.count += 2;
            writer.finish_compound(map);
        }
        (ResponseKind::SessionState, Reply::SessionState(state)) => {
            let mut writer = Writer::new(&mut body);
            let mut map = writer.start_map();
            writer.string("session-state");
            match state {
                Some(bytes) => writer.binary(&bytes),
                None => writer.null(),
            }
            map.count += 2;
            writer.finish_compound(map);
        }
        (ResponseKind::SessionIds, Reply::Sessions(sessions)) => {
            let mut writer = Writer::new(&mut body);
            let mut map = writer.start_map();
            writer.string("sessions-ids");
            let mut list = writer.start_list();
            for session in &sessions {
                writer.string(session);
                list.count += 1;
            }
            writer.finish_compound(list);
            map.count += 2;
            writer.finish_compound(map);
        }
        (ResponseKind::Rules, Reply::Rules(rules)) if rules.is_empty() => {
            return request::response(
                correlation,
                StatusKeys::Management,
                204,
                "No rules",
                None,
                None,
            );
        }
        (ResponseKind::Rules, Reply::Rules(rules)) => {
            let mut writer = Writer::new(&mut body);
            let mut map = writer.start_map();
            writer.string("rules");
            let mut list = writer.start_list();
            for rule in &rules {
                let mut entry = writer.start_map();
                writer.string("rule-description");
                write_rule(&mut writer, rule);
                entry.count = 2;
                writer.finish_compound(entry);
                list.count += 1;
            }
            writer.finish_compound(list);
            map.count += 2;
            writer.finish_compound(map);
        }
        (ResponseKind::Peeked, Reply::Messages(messages)) if messages.is_empty() => {
            return request::response(
                correlation,
                StatusKeys::Management,
                204,
                "No messages",
                None,
                None,
            );
        }
        (kind @ (ResponseKind::Peeked | ResponseKind::Deferred), Reply::Messages(messages)) => {
            let mut writer = Writer::new(&mut body);
            let mut map = writer.start_map();
            writer.string("messages");
            let mut list = writer.start_list();
            for delivery in &messages {
                let lock = delivery.record.lock.map(|lock| (lock.token, lock.until));
                let mut encoded = BytesMut::new();
                amqp_message::encode_delivery(
                    DeliveryView {
                        record: &delivery.record,
                        lock,
                    },
                    &mut encoded,
                );
                let mut entry = writer.start_map();
                if let (ResponseKind::Deferred, Some((token, _))) = (kind, lock) {
                    writer.string("lock-token");
                    writer.uuid(&token.0);
                    entry.count += 2;
                }
                writer.string("message");
                writer.binary(&encoded);
                entry.count += 2;
                writer.finish_compound(entry);
                list.count += 1;
            }
            writer.finish_compound(list);
            map.count += 2;
            writer.finish_compound(map);
        }
        _ => {
            let mut writer = Writer::new(&mut body);
            let map = writer.start_map();
            writer.finish_compound(map);
        }
    }
    request::response(
        correlation,
        StatusKeys::Management,
        200,
        "OK",
        None,
        Some(&body),
    )
}
