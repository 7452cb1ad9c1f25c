//! Rendering entries, feeds, the namespace document and errors as the service does.

use std::time::{Duration, SystemTime};

use quick_xml::Writer;
use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};

use super::*;

/// A small wrapper over `quick_xml::Writer` writing into memory.
pub(super) struct XmlOut {
    writer: Writer<Vec<u8>>,
}

impl XmlOut {
    fn new() -> XmlOut {
        XmlOut {
            writer: Writer::new(Vec::new()),
        }
    }

    fn write(&mut self, event: Event<'_>) {
        // Writing into a Vec<u8> cannot fail: the only error source is the sink.
        let _ = self.writer.write_event(event);
    }

    fn start(&mut self, name: &str, attributes: &[(&str, &str)]) {
        let start = BytesStart::new(name).with_attributes(attributes.iter().copied());
        self.write(Event::Start(start));
    }

    fn end(&mut self, name: &str) {
        self.write(Event::End(BytesEnd::new(name)));
    }

    fn empty(&mut self, name: &str, attributes: &[(&str, &str)]) {
        let start = BytesStart::new(name).with_attributes(attributes.iter().copied());
        self.write(Event::Empty(start));
    }

    fn leaf(&mut self, name: &str, text: &str) {
        self.leaf_with(name, &[], text);
    }

    fn leaf_with(&mut self, name: &str, attributes: &[(&str, &str)], text: &str) {
        self.start(name, attributes);
        if !text.is_empty() {
            self.write(Event::Text(BytesText::new(text)));
        }
        self.end(name);
    }

    fn optional(&mut self, name: &str, text: Option<&str>) {
        if let Some(text) = text {
            self.leaf(name, text);
        }
    }

    /// Appends already-rendered XML verbatim.
    fn raw(&mut self, xml: &str) {
        self.writer.get_mut().extend_from_slice(xml.as_bytes());
    }

    fn finish(self) -> String {
        // Every piece written came from a `&str`, so the bytes are UTF-8.
        String::from_utf8(self.writer.into_inner())
            .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
    }
}

pub(super) fn boolean_text(value: Option<bool>) -> &'static str {
    if value.unwrap_or(false) {
        "true"
    } else {
        "false"
    }
}

/// The namespace name for a base URL (`https://host:port`): see [`namespace_name_of_host`].
pub(super) fn namespace_name(base_url: &str) -> String {
    let without_scheme = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest);
    namespace_name_of_host(without_scheme.split('/').next().unwrap_or(without_scheme))
}

/// The namespace is named after the host the client called (`Host` header, port allowed):
/// the first label of a host name (`mybus.example.com` → `mybus`), an IP address whole.
pub fn namespace_name_of_host(host: &str) -> String {
    let host = host
        .rsplit_once(':')
        .filter(|(name, port)| {
            port.chars().all(|c| c.is_ascii_digit()) && (!name.contains(':') || name.ends_with(']'))
        })
        .map_or(host, |(name, _)| name)
        .trim_matches(['[', ']']);
    if host.parse::<std::net::IpAddr>().is_ok() {
        return host.to_string();
    }
    host.split('.')
        .next()
        .filter(|name| !name.is_empty())
        .unwrap_or("ferrobus")
        .to_string()
}

/// Writes `<entry><id/><title/><published/><updated/><author/><link/><content>`, lets `body`
/// write the description, and closes the entry.
pub(super) fn entry(
    base_url: &str,
    path: &str,
    title: &str,
    published: SystemTime,
    updated: SystemTime,
    body: impl FnOnce(&mut XmlOut),
) -> String {
    let address = format!("{}/{}", base_url.trim_end_matches('/'), path);
    let mut out = XmlOut::new();
    out.start("entry", &[("xmlns", ATOM_NAMESPACE)]);
    out.leaf("id", &address);
    out.leaf_with("title", &[("type", "text")], title);
    out.leaf("published", &format_timestamp(published));
    out.leaf("updated", &format_timestamp(updated));
    out.start("author", &[]);
    out.leaf("name", &namespace_name(base_url));
    out.end("author");
    out.empty("link", &[("rel", "self"), ("href", &address)]);
    out.start("content", &[("type", "application/xml")]);
    body(&mut out);
    out.end("content");
    out.end("entry");
    out.finish()
}

