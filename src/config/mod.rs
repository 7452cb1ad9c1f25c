//! Broker configuration: the TOML file read raw, then validated into a typed [`Config`].
//!
//! The pipeline is `raw.rs` (serde mirror, unknown keys rejected) → `convert.rs` (defaults,
//! durations, rights, filters) → `validate.rs` (names, uniqueness, forward targets, ranges).
//! A [`Config`] from [`Config::from_toml_str`] or [`Config::load`] has passed all of it.
//!
//! This module owns the file format and its defaults only. It must not touch sockets, the
//! broker core, or SQL filter grammar (filter and action text are kept verbatim for the SQL
//! module). Errors name the key path, e.g. `queues[2] "orders": forward_to "nope" is not a
//! queue or topic`; array indices are zero-based, as in the file's order.

pub mod changes;
mod convert;
pub mod duration;
pub mod emulator;
mod entities;
pub mod names;
pub mod parameters;
mod raw;
pub mod render;
pub mod strict;
mod summary;
mod validate;

#[cfg(test)]
mod loading_tests;
#[cfg(test)]
mod rejection_tests;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use entities::{
    CorrelationFilterConfig, DEFAULT_DUPLICATE_DETECTION_WINDOW, DEFAULT_LOCK_DURATION,
    DEFAULT_MAX_DELIVERY_COUNT, DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES,
    DEFAULT_MAX_SIZE_IN_MEGABYTES, EntityStatus, FilterConfig, MAX_MESSAGE_SIZE_LIMIT_IN_KILOBYTES,
    PropertyLiteral, QueueConfig, RuleConfig, SubscriptionConfig, TopicConfig,
};
pub use parameters::{ParameterValue, SqlParameters};

/// Default listen address: loopback only, the AMQP port.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 5672));
/// Default connection idle timeout advertised in `open`.
/// Rules one subscription may hold (Service Bus allows 2,000 SQL filters per topic): each
/// is evaluated for every message published to the topic.
pub const MAX_RULES_PER_SUBSCRIPTION: usize = 2_000;
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// `storage.data_dir` when not set (relative to the working directory).
pub const DEFAULT_DATA_DIR: &str = "data";
/// `storage.min_free_space` when not set.
pub const DEFAULT_MIN_FREE_SPACE: u64 = 64 * 1024 * 1024;
/// `storage.compaction_threshold` when not set.
pub const DEFAULT_COMPACTION_THRESHOLD: u64 = 256 * 1024 * 1024;
/// Time receivers get to settle at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE_PERIOD: Duration = Duration::from_secs(5);
/// Time a peer gets to send its first byte, then the protocol header, SASL and `open`.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default largest AMQP frame accepted, in bytes.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 1_048_576;
/// Smallest frame size AMQP 1.0 allows (`MIN-MAX-FRAME-SIZE`).
pub const MINIMUM_MAX_FRAME_SIZE: u32 = 512;
/// Default limit on concurrent connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Why a configuration could not be loaded. `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Io {
        /// The file that was being read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The text is not TOML, or does not have the file's shape (unknown key, wrong type).
    #[error("{origin}{}: {message}", line.map(|line| format!(":{line}")).unwrap_or_default())]
    Parse {
        /// Where the text came from (a path, or a label such as `<builtin>`).
        origin: String,
        /// One-based line of the problem, when the TOML parser reports a position.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// The file is well-formed but breaks a rule; the message names the key path.
    #[error("invalid configuration: {message}")]
    Invalid {
        /// What is wrong, starting with the key path.
        message: String,
    },
}

impl ConfigError {
    /// An [`ConfigError::Invalid`] whose message is `{context}: {reason}`.
    pub(crate) fn invalid(context: &str, reason: impl fmt::Display) -> ConfigError {
        ConfigError::Invalid {
            message: format!("{context}: {reason}"),
        }
    }
}

/// The whole validated configuration.
///
/// `Config::default()` is what an empty file yields: default server settings, no keys, no
/// entities. [`Config::builtin_default`] is what the broker runs with when no file is found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// Network settings.
    pub server: ServerConfig,
    /// Shared access keys checked against SAS tokens.
    pub auth: AuthConfig,
    /// Queues created at start-up.
    pub queues: Vec<QueueConfig>,
    /// Topics (with their subscriptions and rules) created at start-up.
    pub topics: Vec<TopicConfig>,
    /// Where and how messages are stored.
    pub storage: StorageConfig,
    /// `[http]`: the admin API, health and metrics listener.
    pub http: HttpConfig,
    /// `[tls]`: AMQP over TLS (and HTTPS, wss) and its listener.
    pub tls: TlsConfig,
    /// `[websocket]`: AMQP over WebSockets and its listener.
    pub websocket: WebSocketConfig,
    /// `[cluster]`: this node's id and peer address, and the members of its groups.
    pub cluster: ClusterConfig,
}

