//! Parsing the ATOM/XML request bodies into descriptions (see the parent module).

use std::borrow::Cow;
use std::time::Duration;

use quick_xml::Reader;
use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};

use super::*;

/// Reads a queue PUT body (create, or update with `If-Match: *`: same shape).
pub fn parse_queue(body: &str) -> Result<QueueDescription, AtomError> {
    let tree = parse_tree(body)?;
    let element = description(&tree, Kind::Queue)?;
    let mut queue = QueueDescription::default();
    for child in &element.children {
        let field = Field(child);
        match child.name.as_str() {
            "LockDuration" => queue.lock_duration = field.duration()?,
            "MaxSizeInMegabytes" => queue.max_size_in_megabytes = field.number()?,
            "RequiresDuplicateDetection" => queue.requires_duplicate_detection = field.boolean()?,
            "RequiresSession" => queue.requires_session = field.boolean()?,
            "DefaultMessageTimeToLive" => {
                queue.default_message_time_to_live = field.duration_or_unlimited()?
            }
            "DeadLetteringOnMessageExpiration" => {
                queue.dead_lettering_on_message_expiration = field.boolean()?
            }
            "DuplicateDetectionHistoryTimeWindow" => {
                queue.duplicate_detection_history_time_window = field.duration()?
            }
            "MaxDeliveryCount" => queue.max_delivery_count = field.number()?,
            "EnableBatchedOperations" => queue.enable_batched_operations = field.boolean()?,
            "Status" => queue.status = field.status()?,
            "ForwardTo" => queue.forward_to = field.text(),
            "UserMetadata" => queue.user_metadata = field.text(),
            "AutoDeleteOnIdle" => queue.auto_delete_on_idle = field.duration_or_unlimited()?,
            "EnablePartitioning" => queue.enable_partitioning = field.boolean()?,
            "ForwardDeadLetteredMessagesTo" => {
                queue.forward_dead_lettered_messages_to = field.text()
            }
            "EnableExpress" => queue.enable_express = field.boolean()?,
            "MaxMessageSizeInKilobytes" => queue.max_message_size_in_kilobytes = field.number()?,
            // AuthorizationRules, runtime counters, EntityAvailabilityStatus, … are ignored.
            _ => {}
        }
    }
    Ok(queue)
}

/// Reads a topic PUT body (create or update).
pub fn parse_topic(body: &str) -> Result<TopicDescription, AtomError> {
    let tree = parse_tree(body)?;
    let element = description(&tree, Kind::Topic)?;
    let mut topic = TopicDescription::default();
    for child in &element.children {
        let field = Field(child);
        match child.name.as_str() {
            "DefaultMessageTimeToLive" => {
                topic.default_message_time_to_live = field.duration_or_unlimited()?
            }
            "MaxSizeInMegabytes" => topic.max_size_in_megabytes = field.number()?,
            "RequiresDuplicateDetection" => topic.requires_duplicate_detection = field.boolean()?,
            "DuplicateDetectionHistoryTimeWindow" => {
                topic.duplicate_detection_history_time_window = field.duration()?
            }
            "EnableBatchedOperations" => topic.enable_batched_operations = field.boolean()?,
            "Status" => topic.status = field.status()?,
            "UserMetadata" => topic.user_metadata = field.text(),
            "SupportOrdering" => topic.support_ordering = field.boolean()?,
            "AutoDeleteOnIdle" => topic.auto_delete_on_idle = field.duration_or_unlimited()?,
            "EnablePartitioning" => topic.enable_partitioning = field.boolean()?,
            "EnableExpress" => topic.enable_express = field.boolean()?,
            "MaxMessageSizeInKilobytes" => topic.max_message_size_in_kilobytes = field.number()?,
            _ => {}
        }
    }
    Ok(topic)
}

