//! Raw file values → typed configuration: defaults, durations, rights, filters.
//!
//! Only conversions that need the raw text happen here (a duration string, a rights list, a
//! rule that sets both or neither filter, a property value of the wrong type). Everything
//! checkable on the typed values lives in `validate.rs`, so hand-built configs get the same
//! checks. Errors name the key path; the first error wins.

use std::net::SocketAddr;
use std::time::Duration;

use super::duration::parse_duration;
use super::raw::{
    RawAuth, RawConfig, RawCorrelationFilter, RawKey, RawQueue, RawRule, RawServer,
    RawSubscription, RawTopic,
};
use super::validate::{queue_context, rule_context, subscription_context, topic_context};
use super::{
    AuthConfig, Config, ConfigError, CorrelationFilterConfig, FilterConfig, HttpConfig,
    PropertyLiteral, QueueConfig, Rights, RuleConfig, ServerConfig, SharedAccessKey, StorageConfig,
    StorageMode, SubscriptionConfig, TopicConfig,
};

/// Converts the whole raw file, applying defaults.
pub(super) fn convert(raw: RawConfig) -> Result<Config, ConfigError> {
    let queues = raw
        .queues
        .into_iter()
        .enumerate()
        .map(|(index, queue)| convert_queue(index, queue))
        .collect::<Result<_, _>>()?;
    let topics = raw
        .topics
        .into_iter()
        .enumerate()
        .map(|(index, topic)| convert_topic(index, topic))
        .collect::<Result<_, _>>()?;
    Ok(Config {
        server: convert_server(raw.server)?,
        auth: convert_auth(raw.auth)?,
        queues,
        topics,
        storage: convert_storage(raw.storage)?,
        http: convert_http(raw.http)?,
        tls: convert_tls(raw.tls)?,
        websocket: convert_websocket(raw.websocket)?,
        cluster: convert_cluster(raw.cluster)?,
    })
}

fn cluster_address(context: &str, text: &str) -> Result<String, ConfigError> {
    let text = text.trim();
    let port = text
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty())
        .and_then(|(_, port)| port.parse::<u16>().ok());
    match port {
        Some(_) => Ok(text.to_string()),
        None => Err(ConfigError::invalid(
            context,
            format!("address {text:?} is not host:port"),
        )),
    }
}

/// The shortest cluster secret accepted.
const MIN_CLUSTER_SECRET: usize = 16;

