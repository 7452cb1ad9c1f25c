//! Typed entity definitions → TOML in the configuration file's format, read back by the
//! same loader. The broker stores the entities changed at run time this way (in the data
//! directory's log), so what it stores is what a user could have written.

use std::fmt::Write;
use std::time::Duration;

use super::duration::format_duration;
use super::{
    FilterConfig, PropertyLiteral, QueueConfig, RuleConfig, SubscriptionConfig, TopicConfig,
};

/// A TOML string literal (quoted and escaped).
fn text(value: &str) -> String {
    toml::Value::String(value.to_string()).to_string()
}

/// A TOML key: bare when it can be, quoted otherwise.
fn key(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_string()
    } else {
        text(name)
    }
}

fn line(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{name} = {value}");
}

fn duration_line(out: &mut String, name: &str, value: Option<Duration>) {
    if let Some(value) = value {
        line(out, name, text(&format_duration(value)));
    }
}

fn optional_text(out: &mut String, name: &str, value: &Option<String>) {
    if let Some(value) = value {
        line(out, name, text(value));
    }
}

/// A `[[queues]]` table.
pub fn queue(queue: &QueueConfig) -> String {
    let mut out = String::from("[[queues]]\n");
    line(&mut out, "name", text(&queue.name));
    duration_line(&mut out, "lock_duration", Some(queue.lock_duration));
    line(&mut out, "max_delivery_count", queue.max_delivery_count);
    duration_line(
        &mut out,
        "default_message_time_to_live",
        queue.default_message_time_to_live,
    );
    line(
        &mut out,
        "dead_lettering_on_message_expiration",
        queue.dead_lettering_on_message_expiration,
    );
    line(&mut out, "requires_session", queue.requires_session);
    if queue.enable_partitioning {
        line(&mut out, "enable_partitioning", true);
    }
    line(
        &mut out,
        "requires_duplicate_detection",
        queue.requires_duplicate_detection,
    );
    duration_line(
        &mut out,
        "duplicate_detection_history_time_window",
        Some(queue.duplicate_detection_history_time_window),
    );
    duration_line(&mut out, "auto_delete_on_idle", queue.auto_delete_on_idle);
    optional_text(&mut out, "forward_to", &queue.forward_to);
    optional_text(
        &mut out,
        "forward_dead_lettered_messages_to",
        &queue.forward_dead_lettered_messages_to,
    );
    line(
        &mut out,
        "max_size_in_megabytes",
        queue.max_size_in_megabytes,
    );
    line(
        &mut out,
        "max_message_size_in_kilobytes",
        queue.max_message_size_in_kilobytes,
    );
    status_line(&mut out, queue.status);
    optional_text(&mut out, "user_metadata", &queue.user_metadata);
    out
}

fn status_line(out: &mut String, status: super::EntityStatus) {
    if status != super::EntityStatus::Active {
        line(out, "status", text(status.as_str()));
    }
}

/// A topic table under `header` (`topics` in a configuration file), with its subscriptions
/// under `header.subscriptions`.
pub fn topic(header: &str, topic: &TopicConfig) -> String {
    let mut out = format!("[[{header}]]\n");
    line(&mut out, "name", text(&topic.name));
    if topic.enable_partitioning {
        line(&mut out, "enable_partitioning", true);
    }
    duration_line(
        &mut out,
        "default_message_time_to_live",
        topic.default_message_time_to_live,
    );
    line(
        &mut out,
        "requires_duplicate_detection",
        topic.requires_duplicate_detection,
    );
    duration_line(
        &mut out,
        "duplicate_detection_history_time_window",
        Some(topic.duplicate_detection_history_time_window),
    );
    duration_line(&mut out, "auto_delete_on_idle", topic.auto_delete_on_idle);
    line(
        &mut out,
        "max_size_in_megabytes",
        topic.max_size_in_megabytes,
    );
    line(
        &mut out,
        "max_message_size_in_kilobytes",
        topic.max_message_size_in_kilobytes,
    );
    status_line(&mut out, topic.status);
    optional_text(&mut out, "user_metadata", &topic.user_metadata);
    for subscription_config in &topic.subscriptions {
        out.push('\n');
        out.push_str(&subscription(
            &format!("{header}.subscriptions"),
            subscription_config,
        ));
    }
    out
}

