//! Between the admin API's descriptions ([`super::atom`]) and the namespace's definitions
//! (the configuration types): what a PUT body asks for, and what a GET shows.
//!
//! Absent elements take the configuration's defaults (which are Service Bus's). Settings
//! ferrobus does not act on (batched operations, express, ordering, user metadata) are
//! accepted and not kept; `EnablePartitioning` (fixed at creation), `MaxSizeInMegabytes`
//! and the message size are.

use std::time::Duration;

use super::atom::{
    CorrelationFilter, PropertyValue as AtomValue, QueueDescription, RuleAction, RuleDescription,
    RuleFilter, SubscriptionDescription, TopicDescription, is_unlimited,
};
use crate::broker::rules::{FilterDefinition, RuleDefinition};
use crate::broker::types::PropertyValue;
use crate::config::parameters::{check_parameters, duration_of, ticks_of};
use crate::config::{
    CorrelationFilterConfig, EntityStatus, FilterConfig, ParameterValue, PropertyLiteral,
    QueueConfig, RuleConfig, SqlParameters, SubscriptionConfig, TopicConfig,
};

fn status_of(status: Option<super::atom::EntityStatus>) -> Option<EntityStatus> {
    status.and_then(|status| EntityStatus::parse(status.as_str()))
}

fn atom_status(status: EntityStatus) -> Option<super::atom::EntityStatus> {
    Some(match status {
        EntityStatus::Active => super::atom::EntityStatus::Active,
        EntityStatus::Disabled => super::atom::EntityStatus::Disabled,
        EntityStatus::SendDisabled => super::atom::EntityStatus::SendDisabled,
        EntityStatus::ReceiveDisabled => super::atom::EntityStatus::ReceiveDisabled,
    })
}

/// A duration where Service Bus's "unlimited" (`TimeSpan.MaxValue`) means none.
fn limited(duration: Option<Duration>) -> Option<Option<Duration>> {
    duration.map(|duration| (!is_unlimited(duration)).then_some(duration))
}

/// The entity name of a forwarding address: `queue`, `sb://host/queue` or
/// `https://host:port/queue` all name `queue`; empty means none.
pub fn forward_target(address: &Option<String>) -> Option<String> {
    let address = address.as_deref()?.trim();
    let path = match address.find("://") {
        Some(scheme_end) => {
            let rest = &address[scheme_end + 3..];
            rest.find('/').map(|slash| &rest[slash + 1..]).unwrap_or("")
        }
        None => address,
    };
    let path = path.trim_matches('/');
    (!path.is_empty()).then(|| path.to_string())
}

/// A queue definition from a PUT body.
pub fn queue_config(name: &str, description: &QueueDescription) -> QueueConfig {
    let mut queue = QueueConfig::new(name);
    if let Some(value) = description.lock_duration {
        queue.lock_duration = value;
    }
    if let Some(value) = description.max_size_in_megabytes {
        queue.max_size_in_megabytes = value;
    }
    if let Some(value) = description.requires_duplicate_detection {
        queue.requires_duplicate_detection = value;
    }
    if let Some(value) = description.requires_session {
        queue.requires_session = value;
    }
    if let Some(value) = description.enable_partitioning {
        queue.enable_partitioning = value;
    }
    if let Some(value) = limited(description.default_message_time_to_live) {
        queue.default_message_time_to_live = value;
    }
    if let Some(value) = description.dead_lettering_on_message_expiration {
        queue.dead_lettering_on_message_expiration = value;
    }
    if let Some(value) = description.duplicate_detection_history_time_window {
        queue.duplicate_detection_history_time_window = value;
    }
    if let Some(value) = description.max_delivery_count {
        queue.max_delivery_count = value;
    }
    queue.forward_to = forward_target(&description.forward_to);
    queue.forward_dead_lettered_messages_to =
        forward_target(&description.forward_dead_lettered_messages_to);
    if let Some(value) = limited(description.auto_delete_on_idle) {
        queue.auto_delete_on_idle = value;
    }
    if let Some(value) = description.max_message_size_in_kilobytes {
        queue.max_message_size_in_kilobytes = value;
    }
    if let Some(value) = status_of(description.status) {
        queue.status = value;
    }
    queue.user_metadata = description.user_metadata.clone();
    queue
}

