//! The explorer: a web page on the HTTP side (`/explorer/`) that shows what the broker holds
//! and repairs it — entity counts and rates, peek with search, message detail, dead-letter
//! resubmit, purge, single-message actions and a send form — and its JSON API
//! (`/explorer/api/…`, contract in `docs/explorer.md`).
//!
//! Every operation goes through the namespace and the entity actors' commands, as AMQP and
//! the admin API do: the explorer has no access of its own to stored messages. With
//! `[[auth.keys]]` configured, requests need HTTP Basic authentication with a key name and
//! key holding the Manage right. A request that changes state (POST, PUT) must declare a
//! JSON body, which no page on another origin can send without a CORS preflight (none is
//! granted); the `Host` and `Origin` rules are applied before this module runs
//! ([`super::guard`]).

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};

use super::guard;
use super::http::Admin;
use crate::amqp::message as amqp_message;
use crate::amqp::sas;
use crate::broker::entity::{Command, Delivery, EntityHandle, Reply, ReplyTo};
use crate::broker::message::Message;
use crate::broker::namespace::NamespaceError;
use crate::broker::registry::{Description, Entity, Slot};
use crate::broker::topic::{TopicCommand, TopicHandle};
use crate::broker::types::{
    EntityError, MessageState, ReceiveMode, SequenceNumber, Settlement, SubQueue, Timestamp,
};
use crate::config::changes::NamespaceChanges;
use crate::config::{RuleConfig, TopicConfig, render};

mod actions;
mod view;
use view::*;

const INDEX_HTML: &str = include_str!("explorer/index.html");
const APP_CSS: &str = include_str!("explorer/app.css");
/// The page's script modules by file name: `app.js` is the page and imports the others.
const SCRIPTS: [(&str, &str); 6] = [
    ("app.js", include_str!("explorer/app.js")),
    ("client.js", include_str!("explorer/client.js")),
    ("cluster.js", include_str!("explorer/cluster.js")),
    ("entities.js", include_str!("explorer/entities.js")),
    ("format.js", include_str!("explorer/format.js")),
    ("messages.js", include_str!("explorer/messages.js")),
];

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
        (&Method::GET, [name]) if let Some(script) = script(name) => {
            file(script, "text/javascript; charset=utf-8")
        }
        (&Method::GET, ["app.css"]) => file(APP_CSS, "text/css; charset=utf-8"),
        (_, ["api", ..]) => {
            if matches!(parts.method, Method::POST | Method::PUT) && !guard::is_json(&parts.headers)
            {
                return error(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "A request that changes something must send its body as Content-Type: application/json.",
                );
            }
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
    match guard::basic_key(&admin.keys, headers) {
        Err(guard::BasicRefusal::Missing) => Err(denied(
            "The explorer needs a key name and key with the Manage right (HTTP Basic authentication).",
        )),
        Err(guard::BasicRefusal::Malformed) => {
            Err(denied("The Basic credentials are not 'name:key'."))
        }
        Err(guard::BasicRefusal::Unknown) => Err(denied("Unknown key name or wrong key.")),
        Ok(found) if !found.rights.manage => {
            let mut response = error(
                StatusCode::FORBIDDEN,
                &format!(
                    "The key '{}' lacks the Manage right the explorer needs.",
                    found.name
                ),
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"ferrobus explorer\", charset=\"UTF-8\""),
            );
            Err(Box::new(response))
        }
        Ok(_) => Ok(()),
    }
}

/// The page's script module named `name`, if it is one.
fn script(name: &str) -> Option<&'static str> {
    SCRIPTS
        .iter()
        .find(|(file, _)| *file == name)
        .map(|(_, text)| *text)
}

fn file(text: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, text).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(guard::PAGE_POLICY),
    );
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

/// A refusal in the explorer's error shape (`{"error": text}`), for the HTTP side's guard.
pub(super) fn refusal(status: StatusCode, text: &str) -> Response {
    error(status, text)
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
            NamespaceError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
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
            (&Method::POST, ["cluster", action]) => self.cluster(action, body).await,
            _ => Err(Failure::not_found(format!(
                "No explorer API route {method} /{}.",
                route.join("/")
            ))),
        }
    }

    /// The cluster view's actions, as `/$cluster` runs them: `leader` `{"id": N}` (or
    /// `{}`) moves the leadership, `add` `{"id": N, "address": "host:port"}` adds a node,
    /// `remove` `{"id": N}` removes one.
    async fn cluster(&self, action: &str, body: &[u8]) -> Answer {
        use super::http::ClusterRequest;
        let Some(control) = &self.admin.cluster_control else {
            return Err(Failure::not_found(
                "This broker is not a cluster member ([cluster] names one member).",
            ));
        };
        let request = if body.is_empty() {
            json!({})
        } else {
            parse_body(body)?
        };
        let id = request
            .get("id")
            .and_then(Json::as_u64)
            .filter(|id| *id > 0);
        let request = match (action, id) {
            ("leader", to) => ClusterRequest::Transfer { to },
            ("add", Some(id)) => ClusterRequest::Add {
                id,
                address: text_field(&request, "address")?,
            },
            ("remove", Some(id)) => ClusterRequest::Remove { id },
            ("add" | "remove", None) => {
                return Err(Failure::bad("The body needs 'id' (a node id, 1 or more)."));
            }
            _ => {
                return Err(Failure::not_found(format!(
                    "No explorer API route POST /cluster/{action}."
                )));
            }
        };
        let (status, answer) = control(request).await;
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_success() {
            Ok((status, answer))
        } else {
            Err(Failure {
                status,
                text: answer
                    .get("error")
                    .and_then(Json::as_str)
                    .unwrap_or("The cluster refused the change.")
                    .to_string(),
            })
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
        let mut answer = json!({ "entities": entities });
        if let Some(view) = self.admin.cluster.as_ref().and_then(|view| view()) {
            // A cluster's leader serves the page: the nodes, the leader and each one's lag.
            answer["cluster"] = view;
        }
        Ok((StatusCode::OK, answer))
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
                            "filter_parameters": parameters_json(&definition.filter_parameters),
                            "action_parameters": parameters_json(&definition.action_parameters),
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
                if state.is_some_and(|state| delivery.state() != state) {
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;

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
            message.header().time_to_live,
            Some(std::time::Duration::from_secs(60))
        );
        assert_eq!(
            message.extras().scheduled_enqueue_time,
            Some(Timestamp(1_893_456_000_000))
        );
        assert_eq!(
            crate::broker::message::application_property_text(&message, "colour").as_deref(),
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
