//! How the explorer shows what it reads — entities, messages, their properties and
//! bodies — as the JSON of its API, and how a message is built from the send form.

use bytes::{Bytes, BytesMut};
use serde_json::{Value as Json, json};

use crate::amqp::message::{self as amqp_message, DeliveryView};
use crate::broker::entity::Delivery;
use crate::broker::message::Message;
use crate::broker::namespace::Runtime;
use crate::broker::registry::{Description, Slot};
use crate::broker::types::{MessageState, PropertyValue, Timestamp};
use crate::encoding::codec::{self, Writer};

use super::{Failure, MAX_SHOWN_BODY, requires_session, state_name, timestamp_text};

pub(super) fn entity_json(slot: &Slot, runtime: &Runtime) -> Json {
    let counts = &runtime.counts;
    let totals = &counts.totals;
    let (kind, topic, status) = match &slot.description {
        Description::Queue(queue) => ("queue", None, queue.status),
        Description::Topic(topic) => ("topic", None, topic.status),
        Description::Subscription {
            topic,
            subscription,
        } => ("subscription", Some(topic.clone()), subscription.status),
    };
    let mut value = json!({
        "path": slot.description.path(),
        "kind": kind,
        "status": status.as_str(),
        "requires_session": requires_session(&slot.description),
        "counts": {
            "active": counts.active,
            "dead_letter": counts.dead_letter,
            "scheduled": counts.scheduled,
            "deferred": counts.deferred,
            "transfer": counts.transfer,
            "transfer_dead_letter": counts.transfer_dead_letter,
        },
        "size_bytes": counts.size_in_bytes,
        "totals": {
            "sent": totals.sent,
            "delivered": totals.delivered,
            "completed": totals.completed,
            "abandoned": totals.abandoned,
            "dead_lettered": totals.dead_lettered,
            "expired": totals.expired,
            "scheduled": totals.scheduled,
        },
    });
    if let Some(topic) = topic {
        value["topic"] = Json::String(topic);
    }
    if kind == "topic" {
        value["subscription_count"] = json!(runtime.subscription_count);
    }
    value
}

pub(super) fn filter_text(filter: &crate::broker::rules::FilterDefinition) -> String {
    use crate::broker::rules::FilterDefinition;
    match filter {
        FilterDefinition::True => "1=1".to_string(),
        FilterDefinition::False => "1=0".to_string(),
        FilterDefinition::Sql(text) => text.clone(),
        FilterDefinition::Correlation { fields, properties } => {
            const NAMES: [&str; 8] = [
                "correlation_id",
                "message_id",
                "to",
                "reply_to",
                "subject",
                "session_id",
                "reply_to_session_id",
                "content_type",
            ];
            let mut parts: Vec<String> = NAMES
                .iter()
                .zip(fields.iter())
                .filter_map(|(name, value)| {
                    value.as_ref().map(|value| format!("{name} = {value:?}"))
                })
                .collect();
            parts.extend(
                properties
                    .iter()
                    .map(|(name, value)| format!("{name} = {}", property_json(value))),
            );
            format!("correlation: {}", parts.join(", "))
        }
    }
}

/// A rule's SQL parameters for the page: name, type and value as text, in order.
pub(super) fn parameters_json(parameters: &[(String, crate::config::ParameterValue)]) -> Json {
    Json::Array(
        parameters
            .iter()
            .map(|(name, value)| {
                json!({
                    "name": name,
                    "type": value.type_name(),
                    "value": value.display_text(),
                })
            })
            .collect(),
    )
}

pub(super) fn property_json(value: &PropertyValue) -> Json {
    match value {
        PropertyValue::Null => Json::Null,
        PropertyValue::Bool(flag) => Json::Bool(*flag),
        PropertyValue::Long(number) => json!(number),
        PropertyValue::Double(number) => json!(number),
        PropertyValue::String(text) => Json::String(text.clone()),
        PropertyValue::Timestamp(millis) => Json::String(timestamp_text(Timestamp(*millis))),
        PropertyValue::Uuid(bytes) => Json::String(crate::encoding::ids::format_guid(bytes)),
        PropertyValue::Binary(bytes) => Json::String(hex(bytes)),
    }
}

