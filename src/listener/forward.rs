//! A cluster follower's listeners: every connection a client opens here is forwarded, byte
//! for byte, to the node that leads the cluster, at that node's host and the port number of
//! the listener the client reached (every member serves the same ports). TLS, WebSockets,
//! SASL and `$cbs` all happen on the leader, so a connection string may name any member.
//! When the leader changes, the connections forwarded to the old one are closed; the
//! client's SDK reconnects and reaches the new one.
//!
//! `GET /health` and `GET /metrics` are answered here, by this node, so that each member
//! reports its own view and its own figures. With `[cluster] client_routing = "proxy"`,
//! plain AMQP connections are not forwarded either: [`Forwarding::local_amqp`] serves them
//! on this node (`crate::daemon::proxying`).
//!
//! A forwarded connection leaves from this node's own host address where that is an IP
//! address, so that the leader can tell the connections a member forwards: when the member
//! stops, it asks the leader to drain them ([`super::drains`]) and waits for them to end
//! ([`Forwarded::ended`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::sniff;

/// How long a connection waits for a leader to be known before it is closed.
const WAIT_FOR_LEADER: Duration = Duration::from_secs(10);

/// How long the client has to send its first bytes, and the leader to accept.
const FIRST_BYTES: Duration = Duration::from_secs(10);

/// The most connections a follower forwards at once.
const MAX_FORWARDED: usize = 4096;

/// Where a follower forwards to.
#[derive(Clone)]
pub struct Forwarding {
    /// This node's id (never a target: the node leads once it runs the entities itself).
    pub own: u64,
    /// The leader as this node knows it.
    pub leader: watch::Receiver<Option<u64>>,
    /// A member's host.
    pub host_of: Arc<dyn Fn(u64) -> Option<String> + Send + Sync>,
    /// This node's `/health`: status code and JSON body.
    pub health: Arc<dyn Fn() -> (u16, String) + Send + Sync>,
    /// This node's metrics (`/metrics` is answered here too; forwarded connections are
    /// counted).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Whether a `/metrics` request (its head, as received) may read them: `Err` is the
    /// status and text of the refusal.
    pub metrics_allowed: MetricsGate,
    /// The address forwarded connections leave from (this node's host, when it is an IP
    /// address); `None`: the system's choice.
    pub source: Option<std::net::IpAddr>,
    /// With `[cluster] client_routing = "proxy"`: plain AMQP connections are served here,
    /// by this hook (this node's own broker front end, its commands carried to the
    /// leader); everything else is forwarded.
    pub local_amqp: Option<LocalAmqp>,
}

/// Serves a plain AMQP connection on this node (see [`Forwarding::local_amqp`]).
pub type LocalAmqp = Arc<dyn Fn(TcpStream) + Send + Sync>;

/// The connections being forwarded.
pub struct Forwarded {
    permits: Arc<Semaphore>,
}

impl Forwarded {
    /// How many connections are being forwarded now.
    pub fn open(&self) -> usize {
        MAX_FORWARDED - self.permits.available_permits()
    }

    /// Waits until no connection is forwarded any more, at most `within`; whether none is.
    pub async fn ended(&self, within: Duration) -> bool {
        let all = u32::try_from(MAX_FORWARDED).unwrap_or(u32::MAX);
        matches!(
            tokio::time::timeout(within, self.permits.acquire_many(all)).await,
            Ok(Ok(_))
        )
    }
}

/// Decides whether a `/metrics` request head may read them (`Err`: status and text).
pub type MetricsGate = Arc<dyn Fn(&[u8]) -> Result<(), (u16, String)> + Send + Sync>;

