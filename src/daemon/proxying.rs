//! A cluster member that serves its own clients' AMQP connections (`[cluster]
//! client_routing = "proxy"`, `docs/cluster.md`): while another node leads, this node keeps
//! each plain AMQP connection a client opens here — SASL, `$cbs`, sessions, links — and
//! carries its entity and topic commands to the leader over one entity-command connection
//! ([`crate::cluster::remote`]); TLS, WebSocket and HTTP connections are still forwarded to
//! the leader byte for byte ([`crate::listener::forward`]).
//!
//! The entities this node knows are the configuration file's with the run-time changes the
//! cluster committed laid over them ([`RaftLog::applied_namespace`]), followed as they
//! change. When the leader changes, the stream to the old one is ended: commands waiting on
//! it are answered with a retryable timeout, receivers attached through it are detached so
//! that the client attaches them again, and the next command reaches the new leader.
//!
//! On the leader, [`serve_commands`] answers the other members' streams from its registry,
//! each byte sent only while its lease holds (a deposed leader answers nothing).

use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, watch};

use crate::broker::leadership::Lease;
use crate::broker::registry::{Entity, Registry, RemoteEntities};
use crate::clock::Clock;
use crate::cluster::RaftLog;
use crate::cluster::remote::{self, Proxy};
use crate::config::Config;
use crate::listener::forward::LocalAmqp;
use crate::server::{Context, run_with_permit};

/// How long a command waits for a leader to be known before it is answered with a
/// retryable timeout.
const WAIT_FOR_LEADER: Duration = Duration::from_secs(10);

/// The first receiver id of a member's connections: its node id in the top 16 bits, so
/// that receivers of different nodes' connections never share an id at an entity.
pub(crate) fn first_receiver_id(node: u64) -> u64 {
    (node << 48) | 1
}

/// The namespace this member serves: `config`'s entities with the cluster's run-time
/// changes `text` laid over them.
fn namespace_of(config: &Config, text: Option<&str>) -> Result<Config, String> {
    match text {
        Some(text) => crate::lay_changes(config, text, "the cluster's log"),
        None => Ok(config.clone()),
    }
}

/// The clients this member serves itself while another node leads.
pub(crate) struct LocalClients {
    /// Hands a plain AMQP connection to this node's front end ([`Forwarding::local_amqp`]).
    ///
    /// [`Forwarding::local_amqp`]: crate::listener::forward::Forwarding::local_amqp
    pub(crate) hook: LocalAmqp,
    /// Turns true to drain and close the connections served here.
    stop: watch::Sender<bool>,
    proxy: Arc<Proxy>,
    context: Arc<Context>,
    /// The connections served here.
    connections: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
}

