//! The HTTP side: the Service Bus administration API (ATOM/XML, as
//! `ServiceBusAdministrationClient` speaks it), `GET /health` and `GET /metrics`, served by
//! axum on hyper over any byte stream — the HTTP listener, or a connection on the AMQP port
//! whose first bytes were HTTP or a TLS ClientHello.
//!
//! Routes (paths are case-insensitive; `api-version` is accepted and not checked):
//! - `GET /health` (no authorization and any `Host`, like the emulator's health check)
//! - `GET /metrics` (with `[[auth.keys]]`: a key with the Manage right, HTTP Basic or SAS)
//! - `/explorer/` and `/explorer/api/…`: the web explorer (see [`super::explorer`])
//! - `GET /$namespaceinfo`
//! - `GET /$Resources/Queues`, `GET /$Resources/Topics` (`$skip`, `$top`)
//! - `GET|PUT|DELETE /{queue or topic}` (PUT with `If-Match: *` updates)
//! - `GET /{topic}/Subscriptions`, `GET|PUT|DELETE /{topic}/Subscriptions/{name}`
//! - `GET /{topic}/Subscriptions/{name}/Rules`, `GET|PUT|DELETE …/Rules/{rule}`
//! - `POST /$config/reload`: re-read the configuration file (JSON answer, see
//!   [`crate::daemon::reload`])
//!
//! With `[[auth.keys]]` configured every admin route needs a SAS token with the Manage
//! right in `Authorization`; without keys anything is accepted. Before any route but
//! `/health` runs, [`super::guard`]'s rules apply: the `Host` must be one the broker answers
//! for, a request that may change state must not come from another `Origin`, and the
//! WebSocket path takes pages only from trusted origins. Every answer carries
//! [`super::guard::protect`]'s headers.
//!
//! The handlers of the ATOM resources are in `http/entities.rs`, the AMQP WebSocket bridge in
//! `http/websocket.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

mod entities;
mod websocket;

use super::atom;
use crate::amqp::sas::{self, AccessKey};
use crate::broker::registry::Registry;
use crate::metrics::Metrics;

/// How long a request head may take to arrive.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Largest request body accepted (entity descriptions are a few KiB).
const MAX_BODY: usize = 1024 * 1024;

/// What every HTTP request handler shares.
pub struct Admin {
    /// The namespace.
    pub registry: Arc<Registry>,
    /// Configured keys; empty: no authorization.
    pub keys: Vec<AccessKey>,
    /// The `Host` names served (a guard against DNS rebinding): `[http] allowed_hosts` and
    /// the built-in ones.
    pub hosts: super::guard::HostAllowList,
    /// Turns true once the broker serves AMQP (until then `/health` answers 503).
    pub serving: AtomicBool,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// When the broker started (namespace creation time).
    pub started: SystemTime,
    /// Starts an AMQP connection on a stream (WebSocket sessions hand theirs over); set once
    /// the broker's connection context exists. `None` inside: WebSockets are switched off.
    pub amqp: std::sync::OnceLock<Option<AmqpEntry>>,
    /// Re-reads the configuration file (`POST /$config/reload`, [`crate::daemon::reload`]);
    /// unset (a broker started by a library caller): the route answers 404.
    pub reload: std::sync::OnceLock<ReloadHook>,
    /// In a cluster, what this node knows of it (`/health` shows it under `cluster`).
    pub cluster: Option<ClusterView>,
    /// In a cluster, the leader's lease: without it, routes other than `/health` and
    /// `/metrics` answer 503 (what they would show may be stale).
    pub lease: Option<Arc<crate::broker::leadership::Lease>>,
    /// In a cluster, the membership routes (`/$cluster`, `/$cluster/members`).
    pub cluster_control: Option<ClusterControl>,
    /// In a cluster whose nodes each serve their own HTTP clients (`placement = "spread"`):
    /// the HTTP address of the node that changes the namespace, when it is another one;
    /// requests that may change it are relayed there.
    pub namespace_node: Option<NamespaceNode>,
}

/// See [`Admin::namespace_node`].
pub type NamespaceNode = Arc<dyn Fn() -> Option<std::net::SocketAddr> + Send + Sync>;

