//! The explorer: a web page on the HTTP side (`/explorer/`) that shows what the broker holds
//! and repairs it — entity counts and rates, peek with search, message detail, dead-letter
//! resubmit, purge, single-message actions and a send form — and its JSON API
//! (`/explorer/api/…`, contract in `docs/explorer.md`).
//!
//! Every operation goes through the namespace and the entity actors' commands, as AMQP and
//! the admin API do: the explorer has no access of its own to stored messages. With
//! `[[auth.keys]]` configured, requests need HTTP Basic authentication with a key name and
//! key holding the Manage right.

use std::sync::Arc;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use serde_json::{Value as Json, json};

use super::http::Admin;
use crate::amqp::codec::{self, Writer};
use crate::amqp::message::{self as amqp_message, DeliveryView};
use crate::amqp::sas;
use crate::broker::entity::{Command, Delivery, EntityHandle, Reply, ReplyTo};
use crate::broker::message::Message;
use crate::broker::namespace::{NamespaceError, Runtime};
use crate::broker::registry::{Description, Entity, Slot};
use crate::broker::topic::{TopicCommand, TopicHandle};
use crate::broker::types::{
    EntityError, MessageState, PropertyValue, ReceiveMode, SequenceNumber, Settlement, SubQueue,
    Timestamp,
};
use crate::config::changes::NamespaceChanges;
use crate::config::{RuleConfig, TopicConfig, render};

const INDEX_HTML: &str = include_str!("explorer/index.html");
const APP_JS: &str = include_str!("explorer/app.js");
const APP_CSS: &str = include_str!("explorer/app.css");

/// Largest request body the API takes (a send form's body, a definition).
const MAX_BODY: usize = 4 * 1024 * 1024;
/// Messages one page of the message list shows at most.
const MAX_PAGE: usize = 200;
/// Messages one list request looks at while searching, at most (the answer's `next`
/// continues from there).
const MAX_SCAN: usize = 5_000;
/// Messages one peek command returns.
const PEEK_BATCH: usize = 100;
/// Messages one resubmit request moves at most (the page asks again for more).
const MAX_RESUBMIT: usize = 10_000;
/// Messages one send request may create.
const MAX_SEND_COUNT: u64 = 1_000;
/// Sessions listed in an entity's detail.
const MAX_SESSIONS: usize = 100;
/// Body text shown in a message's detail at most (the download has all of it).
const MAX_SHOWN_BODY: usize = 256 * 1024;

/// Serves one explorer request: `rest` is the path after `/explorer`.
pub async fn handle(admin: &Admin, parts: Parts, body: Body, rest: &[String]) -> Response {
    if let Err(response) = authorize(admin, &parts.headers) {
        return *response;
    }
    let route: Vec<&str> = rest.iter().map(String::as_str).collect();
    match (&parts.method, route.as_slice()) {
        (&Method::GET, []) if !parts.uri.path().ends_with('/') => {
            // Relative links of the page need the trailing slash.
            let mut response = StatusCode::PERMANENT_REDIRECT.into_response();
            response
                .headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/explorer/"));
            response
        }
        (&Method::GET, [] | ["index.html"]) => file(INDEX_HTML, "text/html; charset=utf-8"),
        (&Method::GET, ["app.js"]) => file(APP_JS, "text/javascript; charset=utf-8"),
        (&Method::GET, ["app.css"]) => file(APP_CSS, "text/css; charset=utf-8"),
        (_, ["api", ..]) => {
            let body = match axum::body::to_bytes(body, MAX_BODY).await {
                Ok(bytes) => bytes,
                Err(_) => {
                    return error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "The request body is larger than 4 MiB.",
                    );
                }
            };
            let query = Query::parse(parts.uri.query().unwrap_or(""));
            let api = Api {
                admin,
                query: &query,
            };
            if parts.method == Method::GET && route[1..] == ["message", "body"] {
                return match api.body().await {
                    Ok(response) => response,
                    Err(failure) => error(failure.status, &failure.text),
                };
            }
            let result = api.route(&parts.method, &route[1..], &body).await;
            match result {
                Ok((status, value)) => json_response(status, &value),
                Err(failure) => error(failure.status, &failure.text),
            }
        }
        _ => error(
            StatusCode::NOT_FOUND,
            &format!("No explorer resource at '{}'.", parts.uri.path()),
        ),
    }
}

/// Checks HTTP Basic credentials against the configured keys (Manage right needed).
fn authorize(admin: &Admin, headers: &HeaderMap) -> Result<(), Box<Response>> {
    if admin.keys.is_empty() {
        return Ok(());
    }
    let denied = |text: &str| {
        let mut response = error(StatusCode::UNAUTHORIZED, text);
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"ferrobus explorer\", charset=\"UTF-8\""),
        );
        Box::new(response)
    };
    let Some(encoded) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
    else {
        return Err(denied(
            "The explorer needs a key name and key with the Manage right (HTTP Basic authentication).",
        ));
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    let Some((name, key)) = decoded.as_deref().and_then(|text| text.split_once(':')) else {
        return Err(denied("The Basic credentials are not 'name:key'."));
    };
    let matching = admin
        .keys
        .iter()
        .find(|candidate| candidate.name == name && candidate.key == key);
    match matching {
        None => Err(denied("Unknown key name or wrong key.")),
        Some(found) if !found.rights.manage => {
            let mut response = error(
                StatusCode::FORBIDDEN,
                &format!("The key '{name}' lacks the Manage right the explorer needs."),
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"ferrobus explorer\", charset=\"UTF-8\""),
            );
            Err(Box::new(response))
        }
        Some(_) => Ok(()),
    }
}

