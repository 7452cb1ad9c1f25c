//! `ferrobus receive`: messages taken over AMQP with fe2o3-amqp, as an SDK receiver takes
//! them: peek-lock, each completed once it is printed (the default), or receive-and-delete.
//! A receiver is a link a client holds, with locks, sessions and flow control, which no HTTP
//! route offers.
//!
//! The connection is [`super::amqp::Link`]'s. Credit is granted one message at a time, so
//! receive-and-delete takes no message it will not print; when the wait ends the credit is
//! drained and whatever the broker sent meanwhile is printed too.

use std::time::Duration;

use fe2o3_amqp::link::{ReceiverAttachError, RecvError};
use fe2o3_amqp::types::definitions::{ReceiverSettleMode, SenderSettleMode};
use fe2o3_amqp::types::messaging::{Body, MessageId, Source};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use fe2o3_amqp::{Delivery, Receiver};
use serde_json::{Value as Json, json};

use super::amqp::{Link, condition_error};
use super::client::{OpsError, Target};
use super::entities::encode;
use super::output::{self, print_messages, put};
use super::{Output, ReceiveArgs, SubQueue};

/// How long the broker gets to answer the drain at the end (messages it sent before it saw
/// the drain arrive within it).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// `ferrobus receive`.
pub async fn receive(arguments: &ReceiveArgs) -> Result<(), OpsError> {
    let target = Target::from_options(arguments.connection.connection_string.as_deref())?;
    let as_table = arguments.connection.output == Some(Output::Table);
    // A session entity needs a session filter: ask whether this one is (one request, which
    // needs the Manage right; a key without it receives as from an entity without sessions
    // unless --session-id is given).
    let sessions = arguments.queue == SubQueue::Main
        && (arguments.session_id.is_some()
            || match target
                .explorer(
                    "GET",
                    &format!("entity?path={}", encode(&arguments.path)),
                    None,
                )
                .await
            {
                Ok(detail) => detail
                    .get("requires_session")
                    .and_then(Json::as_bool)
                    .unwrap_or(false),
                Err(OpsError::Unauthorized(_)) => false,
                Err(error) => return Err(error),
            });
    let address = match arguments.queue {
        SubQueue::Main => arguments.path.clone(),
        SubQueue::Dlq => format!("{}/$DeadLetterQueue", arguments.path),
        SubQueue::TransferDlq => format!("{}/$Transfer/$DeadLetterQueue", arguments.path),
    };
    let mut link = Link::open(&target).await?;
    let mut source = Source::builder().address(address.clone());
    if sessions {
        let value = match &arguments.session_id {
            Some(id) => Value::String(id.clone()),
            None => Value::Null,
        };
        source = source.add_to_filter_using_legacy_format("com.microsoft:session-filter", value);
    }
    let settle = if arguments.receive_and_delete {
        SenderSettleMode::Settled
    } else {
        SenderSettleMode::Unsettled
    };
    let mut receiver = Receiver::builder()
        .name(format!("ferrobus-cli-receive-{}", std::process::id()))
        .source(source.build())
        .sender_settle_mode(settle)
        .receiver_settle_mode(ReceiverSettleMode::First)
        .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Manual)
        .attach(&mut link.session)
        .await
        .map_err(|error| attach_error(&address, error))?;
    let mut messages = Vec::new();
    let mut failure = None;
    while messages.len() < arguments.count as usize {
        if let Err(error) = receiver.set_credit(1).await {
            failure = Some(OpsError::Refused(format!("cannot grant credit: {error}")));
            break;
        }
        match tokio::time::timeout(arguments.wait, receiver.recv::<Body<Value>>()).await {
            Ok(Ok(delivery)) => {
                // Printed before it is completed: a run cut short between the two leaves
                // the message to be delivered again, never taken and unseen.
                let message = message_json(&delivery);
                print_now(&message, as_table, &mut messages);
                if !arguments.receive_and_delete
                    && let Err(error) = receiver.accept(&delivery).await
                {
                    failure = Some(OpsError::Refused(format!(
                        "cannot complete message {} (it will be delivered again): {error}",
                        output::text(&message, "/sequence_number")
                    )));
                    break;
                }
            }
            Ok(Err(error)) => {
                failure = Some(receive_error(&address, error));
                break;
            }
            Err(_) => {
                // The wait is over: take back the credit; a message already on its way is
                // printed (and completed) rather than lost.
                if receiver.drain().await.is_ok()
                    && let Ok(Ok(delivery)) =
                        tokio::time::timeout(DRAIN_GRACE, receiver.recv::<Body<Value>>()).await
                {
                    let message = message_json(&delivery);
                    print_now(&message, as_table, &mut messages);
                    if !arguments.receive_and_delete {
                        let _ = receiver.accept(&delivery).await;
                    }
                }
                break;
            }
        }
    }
    if as_table {
        print_messages(&messages, true);
    }
    let _ = receiver.close().await;
    link.close().await;
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// JSON lines are printed as each message is taken (a message is never taken and lost to a
/// later failure); a table waits for all of them.
fn print_now(message: &Json, as_table: bool, messages: &mut Vec<Json>) {
    if !as_table {
        output::print_json_line(message);
    }
    messages.push(message.clone());
}

