//! ferrobus: a standalone AMQP 1.0 message broker with the semantics of Azure Service Bus.
//!
//! # Layout
//! - [`config`]: the TOML configuration, read raw and validated into typed settings.
//! - [`cli`]: command-line flags.
//! - [`ops`]: the operator CLI (`ferrobus queue|send|receive|…`), a client of a running
//!   broker's HTTP routes and AMQP; it imports `admin`'s ATOM codec and `config`'s duration
//!   text, nothing of the broker's core.
//! - [`daemon`]: running as a daemon: the configuration reload (SIGHUP and the admin route),
//!   the service manager's readiness protocol, the log format; it drives the namespace
//!   through `broker`'s operations like the admin plane.
//! - [`clock`]: the wall clock injected into the core.
//! - [`listener`]: accepts sockets and tells AMQP, HTTP and TLS apart by their first bytes,
//!   handing each connection to `server` or to the admin plane's HTTP front.
//! - [`server`]: the AMQP front end (framing, SASL, connections, sessions, links).
//! - [`admin`]: the HTTP front (administration API, explorer, `/health`, `/metrics`).
//! - [`amqp`]: protocol adapters (transfer ⇄ core message, addresses, `$cbs`,
//!   `$management`, the error-condition table).
//! - [`broker`]: the core: entity actors around a pure state machine, topics, registry.
//! - [`encoding`]: the ground floor of a message: AMQP's byte-level codec, the depth guard,
//!   the message's sections, invented ids.
//! - [`metrics`]: the broker's Prometheus metrics, which the fronts and the storage record
//!   into.
//!
//! Dependency rule: `server → broker`, `server → amqp`, `amqp → broker`; `broker` and
//! `amqp` both build on `encoding`, which imports none of them; `broker` never imports
//! `server`, `amqp` or AMQP frame types; `listener → server`, `listener → admin`, and
//! `server` and `admin` never import each other.

pub mod admin;
pub mod amqp;
pub mod broker;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod encoding;
pub mod listener;
pub mod metrics;
pub mod ops;
pub mod server;
pub mod store;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::net::TcpListener;
use tokio::sync::watch;

use amqp::sas::{AccessKey, Rights};
use broker::registry::Registry;
use clock::Clock;
use config::{Config, StorageMode};
use server::{Context, ServerSettings};
use store::storage::{LogStorage, Recovery, StorageOptions};

/// Checks what the configuration parser cannot: rule SQL compiles, and the TLS certificate
/// and key files a configuration names can be read and make an identity.
pub fn validate(config: &Config) -> Result<(), String> {
    let identity = tls_identity(config);
    if matches!(identity, admin::tls::Identity::Files { .. }) {
        admin::tls::load(&identity)?;
    }
    for topic in &config.topics {
        for subscription in &topic.subscriptions {
            broker::topic::compile_rules(&subscription.rules, 0).map_err(|error| {
                format!(
                    "topic '{}' subscription '{}': {error}",
                    topic.name, subscription.name
                )
            })?;
        }
    }
    Ok(())
}