fn file(text: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, text).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn json_response(status: StatusCode, value: &Json) -> Response {
    let mut response = (status, value.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn error(status: StatusCode, text: &str) -> Response {
    json_response(status, &json!({ "error": text }))
}

/// Why an API request failed: its status and a text naming the problem.
#[derive(Debug)]
struct Failure {
    status: StatusCode,
    text: String,
}

impl Failure {
    fn bad(text: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::BAD_REQUEST,
            text: text.into(),
        }
    }

    fn not_found(text: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::NOT_FOUND,
            text: text.into(),
        }
    }
}

impl From<NamespaceError> for Failure {
    fn from(error: NamespaceError) -> Failure {
        let status = match &error {
            NamespaceError::NotFound(_) => StatusCode::NOT_FOUND,
            NamespaceError::Exists(_) => StatusCode::CONFLICT,
            NamespaceError::Invalid(_) => StatusCode::BAD_REQUEST,
            NamespaceError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Failure {
            status,
            text: error.to_string(),
        }
    }
}

impl From<EntityError> for Failure {
    fn from(error: EntityError) -> Failure {
        let status = match &error {
            EntityError::NotFound(_) | EntityError::MessageNotFound(_) => StatusCode::NOT_FOUND,
            EntityError::Argument(_) => StatusCode::BAD_REQUEST,
            EntityError::AlreadyExists(_) => StatusCode::CONFLICT,
            EntityError::QuotaExceeded { .. } | EntityError::StorageFull(_) => {
                StatusCode::INSUFFICIENT_STORAGE
            }
            EntityError::Disabled(_) | EntityError::NotAllowed(_) => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let text = match &error {
            EntityError::NotFound(path) => {
                format!("The messaging entity '{path}' could not be found.")
            }
            other => other.to_string(),
        };
        Failure { status, text }
    }
}

type Answer = Result<(StatusCode, Json), Failure>;

/// Query parameters, decoded (`+` is a space, as forms and `URLSearchParams` write it).
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(text: &str) -> Query {
        Query(
            text.split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    (
                        sas::percent_decode(&name.replace('+', " ")),
                        sas::percent_decode(&value.replace('+', " ")),
                    )
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .filter(|value| !value.is_empty())
    }

    fn path(&self) -> Result<&str, Failure> {
        self.get("path")
            .map(|path| path.trim_matches('/'))
            .ok_or_else(|| Failure::bad("The query needs 'path' (an entity path)."))
    }

    fn number(&self, name: &str) -> Result<Option<i64>, Failure> {
        self.get(name)
            .map(|text| {
                text.parse::<i64>()
                    .map_err(|_| Failure::bad(format!("'{name}' must be a whole number.")))
            })
            .transpose()
    }
}

fn sub_queue(name: Option<&str>) -> Result<SubQueue, Failure> {
    match name.unwrap_or("main") {
        "main" => Ok(SubQueue::Main),
        "dlq" | "$DeadLetterQueue" => Ok(SubQueue::DeadLetter),
        "transfer-dlq" | "$Transfer/$DeadLetterQueue" => Ok(SubQueue::TransferDeadLetter),
        other => Err(Failure::bad(format!(
            "Unknown queue '{other}': use main, dlq or transfer-dlq."
        ))),
    }
}

fn timestamp_text(at: Timestamp) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at.0.max(0) as u64);
    super::atom::format_timestamp(time)
}

fn state_name(state: MessageState) -> &'static str {
    match state {
        MessageState::Active => "active",
        MessageState::Deferred => "deferred",
        MessageState::Scheduled => "scheduled",
    }
}

/// Waits for the one reply of a oneshot request.
async fn answer_of(
    answer: tokio::sync::mpsc::UnboundedReceiver<crate::broker::entity::Notification>,
    path: &str,
) -> Result<Reply, Failure> {
    let path = path.to_string();
    Ok(ReplyTo::wait(answer, move || EntityError::NotFound(path)).await?)
}

/// One request's view of the broker.
struct Api<'a> {
    admin: &'a Admin,
    query: &'a Query,
}

/// What the explorer can read messages from.
enum Store {
    /// A queue or subscription actor.
    Entity(EntityHandle),
    /// A topic (holds only its scheduled messages).
    Topic(TopicHandle),
}