pub(super) const DESCRIPTION_ATTRIBUTES: [(&str, &str); 2] = [
    ("xmlns", SERVICE_BUS_NAMESPACE),
    ("xmlns:i", XML_SCHEMA_INSTANCE_NAMESPACE),
];

pub(super) fn count_details(out: &mut XmlOut, counts: &MessageCounts) {
    out.start("CountDetails", &[("xmlns:d2p1", COUNT_DETAILS_NAMESPACE)]);
    out.leaf("d2p1:ActiveMessageCount", &counts.active.to_string());
    out.leaf(
        "d2p1:DeadLetterMessageCount",
        &counts.dead_letter.to_string(),
    );
    out.leaf("d2p1:ScheduledMessageCount", &counts.scheduled.to_string());
    out.leaf("d2p1:TransferMessageCount", &counts.transfer.to_string());
    out.leaf(
        "d2p1:TransferDeadLetterMessageCount",
        &counts.transfer_dead_letter.to_string(),
    );
    out.end("CountDetails");
}

pub(super) fn duration_text(duration: Option<Duration>, default: Duration) -> String {
    format_duration(duration.unwrap_or(default))
}

/// Renders the `<entry>` answering GET/PUT on `/{name}` for a queue: every description field
/// (absent ones as the service default) and the runtime counters, in the REST reference order.
/// `base_url` is the scheme and host the client used, e.g. `https://localhost:5300`.
pub fn render_queue_entry(
    base_url: &str,
    name: &str,
    description: &QueueDescription,
    runtime: &QueueRuntime,
) -> String {
    let queue = description.with_defaults();
    entry(
        base_url,
        name,
        name,
        runtime.created_at,
        runtime.updated_at,
        |out| {
            out.start("QueueDescription", &DESCRIPTION_ATTRIBUTES);
            out.leaf(
                "LockDuration",
                &duration_text(queue.lock_duration, DEFAULT_LOCK_DURATION),
            );
            out.leaf(
                "MaxSizeInMegabytes",
                &queue
                    .max_size_in_megabytes
                    .unwrap_or(DEFAULT_MAX_SIZE_IN_MEGABYTES)
                    .to_string(),
            );
            out.leaf(
                "RequiresDuplicateDetection",
                boolean_text(queue.requires_duplicate_detection),
            );
            out.leaf("RequiresSession", boolean_text(queue.requires_session));
            out.leaf(
                "DefaultMessageTimeToLive",
                &format_duration_or_unlimited(queue.default_message_time_to_live),
            );
            out.leaf(
                "DeadLetteringOnMessageExpiration",
                boolean_text(queue.dead_lettering_on_message_expiration),
            );
            out.leaf(
                "DuplicateDetectionHistoryTimeWindow",
                &duration_text(
                    queue.duplicate_detection_history_time_window,
                    DEFAULT_DUPLICATE_DETECTION_WINDOW,
                ),
            );
            out.leaf(
                "MaxDeliveryCount",
                &queue
                    .max_delivery_count
                    .unwrap_or(DEFAULT_MAX_DELIVERY_COUNT)
                    .to_string(),
            );
            out.leaf(
                "EnableBatchedOperations",
                boolean_text(queue.enable_batched_operations),
            );
            out.leaf("SizeInBytes", &runtime.size_in_bytes.to_string());
            out.leaf("MessageCount", &runtime.counts.total().to_string());
            out.leaf("IsAnonymousAccessible", "false");
            out.empty("AuthorizationRules", &[]);
            out.leaf(
                "Status",
                queue.status.unwrap_or(EntityStatus::Active).as_str(),
            );
            out.leaf("CreatedAt", &format_timestamp(runtime.created_at));
            out.leaf("UpdatedAt", &format_timestamp(runtime.updated_at));
            out.leaf("AccessedAt", &format_timestamp(runtime.accessed_at));
            out.leaf("SupportOrdering", "true");
            count_details(out, &runtime.counts);
            out.leaf(
                "AutoDeleteOnIdle",
                &format_duration_or_unlimited(queue.auto_delete_on_idle),
            );
            out.leaf(
                "EnablePartitioning",
                boolean_text(queue.enable_partitioning),
            );
            out.leaf("EntityAvailabilityStatus", "Available");
            out.leaf("EnableExpress", boolean_text(queue.enable_express));
            out.optional("ForwardTo", queue.forward_to.as_deref());
            out.optional("UserMetadata", queue.user_metadata.as_deref());
            out.optional(
                "ForwardDeadLetteredMessagesTo",
                queue.forward_dead_lettered_messages_to.as_deref(),
            );
            out.leaf(
                "MaxMessageSizeInKilobytes",
                &queue
                    .max_message_size_in_kilobytes
                    .unwrap_or(DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES)
                    .to_string(),
            );
            out.end("QueueDescription");
        },
    )
}

