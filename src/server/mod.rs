//! The AMQP front end: runs one task per connection that speaks AMQP 1.0 (SASL,
//! connection, sessions, links) and hands work to entity actors. The listener
//! ([`crate::listener`]) accepts the sockets and hands it the AMQP ones. It owns no message
//! state, must not implement Service Bus rules, and never imports the admin plane.

mod authorization;
mod connection;
mod credit;
mod detach;
mod dispositions;
mod event_loop;
pub mod frame;
mod handshake;
mod incoming;
pub mod limits;
mod links;
pub mod log_text;
mod outgoing;
mod requests;
mod sasl;
mod session;
mod transaction_via;
mod transactions;
pub mod transport;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};

use crate::amqp::sas::AccessKey;
use crate::broker::registry::Registry;
use crate::clock::Clock;
use crate::metrics::Metrics;
pub use handshake::{Admission, out_of_descriptors_refusal};

/// Settings of the network front end.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Advertised in `open` (zero: none); a peer silent for twice that is closed.
    pub idle_timeout: Duration,
    /// Largest frame we accept, advertised in `open`.
    pub max_frame_size: u32,
    /// Concurrent connections allowed; more are closed with an error.
    pub max_connections: usize,
    /// Shared access keys; empty accepts any token (emulator behaviour).
    pub keys: Vec<AccessKey>,
    /// At shutdown, how long receivers may settle what they hold before the close.
    pub shutdown_grace_period: Duration,
    /// How long a peer may take from connecting to a complete `open`: its first byte, the
    /// protocol header, SASL and `open` (`server.handshake_timeout`).
    pub handshake_timeout: Duration,
    /// `[tls] required`: connections that do not start with TLS are refused.
    pub tls_required: bool,
    /// `[tls] enabled = false`: TLS connections are refused.
    pub tls_disabled: bool,
}

/// What every connection task shares.
#[derive(Debug)]
pub struct Context {
    /// Front-end settings.
    pub settings: ServerSettings,
    /// The entities.
    pub registry: Arc<Registry>,
    /// Wall-clock source.
    pub clock: Clock,
    /// Source of process-unique receiver ids.
    pub next_receiver_id: AtomicU64,
    /// The broker's metrics (connections, links, delivery latency).
    pub metrics: Arc<Metrics>,
    /// One per open connection (`server.max_connections`), whatever its transport.
    pub connection_permits: Arc<Semaphore>,
    /// In a cluster, the leader's lease: while it does not hold, connections send nothing
    /// and close (`None` on a single node).
    pub lease: Option<Arc<crate::broker::leadership::Lease>>,
}

impl Context {
    /// Whether the entity at `path` requires sessions.
    pub fn requires_session(&self, path: &str) -> bool {
        self.registry.requires_session(path)
    }

    /// Bytes one connection may hold in unfinished multi-frame deliveries: two of the
    /// largest messages any entity accepts, and at least 2 MiB.
    pub fn max_partial_bytes(&self) -> usize {
        let largest = self.registry.largest_message_size();
        (largest.max(1024 * 1024) * 2) as usize
    }

    /// The largest message an entity accepts (256 KiB when unknown).
    pub fn max_message_size(&self, path: &str) -> u64 {
        self.registry.max_message_size(path)
    }
}

/// Runs an AMQP connection on `stream`, counted in the metrics; its `open` must have come
/// by `handshake_deadline`.
pub async fn run_amqp<S: transport::RawStream>(
    stream: S,
    context: Arc<Context>,
    shutdown: watch::Receiver<bool>,
    admission: Admission,
    handshake_deadline: tokio::time::Instant,
) {
    let metrics = context.metrics.clone();
    metrics.connections.inc();
    metrics.connections_total.inc();
    connection::run(stream, context, shutdown, admission, handshake_deadline).await;
    metrics.connections.dec();
}

/// Runs an AMQP connection that arrived over a WebSocket (the engine's end of its bridge).
pub async fn run_bridged(
    stream: tokio::net::UnixStream,
    context: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    // The HTTP connection it upgraded from gave its permit back: this one takes its own.
    run_with_permit(stream, context, shutdown).await;
}

/// Runs an AMQP connection that was accepted elsewhere (a WebSocket's bridge, a cluster
/// follower's forwarding loop): it takes its own connection permit, or is refused as one
/// too many.
pub async fn run_with_permit<S: transport::RawStream>(
    stream: S,
    context: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    let permit = context.connection_permits.clone().try_acquire_owned().ok();
    let admission = if permit.is_some() {
        Admission::Admitted
    } else {
        Admission::TooManyConnections
    };
    let deadline = tokio::time::Instant::now() + context.settings.handshake_timeout;
    run_amqp(stream, context, shutdown, admission, deadline).await;
    drop(permit);
}
