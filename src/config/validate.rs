//! Checks on a typed [`Config`]: names, uniqueness, forward targets and ranges.
//!
//! Runs on typed values so hand-built configurations get the same checks as loaded ones.
//! Names are compared case-insensitively (ASCII), as Service Bus does. No cloud minimums are
//! imposed (tests need durations like `200ms`), but zero durations that would make an entity
//! useless are rejected. The first broken rule is reported, naming its key path.

use std::collections::HashMap;
use std::time::Duration;

use super::names::{check_entity_name, check_rule_name, check_subscription_name};
use super::{
    Config, ConfigError, FilterConfig, MAX_MESSAGE_SIZE_LIMIT_IN_KILOBYTES, MINIMUM_MAX_FRAME_SIZE,
    QueueConfig, RuleConfig, SubscriptionConfig, TopicConfig,
};

/// `queues[2] "orders"`.
pub(super) fn queue_context(index: usize, name: &str) -> String {
    format!("queues[{index}] {name:?}")
}

/// `topics[0] "events"`.
pub(super) fn topic_context(index: usize, name: &str) -> String {
    format!("topics[{index}] {name:?}")
}

/// `topics[0] "events" subscriptions[1] "all"`.
pub(super) fn subscription_context(topic_context: &str, index: usize, name: &str) -> String {
    format!("{topic_context} subscriptions[{index}] {name:?}")
}

/// `topics[0] "events" subscriptions[1] "all" rules[0] "big-red"`.
pub(super) fn rule_context(subscription_context: &str, index: usize, name: &str) -> String {
    format!("{subscription_context} rules[{index}] {name:?}")
}

/// Runs every check, returning the first failure.
pub(super) fn validate(config: &Config) -> Result<(), ConfigError> {
    validate_server(config)?;
    validate_auth(config)?;
    if config.cluster.is_multi_node() && config.storage.mode == super::StorageMode::Memory {
        return Err(ConfigError::invalid(
            "cluster",
            format!(
                "members lists {} nodes and storage is in memory: a cluster keeps its log on every member's disk (set [storage] mode = \"durable\")",
                config.cluster.members.len()
            ),
        ));
    }
    // Lower-cased queue/topic name → the context of the entity that has it.
    let mut entity_names: HashMap<String, String> = HashMap::new();
    let contexts = config
        .queues
        .iter()
        .enumerate()
        .map(|(index, queue)| (queue_context(index, &queue.name), &queue.name))
        .chain(
            config
                .topics
                .iter()
                .enumerate()
                .map(|(index, topic)| (topic_context(index, &topic.name), &topic.name)),
        );
    for (context, name) in contexts {
        check_entity_name(name).map_err(|reason| ConfigError::invalid(&context, reason))?;
        if let Some(previous) = entity_names.insert(name.to_ascii_lowercase(), context.clone()) {
            return Err(ConfigError::invalid(
                &context,
                format!(
                    "name conflicts with {previous} (queue and topic names are case-insensitive and shared)"
                ),
            ));
        }
    }
    let targets = ForwardTargets {
        entity_names: &entity_names,
    };
    for (index, queue) in config.queues.iter().enumerate() {
        validate_queue(&queue_context(index, &queue.name), queue, &targets)?;
    }
    for (index, topic) in config.topics.iter().enumerate() {
        validate_topic(&topic_context(index, &topic.name), topic, &targets)?;
    }
    if let Some(tier) = config.server.strict {
        super::strict::validate(config, tier)?;
    }
    if let Some(cycle) = forwarding_cycle(config) {
        return Err(ConfigError::invalid(
            "forwarding",
            format!("forward_to makes a cycle, which would pass messages around for ever: {cycle}"),
        ));
    }
    Ok(())
}