/// `[cluster]`: every durable change goes through a Raft group whose members this names.
/// Without the table the node is node 1 and the only member of every group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// This node's id (≥ 1), recorded in every group's log.
    pub node_id: u64,
    /// The address other members reach this node's Raft traffic at (`host:port`).
    pub address: String,
    /// The members of the cluster, this node among them (alone without `members`).
    pub members: Vec<ClusterMember>,
    /// The secret every member proves it knows on each peer connection (required with
    /// more than one member).
    pub secret: Option<String>,
    /// This node joins a running cluster: it never starts a new one (it waits for the
    /// leader to add it, `ferrobus cluster add-node`).
    pub join: bool,
    /// How a member that does not run an entity serves its clients' work on it.
    pub client_routing: ClientRouting,
    /// Whether one node leads every entity, or each queue's and topic's group has its own
    /// leader.
    pub placement: Placement,
}

/// How a cluster's entities are led (`[cluster] placement`, `docs/cluster.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// `"one-leader"`: one Raft group carries every entity; its leader runs them all.
    #[default]
    OneLeader,
    /// `"spread"`: each queue, and each topic with its subscriptions, is a Raft group of
    /// its own, with its own leader; leaders are spread over the members, and every member
    /// serves its own clients, carrying their commands to the entities' leaders.
    Spread,
}

impl Placement {
    /// The configuration's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::OneLeader => "one-leader",
            Placement::Spread => "spread",
        }
    }
}

/// How a cluster member serves clients' work on entities another node runs (`[cluster]
/// client_routing`, `docs/cluster.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientRouting {
    /// `"forward"`: a follower forwards each client connection, byte for byte, to the
    /// leader, which does all the work.
    #[default]
    Forward,
    /// `"proxy"`: every member keeps its own clients' connections (TLS, SASL, `$cbs`,
    /// links) and carries their commands to the entities' node over one connection.
    Proxy,
}

impl ClientRouting {
    /// The configuration's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientRouting::Forward => "forward",
            ClientRouting::Proxy => "proxy",
        }
    }
}

impl ClusterConfig {
    /// Whether this node runs in a cluster of several members.
    pub fn is_multi_node(&self) -> bool {
        self.members.len() > 1
    }
}

/// A member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMember {
    /// Its node id.
    pub id: u64,
    /// Its peer address.
    pub address: String,
}

/// The default peer address of a node.
pub const DEFAULT_CLUSTER_ADDRESS: &str = "127.0.0.1:5700";

impl Default for ClusterConfig {
    fn default() -> ClusterConfig {
        ClusterConfig {
            node_id: 1,
            address: DEFAULT_CLUSTER_ADDRESS.to_string(),
            members: vec![ClusterMember {
                id: 1,
                address: DEFAULT_CLUSTER_ADDRESS.to_string(),
            }],
            secret: None,
            join: false,
            client_routing: ClientRouting::Forward,
            placement: Placement::OneLeader,
        }
    }
}

/// Default port of the AMQPS listener (AMQP over TLS), as the cloud service's.
pub const DEFAULT_AMQPS_PORT: u16 = 5671;

/// Default port of the WebSocket listener (`wss`), as the cloud service's.
pub const DEFAULT_WEBSOCKET_PORT: u16 = 443;

/// `[tls]`. Every listener accepts TLS (detected from the first bytes); this table names the
/// certificate, the AMQPS listener, and whether plain connections are refused.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsConfig {
    /// No TLS anywhere and no AMQPS listener.
    pub disabled: bool,
    /// Address of the AMQPS listener; `None`: port 5671 on the AMQP listener's IP address
    /// (an ephemeral port when the AMQP port is 0).
    pub listen: Option<SocketAddr>,
    /// PEM certificate chain; `None`: `[http] tls_cert`, else a development certificate.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// Refuse every connection that is not TLS (plain AMQP, HTTP and ws), on every listener.
    pub required: bool,
}

/// `[websocket]`. Every listener serves the AMQP WebSocket path
/// (`/$servicebus/websocket/`, over HTTP and HTTPS); this table names its own listener.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WebSocketConfig {
    /// The WebSocket path is not served and there is no WebSocket listener.
    pub disabled: bool,
    /// Address of the WebSocket listener; `None`: port 443 on the AMQP listener's IP
    /// address (an ephemeral port when the AMQP port is 0).
    pub listen: Option<SocketAddr>,
}