/// Reads a subscription PUT body (create or update), including an embedded
/// `DefaultRuleDescription`.
pub fn parse_subscription(body: &str) -> Result<SubscriptionDescription, AtomError> {
    let tree = parse_tree(body)?;
    let element = description(&tree, Kind::Subscription)?;
    let mut subscription = SubscriptionDescription::default();
    for child in &element.children {
        let field = Field(child);
        match child.name.as_str() {
            "LockDuration" => subscription.lock_duration = field.duration()?,
            "RequiresSession" => subscription.requires_session = field.boolean()?,
            "DefaultMessageTimeToLive" => {
                subscription.default_message_time_to_live = field.duration_or_unlimited()?
            }
            "DeadLetteringOnMessageExpiration" => {
                subscription.dead_lettering_on_message_expiration = field.boolean()?
            }
            "DeadLetteringOnFilterEvaluationExceptions" => {
                subscription.dead_lettering_on_filter_evaluation_exceptions = field.boolean()?
            }
            "DefaultRuleDescription" => subscription.default_rule = Some(rule_from(child)?),
            "MaxDeliveryCount" => subscription.max_delivery_count = field.number()?,
            "EnableBatchedOperations" => {
                subscription.enable_batched_operations = field.boolean()?
            }
            "Status" => subscription.status = field.status()?,
            "ForwardTo" => subscription.forward_to = field.text(),
            "UserMetadata" => subscription.user_metadata = field.text(),
            "ForwardDeadLetteredMessagesTo" => {
                subscription.forward_dead_lettered_messages_to = field.text()
            }
            "AutoDeleteOnIdle" => {
                subscription.auto_delete_on_idle = field.duration_or_unlimited()?
            }
            _ => {}
        }
    }
    Ok(subscription)
}

/// Reads a rule PUT body (create or update).
pub fn parse_rule(body: &str) -> Result<RuleDescription, AtomError> {
    let tree = parse_tree(body)?;
    let element = description(&tree, Kind::Rule)?;
    rule_from(element)
}

/// Tells which description a PUT body carries, so `PUT /{name}` can be routed to queue or
/// topic creation. `None` when the body is not well-formed XML or holds no known description
/// (an empty `<entry/>`, for instance).
pub fn detect_kind(body: &str) -> Option<Kind> {
    let tree = parse_tree(body).ok()?;
    let element = content_description(&tree)?;
    Kind::from_element_name(&element.name)
}

/// One XML element, reduced to what the codec needs: local names only (prefixes and namespace
/// declarations dropped), attributes by local name, concatenated text.
#[derive(Debug)]
pub(super) struct Element {
    name: String,
    attributes: Vec<(String, String)>,
    children: Vec<Element>,
    text: String,
}

impl Element {
    fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|child| child.name == name)
    }

    fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The `xsi:type` (whatever its prefix) with any `prefix:` of the value removed.
    fn type_attribute(&self) -> Option<&str> {
        self.attribute("type")
            .map(|value| value.rsplit(':').next().unwrap_or(value).trim())
    }
}

pub(super) fn malformed(reader: &Reader<&[u8]>, message: impl std::fmt::Display) -> AtomError {
    AtomError::Malformed(format!(
        "{message} (near byte {})",
        reader.buffer_position()
    ))
}