fn convert_cluster(raw: super::raw::RawCluster) -> Result<super::ClusterConfig, ConfigError> {
    let node_id = raw.node_id.unwrap_or(1);
    if node_id == 0 {
        return Err(ConfigError::invalid("cluster", "node_id must be 1 or more"));
    }
    let configured = match raw.address {
        Some(text) => Some(cluster_address("cluster", &text)?),
        None => None,
    };
    // Without `address`, this node's entry in `members` names it.
    let own_entry = raw.members.as_ref().and_then(|members| {
        members
            .iter()
            .find(|member| member.id == node_id)
            .map(|member| member.address.trim().to_string())
    });
    let address = configured
        .or(own_entry)
        .unwrap_or_else(|| super::DEFAULT_CLUSTER_ADDRESS.to_string());
    let members = match raw.members {
        None => vec![super::ClusterMember {
            id: node_id,
            address: address.clone(),
        }],
        Some(members) => {
            let mut converted: Vec<super::ClusterMember> = Vec::with_capacity(members.len());
            for member in members {
                let context = format!("cluster member {}", member.id);
                if converted.iter().any(|other| other.id == member.id) {
                    return Err(ConfigError::invalid(&context, "is listed twice"));
                }
                converted.push(super::ClusterMember {
                    id: member.id,
                    address: cluster_address(&context, &member.address)?,
                });
            }
            converted
        }
    };
    if !members.iter().any(|member| member.id == node_id) {
        return Err(ConfigError::invalid(
            "cluster",
            format!("members must include this node (node_id {node_id})"),
        ));
    }
    let secret = raw.secret.filter(|secret| !secret.is_empty());
    if members.len() > 1 {
        match &secret {
            None => {
                return Err(ConfigError::invalid(
                    "cluster",
                    format!(
                        "members lists {} nodes: set secret, the same text of at least {MIN_CLUSTER_SECRET} characters on every member (the members prove it to each other)",
                        members.len()
                    ),
                ));
            }
            Some(text) if text.chars().count() < MIN_CLUSTER_SECRET => {
                return Err(ConfigError::invalid(
                    "cluster",
                    format!(
                        "secret is {} characters: it must have at least {MIN_CLUSTER_SECRET}",
                        text.chars().count()
                    ),
                ));
            }
            Some(_) => {}
        }
        let own = members
            .iter()
            .find(|member| member.id == node_id)
            .map(|member| member.address.clone())
            .unwrap_or_default();
        if own != address {
            return Err(ConfigError::invalid(
                "cluster",
                format!(
                    "address {address:?} differs from member {node_id}'s address {own:?}: the members reach this node at the address its entry in members names"
                ),
            ));
        }
    }
    let client_routing = match raw.client_routing.as_deref() {
        None | Some("forward") => super::ClientRouting::Forward,
        Some("proxy") => super::ClientRouting::Proxy,
        Some(other) => {
            return Err(ConfigError::invalid(
                "cluster",
                format!("client_routing is {other:?}: it must be \"forward\" or \"proxy\""),
            ));
        }
    };
    let placement = match raw.placement.as_deref() {
        None | Some("one-leader") => super::Placement::OneLeader,
        Some("spread") => super::Placement::Spread,
        Some(other) => {
            return Err(ConfigError::invalid(
                "cluster",
                format!("placement is {other:?}: it must be \"one-leader\" or \"spread\""),
            ));
        }
    };
    Ok(super::ClusterConfig {
        node_id,
        address,
        members,
        secret,
        join: raw.join.unwrap_or(false),
        client_routing,
        placement,
    })
}

/// Reads an entity status (`Active`, `Disabled`, `SendDisabled`, `ReceiveDisabled`).
fn status(context: &str, raw: Option<String>) -> Result<super::EntityStatus, ConfigError> {
    match raw {
        None => Ok(super::EntityStatus::Active),
        Some(text) => super::EntityStatus::parse(&text).ok_or_else(|| {
            ConfigError::invalid(
                context,
                format!(
                    "status {text:?} is not an entity status (expected \"Active\", \"Disabled\", \"SendDisabled\" or \"ReceiveDisabled\")"
                ),
            )
        }),
    }
}

/// Reads `table.key` as a socket address.
fn socket_address(
    table: &str,
    key: &str,
    text: Option<String>,
) -> Result<Option<SocketAddr>, ConfigError> {
    text.map(|text| {
        text.trim().parse::<SocketAddr>().map_err(|_| {
            ConfigError::invalid(
                table,
                format!("{key} {text:?} is not a socket address (expected IP:port, e.g. \"127.0.0.1:5300\")"),
            )
        })
    })
    .transpose()
}

/// Reads a file path; blank is none.
fn file_path(text: Option<String>) -> Option<std::path::PathBuf> {
    text.filter(|text| !text.trim().is_empty())
        .map(std::path::PathBuf::from)
}

fn convert_tls(raw: super::raw::RawTls) -> Result<super::TlsConfig, ConfigError> {
    let tls = super::TlsConfig {
        disabled: raw.enabled == Some(false),
        listen: socket_address("tls", "listen", raw.listen)?,
        cert: file_path(raw.cert),
        key: file_path(raw.key),
        required: raw.required == Some(true),
    };
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(ConfigError::invalid(
            "tls",
            "cert and key go together: set both (PEM files) or neither (a development certificate is generated)".to_string(),
        ));
    }
    if tls.disabled && tls.required {
        return Err(ConfigError::invalid(
            "tls",
            "required = true needs TLS: remove enabled = false".to_string(),
        ));
    }
    Ok(tls)
}

