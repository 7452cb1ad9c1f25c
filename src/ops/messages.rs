//! Messages from the command line over the explorer's JSON API: `peek` (the summary,
//! detail and raw body routes), `resubmit`, `purge`, and the counts table of `status`. These
//! go through the entities' actors like any client's request (docs/explorer.md, "How the
//! actions work").

use serde_json::{Value as Json, json};

use super::client::{OpsError, Target};
use super::entities::encode;
use super::output::{self, print_entities, print_json, print_messages, put, text};
use super::{Connection, Output, PeekArgs, PurgeArgs, ResubmitArgs, SubQueue};

/// Largest page one peek request asks for.
const PAGE: usize = 100;

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