impl Api<'_> {
    async fn route(&self, method: &Method, route: &[&str], body: &[u8]) -> Answer {
        match (method, route) {
            (&Method::GET, ["entities"]) => self.entities().await,
            (&Method::POST, ["entities"]) => self.create(body).await,
            (&Method::GET, ["entity"]) => self.entity(self.query.path()?).await,
            (&Method::PUT, ["entity"]) => self.update(self.query.path()?, body).await,
            (&Method::DELETE, ["entity"]) => {
                let path = self.query.path()?;
                self.admin.registry.delete(path).await?;
                Ok((StatusCode::OK, json!({ "deleted": path })))
            }
            (&Method::GET, ["messages"]) => self.messages().await,
            (&Method::GET, ["message"]) => self.message().await,
            (&Method::POST, ["action"]) => self.action(&parse_body(body)?).await,
            (&Method::POST, ["resubmit"]) => self.resubmit(&parse_body(body)?).await,
            (&Method::POST, ["purge"]) => self.purge(&parse_body(body)?).await,
            (&Method::POST, ["send"]) => self.send(&parse_body(body)?).await,
            _ => Err(Failure::not_found(format!(
                "No explorer API route {method} /{}.",
                route.join("/")
            ))),
        }
    }

    fn slot(&self, path: &str) -> Result<Slot, Failure> {
        self.admin.registry.slot(path).ok_or_else(|| {
            Failure::not_found(format!("The messaging entity '{path}' could not be found."))
        })
    }

    fn store(&self, path: &str) -> Result<Store, Failure> {
        match self.slot(path)?.entity {
            Entity::Queue(handle) | Entity::Subscription(handle) => Ok(Store::Entity(handle)),
            Entity::Topic(handle) => Ok(Store::Topic(handle)),
        }
    }

    fn entity_handle(&self, path: &str) -> Result<EntityHandle, Failure> {
        match self.store(path)? {
            Store::Entity(handle) => Ok(handle),
            Store::Topic(_) => Err(Failure::bad(format!(
                "'{path}' is a topic: its messages are in its subscriptions; choose one of them."
            ))),
        }
    }

    // ----- entities -----

    async fn entities(&self) -> Answer {
        let mut entities = Vec::new();
        for slot in self.admin.registry.slots() {
            let path = slot.description.path();
            match self.admin.registry.runtime(&path).await {
                Ok(runtime) => entities.push(entity_json(&slot, &runtime)),
                // Deleted meanwhile.
                Err(NamespaceError::NotFound(_)) => {}
                Err(other) => return Err(other.into()),
            }
        }
        Ok((StatusCode::OK, json!({ "entities": entities })))
    }

    async fn entity(&self, path: &str) -> Answer {
        let slot = self.slot(path)?;
        let runtime = self.admin.registry.runtime(path).await?;
        let mut value = entity_json(&slot, &runtime);
        value["definition"] = Json::String(definition_of(&slot.description));
        if let Description::Subscription {
            topic,
            subscription,
        } = &slot.description
        {
            let rules = self.admin.registry.rules(topic, &subscription.name).await?;
            value["rules"] = Json::Array(
                rules
                    .iter()
                    .map(|rule| {
                        let definition = crate::broker::rules::RuleDefinition::of(rule);
                        json!({
                            "name": definition.name,
                            "filter": filter_text(&definition.filter),
                            "action": definition.action,
                        })
                    })
                    .collect(),
            );
        }
        if requires_session(&slot.description)
            && let Entity::Queue(handle) | Entity::Subscription(handle) = &slot.entity
        {
            let (reply, answer) = ReplyTo::oneshot();
            handle
                .send(Command::ListSessions {
                    // The "any time" sentinel of get-message-sessions.
                    last_updated: i64::MAX,
                    skip: 0,
                    top: MAX_SESSIONS,
                    reply,
                })
                .await?;
            if let Reply::Sessions(ids) = answer_of(answer, path).await? {
                value["sessions"] = Json::Array(
                    ids.into_iter()
                        .map(|id| json!({ "id": id, "state": null, "state_base64": null }))
                        .collect(),
                );
            }
        }
        Ok((StatusCode::OK, value))
    }

    async fn create(&self, body: &[u8]) -> Answer {
        let definition = definition_field(&parse_body(body)?)?;
        let changes = parse_definition(&definition)?;
        let registry = &self.admin.registry;
        match (changes.queues.as_slice(), changes.topics.as_slice()) {
            ([queue], []) => {
                let slot = registry.create(Description::Queue(queue.clone())).await?;
                Ok((
                    StatusCode::CREATED,
                    json!({ "path": slot.description.path() }),
                ))
            }
            ([], [topic]) => {
                let existing = match registry.slot(&topic.name).map(|slot| slot.description) {
                    Some(Description::Topic(existing)) => Some(existing.name),
                    Some(_) => {
                        return Err(Failure {
                            status: StatusCode::CONFLICT,
                            text: format!(
                                "'{}' is taken by an entity of another kind.",
                                topic.name
                            ),
                        });
                    }
                    None => None,
                };
                let mut paths = Vec::new();
                let topic_name = match existing {
                    Some(name) if !topic.subscriptions.is_empty() => name,
                    Some(name) => {
                        return Err(Failure {
                            status: StatusCode::CONFLICT,
                            text: format!(
                                "The topic '{name}' already exists; to add a subscription, give it a [[topics.subscriptions]] table."
                            ),
                        });
                    }
                    None => {
                        let bare = TopicConfig {
                            subscriptions: Vec::new(),
                            ..topic.clone()
                        };
                        let slot = registry.create(Description::Topic(bare)).await?;
                        paths.push(slot.description.path());
                        topic.name.clone()
                    }
                };
                for subscription in &topic.subscriptions {
                    let slot = registry
                        .create(Description::Subscription {
                            topic: topic_name.clone(),
                            subscription: subscription.clone(),
                        })
                        .await?;
                    paths.push(slot.description.path());
                }
                Ok((
                    StatusCode::CREATED,
                    json!({ "path": paths.first(), "paths": paths }),
                ))
            }
            _ => Err(Failure::bad(
                "The definition must hold one [[queues]] table, or one [[topics]] table (with [[topics.subscriptions]] tables to add subscriptions).",
            )),
        }
    }

    async fn update(&self, path: &str, body: &[u8]) -> Answer {
        let slot = self.slot(path)?;
        let definition = definition_field(&parse_body(body)?)?;
        let changes = parse_definition(&definition)?;
        let description = match (
            &slot.description,
            changes.queues.as_slice(),
            changes.topics.as_slice(),
        ) {
            (Description::Queue(_), [queue], []) => Description::Queue(queue.clone()),
            (Description::Topic(_), [], [topic]) if topic.subscriptions.is_empty() => {
                Description::Topic(topic.clone())
            }
            (Description::Subscription { topic: owner, .. }, [], [topic])
                if topic.subscriptions.len() == 1 =>
            {
                Description::Subscription {
                    topic: owner.clone(),
                    subscription: topic.subscriptions[0].clone(),
                }
            }
            _ => {
                return Err(Failure::bad(format!(
                    "The definition must describe '{path}' alone, in the shape GET entity gives it."
                )));
            }
        };
        if !description
            .path()
            .eq_ignore_ascii_case(&slot.description.path())
        {
            return Err(Failure::bad(format!(
                "The definition names '{}', not '{path}': entities cannot be renamed.",
                description.path()
            )));
        }
        self.admin.registry.update(description).await?;
        self.entity(path).await
    }

    // ----- messages -----

    async fn peek(
        &self,
        store: &Store,
        path: &str,
        queue: SubQueue,
        from: i64,
        count: usize,
    ) -> Result<Vec<Delivery>, Failure> {
        let Store::Entity(handle) = store else {
            return Ok(Vec::new());
        };
        let (reply, answer) = ReplyTo::oneshot();
        handle
            .send(Command::Peek {
                sub_queue: queue,
                from: SequenceNumber(from),
                count,
                session_id: None,
                reply,
            })
            .await?;
        match answer_of(answer, path).await? {
            Reply::Messages(messages) => Ok(messages),
            _ => Ok(Vec::new()),
        }
    }

    async fn messages(&self) -> Answer {
        let path = self.query.path()?;
        let queue = sub_queue(self.query.get("queue"))?;
        let store = self.store(path)?;
        let wanted = self
            .query
            .number("count")?
            .unwrap_or(50)
            .clamp(1, MAX_PAGE as i64) as usize;
        let state = match self.query.get("state").unwrap_or("all") {
            "all" => None,
            "active" => Some(MessageState::Active),
            "deferred" => Some(MessageState::Deferred),
            "scheduled" => Some(MessageState::Scheduled),
            other => {
                return Err(Failure::bad(format!(
                    "Unknown state '{other}': use all, active, deferred or scheduled."
                )));
            }
        };
        let property = self.query.get("property");
        let value = self.query.get("value");
        let body_search = self.query.get("body").map(str::to_lowercase);
        let mut from = self.query.number("from")?.unwrap_or(0).max(0);
        let mut found = Vec::new();
        let mut scanned = 0;
        let mut next = None;
        'scan: loop {
            let batch = self.peek(&store, path, queue, from, PEEK_BATCH).await?;
            let exhausted = batch.len() < PEEK_BATCH;
            let batch_len = batch.len();
            for (index, delivery) in batch.into_iter().enumerate() {
                // Whether anything may follow this message (no `next` for a page that
                // ends the queue exactly).
                let more = index + 1 < batch_len || !exhausted;
                from = delivery.sequence_number.0 + 1;
                scanned += 1;
                if state.is_some_and(|state| delivery.state != state) {
                    continue;
                }
                if let Some(name) = property {
                    let text = property_text(&delivery, name);
                    let matches = match (text, value) {
                        (Some(text), Some(value)) => text == value,
                        (Some(_), None) => true,
                        (None, _) => false,
                    };
                    if !matches {
                        continue;
                    }
                }
                if let Some(search) = &body_search {
                    let body = body_view(&delivery.message);
                    if !body.text.to_lowercase().contains(search.as_str()) {
                        continue;
                    }
                }
                found.push(summary(&delivery));
                if found.len() >= wanted || scanned >= MAX_SCAN {
                    next = more.then_some(from);
                    break 'scan;
                }
            }
            if exhausted {
                break;
            }
            if scanned >= MAX_SCAN {
                next = Some(from);
                break;
            }
        }
        Ok((
            StatusCode::OK,
            json!({ "messages": found, "next": next, "scanned": scanned }),
        ))
    }

    async fn one_message(&self) -> Result<Delivery, Failure> {
        let path = self.query.path()?;
        let queue = sub_queue(self.query.get("queue"))?;
        let store = self.store(path)?;
        let Some(sequence_number) = self.query.number("seq")? else {
            return Err(Failure::bad("The query needs 'seq' (a sequence number)."));
        };
        self.peek(&store, path, queue, sequence_number, 1)
            .await?
            .into_iter()
            .find(|delivery| delivery.sequence_number.0 == sequence_number)
            .ok_or_else(|| {
                Failure::not_found(format!(
                    "No message with sequence number {sequence_number} in '{path}' ({})",
                    self.query.get("queue").unwrap_or("main")
                ))
            })
    }

    async fn message(&self) -> Answer {
        let delivery = self.one_message().await?;
        Ok((StatusCode::OK, detail(&delivery)))
    }

    /// The body bytes of one message, as a download.
    async fn body(&self) -> Result<Response, Failure> {
        let delivery = self.one_message().await?;
        let view = body_view(&delivery.message);
        let mut response = (StatusCode::OK, view.raw).into_response();
        let content_type = delivery
            .message
            .system()
            .content_type()
            .map(str::to_string)
            .unwrap_or_else(|| "application/octet-stream".to_string());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(&content_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream")),
        );
        headers.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_str(&format!(
                "attachment; filename=\"message-{}.bin\"",
                delivery.sequence_number.0
            ))
            .unwrap_or(HeaderValue::from_static("attachment")),
        );
        Ok(response)
    }

    // ----- changes -----

    /// Locks (peek-lock) or removes (receive-and-delete) messages by sequence number.
    async fn take(
        &self,
        handle: &EntityHandle,
        path: &str,
        queue: SubQueue,
        numbers: Vec<SequenceNumber>,
        mode: ReceiveMode,
    ) -> Result<Vec<Delivery>, Failure> {
        let (reply, answer) = ReplyTo::oneshot();
        handle
            .send(Command::Take {
                sub_queue: queue,
                sequence_numbers: numbers,
                mode,
                reply,
            })
            .await?;
        match answer_of(answer, path).await? {
            Reply::Messages(messages) => Ok(messages),
            _ => Ok(Vec::new()),
        }
    }

    async fn settle(
        &self,
        handle: &EntityHandle,
        path: &str,
        delivery: &Delivery,
        settlement: Settlement,
    ) -> Result<(), Failure> {
        let Some(lock) = delivery.lock else {
            return Ok(());
        };
        let (reply, answer) = ReplyTo::oneshot();
        handle
            .send(Command::Settle {
                token: lock.token,
                settlement,
                reply: Some(reply),
            })
            .await?;
        answer_of(answer, path).await?;
        Ok(())
    }

    async fn action(&self, request: &Json) -> Answer {
        let path = text_field(request, "path")?;
        let queue = sub_queue(request.get("queue").and_then(Json::as_str))?;
        let numbers = sequence_numbers(request)?;
        let action = text_field(request, "action")?;
        let reason = request.get("reason").and_then(Json::as_str);
        let description = request.get("description").and_then(Json::as_str);
        if action == "cancel-scheduled" {
            let (reply, answer) = ReplyTo::oneshot();
            match self.store(&path)? {
                Store::Entity(handle) => {
                    handle
                        .send(Command::CancelScheduled {
                            sequence_numbers: numbers.clone(),
                            reply,
                        })
                        .await?
                }
                Store::Topic(handle) => {
                    handle
                        .send(TopicCommand::CancelScheduled {
                            sequence_numbers: numbers.clone(),
                            reply,
                        })
                        .await?
                }
            }
            answer_of(answer, &path).await?;
            return Ok((StatusCode::OK, json!({ "done": numbers.len() })));
        }
        let settlement = match action.as_str() {
            "receive" => None,
            "complete" => Some(Settlement::Complete),
            "abandon" => Some(Settlement::Abandon {
                properties: Vec::new(),
            }),
            "defer" => Some(Settlement::Defer {
                properties: Vec::new(),
            }),
            "dead-letter" => Some(Settlement::DeadLetter {
                reason: Some(reason.unwrap_or("ExplorerDeadLettered").to_string()),
                description: Some(
                    description
                        .unwrap_or("Dead-lettered from the ferrobus explorer.")
                        .to_string(),
                ),
                properties: Vec::new(),
            }),
            other => {
                return Err(Failure::bad(format!(
                    "Unknown action '{other}': use complete, receive, abandon, dead-letter, defer or cancel-scheduled."
                )));
            }
        };
        let handle = self.entity_handle(&path)?;
        let Some(settlement) = settlement else {
            let taken = self
                .take(
                    &handle,
                    &path,
                    queue,
                    numbers,
                    ReceiveMode::ReceiveAndDelete,
                )
                .await?;
            return Ok((StatusCode::OK, json!({ "done": taken.len() })));
        };
        let taken = self
            .take(&handle, &path, queue, numbers, ReceiveMode::PeekLock)
            .await?;
        let mut done = 0;
        for delivery in &taken {
            self.settle(&handle, &path, delivery, settlement.clone())
                .await?;
            done += 1;
        }
        Ok((StatusCode::OK, json!({ "done": done })))
    }

    async fn resubmit(&self, request: &Json) -> Answer {
        let path = text_field(request, "path")?;
        let queue = sub_queue(request.get("queue").and_then(Json::as_str).or(Some("dlq")))?;
        let handle = self.entity_handle(&path)?;
        let target = match request.get("target").and_then(Json::as_str) {
            Some(target) if !target.trim().is_empty() => target.trim().trim_matches('/'),
            _ => path.as_str(),
        }
        .to_string();
        if target.eq_ignore_ascii_case(&path) && queue == SubQueue::Main {
            return Err(Failure::bad(
                "Resubmitting a main queue's messages to itself would only duplicate them; choose the dlq or another target.",
            ));
        }
        let target_entity = self.slot(&target)?.entity;
        let all = request.get("all").and_then(Json::as_bool).unwrap_or(false);
        let mut resubmitted = 0usize;
        if all {
            let store = Store::Entity(handle.clone());
            let mut from = 0;
            while resubmitted < MAX_RESUBMIT {
                let batch = self.peek(&store, &path, queue, from, PEEK_BATCH).await?;
                let Some(last) = batch.last() else { break };
                from = last.sequence_number.0 + 1;
                let exhausted = batch.len() < PEEK_BATCH;
                let numbers: Vec<SequenceNumber> = batch
                    .iter()
                    .filter(|delivery| {
                        delivery.lock.is_none() && delivery.state != MessageState::Scheduled
                    })
                    .map(|delivery| delivery.sequence_number)
                    .take(MAX_RESUBMIT - resubmitted)
                    .collect();
                resubmitted += self
                    .move_messages(&handle, &path, queue, numbers, &target_entity, &target)
                    .await?;
                if exhausted {
                    break;
                }
            }
        } else {
            let numbers = sequence_numbers(request)?;
            resubmitted = self
                .move_messages(&handle, &path, queue, numbers, &target_entity, &target)
                .await?;
        }
        Ok((
            StatusCode::OK,
            json!({ "resubmitted": resubmitted, "target": target }),
        ))
    }

    /// Locks the messages, sends copies to the target, then completes them (or unlocks
    /// them when the target refused): a message is never lost nor left locked.
    async fn move_messages(
        &self,
        handle: &EntityHandle,
        path: &str,
        queue: SubQueue,
        numbers: Vec<SequenceNumber>,
        target: &Entity,
        target_path: &str,
    ) -> Result<usize, Failure> {
        if numbers.is_empty() {
            return Ok(0);
        }
        let taken = match self
            .take(handle, path, queue, numbers.clone(), ReceiveMode::PeekLock)
            .await
        {
            Ok(taken) => taken,
            // One was locked or removed meanwhile: the others one by one.
            Err(failure) if failure.status == StatusCode::NOT_FOUND && numbers.len() > 1 => {
                let mut taken = Vec::new();
                for number in numbers {
                    if let Ok(mut one) = self
                        .take(handle, path, queue, vec![number], ReceiveMode::PeekLock)
                        .await
                    {
                        taken.append(&mut one);
                    }
                }
                taken
            }
            Err(failure) => return Err(failure),
        };
        if taken.is_empty() {
            return Ok(0);
        }
        let copies: Vec<Arc<Message>> = taken
            .iter()
            .map(|delivery| Arc::new(resubmitted_copy(&delivery.message)))
            .collect();
        let sent = send_to(target, target_path, copies).await;
        let settlement = if sent.is_ok() {
            Settlement::Complete
        } else {
            Settlement::Release
        };
        for delivery in &taken {
            self.settle(handle, path, delivery, settlement.clone())
                .await?;
        }
        sent?;
        Ok(taken.len())
    }

    async fn purge(&self, request: &Json) -> Answer {
        let path = text_field(request, "path")?;
        let queue = sub_queue(request.get("queue").and_then(Json::as_str))?;
        let confirm = request.get("confirm").and_then(Json::as_str).unwrap_or("");
        if !confirm.trim().trim_matches('/').eq_ignore_ascii_case(&path) {
            return Err(Failure::bad(format!(
                "Purging deletes messages for good: repeat the entity path '{path}' in 'confirm'."
            )));
        }
        let handle = self.entity_handle(&path)?;
        let (reply, answer) = ReplyTo::oneshot();
        handle
            .send(Command::Purge {
                sub_queue: queue,
                before: None,
                session_id: None,
                max: usize::MAX,
                reply,
            })
            .await?;
        let deleted = match answer_of(answer, &path).await? {
            Reply::Count(count) => count,
            _ => 0,
        };
        tracing::info!(entity = %path, deleted, "messages purged from the explorer");
        Ok((StatusCode::OK, json!({ "deleted": deleted })))
    }

    async fn send(&self, request: &Json) -> Answer {
        let path = text_field(request, "path")?;
        let slot = self.slot(&path)?;
        if matches!(slot.entity, Entity::Subscription(_)) {
            return Err(Failure::bad(format!(
                "'{path}' is a subscription: send to its topic."
            )));
        }
        let count = match request.get("count") {
            None | Some(Json::Null) => 1,
            Some(value) => value
                .as_u64()
                .filter(|count| (1..=MAX_SEND_COUNT).contains(count))
                .ok_or_else(|| {
                    Failure::bad(format!("'count' must be from 1 to {MAX_SEND_COUNT}."))
                })?,
        };
        let encoded = build_message(request)?;
        let limit = self.admin.registry.max_message_size(&path);
        if encoded.len() as u64 > limit {
            return Err(Failure {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                text: format!(
                    "The message ({} bytes) exceeds the entity's limit of {limit} bytes.",
                    encoded.len()
                ),
            });
        }
        let mut messages = Vec::new();
        for _ in 0..count {
            let message = amqp_message::parse_message(encoded.clone())
                .map_err(|error| Failure::bad(format!("The message is invalid: {error}")))?;
            messages.push(Arc::new(message));
        }
        let scheduled = messages
            .first()
            .is_some_and(|message| message.extras().scheduled_enqueue_time.is_some());
        let reply = match (&slot.entity, scheduled) {
            (Entity::Topic(handle), true) => {
                let (reply, answer) = ReplyTo::oneshot();
                handle
                    .send(TopicCommand::Schedule { messages, reply })
                    .await?;
                answer_of(answer, &path).await?
            }
            (entity, _) => send_to(entity, &path, messages).await?,
        };
        let numbers: Vec<i64> = match reply {
            Reply::SequenceNumbers(numbers) => numbers.iter().map(|number| number.0).collect(),
            _ => Vec::new(),
        };
        Ok((
            StatusCode::OK,
            json!({ "sent": count, "sequence_numbers": numbers }),
        ))
    }
}