fn convert_websocket(raw: super::raw::RawWebSocket) -> Result<super::WebSocketConfig, ConfigError> {
    Ok(super::WebSocketConfig {
        disabled: raw.enabled == Some(false),
        listen: socket_address("websocket", "listen", raw.listen)?,
    })
}

fn convert_http(raw: super::raw::RawHttp) -> Result<HttpConfig, ConfigError> {
    let http = HttpConfig {
        disabled: raw.enabled == Some(false),
        listen: socket_address("http", "listen", raw.listen)?,
        https_listen: socket_address("http", "https_listen", raw.https_listen)?,
        tls_cert: file_path(raw.tls_cert),
        tls_key: file_path(raw.tls_key),
        allowed_hosts: raw
            .allowed_hosts
            .unwrap_or_default()
            .into_iter()
            .map(allowed_host)
            .collect::<Result<_, _>>()?,
        max_connections: match raw.max_connections {
            None => super::DEFAULT_HTTP_MAX_CONNECTIONS,
            Some(0) => {
                return Err(ConfigError::invalid(
                    "http",
                    "max_connections must be at least 1".to_string(),
                ));
            }
            Some(count) => count,
        },
    };
    if http.tls_cert.is_some() != http.tls_key.is_some() {
        return Err(ConfigError::invalid(
            "http",
            "tls_cert and tls_key go together: set both (PEM files) or neither (a development certificate is generated)".to_string(),
        ));
    }
    Ok(http)
}

/// One `[http] allowed_hosts` entry, lower-cased: a host name, `*.suffix`, or `*`.
fn allowed_host(entry: String) -> Result<String, ConfigError> {
    let name = entry.strip_prefix("*.").unwrap_or(&entry);
    let valid = entry == "*"
        || (!name.is_empty()
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
            }));
    if !valid {
        return Err(ConfigError::invalid(
            "http",
            format!(
                "allowed_hosts entry '{entry}' is not a host name, '*.domain' or '*' (no port, no scheme; IP addresses are always allowed)"
            ),
        ));
    }
    Ok(entry.to_ascii_lowercase())
}

fn convert_storage(raw: super::raw::RawStorage) -> Result<StorageConfig, ConfigError> {
    let defaults = StorageConfig::default();
    let mode = match raw.mode.as_deref().map(str::trim) {
        None => defaults.mode,
        Some(text) if text.eq_ignore_ascii_case("durable") => StorageMode::Durable,
        Some(text) if text.eq_ignore_ascii_case("memory") => StorageMode::Memory,
        Some(text) => {
            return Err(ConfigError::invalid(
                "storage",
                format!("mode {text:?} is not a storage mode (expected \"durable\" or \"memory\")"),
            ));
        }
    };
    let data_dir = match raw.data_dir {
        Some(text) if text.trim().is_empty() => {
            return Err(ConfigError::invalid(
                "storage",
                "data_dir must not be empty",
            ));
        }
        Some(text) => std::path::PathBuf::from(text),
        None => defaults.data_dir,
    };
    Ok(StorageConfig {
        mode,
        data_dir,
        min_free_space: raw
            .min_free_space
            .map(|value| byte_size("storage", "min_free_space", value))
            .transpose()?
            .unwrap_or(defaults.min_free_space),
        compaction_threshold: raw
            .compaction_threshold
            .map(|value| byte_size("storage", "compaction_threshold", value))
            .transpose()?
            .unwrap_or(defaults.compaction_threshold),
    })
}

/// Parses an optional duration key, naming `context` and `key` on error.
fn duration(
    context: &str,
    key: &str,
    value: Option<String>,
) -> Result<Option<Duration>, ConfigError> {
    value
        .map(|text| {
            parse_duration(&text)
                .map_err(|reason| ConfigError::invalid(context, format!("{key}: {reason}")))
        })
        .transpose()
}

