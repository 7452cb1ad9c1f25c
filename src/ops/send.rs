//! `ferrobus send`: a message sent over AMQP as an SDK sender sends it — the body as one data
//! section (any bytes, from an argument, a file or standard input), the properties section,
//! typed application properties, the time to live in the header, and a schedule as the
//! `x-opt-scheduled-enqueue-time` annotation (rule SCH-1). A key with the `Send` right is
//! enough, as for any sender.

use std::io::Read as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fe2o3_amqp::Sender;
use fe2o3_amqp::link::SenderAttachError;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Data, Header, Message, MessageAnnotations, MessageId, Outcome,
    Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use serde_json::json;

use super::amqp::{Link, condition_error};
use super::client::{OpsError, Target};
use super::entities::property_value;
use super::output::print_json;
use super::{Output, SendArgs};
use crate::admin::atom::PropertyValue;

/// Most copies one `send` sends.
const MAX_COUNT: u32 = 1000;

/// `ferrobus send`.
pub async fn send(arguments: &SendArgs) -> Result<(), OpsError> {
    let target = Target::from_options(arguments.connection.connection_string.as_deref())?;
    if arguments.count == 0 || arguments.count > MAX_COUNT {
        return Err(OpsError::Usage(format!(
            "--count {} is not between 1 and {MAX_COUNT}",
            arguments.count
        )));
    }
    let message = message(arguments, &body(arguments)?)?;
    let mut link = Link::open(&target).await?;
    let result = send_all(&mut link, arguments, message).await;
    link.close().await;
    let sent = result?;
    if arguments.connection.output == Some(Output::Json) {
        print_json(&json!({ "sent": sent, "path": arguments.path }));
    } else {
        println!("sent {sent} to {}", arguments.path);
    }
    Ok(())
}

async fn send_all(
    link: &mut Link,
    arguments: &SendArgs,
    message: Message<Data>,
) -> Result<u32, OpsError> {
    let address = arguments.path.as_str();
    let mut sender = Sender::builder()
        .name(format!("ferrobus-cli-send-{}", std::process::id()))
        .target(address)
        .attach(&mut link.session)
        .await
        .map_err(|error| match error {
            SenderAttachError::RemoteClosedWithError(error) => condition_error(address, &error),
            other => OpsError::Refused(format!("cannot send to '{address}': {other}")),
        })?;
    let mut sent = 0;
    let mut failure = None;
    while sent < arguments.count {
        match sender.send(message.clone()).await {
            Ok(Outcome::Accepted(_)) => sent += 1,
            Ok(Outcome::Rejected(rejected)) => {
                failure = Some(match rejected.error {
                    Some(error) => condition_error(address, &error),
                    None => OpsError::Refused(format!("'{address}' rejected the message")),
                });
                break;
            }
            Ok(other) => {
                failure = Some(OpsError::Refused(format!(
                    "'{address}' did not accept the message: {other:?}"
                )));
                break;
            }
            Err(fe2o3_amqp::link::SendError::LinkStateError(
                fe2o3_amqp::link::LinkStateError::RemoteDetachedWithError(error)
                | fe2o3_amqp::link::LinkStateError::RemoteClosedWithError(error),
            )) => {
                failure = Some(condition_error(address, &error));
                break;
            }
            Err(error) => {
                failure = Some(OpsError::Refused(format!(
                    "sending to '{address}' failed: {error}"
                )));
                break;
            }
        }
    }
    let _ = sender.close().await;
    match failure {
        // The copies sent before the refusal are in the entity: say so.
        Some(error) if sent > 0 => Err(match error {
            OpsError::Refused(text) => OpsError::Refused(format!("{text} (after {sent} sent)")),
            other => other,
        }),
        Some(error) => Err(error),
        None => Ok(sent),
    }
}

/// The body's bytes: `--body`, else `--file`, else standard input, exactly.
fn body(arguments: &SendArgs) -> Result<Vec<u8>, OpsError> {
    match (&arguments.body, &arguments.file) {
        (Some(text), _) => Ok(text.clone().into_bytes()),
        (None, Some(path)) => std::fs::read(path)
            .map_err(|error| OpsError::Usage(format!("cannot read {}: {error}", path.display()))),
        (None, None) => {
            let mut bytes = Vec::new();
            std::io::stdin().read_to_end(&mut bytes).map_err(|error| {
                OpsError::Usage(format!("cannot read the body from standard input: {error}"))
            })?;
            Ok(bytes)
        }
    }
}