/// Sends messages into a queue, subscription (straight into it: no filters) or topic, and
/// waits until they are stored.
async fn send_to(
    entity: &Entity,
    path: &str,
    messages: Vec<Arc<Message>>,
) -> Result<Reply, Failure> {
    let (reply, answer) = ReplyTo::oneshot();
    match entity {
        Entity::Queue(handle) | Entity::Subscription(handle) => {
            handle
                .send(Command::Send {
                    messages,
                    reply: Some(reply),
                })
                .await?
        }
        Entity::Topic(handle) => {
            handle
                .send(TopicCommand::Publish {
                    messages,
                    reply: Some(reply),
                })
                .await?
        }
    }
    answer_of(answer, path).await
}

/// A dead-lettered message as a new message: the sender's sections, without what the
/// broker added (dead-letter reason, source, forwarding hops, scheduling).
fn resubmitted_copy(message: &Message) -> Message {
    let mut copy = message.clone();
    copy.extras_mut().dead_letter_source = None;
    copy.extras_mut().extra_properties = Vec::new();
    copy.extras_mut().original_sequence_number = None;
    copy.hop_count = 0;
    copy.extras_mut().scheduled_enqueue_time = None;
    copy.extras_mut().topic_sequence = None;
    copy
}

fn parse_body(body: &[u8]) -> Result<Json, Failure> {
    if body.is_empty() {
        return Err(Failure::bad("The request needs a JSON body."));
    }
    serde_json::from_slice(body)
        .map_err(|error| Failure::bad(format!("The body is not valid JSON: {error}")))
}