/// What a GET shows of a queue.
pub fn queue_description(queue: &QueueConfig) -> QueueDescription {
    QueueDescription {
        lock_duration: Some(queue.lock_duration),
        max_size_in_megabytes: Some(queue.max_size_in_megabytes),
        requires_duplicate_detection: Some(queue.requires_duplicate_detection),
        requires_session: Some(queue.requires_session),
        default_message_time_to_live: queue.default_message_time_to_live,
        dead_lettering_on_message_expiration: Some(queue.dead_lettering_on_message_expiration),
        duplicate_detection_history_time_window: Some(
            queue.duplicate_detection_history_time_window,
        ),
        max_delivery_count: Some(queue.max_delivery_count),
        enable_batched_operations: Some(true),
        status: atom_status(queue.status),
        forward_to: queue.forward_to.clone(),
        auto_delete_on_idle: queue.auto_delete_on_idle,
        enable_partitioning: Some(queue.enable_partitioning),
        forward_dead_lettered_messages_to: queue.forward_dead_lettered_messages_to.clone(),
        enable_express: Some(false),
        max_message_size_in_kilobytes: Some(queue.max_message_size_in_kilobytes),
        user_metadata: queue.user_metadata.clone(),
    }
}

/// A topic definition from a PUT body (no subscriptions: they are created one by one).
pub fn topic_config(name: &str, description: &TopicDescription) -> TopicConfig {
    let mut topic = TopicConfig::new(name);
    if let Some(value) = limited(description.default_message_time_to_live) {
        topic.default_message_time_to_live = value;
    }
    if let Some(value) = description.max_size_in_megabytes {
        topic.max_size_in_megabytes = value;
    }
    if let Some(value) = description.requires_duplicate_detection {
        topic.requires_duplicate_detection = value;
    }
    if let Some(value) = description.duplicate_detection_history_time_window {
        topic.duplicate_detection_history_time_window = value;
    }
    if let Some(value) = description.enable_partitioning {
        topic.enable_partitioning = value;
    }
    if let Some(value) = limited(description.auto_delete_on_idle) {
        topic.auto_delete_on_idle = value;
    }
    if let Some(value) = description.max_message_size_in_kilobytes {
        topic.max_message_size_in_kilobytes = value;
    }
    if let Some(value) = status_of(description.status) {
        topic.status = value;
    }
    topic.user_metadata = description.user_metadata.clone();
    topic
}

/// What a GET shows of a topic.
pub fn topic_description(topic: &TopicConfig) -> TopicDescription {
    TopicDescription {
        default_message_time_to_live: topic.default_message_time_to_live,
        max_size_in_megabytes: Some(topic.max_size_in_megabytes),
        requires_duplicate_detection: Some(topic.requires_duplicate_detection),
        duplicate_detection_history_time_window: Some(
            topic.duplicate_detection_history_time_window,
        ),
        enable_batched_operations: Some(true),
        status: atom_status(topic.status),
        support_ordering: Some(true),
        auto_delete_on_idle: topic.auto_delete_on_idle,
        enable_partitioning: Some(topic.enable_partitioning),
        enable_express: Some(false),
        max_message_size_in_kilobytes: Some(topic.max_message_size_in_kilobytes),
        user_metadata: topic.user_metadata.clone(),
    }
}

/// A subscription definition from a PUT body; its embedded default rule, when given,
/// becomes its first rule (named `$Default` unless named).
pub fn subscription_config(
    name: &str,
    description: &SubscriptionDescription,
) -> Result<SubscriptionConfig, String> {
    let mut subscription = SubscriptionConfig::new(name);
    if let Some(value) = description.lock_duration {
        subscription.lock_duration = value;
    }
    if let Some(value) = description.requires_session {
        subscription.requires_session = value;
    }
    if let Some(value) = limited(description.default_message_time_to_live) {
        subscription.default_message_time_to_live = value;
    }
    if let Some(value) = description.dead_lettering_on_message_expiration {
        subscription.dead_lettering_on_message_expiration = value;
    }
    if let Some(value) = description.dead_lettering_on_filter_evaluation_exceptions {
        subscription.dead_lettering_on_filter_evaluation_exceptions = value;
    }
    if let Some(value) = description.max_delivery_count {
        subscription.max_delivery_count = value;
    }
    subscription.forward_to = forward_target(&description.forward_to);
    subscription.forward_dead_lettered_messages_to =
        forward_target(&description.forward_dead_lettered_messages_to);
    if let Some(value) = limited(description.auto_delete_on_idle) {
        subscription.auto_delete_on_idle = value;
    }
    if let Some(value) = status_of(description.status) {
        subscription.status = value;
    }
    subscription.user_metadata = description.user_metadata.clone();
    if let Some(rule) = &description.default_rule {
        let name = rule
            .name
            .clone()
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| crate::broker::rules::DEFAULT_RULE_NAME.to_string());
        subscription.rules = vec![rule_config(&name, rule)?];
    }
    Ok(subscription)
}