/// The largest request body relayed to the node that changes the namespace.
const MAX_RELAYED_BODY: usize = 4 * 1024 * 1024;

/// Whether a request may change the namespace (or is otherwise the namespace node's to
/// answer): every request but reads, and but those each node answers itself.
fn relayed(method: &Method, lower: &[&str]) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    !matches!(
        lower.first(),
        Some(&"$cluster" | &"$config" | &"$servicebus" | &"health" | &"metrics")
    )
}

/// Relays a request to `address` (another node's HTTP listener) and answers what it
/// answers; 503 when it cannot be reached.
async fn relay(
    address: std::net::SocketAddr,
    mut parts: axum::http::request::Parts,
    body: axum::body::Body,
) -> Response {
    let unavailable = |why: String| {
        failure(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "The node that changes the namespace ({address}) cannot be reached: {why}. Try again."
            ),
        )
    };
    let bytes = match axum::body::to_bytes(body, MAX_RELAYED_BODY).await {
        Ok(bytes) => bytes,
        Err(error) => {
            return failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("The request body cannot be read: {error}"),
            );
        }
    };
    let stream = match tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::net::TcpStream::connect(address),
    )
    .await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => return unavailable(error.to_string()),
        Err(_) => return unavailable("no connection within 5 s".to_string()),
    };
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, connection) = match hyper::client::conn::http1::handshake(io).await {
        Ok(handshake) => handshake,
        Err(error) => return unavailable(error.to_string()),
    };
    tokio::spawn(connection);
    if let Some(path) = parts.uri.path_and_query().cloned() {
        parts.uri = path.as_str().parse().unwrap_or_default();
    }
    parts.extensions = Default::default();
    let request = axum::http::Request::from_parts(parts, axum::body::Body::from(bytes));
    match tokio::time::timeout(
        std::time::Duration::from_secs(60),
        sender.send_request(request),
    )
    .await
    {
        Ok(Ok(response)) => {
            let (parts, body) = response.into_parts();
            Response::from_parts(parts, axum::body::Body::new(body))
        }
        Ok(Err(error)) => unavailable(error.to_string()),
        Err(_) => unavailable("no answer within 60 s".to_string()),
    }
}

/// A request to the cluster's membership routes.
#[derive(Debug)]
pub enum ClusterRequest {
    /// `GET /$cluster`: the leader's view.
    View,
    /// `POST /$cluster/members` `{"id": N, "address": "host:port"}`.
    Add {
        /// The new node's id.
        id: u64,
        /// Its peer address.
        address: String,
    },
    /// `DELETE /$cluster/members/N`.
    Remove {
        /// The node's id.
        id: u64,
    },
    /// `POST /$cluster/leader` `{"id": N}` (or no body): the leader drains its clients and
    /// hands its leadership to node N (or to the member with the most of the log).
    Transfer {
        /// The node to lead next, if one is named.
        to: Option<u64>,
    },
}

/// Runs a membership request: its HTTP status and JSON answer.
pub type ClusterControl = Arc<
    dyn Fn(
            ClusterRequest,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = (u16, serde_json::Value)> + Send>>
        + Send
        + Sync,
>;

/// What a cluster node knows of the cluster, as JSON.
pub type ClusterView = Arc<dyn Fn() -> Option<serde_json::Value> + Send + Sync>;

/// Runs a configuration reload: its HTTP status and JSON answer.
pub type ReloadHook = Arc<
    dyn Fn()
            -> std::pin::Pin<Box<dyn std::future::Future<Output = (u16, serde_json::Value)> + Send>>
        + Send
        + Sync,
>;

/// Runs an AMQP connection on the engine's end of a bridged stream until it ends.
pub type AmqpEntry = Arc<
    dyn Fn(
            tokio::net::UnixStream,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

/// Whether the connection a request came on is TLS (request extension).
#[derive(Debug, Clone, Copy)]
struct Secure(bool);

/// The router of every HTTP route.
pub fn router(admin: Arc<Admin>) -> Router {
    Router::new().fallback(handle).with_state(admin)
}

/// Serves HTTP/1.1 on one connection until it ends or `shutdown` turns true.
pub async fn serve_connection<S>(
    stream: S,
    router: Router,
    secure: bool,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(
        router.layer(axum::Extension(Secure(secure))),
    );
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        // A client that never finishes its request head (or a WebSocket upgrade) is dropped.
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "HTTP connection ended with an error");
            }
        }
        () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), connection).await;
        }
    }
}

