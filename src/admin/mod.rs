//! The administration plane: the HTTP API that `ServiceBusAdministrationClient` speaks to create,
//! read, update, list and delete queues, topics, subscriptions and rules.
//!
//! - [`atom`]: the pure ATOM/XML codec for the request and response bodies (no I/O).
//! - [`describe`]: ATOM descriptions ⇄ the namespace's definitions.
//! - [`explorer`]: the web explorer page and its JSON API.
//! - [`guard`]: what keeps a web page from driving the broker (Host allow-list, same-origin
//!   and JSON-only rules, protective headers, Basic credentials).
//! - [`http`]: the routes (admin API, `/health`, `/metrics`) and the HTTP serving loops; the
//!   admin API's ATOM resources in `http/entities.rs`, the AMQP WebSocket bridge in
//!   `http/websocket.rs`.
//! - [`scrape`]: `GET /metrics`: the entities' figures read into the broker's metrics.
//! - [`tls`]: certificates: configured, or a development CA in the data directory.

pub mod atom;
pub mod describe;
pub mod explorer;
pub mod guard;
pub mod http;
pub mod scrape;
pub mod tls;