/// What a GET shows of a subscription.
pub fn subscription_description(subscription: &SubscriptionConfig) -> SubscriptionDescription {
    SubscriptionDescription {
        lock_duration: Some(subscription.lock_duration),
        requires_session: Some(subscription.requires_session),
        default_message_time_to_live: subscription.default_message_time_to_live,
        dead_lettering_on_message_expiration: Some(
            subscription.dead_lettering_on_message_expiration,
        ),
        dead_lettering_on_filter_evaluation_exceptions: Some(
            subscription.dead_lettering_on_filter_evaluation_exceptions,
        ),
        max_delivery_count: Some(subscription.max_delivery_count),
        enable_batched_operations: Some(true),
        status: atom_status(subscription.status),
        forward_to: subscription.forward_to.clone(),
        forward_dead_lettered_messages_to: subscription.forward_dead_lettered_messages_to.clone(),
        auto_delete_on_idle: subscription.auto_delete_on_idle,
        user_metadata: subscription.user_metadata.clone(),
        ..Default::default()
    }
}

fn literal(name: &str, value: &AtomValue) -> Result<PropertyLiteral, String> {
    Ok(match value {
        AtomValue::String(text) => PropertyLiteral::String(text.clone()),
        AtomValue::Int(number) => PropertyLiteral::Integer(i64::from(*number)),
        AtomValue::Long(number) => PropertyLiteral::Integer(*number),
        AtomValue::Double(number) => PropertyLiteral::Float(*number),
        AtomValue::Boolean(flag) => PropertyLiteral::Bool(*flag),
        AtomValue::Guid(bytes) => {
            PropertyLiteral::String(crate::config::parameters::guid_text(bytes))
        }
        other => {
            return Err(format!(
                "correlation filter property '{name}': values of type {} are not supported (use string, int, long, double or boolean)",
                other.type_name()
            ));
        }
    })
}

/// An instant as 100-ns ticks since the Unix epoch (before it: negative).
fn instant_ticks(time: std::time::SystemTime) -> i64 {
    match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => ticks_of(after),
        Err(before) => -ticks_of(before.duration()),
    }
}

/// An instant from 100-ns ticks since the Unix epoch.
fn instant_of(ticks: i64) -> std::time::SystemTime {
    if ticks >= 0 {
        std::time::UNIX_EPOCH + duration_of(ticks)
    } else {
        let before = duration_of(ticks.checked_neg().unwrap_or(i64::MAX));
        std::time::UNIX_EPOCH
            .checked_sub(before)
            .unwrap_or(std::time::UNIX_EPOCH)
    }
}

/// The `Parameters` of a SQL filter or action, typed as sent; `part` names it in errors.
fn parameters(part: &str, pairs: &[(String, AtomValue)]) -> Result<SqlParameters, String> {
    let parameters: SqlParameters = pairs
        .iter()
        .map(|(name, value)| {
            let value = match value {
                AtomValue::String(text) => ParameterValue::String(text.clone()),
                AtomValue::Int(number) => ParameterValue::Int(*number),
                AtomValue::Long(number) => ParameterValue::Long(*number),
                AtomValue::Double(number) => ParameterValue::Double(*number),
                AtomValue::Boolean(flag) => ParameterValue::Bool(*flag),
                AtomValue::DateTime(time) => ParameterValue::DateTime(instant_ticks(*time)),
                AtomValue::Duration(duration) => ParameterValue::Duration(ticks_of(*duration)),
                AtomValue::Guid(bytes) => ParameterValue::Guid(*bytes),
            };
            (name.clone(), value)
        })
        .collect();
    check_parameters(&parameters).map_err(|reason| format!("{part} Parameters: {reason}"))?;
    Ok(parameters)
}