pub(super) use crate::encoding::ids::hex;

/// A property the broker sets on a record (dead-letter reason and description), as a
/// receiver gets it: carried from a forwarding source, else in the application properties.
pub(super) fn broker_property(delivery: &Delivery, name: &str) -> Option<String> {
    let carried = delivery
        .message
        .extras()
        .extra_properties
        .iter()
        .rev()
        .find(|(key, _)| key == name);
    match carried {
        Some((_, PropertyValue::String(text))) => Some(text.clone()),
        Some((_, PropertyValue::Null)) => None,
        Some((_, other)) => Some(property_json(other).to_string()),
        None => crate::broker::message::application_property_text(&delivery.message, name),
    }
}

/// An application property as text (what the search compares with).
pub(super) fn property_text(delivery: &Delivery, name: &str) -> Option<String> {
    application_properties(delivery)
        .into_iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| match value {
            Json::String(text) => text,
            other => other.to_string(),
        })
}

pub(super) fn summary(delivery: &Delivery) -> Json {
    let message = &delivery.message;
    let mut value = json!({
        "sequence_number": delivery.sequence_number.0,
        "message_id": message.system().message_id(),
        "session_id": message.system().session_id(),
        "subject": message.system().subject(),
        "state": state_name(delivery.state()),
        "locked": delivery.lock.is_some(),
        "enqueued_time": timestamp_text(delivery.enqueued_time()),
        "delivery_count": delivery.delivery_count(),
        "size": message.encoded_size(),
    });
    if delivery.state() == MessageState::Scheduled
        && let Some(at) = message.extras().scheduled_enqueue_time
    {
        value["scheduled_enqueue_time"] = Json::String(timestamp_text(at));
    }
    if let Some(reason) = broker_property(delivery, "DeadLetterReason") {
        value["dead_letter_reason"] = Json::String(reason);
    }
    value
}

pub(super) fn detail(delivery: &Delivery) -> Json {
    let message = &delivery.message;
    let system = message.system();
    let mut fields: Vec<(&str, Json)> = vec![
        ("MessageId", json!(system.message_id())),
        ("CorrelationId", json!(system.correlation_id())),
        ("To", json!(system.to())),
        ("ReplyTo", json!(system.reply_to())),
        ("Subject", json!(system.subject())),
        ("SessionId", json!(system.session_id())),
        ("ReplyToSessionId", json!(system.reply_to_session_id())),
        ("ContentType", json!(system.content_type())),
        ("SequenceNumber", json!(delivery.sequence_number.0)),
        (
            "EnqueuedTime",
            json!(timestamp_text(delivery.enqueued_time())),
        ),
        ("DeliveryCount", json!(delivery.delivery_count())),
        ("State", json!(state_name(delivery.state()))),
        (
            "TimeToLive",
            json!(
                delivery
                    .time_to_live()
                    .map(crate::admin::atom::format_duration)
            ),
        ),
        (
            "ExpiresAt",
            json!(delivery.expires_at().map(timestamp_text)),
        ),
        (
            "LockedUntil",
            json!(delivery.lock.map(|lock| timestamp_text(lock.until))),
        ),
        (
            "ScheduledEnqueueTime",
            json!(message.extras().scheduled_enqueue_time.map(timestamp_text)),
        ),
        (
            "EnqueuedSequenceNumber",
            json!(message.extras().original_sequence_number),
        ),
        (
            "DeadLetterSource",
            json!(message.extras().dead_letter_source),
        ),
        (
            "DeadLetterReason",
            json!(broker_property(delivery, "DeadLetterReason")),
        ),
        (
            "DeadLetterErrorDescription",
            json!(broker_property(delivery, "DeadLetterErrorDescription")),
        ),
    ];
    fields.retain(|(_, value)| !value.is_null());
    let system_json: serde_json::Map<String, Json> = fields
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
    let properties: serde_json::Map<String, Json> =
        application_properties(delivery).into_iter().collect();
    let body = body_view(message);
    let mut shown = body.text;
    if shown.len() > MAX_SHOWN_BODY {
        let mut cut = MAX_SHOWN_BODY;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push_str("\n… (cut here: download the body for all of it)");
    }
    let mut value = summary(delivery);
    value["system"] = Json::Object(system_json);
    value["properties"] = Json::Object(properties);
    value["body"] = json!({ "kind": body.kind, "text": shown, "size": body.raw.len() });
    value
}