/// Renders the `<entry>` answering GET/PUT on `/{name}` for a topic.
pub fn render_topic_entry(
    base_url: &str,
    name: &str,
    description: &TopicDescription,
    runtime: &TopicRuntime,
) -> String {
    let topic = description.with_defaults();
    entry(
        base_url,
        name,
        name,
        runtime.created_at,
        runtime.updated_at,
        |out| {
            out.start("TopicDescription", &DESCRIPTION_ATTRIBUTES);
            out.leaf(
                "DefaultMessageTimeToLive",
                &format_duration_or_unlimited(topic.default_message_time_to_live),
            );
            out.leaf(
                "MaxSizeInMegabytes",
                &topic
                    .max_size_in_megabytes
                    .unwrap_or(DEFAULT_MAX_SIZE_IN_MEGABYTES)
                    .to_string(),
            );
            out.leaf(
                "RequiresDuplicateDetection",
                boolean_text(topic.requires_duplicate_detection),
            );
            out.leaf(
                "DuplicateDetectionHistoryTimeWindow",
                &duration_text(
                    topic.duplicate_detection_history_time_window,
                    DEFAULT_DUPLICATE_DETECTION_WINDOW,
                ),
            );
            out.leaf(
                "EnableBatchedOperations",
                boolean_text(topic.enable_batched_operations),
            );
            out.leaf("SizeInBytes", &runtime.size_in_bytes.to_string());
            out.leaf("FilteringMessagesBeforePublishing", "false");
            out.leaf("IsAnonymousAccessible", "false");
            out.empty("AuthorizationRules", &[]);
            out.leaf(
                "Status",
                topic.status.unwrap_or(EntityStatus::Active).as_str(),
            );
            out.leaf("CreatedAt", &format_timestamp(runtime.created_at));
            out.leaf("UpdatedAt", &format_timestamp(runtime.updated_at));
            out.leaf("AccessedAt", &format_timestamp(runtime.accessed_at));
            out.leaf("SupportOrdering", boolean_text(topic.support_ordering));
            count_details(out, &runtime.counts);
            out.leaf("SubscriptionCount", &runtime.subscription_count.to_string());
            out.leaf(
                "AutoDeleteOnIdle",
                &format_duration_or_unlimited(topic.auto_delete_on_idle),
            );
            out.leaf(
                "EnablePartitioning",
                boolean_text(topic.enable_partitioning),
            );
            out.leaf("EntityAvailabilityStatus", "Available");
            out.leaf("EnableSubscriptionPartitioning", "false");
            out.leaf("EnableExpress", boolean_text(topic.enable_express));
            out.optional("UserMetadata", topic.user_metadata.as_deref());
            out.leaf(
                "MaxMessageSizeInKilobytes",
                &topic
                    .max_message_size_in_kilobytes
                    .unwrap_or(DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES)
                    .to_string(),
            );
            // Last, as the service writes them (api-version 2024-05).
            out.leaf("SqlFilterCount", &runtime.sql_filter_count.to_string());
            out.leaf(
                "CorrelationFilterCount",
                &runtime.correlation_filter_count.to_string(),
            );
            out.end("TopicDescription");
        },
    )
}