/// How often a listener at its connection cap says so in the log, at most.
const CAP_WARNING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves an HTTP (or, with `tls`, HTTPS) listener until `shutdown` turns true. Each
/// connection holds one of `permits` (`[http] max_connections`, shared by the HTTP
/// listeners); a connection accepted when none is left is closed at once, before anything
/// is read from it, so a flood of connections costs no task and no buffer.
pub async fn serve_listener(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    permits: Arc<tokio::sync::Semaphore>,
    shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    let mut stop = shutdown.clone();
    let mut last_cap_warning: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = async { let _ = stop.wait_for(|stop| *stop).await; } => break,
        };
        let Ok((stream, peer)) = accepted else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(stream);
            if last_cap_warning.is_none_or(|at| at.elapsed() >= CAP_WARNING_INTERVAL) {
                last_cap_warning = Some(tokio::time::Instant::now());
                tracing::warn!(
                    %peer,
                    "HTTP connection closed at once: the HTTP listeners hold [http] max_connections already"
                );
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let _permit = permit;
            match tls {
                None => serve_connection(stream, router, false, shutdown).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(
                        std::time::Duration::from_secs(10),
                        acceptor.accept(stream),
                    )
                    .await;
                    if let Ok(Ok(stream)) = handshake {
                        serve_connection(stream, router, true, shutdown).await;
                    }
                }
            }
        });
    }
    connections.abort_all();
}

/// A response with an XML body.
fn xml(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An error in the shape Service Bus returns it.
fn failure(status: StatusCode, detail: &str) -> Response {
    xml(
        status,
        "application/xml; charset=utf-8",
        atom::render_error(status.as_u16(), detail),
    )
}

/// Checks the SAS token of an admin request: Manage right on the path.
fn authorize(admin: &Admin, headers: &HeaderMap, path: &str) -> Result<(), Box<Response>> {
    if admin.keys.is_empty() {
        return Ok(());
    }
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
    else {
        return Err(Box::new(failure(
            StatusCode::UNAUTHORIZED,
            "MissingToken: The authorization header was not found. Send a SharedAccessSignature with the Manage right.",
        )));
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or(0);
    let grant = sas::validate(token, &admin.keys, now)
        .map_err(|error| Box::new(failure(StatusCode::UNAUTHORIZED, &error.to_string())))?;
    if !sas::covers(&grant, path, now) {
        return Err(Box::new(failure(
            StatusCode::UNAUTHORIZED,
            &format!("InvalidAudience: the token does not cover '{path}'."),
        )));
    }
    if !grant.rights.manage {
        return Err(Box::new(failure(
            StatusCode::FORBIDDEN,
            "Unauthorized: Manage claim(s) are required for this operation.",
        )));
    }
    Ok(())
}

/// The request's path split into decoded segments.
fn segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|segment| !segment.is_empty())
        .map(sas::percent_decode)
        .collect()
}

async fn handle(State(admin): State<Arc<Admin>>, request: Request) -> Response {
    let mut response = route(admin, request).await;
    super::guard::protect(&mut response);
    response
}

/// The refusal of what a web page could use to drive the broker ([`super::guard`]): a
/// `Host` the broker does not answer for, and a state change from another `Origin`; `None`
/// when the request may go on. The explorer's refusals are JSON, the rest in the Service Bus
/// error shape.
fn guard(
    admin: &Admin,
    parts: &axum::http::request::Parts,
    secure: bool,
    explorer: bool,
) -> Option<Response> {
    let refusal = |text: &str| {
        if explorer {
            super::explorer::refusal(StatusCode::FORBIDDEN, text)
        } else {
            failure(StatusCode::FORBIDDEN, text)
        }
    };
    let host = super::guard::request_host(parts);
    if !admin.hosts.allows(host.as_deref()) {
        let shown: String = host.unwrap_or_default().chars().take(200).collect();
        return Some(refusal(&format!(
            "Host '{shown}' is not a name this broker answers for; add it to [http] allowed_hosts to serve it."
        )));
    }
    if !super::guard::changes_state(&parts.method) {
        return None;
    }
    super::guard::same_origin(&parts.headers, host.as_deref(), secure)
        .err()
        .map(|text| refusal(&text))
}

