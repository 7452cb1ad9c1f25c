//! `GET /metrics`: Prometheus text exposition, with the `prometheus` crate (one registry per
//! broker, so brokers in one process — the tests — do not share counters).
//!
//! Connection counters are kept as they happen; per-entity figures are read from the
//! entities at scrape time (each actor answers with its counts and cumulative totals).

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus::{Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, TextEncoder};

use crate::broker::registry::{Description, Registry};

/// The broker's metrics.
pub struct Metrics {
    registry: prometheus::Registry,
    /// Open AMQP connections.
    pub connections: IntGauge,
    /// AMQP connections accepted since start.
    pub connections_total: IntCounter,
    /// HTTP requests served, by kind of connection.
    pub http_requests: IntCounterVec,
    messages: IntGaugeVec,
    size: IntGaugeVec,
    subscriptions: IntGaugeVec,
    totals: IntGaugeVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Metrics")
    }
}

fn registered<T: prometheus::core::Collector + Clone + 'static>(
    registry: &prometheus::Registry,
    collector: T,
) -> T {
    // Names are constants and unique: registration cannot fail.
    let _ = registry.register(Box::new(collector.clone()));
    collector
}

impl Metrics {
    /// Fresh metrics in their own registry.
    pub fn new() -> Arc<Metrics> {
        let registry = prometheus::Registry::new();
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels)
                .expect("constant metric names and labels are valid")
        };
        Arc::new(Metrics {
            connections: registered(
                &registry,
                IntGauge::new("ferrobus_connections", "Open AMQP connections.")
                    .expect("valid metric"),
            ),
            connections_total: registered(
                &registry,
                IntCounter::new(
                    "ferrobus_connections_total",
                    "AMQP connections accepted since start.",
                )
                .expect("valid metric"),
            ),
            http_requests: registered(
                &registry,
                IntCounterVec::new(
                    Opts::new("ferrobus_http_requests_total", "HTTP requests served."),
                    &["listener"],
                )
                .expect("valid metric"),
            ),
            messages: registered(
                &registry,
                gauge_vec(
                    "ferrobus_entity_messages",
                    "Messages an entity holds, by state (active, scheduled, dead_letter, transfer, transfer_dead_letter).",
                    &["entity", "state"],
                ),
            ),
            size: registered(
                &registry,
                gauge_vec(
                    "ferrobus_entity_size_bytes",
                    "Bytes an entity stores across its sub-queues.",
                    &["entity"],
                ),
            ),
            subscriptions: registered(
                &registry,
                gauge_vec(
                    "ferrobus_topic_subscriptions",
                    "Subscriptions of a topic.",
                    &["entity"],
                ),
            ),
            totals: registered(
                &registry,
                gauge_vec(
                    "ferrobus_entity_messages_total",
                    "Messages an entity has handled since it started, by event (sent, delivered, completed, abandoned, dead_lettered, expired, scheduled). A counter; exposed as a gauge because it restarts with the entity.",
                    &["entity", "event"],
                ),
            ),
            registry,
        })
    }

    /// Reads every entity's figures and renders the exposition.
    pub async fn render(&self, namespace: &Registry) -> Response {
        self.messages.reset();
        self.size.reset();
        self.subscriptions.reset();
        self.totals.reset();
        for slot in namespace.slots() {
            let path = slot.description.path();
            let Ok(runtime) = namespace.runtime(&path).await else {
                continue;
            };
            let counts = runtime.counts;
            if let Description::Topic(_) = slot.description {
                self.subscriptions
                    .with_label_values(&[&path])
                    .set(runtime.subscription_count as i64);
                self.messages
                    .with_label_values(&[&path, "scheduled"])
                    .set(counts.scheduled as i64);
                continue;
            }
            for (state, value) in [
                ("active", counts.active),
                ("scheduled", counts.scheduled),
                ("dead_letter", counts.dead_letter),
                ("transfer", counts.transfer),
                ("transfer_dead_letter", counts.transfer_dead_letter),
            ] {
                self.messages
                    .with_label_values(&[&path, state])
                    .set(value as i64);
            }
            self.size
                .with_label_values(&[&path])
                .set(counts.size_in_bytes as i64);
            for (event, value) in counts.totals.labelled() {
                self.totals
                    .with_label_values(&[&path, event])
                    .set(value as i64);
            }
        }
        let mut buffer = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode metrics: {error}"),
            )
                .into_response();
        }
        let mut response = (StatusCode::OK, buffer).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        response
    }
}