/// A parameter as the ATOM wire types it. A negative span (only the configuration or AMQP
/// give one) has no `xs:duration` here and shows as zero.
fn atom_parameter(value: &ParameterValue) -> AtomValue {
    match value {
        ParameterValue::String(text) => AtomValue::String(text.clone()),
        ParameterValue::Int(number) => AtomValue::Int(*number),
        ParameterValue::Long(number) => AtomValue::Long(*number),
        ParameterValue::Double(number) => AtomValue::Double(*number),
        ParameterValue::Bool(flag) => AtomValue::Boolean(*flag),
        ParameterValue::DateTime(ticks) => AtomValue::DateTime(instant_of(*ticks)),
        ParameterValue::Duration(ticks) => AtomValue::Duration(duration_of(*ticks)),
        ParameterValue::Guid(bytes) => AtomValue::Guid(*bytes),
    }
}

fn atom_parameters(parameters: &[(String, ParameterValue)]) -> Vec<(String, AtomValue)> {
    parameters
        .iter()
        .map(|(name, value)| (name.clone(), atom_parameter(value)))
        .collect()
}

/// One list for a configured rule, whose parameters serve its filter and action alike: the
/// filter's, then the action's not already there; the same name with two values is refused.
fn merged_parameters(
    filter: SqlParameters,
    action: SqlParameters,
) -> Result<SqlParameters, String> {
    let mut merged = filter;
    for (name, value) in action {
        let key = crate::config::parameters::parameter_key(&name);
        let same = merged.iter().find(|(earlier, _)| {
            crate::broker::filter::property_names_equal(
                crate::config::parameters::parameter_key(earlier),
                key,
            )
        });
        match same {
            Some((_, earlier)) if *earlier == value => {}
            Some((earlier, _)) => {
                return Err(format!(
                    "the filter's parameter '{earlier}' and the action's '{name}' differ: a subscription's default rule takes one value per parameter"
                ));
            }
            None => merged.push((name, value)),
        }
    }
    Ok(merged)
}

/// A rule as the configuration writes it (for a subscription's creation).
pub fn rule_config(name: &str, rule: &RuleDescription) -> Result<RuleConfig, String> {
    let mut filter_parameters = Vec::new();
    let filter = match &rule.filter {
        RuleFilter::True => FilterConfig::True,
        RuleFilter::False => FilterConfig::Sql("1=0".to_string()),
        RuleFilter::Sql {
            expression,
            parameters: pairs,
        } => {
            filter_parameters = parameters("SqlFilter", pairs)?;
            FilterConfig::Sql(expression.clone())
        }
        RuleFilter::Correlation(filter) => FilterConfig::Correlation(CorrelationFilterConfig {
            correlation_id: filter.correlation_id.clone(),
            message_id: filter.message_id.clone(),
            to: filter.to.clone(),
            reply_to: filter.reply_to.clone(),
            subject: filter.label.clone(),
            session_id: filter.session_id.clone(),
            reply_to_session_id: filter.reply_to_session_id.clone(),
            content_type: filter.content_type.clone(),
            properties: filter
                .properties
                .iter()
                .map(|(key, value)| Ok((key.clone(), literal(key, value)?)))
                .collect::<Result<_, String>>()?,
        }),
    };
    let mut action_parameters = Vec::new();
    let action = match &rule.action {
        RuleAction::None => None,
        RuleAction::Sql {
            expression,
            parameters: pairs,
        } => {
            action_parameters = parameters("SqlRuleAction", pairs)?;
            Some(expression.clone())
        }
    };
    Ok(RuleConfig {
        name: name.to_string(),
        filter,
        action,
        parameters: merged_parameters(filter_parameters, action_parameters)?,
    })
}

fn broker_value(name: &str, value: &AtomValue) -> Result<PropertyValue, String> {
    Ok(match value {
        AtomValue::String(text) => PropertyValue::String(text.clone()),
        AtomValue::Int(number) => PropertyValue::Long(i64::from(*number)),
        AtomValue::Long(number) => PropertyValue::Long(*number),
        AtomValue::Double(number) => PropertyValue::Double(*number),
        AtomValue::Boolean(flag) => PropertyValue::Bool(*flag),
        AtomValue::DateTime(time) => PropertyValue::Timestamp(
            time.duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_millis() as i64)
                .unwrap_or(0),
        ),
        AtomValue::Guid(bytes) => PropertyValue::Uuid(*bytes),
        AtomValue::Duration(_) => {
            return Err(format!(
                "correlation filter property '{name}': duration values are not supported"
            ));
        }
    })
}