/// `GET /metrics`: open without keys; with keys, a key with the Manage right, as HTTP Basic
/// credentials (what Prometheus' `basic_auth` sends) or a SAS token for the namespace.
async fn metrics(admin: &Admin, headers: &HeaderMap) -> Response {
    if !admin.keys.is_empty() {
        let basic = headers
            .get(header::AUTHORIZATION)
            .is_some_and(|value| value.as_bytes().starts_with(b"Basic "));
        let refused = if basic || headers.get(header::AUTHORIZATION).is_none() {
            match super::guard::basic_key(&admin.keys, headers) {
                Ok(key) if key.rights.manage => None,
                Ok(key) => Some((
                    StatusCode::FORBIDDEN,
                    format!("The key '{}' lacks the Manage right metrics need.", key.name),
                )),
                Err(super::guard::BasicRefusal::Missing) => Some((
                    StatusCode::UNAUTHORIZED,
                    "Metrics need a key with the Manage right: HTTP Basic with the key name and key, or a SAS token.".to_string(),
                )),
                Err(_) => Some((
                    StatusCode::UNAUTHORIZED,
                    "Unknown key name or wrong key.".to_string(),
                )),
            }
        } else {
            authorize(admin, headers, "").err().map(|response| {
                (
                    response.status(),
                    "The SAS token does not grant Manage on the namespace.".to_string(),
                )
            })
        };
        if let Some((status, text)) = refused {
            let mut response = (status, format!("{text}\n")).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"ferrobus metrics\", charset=\"UTF-8\""),
                );
            }
            return response;
        }
    }
    super::scrape::render(&admin.metrics, &admin.registry).await
}