/// Opens the data directory of a durable configuration and recovers what it holds;
/// `None` in memory mode. Fails when the directory is locked by another process, cannot be
/// created, or holds a log damaged before its tail.
pub fn open_storage(config: &Config) -> Result<Option<(LogStorage, Recovery)>, String> {
    if config.storage.mode == StorageMode::Memory {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let mut options = StorageOptions::new(&config.storage.data_dir);
    options.min_free_space = config.storage.min_free_space;
    options.compaction_min_bytes = config.storage.compaction_threshold;
    if let Ok(text) = std::env::var("FERROBUS_FAULT_INJECT") {
        // The fault harness's slow or failing disk (docs/development.md).
        let fault = store::log::Fault::parse(&text)
            .map_err(|error| format!("FERROBUS_FAULT_INJECT: {error}"))?;
        tracing::warn!(?fault, "fault injection: this node's log has a faulty disk");
        options.fault = Some(fault);
    }
    if config.cluster.is_multi_node() {
        // Members read entries back for each other and for taking over, and compact by
        // snapshots of the cluster's log (sent to members that lack what was purged).
        options.keep_entry_locations = true;
        options.compact_by_snapshots = true;
    }
    let (storage, mut recovery) = LogStorage::open(options).map_err(|error| error.to_string())?;
    recovery.elapsed = started.elapsed();
    Ok(Some((storage, recovery)))
}

/// Runs the broker on an already-bound listener until `shutdown` turns true, with the
/// storage its configuration names. Fails at once (serving nothing) if the configuration's
/// rules do not compile or the data directory cannot be opened.
pub async fn run(
    listener: TcpListener,
    config: &Config,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let storage = open_storage(config)?;
    run_with_storage(listener, config, storage, shutdown).await
}

/// [`run`] with storage already opened by [`open_storage`]. The AMQP listener also serves
/// the HTTP routes (protocol detection); no separate HTTP listener runs.
pub async fn run_with_storage(
    listener: TcpListener,
    config: &Config,
    storage: Option<(LogStorage, Recovery)>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let listeners = Listeners {
        amqp: listener,
        more: Vec::new(),
        http: None,
        https: None,
    };
    run_listeners(listeners, config, storage, shutdown, || {}).await
}

/// The sockets a broker serves.
pub struct Listeners {
    /// AMQP, and HTTP and TLS told apart by their first bytes.
    pub amqp: TcpListener,
    /// More listeners served like `amqp` (every protocol, told apart by the first bytes):
    /// AMQPS (5671), WebSockets (443).
    pub more: Vec<TcpListener>,
    /// Plain HTTP (admin API, health, metrics), like the emulator's port 5300.
    pub http: Option<TcpListener>,
    /// HTTPS.
    pub https: Option<TcpListener>,
}

/// Where the development TLS certificate's CA is kept: the data directory.
pub fn tls_identity(config: &Config) -> admin::tls::Identity {
    let files = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => (Some(cert), Some(key), ("tls.cert", "tls.key")),
        _ => (
            config.http.tls_cert.as_ref(),
            config.http.tls_key.as_ref(),
            ("http.tls_cert", "http.tls_key"),
        ),
    };
    match files {
        (Some(cert), Some(key), keys) => admin::tls::Identity::Files {
            cert: cert.clone(),
            key: key.clone(),
            keys,
        },
        _ => admin::tls::Identity::Development {
            directory: config.storage.data_dir.clone(),
        },
    }
}

/// Runs the broker on its listeners until `shutdown` turns true; `ready` is called once
/// every listener serves (the binary prints the emulator's ready line then).
pub async fn run_listeners(
    listeners: Listeners,
    config: &Config,
    storage: Option<(LogStorage, Recovery)>,
    shutdown: watch::Receiver<bool>,
    ready: impl FnOnce(),
) -> Result<(), String> {
    run_daemon(listeners, config, storage, shutdown, ready, None).await
}

/// [`run_listeners`] that can reload its configuration file (`reload`: SIGHUP and
/// `POST /$config/reload`, see [`daemon::reload`]).
pub async fn run_daemon(
    listeners: Listeners,
    config: &Config,
    storage: Option<(LogStorage, Recovery)>,
    shutdown: watch::Receiver<bool>,
    ready: impl FnOnce(),
    reload: Option<daemon::reload::ReloadSource>,
) -> Result<(), String> {
    let store = storage.as_ref().map(|(storage, _)| storage.clone());
    if let Some((storage, recovery)) = &storage {
        let messages: usize = recovery
            .entities
            .values()
            .map(|changes| {
                changes
                    .iter()
                    .filter(|change| matches!(change, broker::entity::state::Change::Put { .. }))
                    .count()
            })
            .sum();
        tracing::info!(
            data_dir = %storage.directory().display(),
            records = recovery.records,
            entities = recovery.entities.len(),
            "recovered the data directory in {:.1} ms ({messages} message records)",
            recovery.elapsed.as_secs_f64() * 1000.0
        );
    }
    // The core sees the log through its port only: every write goes through its placement
    // group's Raft log (src/cluster) on the node's write-ahead log.
    let mut groups = None;
    let mut start = NamespaceStart::default();
    let metrics = crate::metrics::Metrics::new();
    let storage = match storage {
        Some((storage, recovery)) => {
            let raft = Arc::new(
                cluster::RaftLog::new(storage, &recovery.groups, config.cluster.clone())?
                    .with_namespace(recovery.namespace.clone()),
            );
            raft.report_to(metrics.groups.clone());
            raft.keep_metadata();
            start = NamespaceStart {
                file: recovery.namespace_file.clone(),
                reset: recovery.namespace_reset,
            };
            groups = Some(raft.clone());
            let port: Arc<dyn broker::storage::DurableLog> = raft;
            Some((
                broker::storage::Storage::new(port),
                recovery.into_recovered(),
            ))
        }
        None => None,
    };
    let served = serve(
        listeners,
        config,
        storage,
        start,
        store.clone(),
        metrics,
        shutdown,
        ready,
        reload,
        None,
    )
    .await;
    if let Some(groups) = groups {
        groups.shutdown().await;
    }
    if let Some(store) = store {
        // Everything acknowledged is on disk already; this releases the directory.
        store.close();
    }
    served
}