fn text_field(request: &Json, name: &str) -> Result<String, Failure> {
    request
        .get(name)
        .and_then(Json::as_str)
        .map(|text| text.trim().trim_matches('/').to_string())
        .filter(|text| !text.is_empty())
        .ok_or_else(|| Failure::bad(format!("The body needs '{name}' (text).")))
}

fn definition_field(request: &Json) -> Result<String, Failure> {
    request
        .get("definition")
        .and_then(Json::as_str)
        .map(str::to_string)
        .ok_or_else(|| Failure::bad("The body needs 'definition' (TOML text)."))
}

fn sequence_numbers(request: &Json) -> Result<Vec<SequenceNumber>, Failure> {
    let numbers: Option<Vec<SequenceNumber>> = request
        .get("sequence_numbers")
        .and_then(Json::as_array)
        .map(|items| {
            items
                .iter()
                .map(|item| item.as_i64().map(SequenceNumber))
                .collect()
        })
        .unwrap_or(None);
    match numbers {
        Some(numbers) if !numbers.is_empty() && numbers.len() <= MAX_RESUBMIT => Ok(numbers),
        _ => Err(Failure::bad(format!(
            "The body needs 'sequence_numbers': 1 to {MAX_RESUBMIT} whole numbers."
        ))),
    }
}

