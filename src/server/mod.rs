//! The network front end: accepts TCP connections and runs one task per connection that
//! speaks AMQP 1.0 (SASL, connection, sessions, links) and hands work to entity actors.
//! It owns no message state and must not implement Service Bus rules.

mod authorization;
mod connection;
mod dispositions;
pub mod frame;
mod incoming;
mod links;
pub mod log_text;
mod outgoing;
mod requests;
mod sasl;
mod session;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::amqp::sas::AccessKey;
use crate::broker::registry::Registry;
use crate::clock::Clock;

/// Settings of the network front end.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Advertised in `open`; heartbeats go out at half of it.
    pub idle_timeout: Duration,
    /// Largest frame we accept, advertised in `open`.
    pub max_frame_size: u32,
    /// Concurrent connections allowed; more are closed with an error.
    pub max_connections: usize,
    /// Shared access keys; empty accepts any token (emulator behaviour).
    pub keys: Vec<AccessKey>,
    /// At shutdown, how long receivers may settle what they hold before the close.
    pub shutdown_grace_period: Duration,
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
    /// Lowercase paths of entities that require sessions.
    pub session_entities: std::collections::HashSet<String>,
    /// Lowercase entity path → largest message accepted, in bytes.
    pub max_message_sizes: std::collections::HashMap<String, u64>,
}

impl Context {
    /// Whether the entity at `path` requires sessions.
    pub fn requires_session(&self, path: &str) -> bool {
        self.session_entities
            .contains(&path.trim_matches('/').to_ascii_lowercase())
    }

    /// The largest message an entity accepts (256 KiB when unknown).
    pub fn max_message_size(&self, path: &str) -> u64 {
        self.max_message_sizes
            .get(&path.trim_matches('/').to_ascii_lowercase())
            .copied()
            .unwrap_or(256 * 1024)
    }
}

/// Serves connections from `listener` until `shutdown` turns true, then stops accepting,
/// lets every connection drain (receivers may settle for the grace period; then each is
/// closed with `amqp:connection:forced`) and returns once all have ended.
pub async fn serve(
    listener: TcpListener,
    context: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(context.settings.max_connections));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reap finished connection tasks as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let permit = permits.clone().try_acquire_owned().ok();
        let context = context.clone();
        let shutdown = shutdown.clone();
        let span = tracing::info_span!("connection", %peer);
        connections.spawn(
            async move {
                connection::run(stream, context, shutdown, permit.is_some()).await;
                drop(permit);
            }
            .instrument(span),
        );
    }
    drop(listener);
    let open = connections.len();
    if open > 0 {
        tracing::info!(connections = open, "draining connections");
    }
    // Each connection closes itself at the end of the grace period; the margin covers the
    // last writes (bounded too).
    let limit = context.settings.shutdown_grace_period + Duration::from_secs(6);
    if tokio::time::timeout(limit, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!(
            connections = connections.len(),
            "connections still open at shutdown; aborted"
        );
        connections.abort_all();
    }
}