/// A rule as the broker keeps it, from a PUT body; refused (with the parser's reason, naming
/// an undefined parameter) unless it compiles.
pub fn rule_definition(name: &str, rule: &RuleDescription) -> Result<RuleDefinition, String> {
    let mut filter_parameters = Vec::new();
    let filter = match &rule.filter {
        RuleFilter::True => FilterDefinition::True,
        RuleFilter::False => FilterDefinition::False,
        RuleFilter::Sql {
            expression,
            parameters: pairs,
        } => {
            filter_parameters = parameters("SqlFilter", pairs)?;
            FilterDefinition::Sql(expression.clone())
        }
        RuleFilter::Correlation(filter) => FilterDefinition::Correlation {
            fields: [
                filter.correlation_id.clone(),
                filter.message_id.clone(),
                filter.to.clone(),
                filter.reply_to.clone(),
                filter.label.clone(),
                filter.session_id.clone(),
                filter.reply_to_session_id.clone(),
                filter.content_type.clone(),
            ],
            properties: filter
                .properties
                .iter()
                .map(|(key, value)| Ok((key.clone(), broker_value(key, value)?)))
                .collect::<Result<_, String>>()?,
        },
    };
    let mut action_parameters = Vec::new();
    let action = match &rule.action {
        RuleAction::None => None,
        RuleAction::Sql {
            expression,
            parameters: pairs,
        } => {
            action_parameters = parameters("SqlRuleAction", pairs)?;
            Some(expression.clone())
        }
    };
    let definition = RuleDefinition {
        name: name.to_string(),
        filter,
        action,
        filter_parameters,
        action_parameters,
        created_at: 0,
    };
    definition.compile().map_err(|error| error.to_string())?;
    Ok(definition)
}

fn atom_value(value: &PropertyValue) -> AtomValue {
    match value {
        PropertyValue::String(text) => AtomValue::String(text.clone()),
        PropertyValue::Long(number) => match i32::try_from(*number) {
            Ok(small) => AtomValue::Int(small),
            Err(_) => AtomValue::Long(*number),
        },
        PropertyValue::Double(number) => AtomValue::Double(*number),
        PropertyValue::Bool(flag) => AtomValue::Boolean(*flag),
        PropertyValue::Timestamp(millis) => AtomValue::DateTime(
            std::time::UNIX_EPOCH + Duration::from_millis((*millis).max(0) as u64),
        ),
        PropertyValue::Uuid(bytes) => AtomValue::Guid(*bytes),
        other => AtomValue::String(format!("{other:?}")),
    }
}