/// Default port of the HTTP listener (the official emulator's).
pub const DEFAULT_HTTP_PORT: u16 = 5300;

/// Default cap on the connections the dedicated HTTP listeners hold together.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 1_000;

/// `[http]`: the HTTP listener serving the administration API, `/health` and `/metrics`.
/// The same routes are also served on the AMQP port, in plain HTTP and over TLS (the
/// protocol is detected from the first bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// Whether the HTTP listener runs (the AMQP port serves HTTP either way).
    pub disabled: bool,
    /// Address of the HTTP listener; `None`: port 5300 (or `EMULATOR_HTTP_PORT`) on the
    /// AMQP listener's IP address, and an ephemeral port when the AMQP port is 0.
    pub listen: Option<SocketAddr>,
    /// Address of an extra HTTPS listener, if any.
    pub https_listen: Option<SocketAddr>,
    /// PEM certificate chain for TLS; `None`: a development certificate signed by a CA
    /// generated into the data directory (`dev-ca.pem`).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Host names the explorer, the admin API and `/metrics` answer for, beyond `localhost`,
    /// `*.localhost`, IP address literals and the machine's host name (a guard against DNS
    /// rebinding): exact names (lower-case), `*.suffix` patterns, or `*` for any.
    pub allowed_hosts: Vec<String>,
    /// Connections the HTTP listeners (`listen` and `https_listen`) hold together; more are
    /// closed as soon as they are accepted. At least 1. HTTP on the AMQP port counts against
    /// `[server] max_connections` instead.
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            disabled: false,
            listen: None,
            https_listen: None,
            tls_cert: None,
            tls_key: None,
            allowed_hosts: Vec::new(),
            max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
        }
    }
}

/// `[storage].mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StorageMode {
    /// Every acknowledged change is on disk (fsync) before it is acknowledged.
    #[default]
    Durable,
    /// Nothing is written: a restart starts empty (the emulator-like mode).
    Memory,
}

/// `[storage]`: the data directory and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// Durable or in memory; `--memory` overrides it.
    pub mode: StorageMode,
    /// The data directory, relative to the working directory; `--data-dir` overrides it.
    pub data_dir: std::path::PathBuf,
    /// Sends are refused while the data directory's disk has less free space than this.
    pub min_free_space: u64,
    /// The log may grow to this size before it is first compacted.
    pub compaction_threshold: u64,
}

impl Default for StorageConfig {
    fn default() -> StorageConfig {
        StorageConfig {
            mode: StorageMode::Durable,
            data_dir: std::path::PathBuf::from(DEFAULT_DATA_DIR),
            min_free_space: DEFAULT_MIN_FREE_SPACE,
            compaction_threshold: DEFAULT_COMPACTION_THRESHOLD,
        }
    }
}

/// `[server]`: how the broker listens and what it advertises to peers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Address the listener binds; `--listen` overrides it.
    pub listen: SocketAddr,
    /// Idle timeout advertised in `open` (zero: none); a peer that sends no frame for twice
    /// that is disconnected (AMQP §2.4.5: the advertised value is half the threshold).
    pub idle_timeout: Duration,
    /// Largest frame accepted and advertised, in bytes (at least 512).
    pub max_frame_size: u32,
    /// Connections accepted at once before new ones are refused (at least 1).
    pub max_connections: usize,
    /// On SIGTERM/SIGINT, how long receivers may still settle what they hold before every
    /// connection is closed with `amqp:connection:forced`.
    pub shutdown_grace_period: Duration,
    /// How long a peer may take from connecting to a complete `open` (first byte, protocol
    /// header, SASL); a peer that has not finished by then is disconnected. Above zero.
    pub handshake_timeout: Duration,
    /// Bytes all entities together may store; `None`: half of the machine's memory.
    pub memory_budget: Option<u64>,
    /// Steps a subscription's rules may take on one message before it is dead-lettered
    /// from that subscription (see [`crate::broker::filter::Fuel`]). At least 1.
    pub filter_evaluation_budget: u64,
    /// Cloud-parity mode (`strict`): the cloud's quotas and rules for this tier, enforced
    /// on the configuration and on entities created at run time; `None`: off.
    pub strict: Option<Tier>,
}

/// A Service Bus tier whose limits `strict` mode enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Standard: messages up to 256 KB, entities up to 5 GB.
    Standard,
    /// Premium: messages up to 100 MB, entities up to 80 GB.
    Premium,
}