/// [`run_with_storage`] on any implementation of the core's storage port, starting from
/// what it recovered (tests that crash a log at a chosen write).
pub async fn run_with_log(
    listener: TcpListener,
    config: &Config,
    log: Arc<dyn broker::storage::DurableLog>,
    recovered: broker::storage::Recovered,
    shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let listeners = Listeners {
        amqp: listener,
        more: Vec::new(),
        http: None,
        https: None,
    };
    let storage = Some((broker::storage::Storage::new(log), recovered));
    let start = NamespaceStart::default();
    serve(
        listeners,
        config,
        storage,
        start,
        None,
        crate::metrics::Metrics::new(),
        shutdown,
        || {},
        None,
        None,
    )
    .await
}

/// The configured keys with their rights (Manage implies Send and Listen).
pub(crate) fn access_keys(config: &Config) -> Vec<AccessKey> {
    config
        .auth
        .keys
        .iter()
        .map(|key| AccessKey {
            name: key.name.clone(),
            key: key.key.clone(),
            rights: Rights {
                manage: key.rights.manage,
                send: key.rights.send || key.rights.manage,
                listen: key.rights.listen || key.rights.manage,
            },
        })
        .collect()
}

/// A cluster leader's part in serving: its lease (connections send nothing without it)
/// and its view of the cluster for `/health`.
pub(crate) struct MemberRole {
    /// `None` where each placement group has its own lease (`placement = "spread"`).
    pub(crate) lease: Option<Arc<broker::leadership::Lease>>,
    pub(crate) view: admin::http::ClusterView,
    pub(crate) control: admin::http::ClusterControl,
    /// Drains of the connections a stopping member forwards.
    pub(crate) drains: Arc<listener::drains::Drains>,
    /// Told the registry once it runs (the leader serves the other members' entity
    /// commands from it).
    pub(crate) on_registry: Option<OnRegistry>,
    /// Where requests that may change the namespace go when another node changes it
    /// (`placement = "spread"`).
    pub(crate) namespace_node: Option<admin::http::NamespaceNode>,
}

/// See [`MemberRole::on_registry`].
pub(crate) type OnRegistry = Arc<dyn Fn(&Arc<Registry>) + Send + Sync>;

/// What the start writes of the namespace's run-time changes before the broker serves.
#[derive(Debug, Default)]
pub(crate) struct NamespaceStart {
    /// A `namespace.toml` left by an older build, whose text was recovered: written to the
    /// log, then removed.
    file: Option<std::path::PathBuf>,
    /// `--reset-runtime-changes`: the recovered text is the empty one, written to the log.
    reset: bool,
}

/// The namespace the broker serves: the configuration file with the stored run-time
/// changes laid over it. What `start` asks for is written (through the metadata group)
/// once the two are known to fit together, so a file that does not fit stays where it is.
async fn seed_namespace(
    config: &Config,
    storage: Option<&(broker::storage::Storage, broker::storage::Recovered)>,
    start: NamespaceStart,
) -> Result<Config, String> {
    let mut namespace = config.clone();
    let Some((storage, recovered)) = storage else {
        return Ok(namespace);
    };
    let Some(text) = &recovered.namespace else {
        return Ok(namespace);
    };
    let origin = match &start.file {
        Some(file) => file.display().to_string(),
        None => "the data directory's log".to_string(),
    };
    namespace = lay_changes(config, text, &origin)?;
    if start.reset || start.file.is_some() {
        storage
            .save_namespace(text.clone())
            .await
            .map_err(|error| format!("cannot store the namespace's run-time changes: {error}"))?;
    }
    if start.reset {
        tracing::info!(
            "--reset-runtime-changes: every entity created, changed or deleted at run time was dropped; the namespace is the configuration file's"
        );
    }
    if let Some(file) = &start.file {
        store::storage::remove_namespace_file(file)
            .map_err(|error| format!("cannot remove {}: {error}", file.display()))?;
        if !start.reset {
            tracing::info!(
                "the run-time namespace changes of {} are kept in the data directory's log now; the file was removed",
                file.display()
            );
        }
    }
    Ok(namespace)
}