/// A `forward_to` cycle of any length, written out (`queue "a" → queue "b" → queue "a"`), if
/// the configuration has one. A topic forwards through each subscription that has a
/// `forward_to`. Dead-letter forwarding is not followed: a message only takes it after a
/// failure, and the hop limit ends any chain.
fn forwarding_cycle(config: &Config) -> Option<String> {
    // Lower-cased entity name → (label, next entities with the hop's label).
    let mut edges: HashMap<String, (String, Vec<(String, String)>)> = HashMap::new();
    for queue in &config.queues {
        let next = queue
            .forward_to
            .iter()
            .map(|target| (target.to_ascii_lowercase(), String::new()))
            .collect();
        edges.insert(
            queue.name.to_ascii_lowercase(),
            (format!("queue {:?}", queue.name), next),
        );
    }
    for topic in &config.topics {
        let next = topic
            .subscriptions
            .iter()
            .filter_map(|subscription| {
                let target = subscription.forward_to.as_ref()?;
                Some((
                    target.to_ascii_lowercase(),
                    format!(" (subscription {:?})", subscription.name),
                ))
            })
            .collect();
        edges.insert(
            topic.name.to_ascii_lowercase(),
            (format!("topic {:?}", topic.name), next),
        );
    }
    // Iterative depth-first search; `on_path` holds the entities of the current path.
    let mut finished: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut names: Vec<&String> = edges.keys().collect();
    names.sort();
    for start in names {
        if finished.contains(start) {
            continue;
        }
        let mut path: Vec<(String, usize)> = vec![(start.clone(), 0)];
        while let Some((node, next_index)) = path.last().cloned() {
            let next = edges
                .get(&node)
                .map(|(_, next)| next.as_slice())
                .unwrap_or(&[]);
            let Some((target, _)) = next.get(next_index) else {
                finished.insert(node);
                path.pop();
                continue;
            };
            if let Some(last) = path.last_mut() {
                last.1 += 1;
            }
            if let Some(position) = path.iter().position(|(on_path, _)| on_path == target) {
                let mut text = String::new();
                for (node, taken) in &path[position..] {
                    let (label, next) = &edges[node];
                    text.push_str(label);
                    text.push_str(&next[taken - 1].1);
                    text.push_str(" → ");
                }
                text.push_str(&edges[target].0);
                return Some(text);
            }
            if !finished.contains(target) && edges.contains_key(target) {
                path.push((target.clone(), 0));
            }
        }
    }
    None
}

fn validate_server(config: &Config) -> Result<(), ConfigError> {
    let server = &config.server;
    if server.max_frame_size < MINIMUM_MAX_FRAME_SIZE {
        return Err(ConfigError::invalid(
            "server",
            format!(
                "max_frame_size {} is below the AMQP minimum of {MINIMUM_MAX_FRAME_SIZE}",
                server.max_frame_size
            ),
        ));
    }
    if server.max_connections == 0 {
        return Err(ConfigError::invalid(
            "server",
            "max_connections must be at least 1",
        ));
    }
    // Zero would drop every connection before it could say anything.
    non_zero(
        "server",
        "handshake_timeout",
        Some(server.handshake_timeout),
    )
}

fn validate_auth(config: &Config) -> Result<(), ConfigError> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (index, key) in config.auth.keys.iter().enumerate() {
        let context = format!("auth.keys[{index}] {:?}", key.name);
        if key.name.trim().is_empty() {
            return Err(ConfigError::invalid(&context, "name is empty"));
        }
        if key.key.is_empty() {
            return Err(ConfigError::invalid(&context, "key is empty"));
        }
        let rights = key.rights;
        if !(rights.manage || rights.send || rights.listen) {
            return Err(ConfigError::invalid(&context, "grants no rights"));
        }
        if rights.manage && !(rights.send && rights.listen) {
            return Err(ConfigError::invalid(
                &context,
                "Manage must also grant Send and Listen",
            ));
        }
        if let Some(previous) = seen.insert(key.name.to_ascii_lowercase(), index) {
            return Err(ConfigError::invalid(
                &context,
                format!(
                    "key name is already used by auth.keys[{previous}] (names are case-insensitive)"
                ),
            ));
        }
    }
    Ok(())
}

/// The queue and topic names forwarding may point at.
struct ForwardTargets<'config> {
    entity_names: &'config HashMap<String, String>,
}