impl Tier {
    /// The tier's name as in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Standard => "standard",
            Tier::Premium => "premium",
        }
    }
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            listen: DEFAULT_LISTEN,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_grace_period: DEFAULT_SHUTDOWN_GRACE_PERIOD,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            memory_budget: None,
            filter_evaluation_budget: crate::broker::filter::DEFAULT_EVALUATION_BUDGET,
            strict: None,
        }
    }
}

/// `[auth]`: which SAS keys are accepted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthConfig {
    /// Configured keys, names unique case-insensitively. Empty means any token is accepted
    /// (the emulator's behaviour).
    pub keys: Vec<SharedAccessKey>,
}

/// A named shared access key and the rights a token signed with it grants.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedAccessKey {
    /// Key name, matched against the token's `skn`.
    pub name: String,
    /// The secret used to verify token signatures; never printed by `Debug`.
    pub key: String,
    /// What tokens signed with this key may do.
    pub rights: Rights,
}

impl fmt::Debug for SharedAccessKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SharedAccessKey")
            .field("name", &self.name)
            .field("key", &"<redacted>")
            .field("rights", &self.rights)
            .finish()
    }
}

/// Service Bus access rights. `Manage` implies `Send` and `Listen`, so a value built from
/// the file with `manage` set also has `send` and `listen` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rights {
    /// May create, delete and inspect entities (`$management`).
    pub manage: bool,
    /// May send messages.
    pub send: bool,
    /// May receive and settle messages.
    pub listen: bool,
}

impl Rights {
    /// All three rights.
    pub const ALL: Rights = Rights {
        manage: true,
        send: true,
        listen: true,
    };
}

impl fmt::Display for Rights {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (self.manage, "Manage"),
            (self.send, "Send"),
            (self.listen, "Listen"),
        ]
        .into_iter()
        .filter_map(|(granted, name)| granted.then_some(name))
        .collect();
        if names.is_empty() {
            formatter.write_str("no rights")
        } else {
            formatter.write_str(&names.join(", "))
        }
    }
}

impl Config {
    /// Parses and validates configuration text; `origin` (a path or label) prefixes parse
    /// errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let raw: raw::RawConfig = toml::from_str(text).map_err(|error| ConfigError::Parse {
            origin: origin.to_string(),
            line: error.span().map(|span| line_number(text, span.start)),
            message: error.message().trim().replace('\n', "; "),
        })?;
        let config = convert::convert(raw)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates the file at `path`: TOML, or the official emulator's
    /// `Config.json` (a `.json` name, or text starting with `{`), converted by [`emulator`]
    /// to TOML first. Errors name `path` either way.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let origin = path.display().to_string();
        if emulator::is_emulator_json(path, &text) {
            let converted = emulator::to_toml(&text, &origin)?;
            return emulator::load_converted(&converted, &origin);
        }
        Config::from_toml_str(&text, &origin)
    }

    /// The configuration used when no file is given or found: the official emulator's
    /// sample namespace — queue `queue.1`, topic `topic.1` with subscription
    /// `subscription.1` (rule `$Default`) — on the default server settings, no keys.
    pub fn builtin_default() -> Config {
        let mut topic = TopicConfig::new("topic.1");
        topic
            .subscriptions
            .push(SubscriptionConfig::new("subscription.1"));
        Config {
            server: ServerConfig::default(),
            auth: AuthConfig::default(),
            queues: vec![QueueConfig::new("queue.1")],
            topics: vec![topic],
            storage: StorageConfig::default(),
            http: HttpConfig::default(),
            tls: TlsConfig::default(),
            websocket: WebSocketConfig::default(),
            cluster: ClusterConfig::default(),
        }
    }

    /// Checks every rule that does not concern the file's syntax: names, uniqueness, forward
    /// targets and ranges. Loading calls this; call it on a hand-built `Config` too.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::validate(self)
    }

    /// Number of entities: queues + topics + subscriptions.
    pub fn entity_count(&self) -> usize {
        let subscriptions: usize = self
            .topics
            .iter()
            .map(|topic| topic.subscriptions.len())
            .sum();
        self.queues.len() + self.topics.len() + subscriptions
    }

    /// A multi-line, human-readable list of the server settings and every entity with its
    /// key settings (for `--check-config`).
    pub fn summary(&self) -> String {
        summary::summary(self)
    }
}

/// One-based line containing byte `offset` of `text`.
fn line_number(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|byte| **byte == b'\n')
        .count()
        + 1
}