/// The AMQP adapter's functions for topics, with the configured filter budget.
pub(crate) fn topic_codec(config: &Config) -> broker::topic::TopicCodec {
    broker::topic::TopicCodec {
        rewrite: Arc::new(amqp::rewrite::apply_rule_action),
        decode_properties: Arc::new(amqp::rewrite::decode_user_properties),
        evaluation_budget: config.server.filter_evaluation_budget,
    }
}

/// The AMQP front end's settings from the configuration, with its access `keys`.
pub(crate) fn server_settings(config: &Config, keys: Vec<AccessKey>) -> ServerSettings {
    ServerSettings {
        idle_timeout: config.server.idle_timeout,
        max_frame_size: config.server.max_frame_size,
        max_connections: config.server.max_connections,
        shutdown_grace_period: config.server.shutdown_grace_period,
        handshake_timeout: config.server.handshake_timeout,
        keys,
        tls_required: config.tls.required,
        tls_disabled: config.tls.disabled,
    }
}

/// The namespace: the configuration file `config` with the run-time changes `text` (read
/// from `origin`, for messages) laid over it, validated.
pub(crate) fn lay_changes(config: &Config, text: &str, origin: &str) -> Result<Config, String> {
    let mut namespace = config.clone();
    let changes =
        config::changes::NamespaceChanges::from_toml_str(text, origin).map_err(|error| {
            format!("the stored run-time namespace changes cannot be read: {error}")
        })?;
    for note in changes.apply(&mut namespace) {
        tracing::warn!(
            "{note} (the run-time change stored in the data directory wins over the configuration file; delete or recreate the entity through the admin API to change it, or start with --reset-runtime-changes to drop every run-time change)"
        );
    }
    namespace.validate().map_err(|error| {
        format!(
            "the configuration file and the run-time changes stored in {origin} do not fit together: {error} (start with --reset-runtime-changes to drop every run-time change)"
        )
    })?;
    Ok(namespace)
}

/// Runs the broker on its listeners and the core's storage (`wal`: the node's own log
/// underneath, for its metrics and to release it at the end).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    listeners: Listeners,
    config: &Config,
    storage: Option<(broker::storage::Storage, broker::storage::Recovered)>,
    start: NamespaceStart,
    wal: Option<LogStorage>,
    metrics: Arc<crate::metrics::Metrics>,
    shutdown: watch::Receiver<bool>,
    ready: impl FnOnce(),
    reload: Option<daemon::reload::ReloadSource>,
    member: Option<MemberRole>,
) -> Result<(), String> {
    // Enqueued times never run backwards, even when the system clock was stepped back
    // while the broker was down (docs/scale-out.md §6.6).
    let latest = storage
        .as_ref()
        .and_then(|(_, recovered)| recovered.latest_time());
    let clock = Clock::system().not_before(latest);
    let codec = topic_codec(config);
    let namespace = seed_namespace(config, storage.as_ref(), start).await?;
    let registry = Registry::start_seeded(&namespace, config, clock, codec, storage)?;
    let core = (registry, clock, wal);
    serve_registry(
        listeners, config, core, metrics, shutdown, ready, reload, member,
    )
    .await
}

