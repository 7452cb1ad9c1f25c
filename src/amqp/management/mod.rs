//! The `$management` node: request parsing and response encoding for the operations the
//! SDKs call (wire contract §6). Each request becomes a plan the connection carries out
//! against the entity; the entity's reply is turned back into a response here.

use bytes::Bytes;
use serde_amqp::Value;

use super::errors::{self, Failure};

mod response;
mod rules;

use super::message as amqp_message;
use super::request::Request;
use crate::broker::entity::SessionOperation;
use crate::broker::message::Message;
use crate::broker::topic::RuleOperation;
use crate::broker::types::{
    LockToken, PropertyChanges, PropertyValue, ReceiveMode, SequenceNumber, Settlement,
};
pub use response::{failure_response, reply_response};
use rules::{rule_from_request, undescribed};

/// Most messages one `batch-delete-messages` request deletes (the service's limit).
const MAX_BATCH_DELETE: i64 = 4000;

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
    /// Delete up to `count` unlocked messages enqueued before `before`
    /// (`batch-delete-messages`: the SDKs' deleteMessages and purgeMessages).
    DeleteMessages {
        /// Most messages.
        count: usize,
        /// Only those enqueued before this time.
        before: crate::broker::types::Timestamp,
        /// Only this session's (session receivers).
        session_id: Option<String>,
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
    /// Whether the request only finishes what a client holds (settles or renews its locks),
    /// which a draining connection still serves; anything else would start new work.
    pub fn finishes_held_work(&self) -> bool {
        matches!(
            self,
            Plan::Settle(..)
                | Plan::RenewLocks(_)
                | Plan::Session(
                    _,
                    SessionOperation::RenewLock | SessionOperation::SetState(_)
                )
        )
    }

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
            Plan::DeleteMessages { .. } => ResponseKind::MessageCount,
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
    /// `message-count`: how many messages were deleted.
    MessageCount,
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

pub(super) fn body_entry<'a>(body: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(map) = body else { return None };
    map.iter().find_map(|(name, value)| match name {
        Value::String(text) if text == key => Some(value),
        Value::Symbol(symbol) if symbol.0 == key => Some(value),
        _ => None,
    })
}

pub(super) fn body_text(body: &Value, key: &str) -> Option<String> {
    match body_entry(body, key)? {
        Value::String(text) => Some(text.clone()),
        Value::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}

pub(super) fn values(value: &Value) -> Vec<&Value> {
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

pub(super) fn integer(value: &Value) -> Option<i64> {
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

fn session_id(body: &Value) -> Result<String, Failure> {
    body_text(body, "session-id").ok_or_else(|| argument("session-id is required"))
}

pub(super) fn argument(description: &str) -> Failure {
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
                // An empty binary clears the state, as null does: the Go SDK's
                // SetSessionState(nil) sends one, and the service reads it back as no state.
                Some(Value::Binary(bytes)) if bytes.is_empty() => None,
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
        "com.microsoft:batch-delete-messages" => {
            let count = body_entry(body, "message-count")
                .and_then(integer)
                .ok_or_else(|| argument("message-count is required"))?;
            if !(1..=MAX_BATCH_DELETE).contains(&count) {
                return Err(argument(&format!(
                    "message-count must be from 1 to {MAX_BATCH_DELETE}; it was {count}"
                )));
            }
            let before = match body_entry(body, "enqueued-time-utc").map(undescribed) {
                Some(Value::Timestamp(time)) => time.milliseconds(),
                Some(other) => integer(other)
                    .ok_or_else(|| argument("enqueued-time-utc must be a timestamp"))?,
                None => return Err(argument("enqueued-time-utc is required")),
            };
            Ok(Plan::DeleteMessages {
                count: count as usize,
                before: crate::broker::types::Timestamp(before),
                session_id: body_text(body, "session-id"),
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