/// A subscription table under `header`; rules are written unless they are just `$Default`.
pub fn subscription(header: &str, subscription: &SubscriptionConfig) -> String {
    let mut out = format!("[[{header}]]\n");
    line(&mut out, "name", text(&subscription.name));
    duration_line(&mut out, "lock_duration", Some(subscription.lock_duration));
    line(
        &mut out,
        "max_delivery_count",
        subscription.max_delivery_count,
    );
    duration_line(
        &mut out,
        "default_message_time_to_live",
        subscription.default_message_time_to_live,
    );
    line(
        &mut out,
        "dead_lettering_on_message_expiration",
        subscription.dead_lettering_on_message_expiration,
    );
    line(
        &mut out,
        "dead_lettering_on_filter_evaluation_exceptions",
        subscription.dead_lettering_on_filter_evaluation_exceptions,
    );
    line(&mut out, "requires_session", subscription.requires_session);
    optional_text(&mut out, "forward_to", &subscription.forward_to);
    optional_text(
        &mut out,
        "forward_dead_lettered_messages_to",
        &subscription.forward_dead_lettered_messages_to,
    );
    duration_line(
        &mut out,
        "auto_delete_on_idle",
        subscription.auto_delete_on_idle,
    );
    status_line(&mut out, subscription.status);
    optional_text(&mut out, "user_metadata", &subscription.user_metadata);
    if subscription.rules != [RuleConfig::default_rule()] {
        for rule_config in &subscription.rules {
            out.push('\n');
            out.push_str(&rule(&format!("{header}.rules"), rule_config));
        }
    }
    out
}

fn literal(value: &PropertyLiteral) -> String {
    match value {
        PropertyLiteral::String(value) => text(value),
        PropertyLiteral::Integer(value) => value.to_string(),
        PropertyLiteral::Float(value) => toml::Value::Float(*value).to_string(),
        PropertyLiteral::Bool(value) => value.to_string(),
    }
}

/// A rule table under `header`. The true filter is written as `1=1`.
pub fn rule(header: &str, rule: &RuleConfig) -> String {
    let mut out = format!("[[{header}]]\n");
    line(&mut out, "name", text(&rule.name));
    match &rule.filter {
        FilterConfig::True => line(&mut out, "sql_filter", text("1=1")),
        FilterConfig::Sql(expression) => line(&mut out, "sql_filter", text(expression)),
        FilterConfig::Correlation(filter) => {
            let mut fields = Vec::new();
            for (name, value) in [
                ("correlation_id", &filter.correlation_id),
                ("message_id", &filter.message_id),
                ("to", &filter.to),
                ("reply_to", &filter.reply_to),
                ("subject", &filter.subject),
                ("session_id", &filter.session_id),
                ("reply_to_session_id", &filter.reply_to_session_id),
                ("content_type", &filter.content_type),
            ] {
                if let Some(value) = value {
                    fields.push(format!("{name} = {}", text(value)));
                }
            }
            if !filter.properties.is_empty() {
                let properties: Vec<String> = filter
                    .properties
                    .iter()
                    .map(|(name, value)| format!("{} = {}", key(name), literal(value)))
                    .collect();
                fields.push(format!("properties = {{ {} }}", properties.join(", ")));
            }
            line(
                &mut out,
                "correlation_filter",
                format!("{{ {} }}", fields.join(", ")),
            );
        }
    }
    optional_text(&mut out, "sql_action", &rule.action);
    if !rule.parameters.is_empty() {
        let parameters: Vec<String> = rule
            .parameters
            .iter()
            .map(|(name, value)| format!("{} = {}", key(name), super::parameters::to_toml(value)))
            .collect();
        line(
            &mut out,
            "sql_parameters",
            format!("{{ {} }}", parameters.join(", ")),
        );
    }
    out
}