/// Runs the broker on its listeners and a running `registry` (`wal`: as for [`serve`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve_registry(
    listeners: Listeners,
    config: &Config,
    (registry, clock, wal): (Arc<Registry>, Clock, Option<LogStorage>),
    metrics: Arc<crate::metrics::Metrics>,
    shutdown: watch::Receiver<bool>,
    ready: impl FnOnce(),
    reload: Option<daemon::reload::ReloadSource>,
    member: Option<MemberRole>,
) -> Result<(), String> {
    let listener = listeners.amqp;
    if let Some(member) = &member {
        registry.cap_message_size(cluster::MAX_MESSAGE_SIZE);
        if let Some(on_registry) = &member.on_registry {
            on_registry(&registry);
        }
    }
    let keys = access_keys(config);
    let admin_keys = keys.clone();
    if let Some(store) = &wal {
        let _ = store
            .log()
            .statistics()
            .sync_seconds
            .set(metrics.storage_sync.clone());
    }
    let http = Arc::new(admin::http::Front::new(
        Arc::new(admin::http::Admin {
            registry: registry.clone(),
            keys: admin_keys,
            hosts: admin::guard::HostAllowList::new(
                &config.http.allowed_hosts,
                admin::tls::host_name().as_deref(),
            ),
            serving: std::sync::atomic::AtomicBool::new(false),
            metrics: metrics.clone(),
            started: std::time::SystemTime::now(),
            amqp: std::sync::OnceLock::new(),
            reload: std::sync::OnceLock::new(),
            cluster: member.as_ref().map(|member| member.view.clone()),
            lease: member.as_ref().and_then(|member| member.lease.clone()),
            cluster_control: member.as_ref().map(|member| member.control.clone()),
            namespace_node: member
                .as_ref()
                .and_then(|member| member.namespace_node.clone()),
        }),
        tls_identity(config),
    ));
    let context = Arc::new(Context {
        settings: server_settings(config, keys),
        registry: registry.clone(),
        clock,
        // A member's receiver ids carry its node id: those of other members' connections
        // reach its entities too (`client_routing = "proxy"`).
        next_receiver_id: AtomicU64::new(if member.is_some() {
            daemon::proxying::first_receiver_id(config.cluster.node_id)
        } else {
            1
        }),
        connection_permits: Arc::new(tokio::sync::Semaphore::new(config.server.max_connections)),
        metrics,
        lease: member.as_ref().and_then(|member| member.lease.clone()),
    });
    let drains = member.map(|member| member.drains);
    let registry = context.registry.clone();
    let mut http_tasks = tokio::task::JoinSet::new();
    let websocket_entry: Option<admin::http::AmqpEntry> = if config.websocket.disabled {
        None
    } else {
        let context = Arc::downgrade(&context);
        let shutdown = shutdown.clone();
        Some(Arc::new(move |stream| {
            let context = context.clone();
            let shutdown = shutdown.clone();
            Box::pin(async move {
                if let Some(context) = context.upgrade() {
                    server::run_bridged(stream, context, shutdown).await;
                }
            })
        }))
    };
    let _ = http.admin.amqp.set(websocket_entry);
    let plain_http = match listeners.http {
        Some(_) if config.tls.required => {
            tracing::info!("no plain HTTP listener: [tls] required = true");
            None
        }
        other => other,
    };
    // One cap for the dedicated HTTP listeners together (HTTP on the AMQP port counts
    // against [server] max_connections).
    let http_permits = Arc::new(tokio::sync::Semaphore::new(config.http.max_connections));
    if let Some(listener) = plain_http {
        http_tasks.spawn(admin::http::serve_listener(
            listener,
            http.router.clone(),
            None,
            http_permits.clone(),
            shutdown.clone(),
        ));
    }
    if let Some(listener) = listeners.https {
        let acceptor = http.tls()?;
        http_tasks.spawn(admin::http::serve_listener(
            listener,
            http.router.clone(),
            Some(acceptor),
            http_permits,
            shutdown.clone(),
        ));
    }
    if config.storage.mode == StorageMode::Durable
        && !config.tls.disabled
        && matches!(
            tls_identity(config),
            admin::tls::Identity::Development { .. }
        )
    {
        // Make the development CA now, so that clients can trust it before they connect.
        if let Err(error) = http.tls() {
            tracing::warn!(%error, "no development certificate: TLS connections will be refused");
        }
    }
    if let Some(source) = reload {
        daemon::reload::install(source, registry.clone(), &http.admin, shutdown.clone());
    }
    http.admin
        .serving
        .store(true, std::sync::atomic::Ordering::Release);
    ready();
    crate::listener::serve(listener, listeners.more, context, http, shutdown, drains).await;
    http_tasks.shutdown().await;
    // Every connection is closed: now the entities, topics and forwarders stop.
    registry.shut_down().await;
    // The caller stops the groups' Raft and releases the directory (`wal`: its metrics).
    drop(wal);
    Ok(())
}