/// Reads the whole body into an [`Element`] tree. Entity references other than the five
/// predefined ones and character references are refused (no DTD expansion).
pub(super) fn parse_tree(body: &str) -> Result<Element, AtomError> {
    let mut reader = Reader::from_str(body);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let event = reader
            .read_event()
            .map_err(|error| malformed(&reader, error))?;
        match event {
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(malformed(&reader, "elements nest too deep"));
                }
                if stack.is_empty() && root.is_some() {
                    return Err(malformed(&reader, "more than one root element"));
                }
                stack.push(element_from(&start, &reader)?);
            }
            Event::Empty(start) => {
                if stack.is_empty() && root.is_some() {
                    return Err(malformed(&reader, "more than one root element"));
                }
                let element = element_from(&start, &reader)?;
                attach(&mut stack, &mut root, element);
            }
            Event::End(_) => {
                let element = stack
                    .pop()
                    .ok_or_else(|| malformed(&reader, "an end tag without a start tag"))?;
                attach(&mut stack, &mut root, element);
            }
            Event::Text(text) => {
                let content = text.xml10_content();
                match stack.last_mut() {
                    Some(parent) => parent.text.push_str(&content),
                    None if content.trim().is_empty() => {}
                    None => return Err(malformed(&reader, "text outside the root element")),
                }
            }
            Event::CData(data) => {
                let content = data.xml10_content();
                match stack.last_mut() {
                    Some(parent) => parent.text.push_str(&content),
                    None => return Err(malformed(&reader, "CDATA outside the root element")),
                }
            }
            Event::GeneralRef(reference) => {
                let resolved: Cow<'static, str> = match reference.resolve_char_ref() {
                    Ok(Some(character)) => Cow::Owned(character.to_string()),
                    Ok(None) => match quick_xml::escape::resolve_predefined_entity(&reference) {
                        Some(text) => Cow::Borrowed(text),
                        None => {
                            return Err(malformed(
                                &reader,
                                format!("unknown entity &{};", &*reference),
                            ));
                        }
                    },
                    Err(error) => return Err(malformed(&reader, error)),
                };
                match stack.last_mut() {
                    Some(parent) => parent.text.push_str(&resolved),
                    None => return Err(malformed(&reader, "a reference outside the root element")),
                }
            }
            Event::Eof => break,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
        }
    }
    if !stack.is_empty() {
        return Err(AtomError::Malformed(
            "the body ends inside an element".to_string(),
        ));
    }
    root.ok_or_else(|| AtomError::Malformed("the body holds no element".to_string()))
}

pub(super) fn attach(stack: &mut [Element], root: &mut Option<Element>, element: Element) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(element),
        None => *root = Some(element),
    }
}

pub(super) fn element_from(
    start: &BytesStart<'_>,
    reader: &Reader<&[u8]>,
) -> Result<Element, AtomError> {
    let name = start.local_name().as_ref().to_string();
    let mut attributes = Vec::new();
    for attribute in start.attributes() {
        let attribute = attribute.map_err(|error| malformed(reader, error))?;
        if attribute.key.as_namespace_binding().is_some() {
            continue;
        }
        let key = attribute.key.local_name().as_ref().to_string();
        let value = attribute
            .normalized_value(XmlVersion::Implicit1_0)
            .map_err(|error| malformed(reader, error))?
            .into_owned();
        attributes.push((key, value));
    }
    Ok(Element {
        name,
        attributes,
        children: Vec::new(),
        text: String::new(),
    })
}

/// The first element inside `<entry><content>`, or the root itself when a client sends a bare
/// description without the ATOM envelope.
pub(super) fn content_description(tree: &Element) -> Option<&Element> {
    if Kind::from_element_name(&tree.name).is_some() {
        return Some(tree);
    }
    if tree.name != "entry" {
        return None;
    }
    tree.child("content")?.children.first()
}

pub(super) fn description(tree: &Element, kind: Kind) -> Result<&Element, AtomError> {
    let expected = kind.element_name();
    let element = content_description(tree).ok_or(AtomError::MissingDescription { expected })?;
    if element.name != expected {
        return Err(AtomError::WrongDescription {
            expected,
            found: element.name.clone(),
        });
    }
    Ok(element)
}

/// Typed readers over one leaf element; an empty element reads as absent.
pub(super) struct Field<'a>(&'a Element);