impl LocalClients {
    /// Starts serving: a proxy that reaches whichever node leads, and a registry of the
    /// namespace whose entities it reaches through that proxy.
    pub(crate) fn start(
        raft: &Arc<RaftLog>,
        config: &Config,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<LocalClients, String> {
        let own = raft.node_id();
        let proxy = {
            let weak = Arc::downgrade(raft);
            Arc::new(Proxy::connecting(move || {
                let weak = weak.clone();
                Box::pin(async move { connect_to_leader(weak, own).await })
            }))
        };
        {
            // A new leader: end the stream to the old one (if it still looks alive).
            let mut leader = raft.cluster_leader();
            let proxy = Arc::downgrade(&proxy);
            tokio::spawn(async move {
                while leader.changed().await.is_ok() {
                    let Some(proxy) = proxy.upgrade() else { return };
                    proxy.reset();
                }
            });
        }
        let remote = RemoteEntities {
            entity: {
                let proxy = proxy.clone();
                Arc::new(move |path| proxy.handle(path))
            },
            topic: {
                let proxy = proxy.clone();
                Arc::new(move |path| proxy.topic_handle(path))
            },
        };
        let mut applied = raft.applied_namespace();
        let namespace = namespace_of(config, applied.borrow_and_update().as_deref())?;
        let clock = Clock::system();
        let registry = Registry::start_remote(
            &namespace,
            config,
            clock,
            crate::topic_codec(config),
            &remote,
        );
        registry.cap_message_size(crate::cluster::MAX_MESSAGE_SIZE);
        {
            let registry = Arc::downgrade(&registry);
            let config = config.clone();
            tokio::spawn(async move {
                while applied.changed().await.is_ok() {
                    let Some(registry) = registry.upgrade() else {
                        return;
                    };
                    let text = applied.borrow_and_update().clone();
                    match namespace_of(&config, text.as_deref()) {
                        Ok(namespace) => registry.follow(&namespace, &remote),
                        Err(error) => tracing::error!(
                            "the cluster's namespace changes cannot be served here: {error}"
                        ),
                    }
                }
            });
        }
        let context = Arc::new(Context {
            settings: crate::server_settings(config, crate::access_keys(config)),
            registry,
            clock,
            next_receiver_id: AtomicU64::new(first_receiver_id(own)),
            metrics,
            connection_permits: Arc::new(Semaphore::new(config.server.max_connections)),
            lease: None,
        });
        let (stop, stopping) = watch::channel(false);
        let connections = Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let hook: LocalAmqp = {
            let context = context.clone();
            let connections = connections.clone();
            Arc::new(move |stream: TcpStream| {
                let context = context.clone();
                let stopping = stopping.clone();
                let mut connections = connections
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                while connections.try_join_next().is_some() {}
                connections.spawn(async move {
                    let _ = stream.set_nodelay(true);
                    run_with_permit(stream, context, stopping).await;
                });
            })
        };
        Ok(LocalClients {
            hook,
            stop,
            proxy,
            context,
            connections,
        })
    }

    /// Closes the connections served here at once, and the stream to the leader: this
    /// node starts to lead, so nothing they wait for can come (their clients connect again
    /// and reach this node's own broker).
    pub(crate) fn abort(&self) {
        let _ = self.stop.send(true);
        self.connections
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .abort_all();
        self.proxy.close();
    }

    /// How many connections are served here now.
    pub(crate) fn open(&self) -> usize {
        self.context.settings.max_connections - self.context.connection_permits.available_permits()
    }

    /// Drains the connections served here (as at a shutdown: receivers may settle for the
    /// grace period, then each is closed) and waits for them to end, at most `within`;
    /// then ends the stream to the leader.
    pub(crate) async fn close(&self, within: Duration) {
        let _ = self.stop.send(true);
        let all = u32::try_from(self.context.settings.max_connections).unwrap_or(u32::MAX);
        let permits = self.context.connection_permits.clone();
        let _ = tokio::time::timeout(within, permits.acquire_many_owned(all)).await;
        self.proxy.close();
    }
}

/// A stream to the node that leads (not this one), once one is known and accepts: tried
/// again every [`RETRY_CONNECT`] (the node this one believes leads may have just died, and
/// an election takes about a second) for at most [`WAIT_FOR_LEADER`].
async fn connect_to_leader(raft: Weak<RaftLog>, own: u64) -> Result<TcpStream, String> {
    let raft = raft
        .upgrade()
        .ok_or_else(|| "this node is stopping".to_string())?;
    let deadline = tokio::time::Instant::now() + WAIT_FOR_LEADER;
    let mut leader = raft.cluster_leader();
    let mut why = format!("no other node is known to lead the cluster after {WAIT_FOR_LEADER:?}");
    loop {
        let known = match tokio::time::timeout_at(
            deadline,
            leader.wait_for(|leader| leader.is_some_and(|leader| leader != own)),
        )
        .await
        {
            Ok(Ok(leader)) => *leader,
            _ => None,
        };
        let Some(node) = known else {
            return Err(why);
        };
        match raft.commands_stream(node).await {
            Ok(stream) => return Ok(stream),
            Err(error) => {
                why = format!("node {node}, which leads as far as this node knows: {error}")
            }
        }
        if tokio::time::Instant::now() + RETRY_CONNECT >= deadline {
            return Err(why);
        }
        tokio::time::sleep(RETRY_CONNECT).await;
    }
}

/// How long a member waits before it tries to reach the leader again.
const RETRY_CONNECT: Duration = Duration::from_millis(100);

/// Serves another member's entity-command stream from `registry` (this node leads), every
/// byte sent only while `lease` holds.
pub(crate) fn serve_commands(
    registry: Weak<Registry>,
    lease: Arc<Lease>,
) -> crate::cluster::peer::ServeCommands {
    Arc::new(move |stream: TcpStream, node: u64| {
        let registry = registry.clone();
        let lease = lease.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let lookup = move |path: &str| {
                let registry = registry.upgrade()?;
                Some(match registry.lookup(path)? {
                    Entity::Queue(handle) | Entity::Subscription(handle) => {
                        remote::Target::Entity(handle)
                    }
                    Entity::Topic(handle) => remote::Target::Topic(handle),
                })
            };
            if let Err(error) = remote::serve(LeaseGated { stream, lease }, lookup).await {
                tracing::info!(node, "a member's entity-command stream ended: {error}");
            }
        });
    })
}

/// A stream that fails every write once the leader's lease does not hold.
struct LeaseGated {
    stream: TcpStream,
    lease: Arc<Lease>,
}

impl AsyncRead for LeaseGated {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut TaskContext<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(context, buffer)
    }
}

impl AsyncWrite for LeaseGated {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut TaskContext<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if !self.lease.held() {
            return Poll::Ready(Err(std::io::Error::other(
                "this node's leader lease does not hold: it may no longer lead",
            )));
        }
        Pin::new(&mut self.stream).poll_write(context, bytes)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        context: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        context: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(context)
    }
}