/// Whether a cluster leader's lease holds now or comes back within 2 s (a leader slow to
/// hear from its majority); polled every 20 ms.
async fn lease_comes_back(lease: &crate::broker::leadership::Lease) -> bool {
    for _ in 0..100 {
        if lease.held() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    lease.held()
}

async fn route(admin: Arc<Admin>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let secure = parts
        .extensions
        .get::<Secure>()
        .map(|secure| secure.0)
        .unwrap_or(false);
    let segments = segments(parts.uri.path());
    let lower: Vec<String> = segments.iter().map(|s| s.to_ascii_lowercase()).collect();
    let lower: Vec<&str> = lower.iter().map(String::as_str).collect();
    let open = matches!(lower.as_slice(), ["health"] | ["metrics"]);
    if !open
        && let Some(lease) = &admin.lease
        && !lease_comes_back(lease).await
    {
        return failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "This node cannot hear from a majority of the cluster: what it would answer may be stale. Try again, or ask another node.",
        );
    }
    if relayed(&parts.method, &lower)
        && let Some(address) = admin.namespace_node.as_ref().and_then(|node| node())
    {
        return relay(address, parts, body).await;
    }
    match (&parts.method, lower.as_slice()) {
        (&Method::GET, ["health"]) => return health(&admin),
        // AMQP authorizes its own links ($cbs): the upgrade needs no token, but a page on
        // another origin may not open it (browsers allow any page to try).
        (&Method::GET, ["$servicebus", "websocket"]) => {
            if let Some(refusal) = guard(&admin, &parts, secure, false) {
                return refusal;
            }
            let origin = parts
                .headers
                .get(header::ORIGIN)
                .map(|origin| String::from_utf8_lossy(origin.as_bytes()).into_owned());
            let host = super::guard::request_host(&parts);
            if !admin
                .hosts
                .trusts_origin(origin.as_deref(), host.as_deref())
            {
                let shown: String = origin.unwrap_or_default().chars().take(200).collect();
                return failure(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "A page at '{shown}' may not open this broker's AMQP WebSocket; add its host to [http] allowed_hosts to allow it."
                    ),
                );
            }
            return websocket::websocket(&admin, parts).await;
        }
        _ => {}
    }
    if let Some(refusal) = guard(&admin, &parts, secure, lower.first() == Some(&"explorer")) {
        return refusal;
    }
    match (&parts.method, lower.as_slice()) {
        (&Method::GET, ["metrics"]) => return metrics(&admin, &parts.headers).await,
        // The explorer authorizes with HTTP Basic (a browser cannot make SAS tokens).
        (_, ["explorer", ..]) => {
            return super::explorer::handle(&admin, parts, body, &segments[1..]).await;
        }
        _ => {}
    }
    let path = segments.join("/");
    if let Err(response) = authorize(&admin, &parts.headers, &path) {
        return *response;
    }
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("localhost")
        .to_string();
    let base = format!("{}://{host}", if secure { "https" } else { "http" });
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => {
            return failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                "The request body is larger than 1 MiB.",
            );
        }
    };
    let update = parts
        .headers
        .get(header::IF_MATCH)
        .is_some_and(|value| value.as_bytes() == b"*");
    let query = entities::query(&parts.uri);
    let context = entities::Context {
        admin: &admin,
        base: &base,
        host: &host,
        query: &query,
    };
    let method = parts.method.clone();
    match (method, lower.as_slice()) {
        (Method::POST, ["$config", "reload"]) => reload(&admin).await,
        (Method::GET, ["$cluster"]) => cluster(&admin, ClusterRequest::View).await,
        (Method::POST, ["$cluster", "members"]) => {
            #[derive(serde::Deserialize)]
            struct Member {
                id: u64,
                address: String,
            }
            match serde_json::from_str::<Member>(&body) {
                Ok(member) if member.id > 0 && member.address.contains(':') => {
                    let request = ClusterRequest::Add {
                        id: member.id,
                        address: member.address,
                    };
                    cluster(&admin, request).await
                }
                _ => failure(
                    StatusCode::BAD_REQUEST,
                    "The body must be {\"id\": N (1 or more), \"address\": \"host:port\"}: the new node's id and peer address.",
                ),
            }
        }
        (Method::POST, ["$cluster", "leader"]) => {
            #[derive(serde::Deserialize)]
            struct Leader {
                id: Option<u64>,
            }
            let named = if body.trim().is_empty() {
                Ok(Leader { id: None })
            } else {
                serde_json::from_str::<Leader>(&body)
            };
            match named {
                Ok(Leader { id }) if id != Some(0) => {
                    cluster(&admin, ClusterRequest::Transfer { to: id }).await
                }
                _ => failure(
                    StatusCode::BAD_REQUEST,
                    "The body must be empty or {\"id\": N (1 or more)}: the node to lead next.",
                ),
            }
        }
        (Method::DELETE, ["$cluster", "members", id]) => match id.parse::<u64>() {
            Ok(id) => cluster(&admin, ClusterRequest::Remove { id }).await,
            Err(_) => failure(StatusCode::BAD_REQUEST, "The node id must be a number."),
        },
        (_, ["$cluster", ..]) => not_allowed(),
        (_, ["$config", "reload"]) => not_allowed(),
        (Method::GET, ["$namespaceinfo"]) => context.namespace_info(),
        (Method::GET, ["$resources", "queues"]) => context.list_entities(true).await,
        (Method::GET, ["$resources", "topics"]) => context.list_entities(false).await,
        (Method::GET, [_, "subscriptions"]) => context.list_subscriptions(&segments[0]).await,
        (Method::GET, [_, "subscriptions", _, "rules"]) => {
            context.list_rules(&segments[0], &segments[2]).await
        }
        (method, [_, "subscriptions", _, "rules", _]) => {
            let (topic, subscription, rule) = (&segments[0], &segments[2], &segments[4]);
            match method {
                Method::GET => context.get_rule(topic, subscription, rule).await,
                Method::PUT => {
                    context
                        .put_rule(topic, subscription, rule, &body, update)
                        .await
                }
                Method::DELETE => context.delete_rule(topic, subscription, rule).await,
                _ => not_allowed(),
            }
        }
        (method, [_, "subscriptions", _]) => {
            let path = format!("{}/Subscriptions/{}", segments[0], segments[2]);
            match method {
                Method::GET => context.get(&path).await,
                Method::PUT => {
                    context
                        .put_subscription(&segments[0], &segments[2], &body, update)
                        .await
                }
                Method::DELETE => context.delete(&path).await,
                _ => not_allowed(),
            }
        }
        (method, _) if !segments.is_empty() && !path.starts_with('$') => match method {
            Method::GET => context.get(&path).await,
            Method::PUT => context.put_entity(&path, &body, update).await,
            Method::DELETE => context.delete(&path).await,
            _ => not_allowed(),
        },
        _ => failure(
            StatusCode::NOT_FOUND,
            &format!("No administration resource at '/{path}'."),
        ),
    }
}