/// Renders the `<entry>` answering GET/PUT on `/{topic}/Subscriptions/{name}`. The embedded
/// default rule is not echoed (the service does not either; it is listed as rule `$Default`).
pub fn render_subscription_entry(
    base_url: &str,
    topic: &str,
    name: &str,
    description: &SubscriptionDescription,
    runtime: &SubscriptionRuntime,
) -> String {
    let subscription = description.with_defaults();
    entry(
        base_url,
        &format!("{topic}/Subscriptions/{name}"),
        name,
        runtime.created_at,
        runtime.updated_at,
        |out| {
            out.start("SubscriptionDescription", &DESCRIPTION_ATTRIBUTES);
            out.leaf(
                "LockDuration",
                &duration_text(subscription.lock_duration, DEFAULT_LOCK_DURATION),
            );
            out.leaf(
                "RequiresSession",
                boolean_text(subscription.requires_session),
            );
            out.leaf(
                "DefaultMessageTimeToLive",
                &format_duration_or_unlimited(subscription.default_message_time_to_live),
            );
            out.leaf(
                "DeadLetteringOnMessageExpiration",
                boolean_text(subscription.dead_lettering_on_message_expiration),
            );
            out.leaf(
                "DeadLetteringOnFilterEvaluationExceptions",
                boolean_text(subscription.dead_lettering_on_filter_evaluation_exceptions),
            );
            out.leaf("MessageCount", &runtime.counts.total().to_string());
            out.leaf(
                "MaxDeliveryCount",
                &subscription
                    .max_delivery_count
                    .unwrap_or(DEFAULT_MAX_DELIVERY_COUNT)
                    .to_string(),
            );
            out.leaf(
                "EnableBatchedOperations",
                boolean_text(subscription.enable_batched_operations),
            );
            out.leaf(
                "Status",
                subscription.status.unwrap_or(EntityStatus::Active).as_str(),
            );
            out.optional("ForwardTo", subscription.forward_to.as_deref());
            out.leaf("CreatedAt", &format_timestamp(runtime.created_at));
            out.leaf("UpdatedAt", &format_timestamp(runtime.updated_at));
            out.leaf("AccessedAt", &format_timestamp(runtime.accessed_at));
            count_details(out, &runtime.counts);
            out.optional(
                "ForwardDeadLetteredMessagesTo",
                subscription.forward_dead_lettered_messages_to.as_deref(),
            );
            out.leaf(
                "AutoDeleteOnIdle",
                &format_duration_or_unlimited(subscription.auto_delete_on_idle),
            );
            out.leaf("EntityAvailabilityStatus", "Available");
            out.optional("UserMetadata", subscription.user_metadata.as_deref());
            out.end("SubscriptionDescription");
        },
    )
}

pub(super) fn key_values_out(out: &mut XmlOut, element: &str, pairs: &[(String, PropertyValue)]) {
    if pairs.is_empty() {
        out.empty(element, &[]);
        return;
    }
    out.start(element, &[]);
    for (key, value) in pairs {
        out.start("KeyValueOfstringanyType", &[]);
        out.leaf("Key", key);
        let type_name = format!("d6p1:{}", value.type_name());
        let namespace = match value {
            PropertyValue::Guid(_) => SERIALIZATION_NAMESPACE,
            _ => XML_SCHEMA_NAMESPACE,
        };
        out.leaf_with(
            "Value",
            &[("xmlns:d6p1", namespace), ("i:type", &type_name)],
            &value.to_text(),
        );
        out.end("KeyValueOfstringanyType");
    }
    out.end(element);
}

pub(super) fn sql_filter_out(
    out: &mut XmlOut,
    type_name: &str,
    expression: &str,
    pairs: &[(String, PropertyValue)],
) {
    out.start("Filter", &[("i:type", type_name)]);
    out.leaf("SqlExpression", expression);
    out.leaf("CompatibilityLevel", "20");
    if !pairs.is_empty() {
        key_values_out(out, "Parameters", pairs);
    }
    out.end("Filter");
}

pub(super) fn rule_body(
    out: &mut XmlOut,
    rule: &RuleDescription,
    name: &str,
    created_at: SystemTime,
) {
    match &rule.filter {
        RuleFilter::Sql {
            expression,
            parameters,
        } => sql_filter_out(out, "SqlFilter", expression, parameters),
        RuleFilter::True => sql_filter_out(out, "TrueFilter", "1=1", &[]),
        RuleFilter::False => sql_filter_out(out, "FalseFilter", "1=0", &[]),
        RuleFilter::Correlation(filter) => {
            out.start("Filter", &[("i:type", "CorrelationFilter")]);
            out.optional("CorrelationId", filter.correlation_id.as_deref());
            out.optional("MessageId", filter.message_id.as_deref());
            out.optional("To", filter.to.as_deref());
            out.optional("ReplyTo", filter.reply_to.as_deref());
            out.optional("Label", filter.label.as_deref());
            out.optional("SessionId", filter.session_id.as_deref());
            out.optional("ReplyToSessionId", filter.reply_to_session_id.as_deref());
            out.optional("ContentType", filter.content_type.as_deref());
            key_values_out(out, "Properties", &filter.properties);
            out.end("Filter");
        }
    }
    // Python's rule reader dereferences `Action` unconditionally: always write one.
    match &rule.action {
        RuleAction::None => out.empty("Action", &[("i:type", "EmptyRuleAction")]),
        RuleAction::Sql {
            expression,
            parameters,
        } => {
            out.start("Action", &[("i:type", "SqlRuleAction")]);
            out.leaf("SqlExpression", expression);
            out.leaf("CompatibilityLevel", "20");
            if !parameters.is_empty() {
                key_values_out(out, "Parameters", parameters);
            }
            out.end("Action");
        }
    }
    out.leaf("CreatedAt", &format_timestamp(created_at));
    out.leaf("Name", name);
}