/// The application properties a receiver would get (the sender's, with the broker's
/// changes merged in), in order.
pub(super) fn application_properties(delivery: &Delivery) -> Vec<(String, Json)> {
    let mut encoded = BytesMut::new();
    amqp_message::encode_delivery(
        DeliveryView {
            record: &delivery.record,
            lock: None,
            lock_token: false,
        },
        &mut encoded,
    );
    let bytes = encoded.freeze();
    let mut at = 0;
    while at < bytes.len() {
        let Ok(length) = codec::value_length(&bytes, at) else {
            break;
        };
        if codec::section_code(&bytes, at) == Some(0x74) {
            let Ok(serde_amqp::Value::Described(described)) =
                serde_amqp::from_slice::<serde_amqp::Value>(&bytes[at..at + length])
            else {
                return Vec::new();
            };
            let serde_amqp::Value::Map(map) = described.value else {
                return Vec::new();
            };
            return map
                .into_iter()
                .map(|(key, value)| {
                    let name = match key {
                        serde_amqp::Value::String(text) => text,
                        other => amqp_json(&other).to_string(),
                    };
                    (name, amqp_json(&value))
                })
                .collect();
        }
        at += length;
    }
    Vec::new()
}

/// An AMQP value as JSON (timestamps as RFC 3339 text, binary as hex).
pub(super) fn amqp_json(value: &serde_amqp::Value) -> Json {
    use serde_amqp::Value;
    match value {
        Value::Null => Json::Null,
        Value::Bool(flag) => Json::Bool(*flag),
        Value::Ubyte(number) => json!(number),
        Value::Ushort(number) => json!(number),
        Value::Uint(number) => json!(number),
        Value::Ulong(number) => json!(number),
        Value::Byte(number) => json!(number),
        Value::Short(number) => json!(number),
        Value::Int(number) => json!(number),
        Value::Long(number) => json!(number),
        Value::Float(number) => json!(number.into_inner()),
        Value::Double(number) => json!(number.into_inner()),
        Value::Char(character) => Json::String(character.to_string()),
        Value::Timestamp(at) => Json::String(timestamp_text(Timestamp(at.milliseconds()))),
        Value::Uuid(uuid) => Json::String(crate::encoding::ids::format_guid(uuid.as_inner())),
        Value::Binary(bytes) => Json::String(hex(bytes)),
        Value::String(text) => Json::String(text.clone()),
        Value::Symbol(symbol) => Json::String(symbol.as_str().to_string()),
        Value::List(items) => Json::Array(items.iter().map(amqp_json).collect()),
        Value::Array(items) => Json::Array(items.iter().map(amqp_json).collect()),
        Value::Map(map) => Json::Object(
            map.iter()
                .map(|(key, value)| {
                    let name = match key {
                        Value::String(text) => text.clone(),
                        Value::Symbol(symbol) => symbol.as_str().to_string(),
                        other => amqp_json(other).to_string(),
                    };
                    (name, amqp_json(value))
                })
                .collect(),
        ),
        other => Json::String(format!("{other:?}")),
    }
}

