//! `GET /metrics`: every entity's figures read into the broker's [`Metrics`] at scrape time
//! (each actor answers with its counts and cumulative totals), then the Prometheus text
//! exposition.

use std::collections::HashSet;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::broker::registry::{Description, Registry};
use crate::metrics::Metrics;

/// Reads every entity's figures and renders the exposition.
pub async fn render(metrics: &Metrics, namespace: &Registry) -> Response {
    let slots = namespace.slots();
    let current: HashSet<String> = slots.iter().map(|slot| slot.description.path()).collect();
    metrics.start_scrape(&current);
    for slot in slots {
        let path = slot.description.path();
        let Ok(runtime) = namespace.runtime(&path).await else {
            continue;
        };
        let counts = runtime.counts;
        if let Description::Topic(_) = slot.description {
            metrics
                .subscriptions
                .with_label_values(&[&path])
                .set(runtime.subscription_count as i64);
            metrics
                .messages
                .with_label_values(&[&path, "scheduled"])
                .set(counts.scheduled as i64);
            continue;
        }
        for (state, value) in [
            ("active", counts.active),
            ("deferred", counts.deferred),
            ("scheduled", counts.scheduled),
            ("dead_letter", counts.dead_letter),
            ("transfer", counts.transfer),
            ("transfer_dead_letter", counts.transfer_dead_letter),
        ] {
            metrics
                .messages
                .with_label_values(&[&path, state])
                .set(value as i64);
        }
        metrics
            .size
            .with_label_values(&[&path])
            .set(counts.size_in_bytes as i64);
        for (event, value) in counts.totals.labelled() {
            metrics
                .totals
                .with_label_values(&[&path, event])
                .set(value as i64);
        }
        for (reason, value) in counts.totals.dead_lettered_by_reason.labelled() {
            metrics
                .dead_lettered
                .with_label_values(&[&path, reason])
                .set(value as i64);
        }
    }
    let buffer = match metrics.encode() {
        Ok(buffer) => buffer,
        Err(error) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode metrics: {error}"),
            )
                .into_response();
        }
    };
    let mut response = (StatusCode::OK, buffer).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}