/// `POST /$config/reload`: the configuration reload's JSON answer.
async fn reload(admin: &Admin) -> Response {
    let (status, body) = match admin.reload.get() {
        Some(hook) => hook().await,
        None => (
            404,
            serde_json::json!({
                "error": "This broker was not started from a configuration file it can reload."
            }),
        ),
    };
    json_answer(status, &body)
}

/// A hook's answer: its status and JSON body.
fn json_answer(status: u16, body: &serde_json::Value) -> Response {
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        format!("{body}\n"),
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn cluster(admin: &Admin, request: ClusterRequest) -> Response {
    let Some(control) = &admin.cluster_control else {
        return failure(
            StatusCode::NOT_FOUND,
            "This broker is not a cluster member ([cluster] names one member).",
        );
    };
    let (status, body) = control(request).await;
    json_answer(status, &body)
}

fn not_allowed() -> Response {
    failure(
        StatusCode::METHOD_NOT_ALLOWED,
        "The method is not allowed on this resource.",
    )
}

/// `GET /health`: the official emulator's contract.
fn health(admin: &Admin) -> Response {
    let (status, text) = if admin.serving.load(Ordering::Acquire) {
        (
            StatusCode::OK,
            r#"{"status":"healthy","message":"Service is healthy."}"#,
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"status":"unhealthy","message":"Service is starting."}"#,
        )
    };
    let body = match admin.cluster.as_ref().and_then(|view| view()) {
        // The emulator's two fields first, then this node's view of the cluster.
        Some(view) => format!("{},\"cluster\":{view}}}", &text[..text.len() - 1]),
        None => text.to_string(),
    };
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The HTTP side as the network front end holds it: the routes, and the TLS identity,
/// made on first use (or at start, by [`Front::tls`]).
pub struct Front {
    /// Shared by every route.
    pub admin: Arc<Admin>,
    /// The routes.
    pub router: Router,
    /// Where the TLS identity comes from.
    identity: super::tls::Identity,
    /// The identity once made (or why it could not be).
    tls: std::sync::OnceLock<Result<tokio_rustls::TlsAcceptor, String>>,
}

impl std::fmt::Debug for Front {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Front")
            .field("identity", &self.identity)
            .finish()
    }
}

impl Front {
    /// The routes over `admin`, with TLS from `identity`.
    pub fn new(admin: Arc<Admin>, identity: super::tls::Identity) -> Front {
        Front {
            router: router(admin.clone()),
            admin,
            identity,
            tls: std::sync::OnceLock::new(),
        }
    }

    /// The TLS acceptor, made on first call (a development certificate is generated then,
    /// and the CA's path logged).
    pub fn tls(&self) -> Result<tokio_rustls::TlsAcceptor, String> {
        self.tls
            .get_or_init(|| {
                let tls = super::tls::load(&self.identity)?;
                if let Some(ca) = &tls.dev_ca {
                    tracing::info!(
                        dev_ca = %ca.display(),
                        "TLS uses a development certificate; clients trust it with this CA file (Python connection_verify, NODE_EXTRA_CA_CERTS)"
                    );
                }
                Ok(tokio_rustls::TlsAcceptor::from(tls.config))
            })
            .clone()
    }
}
