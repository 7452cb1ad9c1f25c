//! Messages from the command line over the explorer's JSON API: `send`, `peek` (the summary,
//! detail and raw body routes), `resubmit`, `purge`, and the counts table of `status`. These
//! go through the entities' actors like any client's request (docs/explorer.md, "How the
//! actions work").

use std::io::Read as _;
use std::time::SystemTime;

use serde_json::{Value as Json, json};

use super::client::{OpsError, Target};
use super::entities::{encode, property_value};
use super::output::{self, print_entities, print_json, print_messages, put, text};
use super::{Connection, Output, PeekArgs, PurgeArgs, ResubmitArgs, SendArgs, SubQueue};
use crate::admin::atom::PropertyValue;

/// Largest page one peek request asks for.
const PAGE: usize = 100;

/// `ferrobus send`.
pub async fn send(arguments: &SendArgs) -> Result<(), OpsError> {
    let target = Target::from_options(arguments.connection.connection_string.as_deref())?;
    let body = match (&arguments.body, &arguments.file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => {
            let bytes = std::fs::read(path).map_err(|error| {
                OpsError::Usage(format!("cannot read {}: {error}", path.display()))
            })?;
            String::from_utf8(bytes).map_err(|_| {
                OpsError::Usage(format!(
                    "{} is not UTF-8 text: the CLI sends text bodies",
                    path.display()
                ))
            })?
        }
        (None, None) => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|error| {
                    OpsError::Usage(format!("cannot read the body from standard input: {error}"))
                })?;
            text
        }
    };
    let mut request = json!({ "path": arguments.path, "body": body, "count": arguments.count });
    if !arguments.properties.is_empty() {
        let mut properties = serde_json::Map::new();
        for pair in &arguments.properties {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| OpsError::Usage(format!("--property {pair:?} is not NAME=VALUE")))?;
            let value = match property_value(value) {
                PropertyValue::Int(number) => json!(number),
                PropertyValue::Long(number) => json!(number),
                PropertyValue::Double(number) => json!(number),
                PropertyValue::Boolean(value) => json!(value),
                PropertyValue::String(text) => json!(text),
                other => json!(other.to_text()),
            };
            properties.insert(name.to_string(), value);
        }
        request["properties"] = Json::Object(properties);
    }
    for (key, value) in [
        ("message_id", &arguments.message_id),
        ("content_type", &arguments.content_type),
        ("session_id", &arguments.session_id),
    ] {
        if let Some(value) = value {
            request[key] = json!(value);
        }
    }
    if let Some(seconds) = arguments.ttl {
        request["ttl_seconds"] = json!(seconds);
    }
    if let Some(schedule) = &arguments.schedule {
        request["scheduled_enqueue_time"] = json!(schedule_time(schedule)?);
    }
    let answer = target.explorer("POST", "send", Some(&request)).await?;
    if arguments.connection.output == Some(Output::Json) {
        print_json(&answer);
    } else {
        let numbers: Vec<String> = answer
            .get("sequence_numbers")
            .and_then(Json::as_array)
            .map(|numbers| numbers.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default();
        println!(
            "sent {} to {}{}",
            output::number(&answer, "/sent"),
            arguments.path,
            if numbers.is_empty() {
                String::new()
            } else {
                format!(" (sequence numbers {})", numbers.join(", "))
            }
        );
    }
    Ok(())
}

/// `--schedule`: RFC 3339 as given, or `+DURATION` from now.
fn schedule_time(text: &str) -> Result<String, OpsError> {
    if let Some(delay) = text.strip_prefix('+') {
        let delay = crate::config::duration::parse_duration(delay)
            .map_err(|error| OpsError::Usage(format!("--schedule {text:?}: {error}")))?;
        return Ok(crate::admin::atom::format_timestamp(
            SystemTime::now() + delay,
        ));
    }
    if crate::admin::atom::parse_timestamp(text).is_none() {
        return Err(OpsError::Usage(format!(
            "--schedule {text:?} is neither an RFC 3339 time (2030-01-01T00:00:00Z) nor +DURATION"
        )));
    }
    Ok(text.to_string())
}

/// `ferrobus peek`.
pub async fn peek(arguments: &PeekArgs) -> Result<(), OpsError> {
    let target = Target::from_options(arguments.connection.connection_string.as_deref())?;
    let queue = arguments.queue.api_name();
    let path = encode(&arguments.path);
    let mut summaries: Vec<Json> = Vec::new();
    let mut from = arguments.from;
    while summaries.len() < arguments.count {
        let wanted = (arguments.count - summaries.len()).min(PAGE);
        let answer = target
            .explorer(
                "GET",
                &format!(
                    "messages?path={path}&queue={queue}&from={from}&count={wanted}&state={}",
                    encode(&arguments.state)
                ),
                None,
            )
            .await?;
        let page = answer
            .get("messages")
            .and_then(Json::as_array)
            .cloned()
            .unwrap_or_default();
        summaries.extend(page.into_iter().take(wanted));
        match answer.get("next").and_then(Json::as_i64) {
            Some(next) if next > from => from = next,
            _ => break,
        }
    }
    let mut messages = Vec::new();
    for summary in &summaries {
        let sequence = text(summary, "/sequence_number");
        let route = format!("path={path}&queue={queue}&seq={sequence}");
        let detail = target
            .explorer("GET", &format!("message?{route}"), None)
            .await?;
        let body = target
            .explorer_bytes(&format!("message/body?{route}"))
            .await?;
        messages.push(peeked(&detail, &body));
    }
    print_messages(
        &messages,
        arguments.connection.output == Some(Output::Table),
    );
    Ok(())
}