/// What a GET shows of a rule in force.
pub fn rule_description(rule: &RuleDefinition) -> RuleDescription {
    let filter = match &rule.filter {
        FilterDefinition::True => RuleFilter::True,
        FilterDefinition::False => RuleFilter::False,
        FilterDefinition::Sql(expression) => RuleFilter::Sql {
            expression: expression.clone(),
            parameters: atom_parameters(&rule.filter_parameters),
        },
        FilterDefinition::Correlation { fields, properties } => {
            let [
                correlation_id,
                message_id,
                to,
                reply_to,
                label,
                session_id,
                reply_to_session_id,
                content_type,
            ] = fields.clone();
            RuleFilter::Correlation(CorrelationFilter {
                correlation_id,
                message_id,
                to,
                reply_to,
                label,
                session_id,
                reply_to_session_id,
                content_type,
                properties: properties
                    .iter()
                    .map(|(key, value)| (key.clone(), atom_value(value)))
                    .collect(),
            })
        }
    };
    RuleDescription {
        name: Some(rule.name.clone()),
        filter,
        action: match &rule.action {
            Some(expression) => RuleAction::Sql {
                expression: expression.clone(),
                parameters: atom_parameters(&rule.action_parameters),
            },
            None => RuleAction::None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_addresses_name_the_entity() {
        let name = |text: &str| forward_target(&Some(text.to_string()));
        assert_eq!(name("orders"), Some("orders".into()));
        assert_eq!(name("sb://localhost/orders"), Some("orders".into()));
        assert_eq!(
            name("https://localhost:5672/orders/"),
            Some("orders".into())
        );
        assert_eq!(name(""), None);
        assert_eq!(forward_target(&None), None);
    }

    #[test]
    fn unlimited_ttl_means_none_and_absent_fields_keep_defaults() {
        let description = QueueDescription {
            default_message_time_to_live: super::super::atom::parse_duration(
                "P10675199DT2H48M5.4775807S",
            ),
            max_delivery_count: Some(3),
            ..Default::default()
        };
        let queue = queue_config("q", &description);
        assert_eq!(queue.default_message_time_to_live, None);
        assert_eq!(queue.max_delivery_count, 3);
        assert_eq!(queue.lock_duration, crate::config::DEFAULT_LOCK_DURATION);
    }

    #[test]
    fn rules_convert_both_ways() {
        let description = RuleDescription {
            name: Some("big".into()),
            filter: RuleFilter::Correlation(CorrelationFilter {
                label: Some("red".into()),
                properties: vec![("size".into(), AtomValue::Int(7))],
                ..Default::default()
            }),
            action: RuleAction::Sql {
                expression: "SET sys.Label = 'x'".into(),
                parameters: Vec::new(),
            },
        };
        let definition = rule_definition("big", &description).expect("converts");
        assert!(definition.compile().is_ok());
        assert_eq!(rule_description(&definition), description);
    }

    fn at(seconds: u64, nanoseconds: u32) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + Duration::new(seconds, nanoseconds)
    }

    #[test]
    fn parameters_keep_their_types_both_ways_and_an_undefined_one_is_named() {
        let typed = vec![
            ("@s".to_string(), AtomValue::String("red".into())),
            ("@i".to_string(), AtomValue::Int(7)),
            ("@l".to_string(), AtomValue::Long(7)),
            ("@d".to_string(), AtomValue::Double(2.5)),
            ("@b".to_string(), AtomValue::Boolean(true)),
            (
                "@t".to_string(),
                AtomValue::DateTime(at(1_714_979_289, 123_456_700)),
            ),
            (
                "@early".to_string(),
                AtomValue::DateTime(at(0, 0) - Duration::from_secs(86_400)),
            ),
            (
                "@span".to_string(),
                AtomValue::Duration(Duration::new(90, 500)),
            ),
            ("@g".to_string(), AtomValue::Guid([0x5a; 16])),
        ];
        let description = RuleDescription {
            name: Some("typed".into()),
            filter: RuleFilter::Sql {
                expression: "s = @s AND i = @i AND l = @l AND d = @d AND b = @b AND t = @t".into(),
                parameters: typed.clone(),
            },
            action: RuleAction::Sql {
                expression: "SET x = @Span".into(),
                parameters: vec![("span".into(), AtomValue::Duration(Duration::from_secs(1)))],
            },
        };
        let definition = rule_definition("typed", &description).expect("converts");
        assert_eq!(definition.filter_parameters[1].1, ParameterValue::Int(7));
        assert_eq!(definition.filter_parameters[2].1, ParameterValue::Long(7));
        assert_eq!(
            definition.filter_parameters[5].1,
            ParameterValue::DateTime(17_149_792_891_234_567)
        );
        assert_eq!(
            definition.filter_parameters[6].1,
            ParameterValue::DateTime(-864_000_000_000)
        );
        assert_eq!(
            rule_description(&definition),
            description,
            "shown back as sent"
        );

        let undefined = RuleDescription {
            filter: RuleFilter::Sql {
                expression: "a = @missing".into(),
                parameters: vec![("@other".into(), AtomValue::Int(1))],
            },
            ..Default::default()
        };
        let error = rule_definition("p", &undefined).expect_err("refused");
        assert!(error.contains("@missing"), "{error}");
        let twice = RuleDescription {
            filter: RuleFilter::Sql {
                expression: "a = @p".into(),
                parameters: vec![
                    ("@p".into(), AtomValue::Int(1)),
                    ("P".into(), AtomValue::Int(2)),
                ],
            },
            ..Default::default()
        };
        let error = rule_definition("p", &twice).expect_err("ambiguous");
        assert!(error.contains("same parameter"), "{error}");
    }

    #[test]
    fn a_default_rule_takes_one_list_of_parameters() {
        let rule = |action_value: i32| RuleDescription {
            filter: RuleFilter::Sql {
                expression: "a = @p".into(),
                parameters: vec![("@p".into(), AtomValue::Int(1))],
            },
            action: RuleAction::Sql {
                expression: "SET b = @p; SET c = @q".into(),
                parameters: vec![
                    ("p".into(), AtomValue::Int(action_value)),
                    ("@q".into(), AtomValue::String("x".into())),
                ],
            },
            ..Default::default()
        };
        let config = rule_config("$Default", &rule(1)).expect("the same value twice is one");
        assert_eq!(
            config.parameters,
            vec![
                ("@p".to_string(), ParameterValue::Int(1)),
                ("@q".to_string(), ParameterValue::String("x".into())),
            ]
        );
        let error = rule_config("$Default", &rule(2)).expect_err("two values for one name");
        assert!(error.contains("@p"), "{error}");
    }
}