/// A message body for showing, searching and downloading.
pub(super) struct BodyView {
    /// `json`, `xml`, `text` or `binary`.
    pub(super) kind: &'static str,
    /// What the page shows (pretty JSON, text, or a hex dump).
    pub(super) text: String,
    /// The bytes a download gives.
    pub(super) raw: Bytes,
}

pub(super) fn body_view(message: &Message) -> BodyView {
    let bytes = message.body();
    let mut data = BytesMut::new();
    let mut values = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Ok(length) = codec::value_length(bytes, at) else {
            break;
        };
        let section = &bytes[at..at + length];
        match codec::section_code(bytes, at) {
            Some(0x75) => {
                if let Ok(serde_amqp::Value::Described(described)) =
                    serde_amqp::from_slice::<serde_amqp::Value>(section)
                    && let serde_amqp::Value::Binary(chunk) = described.value
                {
                    data.extend_from_slice(&chunk);
                }
            }
            Some(0x76 | 0x77) => {
                if let Ok(serde_amqp::Value::Described(described)) =
                    serde_amqp::from_slice::<serde_amqp::Value>(section)
                {
                    values.push(described.value);
                }
            }
            _ => {}
        }
        at += length;
    }
    if values.is_empty() {
        return text_view(data.freeze(), message.system().content_type());
    }
    if let [serde_amqp::Value::String(text)] = values.as_slice() {
        return text_view(
            Bytes::from(text.clone().into_bytes()),
            message.system().content_type(),
        );
    }
    if let [serde_amqp::Value::Binary(binary)] = values.as_slice() {
        return text_view(
            Bytes::from(binary.to_vec()),
            message.system().content_type(),
        );
    }
    let shown = if values.len() == 1 {
        amqp_json(&values[0])
    } else {
        Json::Array(values.iter().map(amqp_json).collect())
    };
    let text = serde_json::to_string_pretty(&shown).unwrap_or_default();
    BodyView {
        kind: "json",
        raw: Bytes::from(text.clone().into_bytes()),
        text,
    }
}

pub(super) fn text_view(raw: Bytes, content_type: Option<&str>) -> BodyView {
    if let Ok(text) = std::str::from_utf8(&raw) {
        let trimmed = text.trim_start();
        let looks_json = trimmed.starts_with('{') || trimmed.starts_with('[');
        if (looks_json || content_type.is_some_and(|kind| kind.contains("json")))
            && let Ok(parsed) = serde_json::from_str::<Json>(text)
        {
            return BodyView {
                kind: "json",
                text: serde_json::to_string_pretty(&parsed).unwrap_or_else(|_| text.to_string()),
                raw,
            };
        }
        let printable = text
            .chars()
            .all(|character| !character.is_control() || matches!(character, '\n' | '\r' | '\t'));
        if printable {
            let kind = if trimmed.starts_with('<') {
                "xml"
            } else {
                "text"
            };
            return BodyView {
                kind,
                text: text.to_string(),
                raw,
            };
        }
    }
    BodyView {
        kind: "binary",
        text: hex_dump(&raw[..raw.len().min(MAX_SHOWN_BODY / 4)]),
        raw,
    }
}

pub(super) fn hex_dump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (index, chunk) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|byte| format!("{byte:02x}")).collect();
        let ascii: String = chunk
            .iter()
            .map(|&byte| {
                if byte.is_ascii_graphic() || byte == b' ' {
                    char::from(byte)
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!(
            "{:08x}  {:<47}  {ascii}\n",
            index * 16,
            hex.join(" ")
        ));
    }
    out
}

