//! The network front end: accepts TCP connections and runs one task per connection that
//! speaks AMQP 1.0 (SASL, connection, sessions, links) and hands work to entity actors.
//! It owns no message state and must not implement Service Bus rules.

mod authorization;
mod connection;
mod dispositions;
pub mod frame;
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

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::amqp::sas::AccessKey;
use crate::broker::registry::Registry;
use crate::clock::Clock;
use connection::Admission;

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
    /// The HTTP side: admin API, health and metrics, also served on this port.
    pub http: crate::admin::http::Front,
    /// One per open connection (`server.max_connections`), whatever its transport.
    pub connection_permits: Arc<Semaphore>,
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

fn spawn_connection(
    connections: &mut JoinSet<()>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    admission: Admission,
    context: &Arc<Context>,
    shutdown: &watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let context = context.clone();
    let shutdown = shutdown.clone();
    let span = tracing::info_span!("connection", %peer);
    connections.spawn(
        async move {
            serve_stream(stream, context, shutdown, admission).await;
            drop(permit);
        }
        .instrument(span),
    );
}

/// How long a TLS connection may take to finish its TLS handshake, and then to send its
/// first byte inside TLS. (A plain connection's first byte is bounded by
/// `server.handshake_timeout`, which the AMQP handshake also counts from the accept.)
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves one accepted connection in the protocol its first byte names: AMQP, HTTP, or
/// TLS (inside which HTTP is served; AMQP over TLS is refused for now).
async fn serve_stream(
    stream: tokio::net::TcpStream,
    context: Arc<Context>,
    shutdown: watch::Receiver<bool>,
    admission: Admission,
) {
    use crate::admin::sniff::{Protocol, classify, classify_stream};
    // The handshake's time counts from the accept: a peer that sends nothing at all is
    // dropped at the same deadline as one that stops after the protocol header.
    let handshake_deadline = tokio::time::Instant::now() + context.settings.handshake_timeout;
    let mut first = [0u8; 1];
    let protocol = match tokio::time::timeout_at(handshake_deadline, stream.peek(&mut first)).await
    {
        Ok(Ok(1)) => classify(first[0]),
        _ => return,
    };
    if context.settings.tls_required && protocol != Protocol::Tls {
        tracing::info!("a connection without TLS is refused ([tls] required = true)");
        return;
    }
    match protocol {
        Protocol::Amqp => {
            run_amqp(stream, context, shutdown, admission, handshake_deadline).await;
        }
        Protocol::Http => {
            let router = context.http.router.clone();
            crate::admin::http::serve_connection(stream, router, false, shutdown).await;
        }
        Protocol::Tls if context.settings.tls_disabled => {
            tracing::info!("a TLS connection is refused ([tls] enabled = false)");
        }
        Protocol::Tls => {
            let acceptor = match context.http.tls() {
                Ok(acceptor) => acceptor,
                Err(error) => {
                    tracing::warn!(%error, "a TLS connection is refused: no TLS identity");
                    return;
                }
            };
            let Ok(Ok(tls)) =
                tokio::time::timeout(FIRST_BYTE_TIMEOUT, acceptor.accept(stream)).await
            else {
                tracing::debug!("TLS handshake failed or timed out");
                return;
            };
            match tokio::time::timeout(FIRST_BYTE_TIMEOUT, classify_stream(tls)).await {
                Ok(Ok(Some((Protocol::Http, stream)))) => {
                    let router = context.http.router.clone();
                    crate::admin::http::serve_connection(stream, router, true, shutdown).await;
                }
                Ok(Ok(Some((Protocol::Amqp, stream)))) => match transport::bridge(stream) {
                    Ok(engine) => {
                        let deadline =
                            tokio::time::Instant::now() + context.settings.handshake_timeout;
                        run_amqp(engine, context, shutdown, admission, deadline).await;
                    }
                    Err(error) => tracing::warn!(%error, "cannot bridge a TLS connection"),
                },
                Ok(Ok(Some((Protocol::Tls, _)))) => {
                    tracing::debug!("TLS inside TLS is not served");
                }
                _ => {}
            }
        }
    }
}

/// Runs an AMQP connection on `stream`, counted in the metrics; its `open` must have come
/// by `handshake_deadline`.
async fn run_amqp<S: transport::RawStream>(
    stream: S,
    context: Arc<Context>,
    shutdown: watch::Receiver<bool>,
    admission: Admission,
    handshake_deadline: tokio::time::Instant,
) {
    let metrics = context.http.admin.metrics.clone();
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

/// Serves connections from `listener` until `shutdown` turns true, then stops accepting,
/// lets every connection drain (receivers may settle for the grace period; then each is
/// closed with `amqp:connection:forced`) and returns once all have ended.
pub async fn serve(
    listener: TcpListener,
    more: Vec<TcpListener>,
    context: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = context.connection_permits.clone();
    let mut connections = JoinSet::new();
    let spare = limits::SpareDescriptor::reserve();
    let refusal = connection::out_of_descriptors_refusal(&context);
    let mut accept_warnings = limits::RateLimitedWarning::new(Duration::from_secs(10));
    // The other listeners accept in tasks of their own and hand their connections over, so
    // that one set of permits and one drain cover them all.
    let (handover, mut handed_over) = tokio::sync::mpsc::channel(64);
    let mut acceptors = JoinSet::new();
    for extra in more {
        let handover = handover.clone();
        acceptors.spawn(async move {
            let mut warnings = limits::RateLimitedWarning::new(Duration::from_secs(10));
            loop {
                match extra.accept().await {
                    Ok(accepted) => {
                        if handover.send(accepted).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        warnings.warn(&error);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
    }
    drop(handover);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(accepted) = handed_over.recv() => Ok(accepted),
            // Reap finished connection tasks as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            _ = shutdown.changed() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                let permit = permits.clone().try_acquire_owned().ok();
                let admission = if permit.is_some() {
                    Admission::Admitted
                } else {
                    Admission::TooManyConnections
                };
                spawn_connection(
                    &mut connections,
                    stream,
                    peer,
                    permit,
                    admission,
                    &context,
                    &shutdown,
                );
            }
            Err(error) if limits::out_of_descriptors(&error) => {
                accept_warnings.warn(&error);
                // Free the spare descriptor to take the waiting connection and refuse it
                // at once, rather than leave the peer hanging in the backlog; the spare is
                // back before the next accept, whatever this peer does.
                if !spare.refuse_one(&listener, &refusal) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Err(error) => {
                accept_warnings.warn(&error);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    acceptors.abort_all();
    drop(handed_over);
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