/// A configuration's entities and keys as text that is the same for the same definitions
/// (tables sorted, so their order in the file does not matter): what every member of a
/// cluster must share (`cluster::peer` compares a digest of it when two members connect).
/// The keys' secrets are in it; it is only ever hashed under the cluster secret. With
/// `[cluster] placement = "spread"` it starts with that line: members of the two layouts
/// refuse each other.
pub fn definitions(config: &super::Config) -> String {
    let mut tables: Vec<String> = config.queues.iter().map(queue).collect();
    if config.cluster.placement == super::Placement::Spread {
        tables.push("[cluster]\nplacement = \"spread\"\n".to_string());
    }
    tables.extend(
        config
            .topics
            .iter()
            .map(|definition| topic("topics", definition)),
    );
    let mut keys: Vec<String> = config
        .auth
        .keys
        .iter()
        .map(|key| {
            let mut out = "[[auth.keys]]\n".to_string();
            line(&mut out, "name", text(&key.name));
            line(&mut out, "key", text(&key.key));
            let rights = &key.rights;
            line(&mut out, "manage", rights.manage);
            line(&mut out, "send", rights.send);
            line(&mut out, "listen", rights.listen);
            out
        })
        .collect();
    tables.sort();
    keys.sort();
    tables.extend(keys);
    tables.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, CorrelationFilterConfig, ParameterValue};

    #[test]
    fn rendered_entities_load_back_equal() {
        let mut queue_config = QueueConfig::new("orders.eu/v1");
        queue_config.default_message_time_to_live = Some(Duration::from_millis(1500));
        queue_config.forward_to = Some("audit".into());
        let mut topic_config = TopicConfig::new("events");
        topic_config.auto_delete_on_idle = Some(Duration::from_secs(3600));
        let mut subscription_config = SubscriptionConfig::new("red");
        subscription_config.rules = vec![
            RuleConfig {
                name: "sql".into(),
                filter: FilterConfig::Sql("color = @color AND size > @size".into()),
                action: Some("SET x = @tag".into()),
                parameters: vec![
                    ("@color".into(), ParameterValue::String("red".into())),
                    ("size".into(), ParameterValue::Long(3)),
                    ("@Tag".into(), ParameterValue::Duration(-600_000_000)),
                ],
            },
            RuleConfig {
                name: "corr".into(),
                filter: FilterConfig::Correlation(CorrelationFilterConfig {
                    subject: Some("s".into()),
                    properties: vec![
                        ("a b".into(), PropertyLiteral::Integer(2)),
                        ("f".into(), PropertyLiteral::Float(0.5)),
                    ],
                    ..Default::default()
                }),
                action: None,
                parameters: Vec::new(),
            },
        ];
        topic_config.subscriptions = vec![subscription_config, SubscriptionConfig::new("all")];
        let mut audit = QueueConfig::new("audit");
        audit.status = crate::config::EntityStatus::SendDisabled;
        let text = format!(
            "{}\n{}\n{}",
            queue(&queue_config),
            queue(&audit),
            topic("topics", &topic_config)
        );
        let loaded = Config::from_toml_str(&text, "rendered").expect("loads");
        assert_eq!(loaded.queues, vec![queue_config, audit]);
        assert_eq!(loaded.topics, vec![topic_config]);
    }

    #[test]
    fn definitions_ignore_the_order_of_tables_and_see_every_entity_and_key() {
        let config = |text: &str| Config::from_toml_str(text, "test").expect("valid");
        let one = config(
            "[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n[[topics]]\nname = \"t\"\n\
             [[auth.keys]]\nname = \"k\"\nkey = \"secret-1\"\nrights = [\"Send\"]\n[[auth.keys]]\nname = \"l\"\nkey = \"x\"\nrights = [\"Listen\"]\n",
        );
        let reordered = config(
            "[[auth.keys]]\nname = \"l\"\nkey = \"x\"\nrights = [\"Listen\"]\n[[topics]]\nname = \"t\"\n[[queues]]\nname = \"b\"\n\
             [[queues]]\nname = \"a\"\n[[auth.keys]]\nname = \"k\"\nkey = \"secret-1\"\nrights = [\"Send\"]\n",
        );
        assert_eq!(definitions(&one), definitions(&reordered));
        let mut other_key = one.clone();
        other_key.auth.keys[0].key = "secret-2".into();
        let mut other_queue = one.clone();
        other_queue.queues[1].max_delivery_count += 1;
        let mut one_topic_less = one.clone();
        one_topic_less.topics.clear();
        let mut other_listener = one.clone();
        other_listener.server.listen = "127.0.0.1:1".parse().expect("address");
        for differing in [&other_key, &other_queue, &one_topic_less] {
            assert_ne!(definitions(&one), definitions(differing));
        }
        assert_eq!(definitions(&one), definitions(&other_listener));
    }
}