/// Parses an entity definition in the configuration file's format.
fn parse_definition(text: &str) -> Result<NamespaceChanges, Failure> {
    let changes = NamespaceChanges::from_toml_str(text, "the definition")
        .map_err(|error| Failure::bad(error.to_string()))?;
    if !changes.deleted.is_empty() || !changes.subscriptions.is_empty() {
        return Err(Failure::bad(
            "The definition takes [[queues]] or [[topics]] tables only.",
        ));
    }
    Ok(changes)
}

/// An entity as configuration TOML (what `PUT entity` takes back). A subscription's rules
/// are not in it: they are listed apart and changed through rules management.
fn definition_of(description: &Description) -> String {
    match description {
        Description::Queue(queue) => render::queue(queue),
        Description::Topic(topic) => render::topic("topics", topic),
        Description::Subscription {
            topic,
            subscription,
        } => {
            let mut owner = TopicConfig::new(topic);
            let mut subscription = subscription.clone();
            subscription.rules = vec![RuleConfig::default_rule()];
            owner.subscriptions = vec![subscription];
            // The topic's own settings are not part of a subscription's definition.
            let mut out = format!(
                "[[topics]]\nname = {}\n",
                toml::Value::String(topic.clone())
            );
            out.push('\n');
            out.push_str(&render::subscription(
                "topics.subscriptions",
                &owner.subscriptions[0],
            ));
            out
        }
    }
}