/// Renders the `<entry>` answering GET/PUT on `/{topic}/Subscriptions/{subscription}/Rules/{name}`.
/// `name` (from the URL) is written as the rule's `Name`, whatever the description holds.
pub fn render_rule_entry(
    base_url: &str,
    topic: &str,
    subscription: &str,
    name: &str,
    rule: &RuleDescription,
    created_at: SystemTime,
) -> String {
    entry(
        base_url,
        &format!("{topic}/Subscriptions/{subscription}/Rules/{name}"),
        name,
        created_at,
        created_at,
        |out| {
            out.start("RuleDescription", &DESCRIPTION_ATTRIBUTES);
            rule_body(out, rule, name, created_at);
            out.end("RuleDescription");
        },
    )
}

/// Renders a list response: a `<feed>` around already-rendered entries. `self_url` is the
/// address of the list (e.g. `https://host/$Resources/Queues`); `title` is `Queues`, `Topics`,
/// `Subscriptions` or `Rules`. Only the `self` link is written: with no `rel="next"` link, both
/// SDKs treat the page as the last (Python takes a next link only when there are two links).
pub fn render_feed(self_url: &str, title: &str, entries: &[String]) -> String {
    render_feed_page(self_url, title, entries, None)
}

/// Renders one page of a feed; `next_url` (when more entries follow) becomes the
/// `<link rel="next">` the SDKs read their continuation (`$skip`) from.
pub fn render_feed_page(
    self_url: &str,
    title: &str,
    entries: &[String],
    next_url: Option<&str>,
) -> String {
    let mut out = XmlOut::new();
    out.start("feed", &[("xmlns", ATOM_NAMESPACE)]);
    out.leaf_with("title", &[("type", "text")], title);
    out.leaf("id", self_url);
    out.empty("link", &[("rel", "self"), ("href", self_url)]);
    if let Some(next_url) = next_url {
        out.empty("link", &[("rel", "next"), ("href", next_url)]);
    }
    for entry in entries {
        out.raw(entry);
    }
    out.end("feed");
    out.finish()
}

/// Renders the `<entry>` answering `GET /$namespaceinfo`: a Standard-tier messaging namespace.
pub fn render_namespace(base_url: &str, info: &NamespaceInfo) -> String {
    entry(
        base_url,
        "$namespaceinfo",
        &info.name,
        info.created_at,
        info.modified_at,
        |out| {
            out.start("NamespaceInfo", &DESCRIPTION_ATTRIBUTES);
            out.optional("Alias", info.alias.as_deref());
            out.leaf("CreatedTime", &format_timestamp(info.created_at));
            out.leaf("MessagingSKU", "Standard");
            if let Some(units) = info.messaging_units {
                out.leaf("MessagingUnits", &units.to_string());
            }
            out.leaf("ModifiedTime", &format_timestamp(info.modified_at));
            out.leaf("Name", &info.name);
            out.leaf("NamespaceType", "Messaging");
            out.end("NamespaceInfo");
        },
    )
}

/// Renders the error body Service Bus sends with a 4xx/5xx status:
/// `<Error><Code>404</Code><Detail>…</Detail></Error>`. Python raises with `Detail` as message;
/// JavaScript reads `Error.Detail` (and looks for `SubCode=40901`-style markers in it).
pub fn render_error(status: u16, detail: &str) -> String {
    let mut out = XmlOut::new();
    out.start("Error", &[]);
    out.leaf("Code", &status.to_string());
    out.leaf("Detail", detail);
    out.end("Error");
    out.finish()
}