impl Field<'_> {
    fn trimmed(&self) -> Option<&str> {
        let text = self.0.text.trim();
        (!text.is_empty()).then_some(text)
    }

    fn invalid(&self, reason: &'static str) -> AtomError {
        AtomError::InvalidValue {
            element: self.0.name.clone(),
            value: self.0.text.clone(),
            reason,
        }
    }

    fn text(&self) -> Option<String> {
        self.trimmed().map(str::to_string)
    }

    fn boolean(&self) -> Result<Option<bool>, AtomError> {
        self.trimmed()
            .map(|text| parse_boolean(text).ok_or_else(|| self.invalid("expected true or false")))
            .transpose()
    }

    fn number<T: std::str::FromStr>(&self) -> Result<Option<T>, AtomError> {
        self.trimmed()
            .map(|text| {
                text.parse::<T>()
                    .map_err(|_| self.invalid("expected a non-negative integer in range"))
            })
            .transpose()
    }

    fn duration(&self) -> Result<Option<Duration>, AtomError> {
        self.trimmed()
            .map(|text| {
                parse_duration(text)
                    .ok_or_else(|| self.invalid("expected an ISO 8601 duration such as PT1M"))
            })
            .transpose()
    }

    /// A duration where `TimeSpan.MaxValue` (or more) means "unlimited", read as `None`.
    fn duration_or_unlimited(&self) -> Result<Option<Duration>, AtomError> {
        Ok(self.duration()?.filter(|duration| !is_unlimited(*duration)))
    }

    fn status(&self) -> Result<Option<EntityStatus>, AtomError> {
        self.trimmed()
            .map(|text| {
                EntityStatus::parse(text).ok_or_else(|| {
                    self.invalid("expected Active, Disabled, SendDisabled or ReceiveDisabled")
                })
            })
            .transpose()
    }
}