fn requires_session(description: &Description) -> bool {
    match description {
        Description::Queue(queue) => queue.requires_session,
        Description::Subscription { subscription, .. } => subscription.requires_session,
        Description::Topic(_) => false,
    }
}

fn entity_json(slot: &Slot, runtime: &Runtime) -> Json {
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

fn filter_text(filter: &crate::broker::rules::FilterDefinition) -> String {
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

fn property_json(value: &PropertyValue) -> Json {
    match value {
        PropertyValue::Null => Json::Null,
        PropertyValue::Bool(flag) => Json::Bool(*flag),
        PropertyValue::Long(number) => json!(number),
        PropertyValue::Double(number) => json!(number),
        PropertyValue::String(text) => Json::String(text.clone()),
        PropertyValue::Timestamp(millis) => Json::String(timestamp_text(Timestamp(*millis))),
        PropertyValue::Uuid(bytes) => Json::String(crate::amqp::ids::format_guid(bytes)),
        PropertyValue::Binary(bytes) => Json::String(hex(bytes)),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The broker's property changes on a record (dead-letter reason and description, …),
/// later ones winning.
fn broker_property(delivery: &Delivery, name: &str) -> Option<String> {
    delivery
        .record
        .property_changes
        .iter()
        .rev()
        .chain(delivery.message.extras().extra_properties.iter().rev())
        .find(|(key, _)| key == name)
        .and_then(|(_, value)| match value {
            PropertyValue::String(text) => Some(text.clone()),
            PropertyValue::Null => None,
            other => Some(property_json(other).to_string()),
        })
}

/// An application property as text (what the search compares with).
fn property_text(delivery: &Delivery, name: &str) -> Option<String> {
    application_properties(delivery)
        .into_iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| match value {
            Json::String(text) => text,
            other => other.to_string(),
        })
}

fn summary(delivery: &Delivery) -> Json {
    let message = &delivery.message;
    let mut value = json!({
        "sequence_number": delivery.sequence_number.0,
        "message_id": message.system().message_id(),
        "session_id": message.system().session_id(),
        "subject": message.system().subject(),
        "state": state_name(delivery.state),
        "locked": delivery.lock.is_some(),
        "enqueued_time": timestamp_text(delivery.enqueued_time),
        "delivery_count": delivery.delivery_count,
        "size": message.encoded_size(),
    });
    if delivery.state == MessageState::Scheduled
        && let Some(at) = message.extras().scheduled_enqueue_time
    {
        value["scheduled_enqueue_time"] = Json::String(timestamp_text(at));
    }
    if let Some(reason) = broker_property(delivery, "DeadLetterReason") {
        value["dead_letter_reason"] = Json::String(reason);
    }
    value
}

fn detail(delivery: &Delivery) -> Json {
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
            json!(timestamp_text(delivery.enqueued_time)),
        ),
        ("DeliveryCount", json!(delivery.delivery_count)),
        ("State", json!(state_name(delivery.state))),
        (
            "TimeToLive",
            json!(delivery.time_to_live.map(super::atom::format_duration)),
        ),
        ("ExpiresAt", json!(delivery.expires_at.map(timestamp_text))),
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
fn application_properties(delivery: &Delivery) -> Vec<(String, Json)> {
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
fn amqp_json(value: &serde_amqp::Value) -> Json {
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
        Value::Uuid(uuid) => Json::String(crate::amqp::ids::format_guid(uuid.as_inner())),
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
struct BodyView {
    /// `json`, `xml`, `text` or `binary`.
    kind: &'static str,
    /// What the page shows (pretty JSON, text, or a hex dump).
    text: String,
    /// The bytes a download gives.
    raw: Bytes,
}

fn body_view(message: &Message) -> BodyView {
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

fn text_view(raw: Bytes, content_type: Option<&str>) -> BodyView {
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

fn hex_dump(bytes: &[u8]) -> String {
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
fn build_message(request: &Json) -> Result<Bytes, Failure> {
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
            let time = super::atom::parse_timestamp(&text).ok_or_else(|| {
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
            amqp_message::write_property_value(&mut writer, value);
            map.count += 2;
        }
        writer.finish_compound(map);
    }
    writer.descriptor(0x75);
    writer.binary(body.as_bytes());
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_message_parses_back_with_its_fields() {
        let request = json!({
            "body": "{\"a\": 1}",
            "content_type": "application/json",
            "properties": {"colour": "red", "n": 3, "ok": true},
            "session_id": "s1",
            "message_id": "m-1",
            "ttl_seconds": 60,
            "scheduled_enqueue_time": "2030-01-01T00:00:00Z",
        });
        let bytes = build_message(&request).expect("encodes");
        let message = amqp_message::parse_message(bytes).expect("parses");
        assert_eq!(message.system().message_id(), Some("m-1"));
        assert_eq!(message.system().session_id(), Some("s1"));
        assert_eq!(message.system().content_type(), Some("application/json"));
        assert_eq!(
            message.header.time_to_live,
            Some(std::time::Duration::from_secs(60))
        );
        assert_eq!(
            message.extras().scheduled_enqueue_time,
            Some(Timestamp(1_893_456_000_000))
        );
        assert_eq!(
            amqp_message::application_property_text(&message, "colour").as_deref(),
            Some("red")
        );
        let view = body_view(&message);
        assert_eq!(view.kind, "json");
        assert_eq!(&view.raw[..], b"{\"a\": 1}");
        assert!(view.text.contains("\"a\": 1"), "{}", view.text);
    }

    #[test]
    fn bad_send_requests_name_the_problem() {
        let failure = build_message(&json!({"properties": {"x": [1]}})).unwrap_err();
        assert!(failure.text.contains("Property 'x'"), "{}", failure.text);
        let failure = build_message(&json!({"scheduled_enqueue_time": "tomorrow"})).unwrap_err();
        assert!(failure.text.contains("RFC 3339"), "{}", failure.text);
        let failure = build_message(&json!({"ttl_seconds": -1})).unwrap_err();
        assert!(failure.text.contains("ttl_seconds"), "{}", failure.text);
    }

    #[test]
    fn bodies_are_shown_by_kind() {
        assert_eq!(text_view(Bytes::from_static(b"<a/>"), None).kind, "xml");
        assert_eq!(text_view(Bytes::from_static(b"hello"), None).kind, "text");
        let binary = text_view(Bytes::from_static(&[0, 1, 2, 0xff]), None);
        assert_eq!(binary.kind, "binary");
        assert!(
            binary.text.starts_with("00000000  00 01 02 ff"),
            "{}",
            binary.text
        );
    }

    #[test]
    fn queue_names_are_checked() {
        assert_eq!(sub_queue(None).unwrap(), SubQueue::Main);
        assert_eq!(sub_queue(Some("dlq")).unwrap(), SubQueue::DeadLetter);
        assert!(sub_queue(Some("nope")).unwrap_err().text.contains("nope"));
    }

    #[test]
    fn definitions_take_one_entity_in_the_file_format() {
        let changes =
            parse_definition("[[queues]]\nname = \"q\"\nmax_delivery_count = 3\n").expect("parses");
        assert_eq!(changes.queues[0].max_delivery_count, 3);
        let failure = parse_definition("[[queues]]\nname = \"q\"\nbogus = 1\n").unwrap_err();
        assert!(failure.text.contains("bogus"), "{}", failure.text);
    }
}