fn convert_server(raw: RawServer) -> Result<ServerConfig, ConfigError> {
    let defaults = ServerConfig::default();
    let listen = match raw.listen {
        Some(text) => text.trim().parse::<SocketAddr>().map_err(|_| {
            ConfigError::invalid(
                "server",
                format!("listen {text:?} is not a socket address (expected IP:port, e.g. \"127.0.0.1:5672\")"),
            )
        })?,
        None => defaults.listen,
    };
    Ok(ServerConfig {
        listen,
        idle_timeout: duration("server", "idle_timeout", raw.idle_timeout)?
            .unwrap_or(defaults.idle_timeout),
        max_frame_size: raw.max_frame_size.unwrap_or(defaults.max_frame_size),
        max_connections: raw.max_connections.unwrap_or(defaults.max_connections),
        shutdown_grace_period: duration(
            "server",
            "shutdown_grace_period",
            raw.shutdown_grace_period,
        )?
        .unwrap_or(defaults.shutdown_grace_period),
        handshake_timeout: duration("server", "handshake_timeout", raw.handshake_timeout)?
            .unwrap_or(defaults.handshake_timeout),
        memory_budget: raw
            .memory_budget
            .map(|value| byte_size("server", "memory_budget", value))
            .transpose()?,
        filter_evaluation_budget: match raw.filter_evaluation_budget {
            None => defaults.filter_evaluation_budget,
            Some(0) => {
                return Err(ConfigError::invalid(
                    "server",
                    "filter_evaluation_budget must be at least 1 (steps a subscription's rules may take on one message)",
                ));
            }
            Some(steps) => steps,
        },
        strict: match raw.strict {
            None | Some(super::raw::RawStrict::Flag(false)) => None,
            Some(super::raw::RawStrict::Flag(true)) => Some(super::Tier::Standard),
            Some(super::raw::RawStrict::Tier(name)) => match name.to_ascii_lowercase().as_str() {
                "standard" => Some(super::Tier::Standard),
                "premium" => Some(super::Tier::Premium),
                _ => {
                    return Err(ConfigError::invalid(
                        "server",
                        format!(
                            "strict {name:?} is not a tier: use true (standard), \"standard\", \"premium\" or false"
                        ),
                    ));
                }
            },
        },
    })
}

/// Reads a byte size: bytes, or a number with KB, MB, GB (powers of 1000) or KiB, MiB,
/// GiB (powers of 1024).
fn byte_size(context: &str, key: &str, value: super::raw::RawBytes) -> Result<u64, ConfigError> {
    let text = match value {
        super::raw::RawBytes::Number(bytes) => return Ok(bytes),
        super::raw::RawBytes::Text(text) => text,
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|character: char| !character.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => 0,
    };
    number
        .parse::<u64>()
        .ok()
        .filter(|_| factor > 0)
        .and_then(|number| number.checked_mul(factor))
        .ok_or_else(|| {
            ConfigError::invalid(
                context,
                format!("{key} {text:?} is not a byte size (e.g. 536870912, \"512MiB\", \"2GiB\")"),
            )
        })
}

fn convert_auth(raw: RawAuth) -> Result<AuthConfig, ConfigError> {
    let keys = raw
        .keys
        .into_iter()
        .enumerate()
        .map(|(index, key)| convert_key(index, key))
        .collect::<Result<_, _>>()?;
    Ok(AuthConfig { keys })
}

fn convert_key(index: usize, raw: RawKey) -> Result<SharedAccessKey, ConfigError> {
    let context = format!("auth.keys[{index}] {:?}", raw.name);
    if raw.rights.is_empty() {
        return Err(ConfigError::invalid(
            &context,
            "rights must list at least one of \"Manage\", \"Send\", \"Listen\"",
        ));
    }
    let mut rights = Rights::default();
    for right in &raw.rights {
        match right.trim().to_ascii_lowercase().as_str() {
            "manage" => rights = Rights::ALL,
            "send" => rights.send = true,
            "listen" => rights.listen = true,
            _ => {
                return Err(ConfigError::invalid(
                    &context,
                    format!(
                        "rights: unknown right {right:?} (expected \"Manage\", \"Send\" or \"Listen\")"
                    ),
                ));
            }
        }
    }
    Ok(SharedAccessKey {
        name: raw.name,
        key: raw.key,
        rights,
    })
}