impl ForwardTargets<'_> {
    /// Checks `key = target`: it must name a queue or topic, and not `own_name` (for a queue
    /// the queue itself, for a subscription its topic), which would make a forwarding loop.
    fn check(
        &self,
        context: &str,
        key: &str,
        target: Option<&String>,
        own_name: &str,
    ) -> Result<(), ConfigError> {
        let Some(target) = target else {
            return Ok(());
        };
        // A malformed target (a `..` segment, say) is named as such, not as a missing entity.
        check_entity_name(target)
            .map_err(|reason| ConfigError::invalid(context, format!("{key}: {reason}")))?;
        if !self.entity_names.contains_key(&target.to_ascii_lowercase()) {
            return Err(ConfigError::invalid(
                context,
                format!("{key} {target:?} is not a queue or topic"),
            ));
        }
        if target.eq_ignore_ascii_case(own_name) {
            return Err(ConfigError::invalid(
                context,
                format!(
                    "{key} {target:?} forms a loop (the entity itself, or a subscription's own topic)"
                ),
            ));
        }
        Ok(())
    }
}

/// Rejects a zero value for a duration where zero makes no sense.
fn non_zero(context: &str, key: &str, value: Option<Duration>) -> Result<(), ConfigError> {
    if value.is_some_and(|duration| duration.is_zero()) {
        return Err(ConfigError::invalid(
            context,
            format!("{key} must be greater than zero"),
        ));
    }
    Ok(())
}

fn validate_delivery(
    context: &str,
    lock_duration: Duration,
    max_delivery_count: u32,
) -> Result<(), ConfigError> {
    non_zero(context, "lock_duration", Some(lock_duration))?;
    if max_delivery_count == 0 {
        return Err(ConfigError::invalid(
            context,
            "max_delivery_count must be at least 1",
        ));
    }
    Ok(())
}

fn validate_sizes(
    context: &str,
    max_size_in_megabytes: u64,
    max_message_size_in_kilobytes: u64,
) -> Result<(), ConfigError> {
    if max_size_in_megabytes == 0 {
        return Err(ConfigError::invalid(
            context,
            "max_size_in_megabytes must be at least 1",
        ));
    }
    if !(1..=MAX_MESSAGE_SIZE_LIMIT_IN_KILOBYTES).contains(&max_message_size_in_kilobytes) {
        return Err(ConfigError::invalid(
            context,
            format!(
                "max_message_size_in_kilobytes {max_message_size_in_kilobytes} is outside 1..={MAX_MESSAGE_SIZE_LIMIT_IN_KILOBYTES}"
            ),
        ));
    }
    Ok(())
}

fn validate_queue(
    context: &str,
    queue: &QueueConfig,
    targets: &ForwardTargets,
) -> Result<(), ConfigError> {
    validate_delivery(context, queue.lock_duration, queue.max_delivery_count)?;
    non_zero(
        context,
        "default_message_time_to_live",
        queue.default_message_time_to_live,
    )?;
    non_zero(
        context,
        "duplicate_detection_history_time_window",
        Some(queue.duplicate_detection_history_time_window),
    )?;
    non_zero(context, "auto_delete_on_idle", queue.auto_delete_on_idle)?;
    validate_sizes(
        context,
        queue.max_size_in_megabytes,
        queue.max_message_size_in_kilobytes,
    )?;
    targets.check(
        context,
        "forward_to",
        queue.forward_to.as_ref(),
        &queue.name,
    )?;
    targets.check(
        context,
        "forward_dead_lettered_messages_to",
        queue.forward_dead_lettered_messages_to.as_ref(),
        &queue.name,
    )
}

