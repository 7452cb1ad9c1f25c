//! The raw serde mirror of the configuration file.
//!
//! Every table denies unknown keys so a typo is an error with a line number, never a silently
//! ignored setting. Everything the contract calls optional is an `Option` here; defaults are
//! applied in `convert.rs`, not by serde, so this file holds only the file's shape. Durations
//! stay text until `convert.rs` parses them with the key's path at hand.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub auth: RawAuth,
    #[serde(default)]
    pub queues: Vec<RawQueue>,
    #[serde(default)]
    pub topics: Vec<RawTopic>,
    #[serde(default)]
    pub storage: RawStorage,
    #[serde(default)]
    pub http: RawHttp,
    #[serde(default)]
    pub tls: RawTls,
    #[serde(default)]
    pub websocket: RawWebSocket,
    #[serde(default)]
    pub cluster: RawCluster,
}

/// `[cluster]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub node_id: Option<u64>,
    pub address: Option<String>,
    pub members: Option<Vec<RawMember>>,
    pub secret: Option<String>,
    pub join: Option<bool>,
    pub client_routing: Option<String>,
    pub placement: Option<String>,
}

/// `[[cluster.members]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMember {
    pub id: u64,
    pub address: String,
}

/// `[tls]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub enabled: Option<bool>,
    pub listen: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub required: Option<bool>,
}

/// `[websocket]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebSocket {
    pub enabled: Option<bool>,
    pub listen: Option<String>,
}

/// `[http]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub enabled: Option<bool>,
    pub listen: Option<String>,
    pub https_listen: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub max_connections: Option<usize>,
}

/// `[storage]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    pub mode: Option<String>,
    pub data_dir: Option<String>,
    pub min_free_space: Option<RawBytes>,
    pub compaction_threshold: Option<RawBytes>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub listen: Option<String>,
    pub idle_timeout: Option<String>,
    pub max_frame_size: Option<u32>,
    pub max_connections: Option<usize>,
    pub shutdown_grace_period: Option<String>,
    pub handshake_timeout: Option<String>,
    pub memory_budget: Option<RawBytes>,
    pub filter_evaluation_budget: Option<u64>,
    pub strict: Option<RawStrict>,
}

/// `strict`: `true` (the standard tier), `false`, or a tier's name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawStrict {
    Flag(bool),
    Tier(String),
}

/// A byte size: a number of bytes, or text such as "512MiB", "2GiB", "100MB".
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawBytes {
    Number(u64),
    Text(String),
}

/// `[auth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    #[serde(default)]
    pub keys: Vec<RawKey>,
}

/// `[[auth.keys]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    pub name: String,
    pub key: String,
    #[serde(default)]
    pub rights: Vec<String>,
}

/// `[[queues]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQueue {
    pub name: String,
    pub lock_duration: Option<String>,
    pub max_delivery_count: Option<u32>,
    pub default_message_time_to_live: Option<String>,
    pub dead_lettering_on_message_expiration: Option<bool>,
    pub requires_session: Option<bool>,
    pub requires_duplicate_detection: Option<bool>,
    pub duplicate_detection_history_time_window: Option<String>,
    pub auto_delete_on_idle: Option<String>,
    pub forward_to: Option<String>,
    pub forward_dead_lettered_messages_to: Option<String>,
    pub max_size_in_megabytes: Option<u64>,
    pub max_message_size_in_kilobytes: Option<u64>,
    pub status: Option<String>,
    pub enable_partitioning: Option<bool>,
    pub user_metadata: Option<String>,
}

/// `[[topics]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopic {
    pub name: String,
    pub default_message_time_to_live: Option<String>,
    pub requires_duplicate_detection: Option<bool>,
    pub duplicate_detection_history_time_window: Option<String>,
    pub auto_delete_on_idle: Option<String>,
    pub max_size_in_megabytes: Option<u64>,
    pub max_message_size_in_kilobytes: Option<u64>,
    pub status: Option<String>,
    pub enable_partitioning: Option<bool>,
    pub user_metadata: Option<String>,
    #[serde(default)]
    pub subscriptions: Vec<RawSubscription>,
}

/// `[[topics.subscriptions]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubscription {
    pub name: String,
    pub lock_duration: Option<String>,
    pub max_delivery_count: Option<u32>,
    pub default_message_time_to_live: Option<String>,
    pub dead_lettering_on_message_expiration: Option<bool>,
    pub dead_lettering_on_filter_evaluation_exceptions: Option<bool>,
    pub requires_session: Option<bool>,
    pub forward_to: Option<String>,
    pub forward_dead_lettered_messages_to: Option<String>,
    pub auto_delete_on_idle: Option<String>,
    pub status: Option<String>,
    pub user_metadata: Option<String>,
    #[serde(default)]
    pub rules: Vec<RawRule>,
}

/// `[[topics.subscriptions.rules]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub name: String,
    pub sql_filter: Option<String>,
    pub correlation_filter: Option<RawCorrelationFilter>,
    pub sql_action: Option<String>,
    /// `sql_parameters = { "@name" = value, ... }`, typed in `convert.rs`.
    #[serde(default)]
    pub sql_parameters: RawProperties,
}

/// `correlation_filter = { ... }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCorrelationFilter {
    pub correlation_id: Option<String>,
    pub message_id: Option<String>,
    pub to: Option<String>,
    pub reply_to: Option<String>,
    pub subject: Option<String>,
    pub session_id: Option<String>,
    pub reply_to_session_id: Option<String>,
    pub content_type: Option<String>,
    #[serde(default)]
    pub properties: RawProperties,
}

/// `properties = { ... }`, kept in the order written; values are typed in `convert.rs`.
#[derive(Debug, Default)]
pub(super) struct RawProperties(pub Vec<(String, toml::Value)>);

impl<'de> Deserialize<'de> for RawProperties {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawProperties, D::Error> {
        deserializer.deserialize_map(PropertiesVisitor)
    }
}

struct PropertiesVisitor;

impl<'de> Visitor<'de> for PropertiesVisitor {
    type Value = RawProperties;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a table of property names to string, integer, float or bool values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawProperties, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<String, toml::Value>()? {
            entries.push(entry);
        }
        Ok(RawProperties(entries))
    }
}
