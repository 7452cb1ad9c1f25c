//! The human-readable overview printed by `--check-config`.
//!
//! Shows server settings, keys (never their secrets), and every entity with its key
//! settings; non-default flags are listed only when set, so the common case stays short.
//! The format is for people, not machines: do not parse it.

use std::fmt::Write as _;
use std::time::Duration;

use super::duration::format_duration;
use super::{Config, FilterConfig, PropertyLiteral, QueueConfig, SubscriptionConfig, TopicConfig};

pub(super) fn summary(config: &Config) -> String {
    let mut lines = Vec::new();
    let server = &config.server;
    lines.push(format!(
        "server: listen {}, idle timeout {}, max frame size {} bytes, max connections {}",
        server.listen,
        format_duration(server.idle_timeout),
        server.max_frame_size,
        server.max_connections
    ));
    lines.push(match config.storage.mode {
        super::StorageMode::Durable => format!(
            "storage: durable in {}, sends refused below {} bytes free, compaction from {} bytes",
            config.storage.data_dir.display(),
            config.storage.min_free_space,
            config.storage.compaction_threshold
        ),
        super::StorageMode::Memory => "storage: in memory (nothing is written)".to_string(),
    });
    if config.auth.keys.is_empty() {
        lines.push("auth: no keys configured, any token is accepted".to_string());
    }
    for key in &config.auth.keys {
        lines.push(format!("auth key {:?}: {}", key.name, key.rights));
    }
    for queue in &config.queues {
        lines.push(queue_line(queue));
    }
    for topic in &config.topics {
        lines.push(topic_line(topic));
        for subscription in &topic.subscriptions {
            lines.push(subscription_line(subscription));
            for rule in &subscription.rules {
                let mut line = format!("    rule {:?}: {}", rule.name, filter_text(&rule.filter));
                if let Some(action) = &rule.action {
                    let _ = write!(line, "; action {action}");
                }
                if !rule.parameters.is_empty() {
                    let parameters: Vec<String> = rule
                        .parameters
                        .iter()
                        .map(|(name, value)| format!("{name} = {}", value.display_text()))
                        .collect();
                    let _ = write!(line, "; parameters {}", parameters.join(", "));
                }
                lines.push(line);
            }
        }
    }
    let subscription_count = config.entity_count() - config.queues.len() - config.topics.len();
    lines.push(format!(
        "{} entities: {} queue(s), {} topic(s), {} subscription(s)",
        config.entity_count(),
        config.queues.len(),
        config.topics.len(),
        subscription_count
    ));
    lines.join("\n")
}

fn time_to_live_text(value: Option<Duration>) -> String {
    value.map_or_else(|| "unlimited".to_string(), format_duration)
}

/// Appends `, name` for each set flag and `, name target` for each set option.
fn append_extras(line: &mut String, flags: &[(bool, &str)], options: &[(&str, Option<String>)]) {
    for (set, name) in flags {
        if *set {
            let _ = write!(line, ", {name}");
        }
    }
    for (name, value) in options {
        if let Some(value) = value {
            let _ = write!(line, ", {name} {value}");
        }
    }
}

fn queue_line(queue: &QueueConfig) -> String {
    let mut line = format!(
        "queue {:?}: lock {}, max deliveries {}, time to live {}, max size {} MB, max message {} KB",
        queue.name,
        format_duration(queue.lock_duration),
        queue.max_delivery_count,
        time_to_live_text(queue.default_message_time_to_live),
        queue.max_size_in_megabytes,
        queue.max_message_size_in_kilobytes
    );
    append_extras(
        &mut line,
        &[
            (queue.requires_session, "sessions"),
            (
                queue.dead_lettering_on_message_expiration,
                "dead-letters expired",
            ),
        ],
        &[
            (
                "duplicate detection",
                queue
                    .requires_duplicate_detection
                    .then(|| format_duration(queue.duplicate_detection_history_time_window)),
            ),
            (
                "auto-delete after idle",
                queue.auto_delete_on_idle.map(format_duration),
            ),
            (
                "forwards to",
                queue
                    .forward_to
                    .as_ref()
                    .map(|target| format!("{target:?}")),
            ),
            (
                "forwards dead letters to",
                queue
                    .forward_dead_lettered_messages_to
                    .as_ref()
                    .map(|target| format!("{target:?}")),
            ),
        ],
    );
    line
}

fn topic_line(topic: &TopicConfig) -> String {
    let mut line = format!(
        "topic {:?}: time to live {}, max size {} MB, max message {} KB, {} subscription(s)",
        topic.name,
        time_to_live_text(topic.default_message_time_to_live),
        topic.max_size_in_megabytes,
        topic.max_message_size_in_kilobytes,
        topic.subscriptions.len()
    );
    append_extras(
        &mut line,
        &[],
        &[
            (
                "duplicate detection",
                topic
                    .requires_duplicate_detection
                    .then(|| format_duration(topic.duplicate_detection_history_time_window)),
            ),
            (
                "auto-delete after idle",
                topic.auto_delete_on_idle.map(format_duration),
            ),
        ],
    );
    line
}

fn subscription_line(subscription: &SubscriptionConfig) -> String {
    let mut line = format!(
        "  subscription {:?}: lock {}, max deliveries {}, time to live {}",
        subscription.name,
        format_duration(subscription.lock_duration),
        subscription.max_delivery_count,
        time_to_live_text(subscription.default_message_time_to_live)
    );
    append_extras(
        &mut line,
        &[
            (subscription.requires_session, "sessions"),
            (
                subscription.dead_lettering_on_message_expiration,
                "dead-letters expired",
            ),
            (
                !subscription.dead_lettering_on_filter_evaluation_exceptions,
                "skips messages whose filter fails",
            ),
        ],
        &[
            (
                "auto-delete after idle",
                subscription.auto_delete_on_idle.map(format_duration),
            ),
            (
                "forwards to",
                subscription
                    .forward_to
                    .as_ref()
                    .map(|target| format!("{target:?}")),
            ),
            (
                "forwards dead letters to",
                subscription
                    .forward_dead_lettered_messages_to
                    .as_ref()
                    .map(|target| format!("{target:?}")),
            ),
        ],
    );
    line
}

fn filter_text(filter: &FilterConfig) -> String {
    match filter {
        FilterConfig::True => "true filter".to_string(),
        FilterConfig::Sql(text) => format!("sql {text}"),
        FilterConfig::Correlation(correlation) => {
            let fields = [
                ("correlation_id", &correlation.correlation_id),
                ("message_id", &correlation.message_id),
                ("to", &correlation.to),
                ("reply_to", &correlation.reply_to),
                ("subject", &correlation.subject),
                ("session_id", &correlation.session_id),
                ("reply_to_session_id", &correlation.reply_to_session_id),
                ("content_type", &correlation.content_type),
            ];
            let mut parts: Vec<String> = fields
                .iter()
                .filter_map(|(name, value)| {
                    value.as_ref().map(|value| format!("{name} = {value:?}"))
                })
                .collect();
            for (name, value) in &correlation.properties {
                let value = match value {
                    PropertyLiteral::String(text) => format!("{text:?}"),
                    PropertyLiteral::Integer(number) => number.to_string(),
                    PropertyLiteral::Float(number) => number.to_string(),
                    PropertyLiteral::Bool(flag) => flag.to_string(),
                };
                parts.push(format!("properties.{name} = {value}"));
            }
            format!("correlation {}", parts.join(", "))
        }
    }
}