/// Forwards every connection the listeners accept until `until` completes, then hands the
/// listeners back (the connections forwarded so far go on until the leader changes) with
/// the connections still forwarded.
pub async fn forward_until(
    listeners: Vec<TcpListener>,
    forwarding: Forwarding,
    until: impl Future<Output = ()>,
) -> (Vec<TcpListener>, Forwarded) {
    let (stop, stopped) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(MAX_FORWARDED));
    let tasks: Vec<_> = listeners
        .into_iter()
        .map(|listener| {
            tokio::spawn(accept(
                listener,
                forwarding.clone(),
                permits.clone(),
                stopped.clone(),
            ))
        })
        .collect();
    until.await;
    let _ = stop.send(true);
    let mut listeners = Vec::with_capacity(tasks.len());
    for task in tasks {
        // An accept loop only ends by handing its listener back.
        if let Ok(listener) = task.await {
            listeners.push(listener);
        }
    }
    (listeners, Forwarded { permits })
}

/// Connects to the leader at `host:port`, leaving from `source` when given (and possible).
async fn connect_upstream(
    host: &str,
    port: u16,
    source: Option<std::net::IpAddr>,
) -> std::io::Result<TcpStream> {
    let target = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{host} resolves to no address")))?;
    if let Some(source) = source.filter(|source| source.is_ipv4() == target.is_ipv4()) {
        let socket = if target.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        if socket.bind((source, 0).into()).is_ok() {
            return socket.connect(target).await;
        }
    }
    TcpStream::connect(target).await
}

async fn accept(
    listener: TcpListener,
    forwarding: Forwarding,
    permits: Arc<Semaphore>,
    mut stopped: watch::Receiver<bool>,
) -> TcpListener {
    let port = listener
        .local_addr()
        .map(|address| address.port())
        .unwrap_or(0);
    loop {
        tokio::select! {
            _ = stopped.changed() => return listener,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        tracing::warn!("refusing a connection: {MAX_FORWARDED} connections are being forwarded");
                        continue;
                    };
                    let forwarding = forwarding.clone();
                    tokio::spawn(async move {
                        forward(stream, port, forwarding).await;
                        drop(permit);
                    });
                }
                Err(error) => {
                    tracing::debug!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    }
}

/// Whether the first bytes are an HTTP GET of `route`.
fn asks_for(first: &[u8], route: &[u8]) -> bool {
    first
        .strip_prefix(b"GET ")
        .and_then(|rest| rest.strip_prefix(route))
        .is_some_and(|rest| matches!(rest.first(), Some(b' ' | b'?' | b'/')))
}

/// The most bytes of a request head answered here.
const MAX_HEAD: usize = 16 * 1024;

/// Reads on until `head` holds a whole HTTP request head (its blank line); `false` when the
/// client closes, takes too long or sends too much.
async fn read_head(client: &mut TcpStream, head: &mut Vec<u8>) -> bool {
    read_until(client, head, |head| {
        head.windows(4).any(|window| window == b"\r\n\r\n")
    })
    .await
}

/// Reads on until `head` holds a GET request's whole first line, when what the first read
/// returned is one cut short (so that its route is known before the connection is
/// forwarded); `true` at once for anything else.
async fn read_request_line(client: &mut TcpStream, head: &mut Vec<u8>) -> bool {
    let get = head.starts_with(b"GET ") || b"GET ".starts_with(&head[..]);
    if !get {
        return true;
    }
    read_until(client, head, |head| head.contains(&b'\n')).await
}

/// Reads on until `complete(head)`; `false` when the client closes, takes too long or
/// sends more than [`MAX_HEAD`].
async fn read_until(
    client: &mut TcpStream,
    head: &mut Vec<u8>,
    complete: impl Fn(&[u8]) -> bool,
) -> bool {
    let reading = async {
        let mut buffer = [0u8; 4096];
        while !complete(head) {
            if head.len() > MAX_HEAD {
                return false;
            }
            match client.read(&mut buffer).await {
                Ok(0) | Err(_) => return false,
                Ok(read) => head.extend_from_slice(&buffer[..read]),
            }
        }
        true
    };
    tokio::time::timeout(FIRST_BYTES, reading)
        .await
        .unwrap_or(false)
}

/// Answers an HTTP request here and closes.
async fn answer(client: &mut TcpStream, status: u16, content_type: &str, body: &[u8]) {
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        _ => "Service Unavailable",
    };
    let challenge = if status == 401 {
        "www-authenticate: Basic realm=\"ferrobus metrics\", charset=\"UTF-8\"\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{challenge}connection: close\r\n\r\n",
        body.len()
    );
    let _ = client.write_all(head.as_bytes()).await;
    let _ = client.write_all(body).await;
    let _ = client.shutdown().await;
}