pub(super) fn convert_queue(index: usize, raw: RawQueue) -> Result<QueueConfig, ConfigError> {
    let context = queue_context(index, &raw.name);
    let defaults = QueueConfig::new(raw.name);
    Ok(QueueConfig {
        lock_duration: duration(&context, "lock_duration", raw.lock_duration)?
            .unwrap_or(defaults.lock_duration),
        max_delivery_count: raw
            .max_delivery_count
            .unwrap_or(defaults.max_delivery_count),
        default_message_time_to_live: duration(
            &context,
            "default_message_time_to_live",
            raw.default_message_time_to_live,
        )?,
        dead_lettering_on_message_expiration: raw
            .dead_lettering_on_message_expiration
            .unwrap_or(defaults.dead_lettering_on_message_expiration),
        requires_session: raw.requires_session.unwrap_or(defaults.requires_session),
        requires_duplicate_detection: raw
            .requires_duplicate_detection
            .unwrap_or(defaults.requires_duplicate_detection),
        duplicate_detection_history_time_window: duration(
            &context,
            "duplicate_detection_history_time_window",
            raw.duplicate_detection_history_time_window,
        )?
        .unwrap_or(defaults.duplicate_detection_history_time_window),
        auto_delete_on_idle: duration(&context, "auto_delete_on_idle", raw.auto_delete_on_idle)?,
        forward_to: raw.forward_to,
        forward_dead_lettered_messages_to: raw.forward_dead_lettered_messages_to,
        max_size_in_megabytes: raw
            .max_size_in_megabytes
            .unwrap_or(defaults.max_size_in_megabytes),
        max_message_size_in_kilobytes: raw
            .max_message_size_in_kilobytes
            .unwrap_or(defaults.max_message_size_in_kilobytes),
        status: status(&context, raw.status)?,
        enable_partitioning: raw.enable_partitioning.unwrap_or(false),
        user_metadata: raw.user_metadata,
        ..defaults
    })
}

pub(super) fn convert_topic(index: usize, raw: RawTopic) -> Result<TopicConfig, ConfigError> {
    let context = topic_context(index, &raw.name);
    let subscriptions = raw
        .subscriptions
        .into_iter()
        .enumerate()
        .map(|(subscription_index, subscription)| {
            convert_subscription(&context, subscription_index, subscription)
        })
        .collect::<Result<_, _>>()?;
    let defaults = TopicConfig::new(raw.name);
    Ok(TopicConfig {
        default_message_time_to_live: duration(
            &context,
            "default_message_time_to_live",
            raw.default_message_time_to_live,
        )?,
        requires_duplicate_detection: raw
            .requires_duplicate_detection
            .unwrap_or(defaults.requires_duplicate_detection),
        duplicate_detection_history_time_window: duration(
            &context,
            "duplicate_detection_history_time_window",
            raw.duplicate_detection_history_time_window,
        )?
        .unwrap_or(defaults.duplicate_detection_history_time_window),
        auto_delete_on_idle: duration(&context, "auto_delete_on_idle", raw.auto_delete_on_idle)?,
        max_size_in_megabytes: raw
            .max_size_in_megabytes
            .unwrap_or(defaults.max_size_in_megabytes),
        max_message_size_in_kilobytes: raw
            .max_message_size_in_kilobytes
            .unwrap_or(defaults.max_message_size_in_kilobytes),
        status: status(&context, raw.status)?,
        enable_partitioning: raw.enable_partitioning.unwrap_or(false),
        user_metadata: raw.user_metadata,
        subscriptions,
        ..defaults
    })
}