fn attach_error(address: &str, error: ReceiverAttachError) -> OpsError {
    match error {
        ReceiverAttachError::RemoteClosedWithError(error) => condition_error(address, &error),
        other => OpsError::Refused(format!("cannot receive from '{address}': {other}")),
    }
}

fn receive_error(address: &str, error: RecvError) -> OpsError {
    match error {
        RecvError::LinkStateError(fe2o3_amqp::link::LinkStateError::RemoteDetachedWithError(
            error,
        ))
        | RecvError::LinkStateError(fe2o3_amqp::link::LinkStateError::RemoteClosedWithError(
            error,
        )) => condition_error(address, &error),
        other => OpsError::Refused(format!("receiving from '{address}' failed: {other}")),
    }
}

/// A received message in the CLI's message shape.
fn message_json(delivery: &Delivery<Body<Value>>) -> Json {
    let message = delivery.message();
    let mut object = output::message_object();
    let annotation = |key: &str| -> Json {
        message
            .message_annotations
            .as_ref()
            .and_then(|annotations| {
                annotations.0.iter().find_map(|(name, value)| match name {
                    fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(symbol)
                        if symbol.0 == key =>
                    {
                        Some(value_json(value))
                    }
                    _ => None,
                })
            })
            .unwrap_or(Json::Null)
    };
    put(
        &mut object,
        "sequence_number",
        annotation("x-opt-sequence-number"),
    );
    if let Some(properties) = &message.properties {
        put(
            &mut object,
            "message_id",
            properties
                .message_id
                .as_ref()
                .map(message_id_json)
                .unwrap_or(Json::Null),
        );
        put(&mut object, "session_id", json!(properties.group_id));
        put(
            &mut object,
            "correlation_id",
            properties
                .correlation_id
                .as_ref()
                .map(message_id_json)
                .unwrap_or(Json::Null),
        );
        put(&mut object, "subject", json!(properties.subject));
        put(
            &mut object,
            "content_type",
            json!(
                properties
                    .content_type
                    .as_ref()
                    .map(|symbol| symbol.0.clone())
            ),
        );
        put(&mut object, "to", json!(properties.to));
        put(&mut object, "reply_to", json!(properties.reply_to));
    }
    put(
        &mut object,
        "enqueued_time",
        annotation("x-opt-enqueued-time"),
    );
    put(
        &mut object,
        "scheduled_enqueue_time",
        annotation("x-opt-scheduled-enqueue-time"),
    );
    put(
        &mut object,
        "locked_until",
        annotation("x-opt-locked-until"),
    );
    if let Some(header) = &message.header {
        put(&mut object, "delivery_count", json!(header.delivery_count));
    }
    let mut properties = serde_json::Map::new();
    if let Some(application) = &message.application_properties {
        for (name, value) in application.0.iter() {
            match name.as_str() {
                "DeadLetterReason" => put(&mut object, "dead_letter_reason", simple_json(value)),
                "DeadLetterErrorDescription" => {
                    put(&mut object, "dead_letter_description", simple_json(value))
                }
                _ => {}
            }
            properties.insert(name.clone(), simple_json(value));
        }
    }
    put(
        &mut object,
        "dead_letter_source",
        annotation("x-opt-deadletter-source"),
    );
    object.insert("properties".to_string(), Json::Object(properties));
    match &message.body {
        Body::Data(batch) => {
            let bytes: Vec<u8> = batch
                .iter()
                .flat_map(|data| data.0.iter().copied())
                .collect();
            output::body_fields(&mut object, &bytes);
        }
        Body::Value(value) => match &value.0 {
            Value::String(text) => {
                object.insert("body".to_string(), json!(text));
            }
            Value::Binary(bytes) => output::body_fields(&mut object, bytes),
            other => {
                object.insert("body_value".to_string(), value_json(other));
            }
        },
        Body::Sequence(batch) => {
            let items: Vec<Json> = batch
                .iter()
                .map(|sequence| Json::Array(sequence.0.iter().map(value_json).collect()))
                .collect();
            object.insert("body_sequence".to_string(), Json::Array(items));
        }
        Body::Empty => {
            object.insert("body".to_string(), json!(""));
        }
    }
    Json::Object(object)
}