/// Encodes the message of a send request: header (durable, TTL), annotations (scheduled
/// enqueue time), properties, application properties and a data body, as an SDK would.
pub(super) fn build_message(request: &Json) -> Result<Bytes, Failure> {
    let body = match request.get("body") {
        None | Some(Json::Null) => String::new(),
        Some(Json::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    };
    let optional = |name: &str| -> Result<Option<String>, Failure> {
        match request.get(name) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(text)) if text.is_empty() => Ok(None),
            Some(Json::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(Failure::bad(format!("'{name}' must be text."))),
        }
    };
    let content_type = optional("content_type")?;
    let session_id = optional("session_id")?;
    let message_id = optional("message_id")?;
    let ttl = match request.get("ttl_seconds") {
        None | Some(Json::Null) => None,
        Some(value) => Some(
            value
                .as_f64()
                .filter(|seconds| *seconds > 0.0 && *seconds < 4_294_967.0)
                .ok_or_else(|| {
                    Failure::bad(
                        "'ttl_seconds' must be a positive number of seconds below 4294967.",
                    )
                })?,
        ),
    };
    let scheduled = match optional("scheduled_enqueue_time")? {
        None => None,
        Some(text) => {
            let time = crate::admin::atom::parse_timestamp(&text).ok_or_else(|| {
                Failure::bad(format!(
                    "'scheduled_enqueue_time' is not an RFC 3339 time: '{text}'."
                ))
            })?;
            let millis = time
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_millis() as i64)
                .unwrap_or(0);
            Some(millis)
        }
    };
    let properties: Vec<(String, PropertyValue)> = match request.get("properties") {
        None | Some(Json::Null) => Vec::new(),
        Some(Json::Object(map)) => map
            .iter()
            .map(|(name, value)| {
                let value = match value {
                    Json::String(text) => PropertyValue::String(text.clone()),
                    Json::Bool(flag) => PropertyValue::Bool(*flag),
                    Json::Null => PropertyValue::Null,
                    Json::Number(number) => match number.as_i64() {
                        Some(whole) => PropertyValue::Long(whole),
                        None => PropertyValue::Double(number.as_f64().unwrap_or(0.0)),
                    },
                    _ => {
                        return Err(Failure::bad(format!(
                            "Property '{name}': values are text, numbers, true/false or null."
                        )));
                    }
                };
                Ok((name.clone(), value))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(Failure::bad(
                "'properties' must be a JSON object of name: value.",
            ));
        }
    };

    let mut out = BytesMut::new();
    let mut writer = Writer::new(&mut out);
    writer.descriptor(0x70);
    let mut header = writer.start_list();
    writer.boolean(true);
    writer.ubyte(4);
    match ttl {
        Some(seconds) => writer.uint((seconds * 1000.0).round() as u32),
        None => writer.null(),
    }
    header.count = 3;
    writer.finish_compound(header);
    if let Some(at) = scheduled {
        writer.descriptor(0x72);
        let mut annotations = writer.start_map();
        writer.symbol("x-opt-scheduled-enqueue-time");
        writer.timestamp(at);
        annotations.count = 2;
        writer.finish_compound(annotations);
    }
    writer.descriptor(0x73);
    let mut list = writer.start_list();
    match &message_id {
        Some(id) => writer.string(id),
        None => writer.null(),
    }
    // user-id, to, subject, reply-to, correlation-id
    for _ in 0..5 {
        writer.null();
    }
    match &content_type {
        Some(kind) => writer.symbol(kind),
        None => writer.null(),
    }
    // content-encoding, absolute-expiry-time, creation-time
    writer.null();
    writer.null();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0);
    writer.timestamp(now);
    match &session_id {
        Some(id) => writer.string(id),
        None => writer.null(),
    }
    list.count = 11;
    writer.finish_compound(list);
    if !properties.is_empty() {
        writer.descriptor(0x74);
        let mut map = writer.start_map();
        for (name, value) in &properties {
            writer.string(name);
            crate::broker::message::write_property_value(&mut writer, value);
            map.count += 2;
        }
        writer.finish_compound(map);
    }
    writer.descriptor(0x75);
    writer.binary(body.as_bytes());
    Ok(out.freeze())
}