async fn forward(mut client: TcpStream, port: u16, forwarding: Forwarding) {
    if let Some(local) = &forwarding.local_amqp {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(FIRST_BYTES, client.peek(&mut byte)).await {
            Ok(Ok(1)) if sniff::classify(byte[0]) == sniff::Protocol::Amqp => {
                local(client);
                return;
            }
            Ok(Ok(1)) => {}
            _ => return,
        }
    }
    let mut first = vec![0u8; 4096];
    let read = match tokio::time::timeout(FIRST_BYTES, client.read(&mut first)).await {
        Ok(Ok(read)) if read > 0 => read,
        _ => return,
    };
    first.truncate(read);
    if !read_request_line(&mut client, &mut first).await {
        return;
    }
    if (asks_for(&first, b"/health") || asks_for(&first, b"/metrics"))
        && !read_head(&mut client, &mut first).await
    {
        return;
    }
    if asks_for(&first, b"/health") {
        let (status, body) = (forwarding.health)();
        answer(&mut client, status, "application/json", body.as_bytes()).await;
        return;
    }
    if asks_for(&first, b"/metrics") {
        if let Err((status, text)) = (forwarding.metrics_allowed)(&first) {
            answer(
                &mut client,
                status,
                "text/plain; charset=utf-8",
                text.as_bytes(),
            )
            .await;
            return;
        }
        let body = forwarding.metrics.encode().unwrap_or_default();
        answer(
            &mut client,
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            &body,
        )
        .await;
        return;
    }
    let mut leader = forwarding.leader.clone();
    let own = forwarding.own;
    // This node leading means it is about to serve on these listeners itself: the client
    // connects again and reaches it.
    let target =
        tokio::time::timeout(WAIT_FOR_LEADER, leader.wait_for(|leader| leader.is_some())).await;
    let Some(target) = target
        .ok()
        .and_then(|found| found.ok())
        .and_then(|found| *found)
        .filter(|target| *target != own)
    else {
        tracing::debug!("closing a connection: no other node leads the cluster");
        return;
    };
    let Some(host) = (forwarding.host_of)(target) else {
        return;
    };
    let upstream = tokio::time::timeout(
        FIRST_BYTES,
        connect_upstream(&host, port, forwarding.source),
    )
    .await;
    let mut upstream = match upstream {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(error)) => {
            tracing::debug!(%error, "cannot reach the leader (node {target}) at {host}:{port}");
            return;
        }
        Err(_) => return,
    };
    let _ = upstream.set_nodelay(true);
    let _ = client.set_nodelay(true);
    if upstream.write_all(&first).await.is_err() {
        return;
    }
    let counted = &forwarding.metrics.cluster;
    counted.forwarded.inc();
    counted.forwarded_open.inc();
    let _open = OpenGuard(counted.forwarded_open.clone());
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        _ = leader.wait_for(|leader| *leader != Some(target)) => {
            tracing::debug!("closing a forwarded connection: node {target} no longer leads");
        }
    }
}

/// Takes one off `gauge` when dropped.
struct OpenGuard(prometheus::IntGauge);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_health_and_metrics_routes_are_answered_here() {
        assert!(asks_for(b"GET /health HTTP/1.1\r\n", b"/health"));
        assert!(asks_for(b"GET /health?x=1 HTTP/1.1\r\n", b"/health"));
        assert!(!asks_for(b"GET /healthy HTTP/1.1\r\n", b"/health"));
        assert!(!asks_for(b"GET /metrics HTTP/1.1\r\n", b"/health"));
        assert!(asks_for(b"GET /metrics HTTP/1.1\r\n", b"/metrics"));
        assert!(!asks_for(b"POST /metrics HTTP/1.1\r\n", b"/metrics"));
        assert!(!asks_for(b"AMQP\x03\x01\x00\x00", b"/health"));
    }
}