fn validate_topic(
    context: &str,
    topic: &TopicConfig,
    targets: &ForwardTargets,
) -> Result<(), ConfigError> {
    non_zero(
        context,
        "default_message_time_to_live",
        topic.default_message_time_to_live,
    )?;
    non_zero(
        context,
        "duplicate_detection_history_time_window",
        Some(topic.duplicate_detection_history_time_window),
    )?;
    non_zero(context, "auto_delete_on_idle", topic.auto_delete_on_idle)?;
    validate_sizes(
        context,
        topic.max_size_in_megabytes,
        topic.max_message_size_in_kilobytes,
    )?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (index, subscription) in topic.subscriptions.iter().enumerate() {
        let subscription_context = subscription_context(context, index, &subscription.name);
        check_subscription_name(&subscription.name)
            .map_err(|reason| ConfigError::invalid(&subscription_context, reason))?;
        if let Some(previous) = seen.insert(subscription.name.to_ascii_lowercase(), index) {
            return Err(ConfigError::invalid(
                &subscription_context,
                format!(
                    "name is already used by subscriptions[{previous}] of this topic (names are case-insensitive)"
                ),
            ));
        }
        validate_subscription(&subscription_context, &topic.name, subscription, targets)?;
    }
    Ok(())
}

fn validate_subscription(
    context: &str,
    topic_name: &str,
    subscription: &SubscriptionConfig,
    targets: &ForwardTargets,
) -> Result<(), ConfigError> {
    validate_delivery(
        context,
        subscription.lock_duration,
        subscription.max_delivery_count,
    )?;
    non_zero(
        context,
        "default_message_time_to_live",
        subscription.default_message_time_to_live,
    )?;
    non_zero(
        context,
        "auto_delete_on_idle",
        subscription.auto_delete_on_idle,
    )?;
    // A subscription forwarding into its own topic would receive its own output again.
    targets.check(
        context,
        "forward_to",
        subscription.forward_to.as_ref(),
        topic_name,
    )?;
    targets.check(
        context,
        "forward_dead_lettered_messages_to",
        subscription.forward_dead_lettered_messages_to.as_ref(),
        "",
    )?;
    if subscription.rules.is_empty() {
        return Err(ConfigError::invalid(
            context,
            "has no rules (omit rules to get the $Default rule)",
        ));
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    if subscription.rules.len() > super::MAX_RULES_PER_SUBSCRIPTION {
        return Err(ConfigError::invalid(
            context,
            format!(
                "has {} rules; a subscription may have at most {}",
                subscription.rules.len(),
                super::MAX_RULES_PER_SUBSCRIPTION
            ),
        ));
    }
    for (index, rule) in subscription.rules.iter().enumerate() {
        let rule_context = rule_context(context, index, &rule.name);
        if let Some(previous) = seen.insert(rule.name.to_ascii_lowercase(), index) {
            return Err(ConfigError::invalid(
                &rule_context,
                format!(
                    "name is already used by rules[{previous}] of this subscription (names are case-insensitive)"
                ),
            ));
        }
        validate_rule(&rule_context, rule)?;
    }
    Ok(())
}

fn validate_rule(context: &str, rule: &RuleConfig) -> Result<(), ConfigError> {
    check_rule_name(&rule.name).map_err(|reason| ConfigError::invalid(context, reason))?;
    match &rule.filter {
        FilterConfig::True => {}
        FilterConfig::Sql(text) if text.trim().is_empty() => {
            return Err(ConfigError::invalid(context, "sql_filter is empty"));
        }
        FilterConfig::Sql(_) => {}
        FilterConfig::Correlation(filter) if filter.is_empty() => {
            return Err(ConfigError::invalid(
                context,
                "correlation_filter sets no field; set at least one field or property",
            ));
        }
        FilterConfig::Correlation(_) => {}
    }
    if rule
        .action
        .as_ref()
        .is_some_and(|text| text.trim().is_empty())
    {
        return Err(ConfigError::invalid(context, "sql_action is empty"));
    }
    if !rule.parameters.is_empty() {
        if !matches!(rule.filter, FilterConfig::Sql(_)) && rule.action.is_none() {
            return Err(ConfigError::invalid(
                context,
                "sql_parameters is set but there is no sql_filter or sql_action to use them",
            ));
        }
        super::parameters::check_parameters(&rule.parameters)
            .map_err(|reason| ConfigError::invalid(context, format!("sql_parameters: {reason}")))?;
    }
    Ok(())
}
