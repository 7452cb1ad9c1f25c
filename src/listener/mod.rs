//! The listener: accepts sockets, tells the protocol of each from its first bytes
//! ([`sniff`]) and hands the connection to the AMQP front end ([`crate::server`]) or the
//! HTTP front ([`crate::admin::http`]). It alone knows both; they never import each other.
//!
//! One set of connection permits (`server.max_connections`) and one drain at shutdown cover
//! every connection it accepts, whatever its protocol.

pub mod drains;
pub mod forward;
pub mod sniff;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::admin::http::{Front, serve_connection};
use crate::server::{Admission, Context, limits, run_amqp, transport};
use sniff::{Protocol, classify, classify_stream};

/// Where the listener hands connections: the AMQP front end's context and the HTTP front.
#[derive(Clone)]
struct Fronts {
    /// AMQP connections run on it.
    amqp: Arc<Context>,
    /// HTTP connections are served by its routes; TLS takes its identity.
    http: Arc<Front>,
    /// A cluster leader's drains of what a stopping member forwards.
    drains: Option<Arc<drains::Drains>>,
}

fn spawn_connection(
    connections: &mut JoinSet<()>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    admission: Admission,
    fronts: &Fronts,
    shutdown: &watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let fronts = fronts.clone();
    let shutdown = match &fronts.drains {
        Some(drains) => drains.signal(peer.ip(), shutdown),
        None => shutdown.clone(),
    };
    let span = tracing::info_span!("connection", %peer);
    connections.spawn(
        async move {
            serve_stream(stream, fronts, shutdown, admission).await;
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
    fronts: Fronts,
    shutdown: watch::Receiver<bool>,
    admission: Admission,
) {
    let Fronts {
        amqp: context,
        http,
        drains: _,
    } = fronts;
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
            let router = http.router.clone();
            serve_connection(stream, router, false, shutdown).await;
        }
        Protocol::Tls if context.settings.tls_disabled => {
            tracing::info!("a TLS connection is refused ([tls] enabled = false)");
        }
        Protocol::Tls => {
            let acceptor = match http.tls() {
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
                    let router = http.router.clone();
                    serve_connection(stream, router, true, shutdown).await;
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

/// Serves connections from `listener` until `shutdown` turns true, then stops accepting,
/// lets every connection drain (receivers may settle for the grace period; then each is
/// closed with `amqp:connection:forced`) and returns once all have ended. With `drains`
/// (a cluster leader), the connections from one address can be drained before that.
pub async fn serve(
    listener: TcpListener,
    more: Vec<TcpListener>,
    context: Arc<Context>,
    http: Arc<Front>,
    mut shutdown: watch::Receiver<bool>,
    drains: Option<Arc<drains::Drains>>,
) {
    let permits = context.connection_permits.clone();
    let fronts = Fronts {
        amqp: context.clone(),
        http,
        drains,
    };
    let mut connections = JoinSet::new();
    let spare = limits::SpareDescriptor::reserve();
    let refusal = crate::server::out_of_descriptors_refusal(&context);
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
                    &fronts,
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