fn convert_subscription(
    topic_context: &str,
    index: usize,
    raw: RawSubscription,
) -> Result<SubscriptionConfig, ConfigError> {
    let context = subscription_context(topic_context, index, &raw.name);
    let mut rules = raw
        .rules
        .into_iter()
        .enumerate()
        .map(|(rule_index, rule)| convert_rule(&context, rule_index, rule))
        .collect::<Result<Vec<_>, _>>()?;
    let defaults = SubscriptionConfig::new(raw.name);
    if rules.is_empty() {
        rules = defaults.rules.clone();
    }
    Ok(SubscriptionConfig {
        lock_duration: duration(&context, "lock_duration", raw.lock_duration)?
            .unwrap_or(defaults.lock_duration),
        max_delivery_count: raw
            .max_delivery_count
            .unwrap_or(defaults.max_delivery_count),
        default_message_time_to_live: duration(
            &context,
            "default_message_time_to_live",
            raw.default_message_time_to_live,
        )?,
        dead_lettering_on_message_expiration: raw
            .dead_lettering_on_message_expiration
            .unwrap_or(defaults.dead_lettering_on_message_expiration),
        dead_lettering_on_filter_evaluation_exceptions: raw
            .dead_lettering_on_filter_evaluation_exceptions
            .unwrap_or(defaults.dead_lettering_on_filter_evaluation_exceptions),
        requires_session: raw.requires_session.unwrap_or(defaults.requires_session),
        forward_to: raw.forward_to,
        forward_dead_lettered_messages_to: raw.forward_dead_lettered_messages_to,
        auto_delete_on_idle: duration(&context, "auto_delete_on_idle", raw.auto_delete_on_idle)?,
        rules,
        status: status(&context, raw.status)?,
        user_metadata: raw.user_metadata,
        ..defaults
    })
}

fn convert_rule(
    subscription_context: &str,
    index: usize,
    raw: RawRule,
) -> Result<RuleConfig, ConfigError> {
    let context = rule_context(subscription_context, index, &raw.name);
    let filter = match (raw.sql_filter, raw.correlation_filter) {
        (Some(sql), None) => FilterConfig::Sql(sql),
        (None, Some(correlation)) => {
            FilterConfig::Correlation(convert_correlation(&context, correlation)?)
        }
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                &context,
                "sets both sql_filter and correlation_filter; set exactly one",
            ));
        }
        (None, None) => {
            return Err(ConfigError::invalid(
                &context,
                "sets neither sql_filter nor correlation_filter; set exactly one",
            ));
        }
    };
    let parameters = raw
        .sql_parameters
        .0
        .iter()
        .map(|(name, value)| {
            super::parameters::from_toml(value)
                .map(|value| (name.clone(), value))
                .map_err(|reason| {
                    ConfigError::invalid(&context, format!("sql_parameters.{name}: {reason}"))
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(RuleConfig {
        name: raw.name,
        filter,
        action: raw.sql_action,
        parameters,
    })
}

fn convert_correlation(
    context: &str,
    raw: RawCorrelationFilter,
) -> Result<CorrelationFilterConfig, ConfigError> {
    let properties = raw
        .properties
        .0
        .into_iter()
        .map(|(name, value)| {
            let literal = match value {
                toml::Value::String(text) => PropertyLiteral::String(text),
                toml::Value::Integer(number) => PropertyLiteral::Integer(number),
                toml::Value::Float(number) => PropertyLiteral::Float(number),
                toml::Value::Boolean(flag) => PropertyLiteral::Bool(flag),
                other => {
                    return Err(ConfigError::invalid(
                        context,
                        format!(
                            "correlation_filter.properties.{name}: must be a string, integer, float or bool, not {}",
                            other.type_str()
                        ),
                    ))
                }
            };
            Ok((name, literal))
        })
        .collect::<Result<_, _>>()?;
    Ok(CorrelationFilterConfig {
        correlation_id: raw.correlation_id,
        message_id: raw.message_id,
        to: raw.to,
        reply_to: raw.reply_to,
        subject: raw.subject,
        session_id: raw.session_id,
        reply_to_session_id: raw.reply_to_session_id,
        content_type: raw.content_type,
        properties,
    })
}