/// The AMQP message the flags describe.
fn message(arguments: &SendArgs, body: &[u8]) -> Result<Message<Data>, OpsError> {
    let properties = Properties {
        message_id: arguments.message_id.clone().map(MessageId::String),
        correlation_id: arguments.correlation_id.clone().map(MessageId::String),
        subject: arguments.subject.clone(),
        content_type: arguments.content_type.clone().map(Symbol::from),
        group_id: arguments.session_id.clone(),
        ..Properties::default()
    };
    let mut application = ApplicationProperties::default();
    for pair in &arguments.properties {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| OpsError::Usage(format!("--property {pair:?} is not NAME=VALUE")))?;
        let value = match property_value(value) {
            PropertyValue::Int(number) => SimpleValue::Int(number),
            PropertyValue::Long(number) => SimpleValue::Long(number),
            PropertyValue::Double(number) => SimpleValue::Double(number.into()),
            PropertyValue::Boolean(value) => SimpleValue::Bool(value),
            PropertyValue::String(text) => SimpleValue::String(text),
            other => SimpleValue::String(other.to_text()),
        };
        application.0.insert(name.to_string(), value);
    }
    let header = Header {
        durable: true,
        ttl: arguments
            .ttl
            .map(|ttl| u32::try_from(ttl.as_millis()).unwrap_or(u32::MAX)),
        ..Header::default()
    };
    let mut builder = Message::builder()
        .header(header)
        .properties(properties)
        .application_properties(application);
    if let Some(schedule) = &arguments.schedule {
        let at = schedule_time(schedule)?;
        let milliseconds = at
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as i64;
        let mut annotations = MessageAnnotations::default();
        annotations.0.insert(
            Symbol::from("x-opt-scheduled-enqueue-time").into(),
            Value::Timestamp(Timestamp::from_milliseconds(milliseconds)),
        );
        builder = builder.message_annotations(annotations);
    }
    Ok(builder.data(Binary::from(body.to_vec())).build())
}

/// `--schedule`: RFC 3339, or `+DURATION` from now.
fn schedule_time(text: &str) -> Result<SystemTime, OpsError> {
    if let Some(delay) = text.strip_prefix('+') {
        let delay = crate::config::duration::parse_duration(delay)
            .map_err(|error| OpsError::Usage(format!("--schedule {text:?}: {error}")))?;
        return Ok(SystemTime::now() + delay);
    }
    crate::admin::atom::parse_timestamp(text).ok_or_else(|| {
        OpsError::Usage(format!(
            "--schedule {text:?} is neither an RFC 3339 time (2030-01-01T00:00:00Z) nor +DURATION"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Connection;

    fn arguments() -> SendArgs {
        SendArgs {
            path: "q".to_string(),
            body: Some("hi".to_string()),
            file: None,
            properties: vec![
                "n=3".to_string(),
                "s=\"3\"".to_string(),
                "ok=true".to_string(),
            ],
            message_id: Some("m1".to_string()),
            correlation_id: None,
            subject: Some("new".to_string()),
            content_type: Some("text/plain".to_string()),
            session_id: Some("s1".to_string()),
            ttl: Some(std::time::Duration::from_secs(60)),
            schedule: Some("2030-01-01T00:00:00Z".to_string()),
            count: 1,
            connection: Connection::default(),
        }
    }

    #[test]
    fn the_flags_make_the_message_an_sdk_would_send() {
        let message = message(&arguments(), b"hi").expect("a message");
        let properties = message.properties.expect("properties");
        assert_eq!(properties.message_id, Some(MessageId::String("m1".into())));
        assert_eq!(properties.group_id.as_deref(), Some("s1"));
        assert_eq!(properties.subject.as_deref(), Some("new"));
        let application = message
            .application_properties
            .expect("application properties");
        assert_eq!(application.0.get("n"), Some(&SimpleValue::Int(3)));
        assert_eq!(
            application.0.get("s"),
            Some(&SimpleValue::String("3".into()))
        );
        assert_eq!(application.0.get("ok"), Some(&SimpleValue::Bool(true)));
        assert_eq!(message.header.and_then(|header| header.ttl), Some(60_000));
        let annotations = message.message_annotations.expect("the schedule");
        assert_eq!(
            annotations.0.values().next(),
            Some(&Value::Timestamp(Timestamp::from_milliseconds(
                1_893_456_000_000
            )))
        );
        assert_eq!(message.body.0.as_slice(), b"hi");
    }

    #[test]
    fn a_bad_schedule_is_a_usage_error() {
        let mut bad = arguments();
        bad.schedule = Some("tomorrow".to_string());
        assert!(matches!(message(&bad, b""), Err(OpsError::Usage(_))));
        bad.schedule = Some("+5m".to_string());
        assert!(message(&bad, b"").is_ok());
    }
}