/// A peeked message (the explorer's `MessageDetail` and raw body) in the CLI's message shape.
fn peeked(detail: &Json, body: &[u8]) -> Json {
    let mut object = output::message_object();
    let system = |name: &str| {
        detail
            .pointer(&format!("/system/{name}"))
            .cloned()
            .unwrap_or(Json::Null)
    };
    put(
        &mut object,
        "sequence_number",
        detail.get("sequence_number").cloned().unwrap_or(Json::Null),
    );
    put(&mut object, "message_id", system("MessageId"));
    put(&mut object, "session_id", system("SessionId"));
    put(&mut object, "correlation_id", system("CorrelationId"));
    put(&mut object, "subject", system("Subject"));
    put(&mut object, "content_type", system("ContentType"));
    put(&mut object, "to", system("To"));
    put(&mut object, "reply_to", system("ReplyTo"));
    put(&mut object, "enqueued_time", system("EnqueuedTime"));
    put(
        &mut object,
        "scheduled_enqueue_time",
        system("ScheduledEnqueueTime"),
    );
    put(&mut object, "expires_at", system("ExpiresAt"));
    put(&mut object, "delivery_count", system("DeliveryCount"));
    put(
        &mut object,
        "state",
        detail.get("state").cloned().unwrap_or(Json::Null),
    );
    put(&mut object, "locked_until", system("LockedUntil"));
    put(
        &mut object,
        "dead_letter_reason",
        system("DeadLetterReason"),
    );
    put(
        &mut object,
        "dead_letter_description",
        system("DeadLetterErrorDescription"),
    );
    put(
        &mut object,
        "dead_letter_source",
        system("DeadLetterSource"),
    );
    put(
        &mut object,
        "properties",
        detail
            .get("properties")
            .cloned()
            .unwrap_or_else(|| json!({})),
    );
    output::body_fields(&mut object, body);
    Json::Object(object)
}

/// `ferrobus resubmit`.
pub async fn resubmit(arguments: &ResubmitArgs) -> Result<(), OpsError> {
    let target = Target::from_options(arguments.connection.connection_string.as_deref())?;
    let queue = if arguments.transfer {
        SubQueue::TransferDlq
    } else {
        SubQueue::Dlq
    };
    let mut request = json!({ "path": arguments.path, "queue": queue.api_name() });
    if arguments.all {
        request["all"] = json!(true);
    } else {
        request["sequence_numbers"] = json!(arguments.sequence_numbers);
    }
    if let Some(to) = &arguments.to {
        request["target"] = json!(to);
    }
    let mut total = 0u64;
    let mut destination = Json::Null;
    loop {
        let answer = target.explorer("POST", "resubmit", Some(&request)).await?;
        let count = answer
            .get("resubmitted")
            .and_then(Json::as_u64)
            .unwrap_or(0);
        total += count;
        destination = answer.get("target").cloned().unwrap_or(destination);
        // `all` moves at most 10 000 a request: ask again until a request moves fewer.
        if !arguments.all || count < 10_000 {
            break;
        }
    }
    let answer = json!({ "resubmitted": total, "target": destination });
    if arguments.connection.output == Some(Output::Json) {
        print_json(&answer);
    } else {
        println!("resubmitted {total} to {}", text(&answer, "/target"));
    }
    Ok(())
}

/// `ferrobus purge`.
pub async fn purge(arguments: &PurgeArgs) -> Result<(), OpsError> {
    let target = Target::from_options(arguments.connection.connection_string.as_deref())?;
    let request = json!({
        "path": arguments.path,
        "queue": arguments.queue.api_name(),
        "confirm": arguments.path,
    });
    let answer = target.explorer("POST", "purge", Some(&request)).await?;
    if arguments.connection.output == Some(Output::Json) {
        print_json(&answer);
    } else {
        println!(
            "deleted {} from {} ({})",
            output::number(&answer, "/deleted"),
            arguments.path,
            arguments.queue.api_name()
        );
    }
    Ok(())
}

/// `ferrobus status`: every entity with its counts.
pub async fn status(connection: &Connection) -> Result<(), OpsError> {
    let target = Target::from_options(connection.connection_string.as_deref())?;
    let answer = target.explorer("GET", "entities", None).await?;
    let entities = answer
        .get("entities")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    if connection.output == Some(Output::Json) {
        print_json(&Json::Array(entities));
    } else {
        print_entities(&entities, true);
    }
    Ok(())
}