fn message_id_json(id: &MessageId) -> Json {
    match id {
        MessageId::String(text) => json!(text),
        MessageId::Ulong(number) => json!(number),
        MessageId::Uuid(uuid) => json!(crate::encoding::ids::format_guid(uuid.as_inner())),
        MessageId::Binary(bytes) => json!(crate::encoding::ids::hex(bytes)),
    }
}

fn timestamp_json(milliseconds: i64) -> Json {
    let time = std::time::UNIX_EPOCH + Duration::from_millis(milliseconds.max(0) as u64);
    json!(crate::admin::atom::format_timestamp(time))
}

fn simple_json(value: &SimpleValue) -> Json {
    match value {
        SimpleValue::Null => Json::Null,
        SimpleValue::Bool(value) => json!(value),
        SimpleValue::Ubyte(number) => json!(number),
        SimpleValue::Ushort(number) => json!(number),
        SimpleValue::Uint(number) => json!(number),
        SimpleValue::Ulong(number) => json!(number),
        SimpleValue::Byte(number) => json!(number),
        SimpleValue::Short(number) => json!(number),
        SimpleValue::Int(number) => json!(number),
        SimpleValue::Long(number) => json!(number),
        SimpleValue::Float(number) => json!(number.into_inner()),
        SimpleValue::Double(number) => json!(number.into_inner()),
        SimpleValue::Char(character) => json!(character.to_string()),
        SimpleValue::Timestamp(time) => timestamp_json(time.milliseconds()),
        SimpleValue::Uuid(uuid) => json!(crate::encoding::ids::format_guid(uuid.as_inner())),
        SimpleValue::Binary(bytes) => {
            use base64::Engine as _;
            json!(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        SimpleValue::String(text) => json!(text),
        SimpleValue::Symbol(symbol) => json!(symbol.0),
        other => json!(format!("{other:?}")),
    }
}

fn value_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(value) => json!(value),
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
        Value::Char(character) => json!(character.to_string()),
        Value::Timestamp(time) => timestamp_json(time.milliseconds()),
        Value::Uuid(uuid) => json!(crate::encoding::ids::format_guid(uuid.as_inner())),
        Value::Binary(bytes) => {
            use base64::Engine as _;
            json!(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        Value::String(text) => json!(text),
        Value::Symbol(symbol) => json!(symbol.0),
        Value::List(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Array(items) => Json::Array(items.0.iter().map(value_json).collect()),
        Value::Map(map) => Json::Object(
            map.iter()
                .map(|(key, value)| {
                    let key = match value_json(key) {
                        Json::String(text) => text,
                        other => other.to_string(),
                    };
                    (key, value_json(value))
                })
                .collect(),
        ),
        Value::Described(described) => value_json(&described.value),
        other => json!(format!("{other:?}")),
    }
}