pub(super) fn parse_boolean(text: &str) -> Option<bool> {
    match text {
        "1" => Some(true),
        "0" => Some(false),
        _ if text.eq_ignore_ascii_case("true") => Some(true),
        _ if text.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

/// Reads a `RuleDescription` or `DefaultRuleDescription` element.
pub(super) fn rule_from(element: &Element) -> Result<RuleDescription, AtomError> {
    let mut rule = RuleDescription::default();
    for child in &element.children {
        match child.name.as_str() {
            "Name" => rule.name = Field(child).text(),
            "Filter" => rule.filter = filter_from(child)?,
            "Action" => rule.action = action_from(child)?,
            _ => {}
        }
    }
    Ok(rule)
}

pub(super) fn sql_expression(element: &Element) -> Result<String, AtomError> {
    element
        .child("SqlExpression")
        .and_then(|expression| Field(expression).text())
        .ok_or_else(|| AtomError::InvalidValue {
            element: format!("{}/SqlExpression", element.name),
            value: String::new(),
            reason: "a SQL filter or action needs a non-empty SqlExpression",
        })
}

pub(super) fn parameters(element: &Element) -> Result<Vec<(String, PropertyValue)>, AtomError> {
    match element.child("Parameters") {
        Some(parameters) => key_values(parameters),
        None => Ok(Vec::new()),
    }
}

pub(super) fn filter_from(element: &Element) -> Result<RuleFilter, AtomError> {
    let kind = match element.type_attribute() {
        Some(kind) => kind.to_string(),
        // Untyped: infer from the content.
        None if element.child("SqlExpression").is_some() => "SqlFilter".to_string(),
        None if element.children.is_empty() => "TrueFilter".to_string(),
        None => "CorrelationFilter".to_string(),
    };
    match kind.as_str() {
        "SqlFilter" => Ok(RuleFilter::Sql {
            expression: sql_expression(element)?,
            parameters: parameters(element)?,
        }),
        "TrueFilter" => Ok(RuleFilter::True),
        "FalseFilter" => Ok(RuleFilter::False),
        "CorrelationFilter" => {
            let text = |name: &str| element.child(name).and_then(|child| Field(child).text());
            Ok(RuleFilter::Correlation(CorrelationFilter {
                correlation_id: text("CorrelationId"),
                message_id: text("MessageId"),
                to: text("To"),
                reply_to: text("ReplyTo"),
                label: text("Label"),
                session_id: text("SessionId"),
                reply_to_session_id: text("ReplyToSessionId"),
                content_type: text("ContentType"),
                properties: match element.child("Properties") {
                    Some(properties) => key_values(properties)?,
                    None => Vec::new(),
                },
            }))
        }
        _ => Err(AtomError::InvalidValue {
            element: "Filter@type".to_string(),
            value: kind,
            reason: "expected SqlFilter, CorrelationFilter, TrueFilter or FalseFilter",
        }),
    }
}

pub(super) fn action_from(element: &Element) -> Result<RuleAction, AtomError> {
    let kind = match element.type_attribute() {
        Some(kind) => kind.to_string(),
        None if element.child("SqlExpression").is_some() => "SqlRuleAction".to_string(),
        None => "EmptyRuleAction".to_string(),
    };
    match kind.as_str() {
        "EmptyRuleAction" => Ok(RuleAction::None),
        "SqlRuleAction" => Ok(RuleAction::Sql {
            expression: sql_expression(element)?,
            parameters: parameters(element)?,
        }),
        _ => Err(AtomError::InvalidValue {
            element: "Action@type".to_string(),
            value: kind,
            reason: "expected EmptyRuleAction or SqlRuleAction",
        }),
    }
}

/// Reads `KeyValueOfstringanyType` children (any element with `Key` and `Value` children).
pub(super) fn key_values(element: &Element) -> Result<Vec<(String, PropertyValue)>, AtomError> {
    let mut pairs = Vec::new();
    for pair in &element.children {
        let (Some(key), Some(value)) = (pair.child("Key"), pair.child("Value")) else {
            continue;
        };
        let kind = value.type_attribute().unwrap_or("string");
        let invalid = |reason: &'static str| AtomError::InvalidValue {
            element: format!("Value ({kind}) of key '{}'", key.text),
            value: value.text.clone(),
            reason,
        };
        let text = value.text.trim();
        let typed = match kind {
            // Strings keep their whitespace.
            "string" | "anyURI" => PropertyValue::String(value.text.clone()),
            "guid" => PropertyValue::Guid(
                crate::config::parameters::parse_guid(text)
                    .ok_or_else(|| invalid("expected a GUID"))?,
            ),
            "int" | "short" | "byte" | "unsignedByte" | "unsignedShort" => PropertyValue::Int(
                text.parse()
                    .map_err(|_| invalid("expected a 32-bit integer"))?,
            ),
            "long" | "unsignedInt" => PropertyValue::Long(
                text.parse()
                    .map_err(|_| invalid("expected a 64-bit integer"))?,
            ),
            "double" | "float" | "decimal" => PropertyValue::Double(
                parse_double(text).ok_or_else(|| invalid("expected a number"))?,
            ),
            "boolean" => PropertyValue::Boolean(
                parse_boolean(text).ok_or_else(|| invalid("expected true or false"))?,
            ),
            "dateTime" => PropertyValue::DateTime(
                parse_timestamp(text)
                    .ok_or_else(|| invalid("expected an ISO 8601 date and time"))?,
            ),
            "duration" => PropertyValue::Duration(
                parse_duration(text).ok_or_else(|| invalid("expected an ISO 8601 duration"))?,
            ),
            _ => return Err(invalid("unsupported xsi:type for a property value")),
        };
        pairs.push((key.text.clone(), typed));
    }
    Ok(pairs)
}

/// `xs:double` text: decimal or exponent notation, `INF`, `-INF`, `NaN` (Python's `inf`/`nan`
/// too, which Rust's parser accepts).
pub(super) fn parse_double(text: &str) -> Option<f64> {
    match text {
        "INF" => Some(f64::INFINITY),
        "-INF" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok(),
    }
}

/// `xs:double` as .NET writes it: `INF`, `-INF`, `NaN`, otherwise the shortest round-trip form.
pub(super) fn format_double(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value == f64::INFINITY {
        "INF".to_string()
    } else if value == f64::NEG_INFINITY {
        "-INF".to_string()
    } else {
        value.to_string()
    }
}
