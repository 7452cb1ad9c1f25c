//! Subscription rules: a filter and an optional SQL action, compiled once from the
//! configuration or an `add-rule` request, and the view of a [`Message`] that filters read.
//!
//! A SQL filter's or action's `@parameters` are substituted when the rule is compiled; the
//! rule keeps their typed values beside it, to show and store the rule as it was given.
//!
//! Fan-out semantics (Service Bus "Topic filters and actions"): all matching rules without
//! an action together produce one copy; every matching rule with an action produces its own
//! copy, with the action applied and the rule's name in the `RuleName` property.

use super::filter::{
    CorrelationFilter, Filter, FilterMessage, FilterSyntaxError, FilterValue, FilterValueRef,
    SqlFilter, SqlRuleAction, SystemProperty, property_names_equal,
};
use super::message::Message;
use super::types::PropertyValue;
use crate::config::parameters::TICKS_PER_MILLISECOND;
use crate::config::{
    CorrelationFilterConfig, FilterConfig, ParameterValue, PropertyLiteral, RuleConfig,
    SqlParameters,
};

/// Name of the rule every subscription starts with.
pub const DEFAULT_RULE_NAME: &str = "$Default";

/// A compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Unique within its subscription.
    pub name: String,
    /// Which messages it selects.
    pub filter: Filter,
    /// What it changes on the copy it produces.
    pub action: Option<SqlRuleAction>,
    /// The values the SQL filter's `@parameters` took, as given (empty for other filters).
    pub filter_parameters: SqlParameters,
    /// The values the action's `@parameters` took, as given (empty without an action).
    pub action_parameters: SqlParameters,
    /// When it was created (unix ms), reported by enumerate-rules.
    pub created_at: i64,
}

/// Why a rule could not be compiled.
#[derive(Debug, Clone, thiserror::Error)]
#[error("rule '{rule}': invalid {part}: {error}")]
pub struct RuleError {
    /// The rule's name.
    pub rule: String,
    /// `sql_filter` or `sql_action`.
    pub part: &'static str,
    /// The parser's message with the position.
    pub error: FilterSyntaxError,
}

pub use crate::config::MAX_RULES_PER_SUBSCRIPTION;

/// A rule as data, for the log: what `add-rule` or the configuration gave, from which
/// [`RuleDefinition::compile`] rebuilds the same [`Rule`].
#[derive(Debug, Clone, PartialEq)]
pub struct RuleDefinition {
    /// The rule's name.
    pub name: String,
    /// Its filter.
    pub filter: FilterDefinition,
    /// Its SQL action text, if any.
    pub action: Option<String>,
    /// Values of the SQL filter's `@parameters` (empty for other filters).
    pub filter_parameters: SqlParameters,
    /// Values of the action's `@parameters` (empty without an action).
    pub action_parameters: SqlParameters,
    /// When it was created (unix ms).
    pub created_at: i64,
}

/// A filter as data.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterDefinition {
    /// Matches everything.
    True,
    /// Matches nothing.
    False,
    /// A SQL expression.
    Sql(String),
    /// A correlation filter: the eight system fields (correlation id, message id, to,
    /// reply to, label, session id, reply-to session id, content type) and user properties.
    Correlation {
        /// The system fields, in that order.
        fields: [Option<String>; 8],
        /// The user properties.
        properties: Vec<(String, PropertyValue)>,
    },
}

impl RuleDefinition {
    /// The definition of a compiled rule.
    pub fn of(rule: &Rule) -> RuleDefinition {
        let filter = match &rule.filter {
            Filter::True => FilterDefinition::True,
            Filter::False => FilterDefinition::False,
            Filter::Sql(filter) => FilterDefinition::Sql(filter.expression().to_string()),
            Filter::Correlation(filter) => FilterDefinition::Correlation {
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
                    .map(|(name, value)| (name.clone(), property_value(value)))
                    .collect(),
            },
        };
        RuleDefinition {
            name: rule.name.clone(),
            filter,
            action: rule
                .action
                .as_ref()
                .map(|action| action.expression().to_string()),
            filter_parameters: rule.filter_parameters.clone(),
            action_parameters: rule.action_parameters.clone(),
            created_at: rule.created_at,
        }
    }

    /// Compiles the definition again.
    pub fn compile(&self) -> Result<Rule, RuleError> {
        let filter = match &self.filter {
            FilterDefinition::True => Filter::True,
            FilterDefinition::False => Filter::False,
            FilterDefinition::Sql(expression) => Filter::Sql(
                SqlFilter::parse_with_parameters(
                    expression,
                    &filter_values(&self.filter_parameters),
                )
                .map_err(|error| RuleError {
                    rule: self.name.clone(),
                    part: "sql_filter",
                    error,
                })?,
            ),
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
                Filter::Correlation(CorrelationFilter {
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
                        .map(|(name, value)| (name.clone(), owned_filter_value(value)))
                        .collect(),
                })
            }
        };
        let action = match &self.action {
            Some(expression) => Some(
                SqlRuleAction::parse_with_parameters(
                    expression,
                    &filter_values(&self.action_parameters),
                )
                .map_err(|error| RuleError {
                    rule: self.name.clone(),
                    part: "sql_action",
                    error,
                })?,
            ),
            None => None,
        };
        Ok(Rule {
            name: self.name.clone(),
            filter,
            action,
            filter_parameters: match self.filter {
                FilterDefinition::Sql(_) => self.filter_parameters.clone(),
                _ => Vec::new(),
            },
            action_parameters: match self.action {
                Some(_) => self.action_parameters.clone(),
                None => Vec::new(),
            },
            created_at: self.created_at,
        })
    }
}

/// A parameter's value as the SQL parser substitutes it: the filter value of its type
/// (instants and spans at the millisecond precision messages carry).
pub fn parameter_filter_value(value: &ParameterValue) -> FilterValue {
    match value {
        ParameterValue::String(text) => FilterValue::String(text.clone()),
        ParameterValue::Int(number) => FilterValue::Integer(i64::from(*number)),
        ParameterValue::Long(number) => FilterValue::Integer(*number),
        ParameterValue::Double(number) => FilterValue::Float(*number),
        ParameterValue::Bool(flag) => FilterValue::Bool(*flag),
        ParameterValue::DateTime(ticks) => {
            FilterValue::Timestamp(ticks.div_euclid(TICKS_PER_MILLISECOND))
        }
        ParameterValue::Duration(ticks) => {
            FilterValue::Duration(ticks.div_euclid(TICKS_PER_MILLISECOND))
        }
        ParameterValue::Guid(bytes) => FilterValue::Uuid(*bytes),
    }
}

/// A rule's parameters as the SQL parser takes them.
fn filter_values(parameters: &[(String, ParameterValue)]) -> Vec<(String, FilterValue)> {
    parameters
        .iter()
        .map(|(name, value)| (name.clone(), parameter_filter_value(value)))
        .collect()
}

/// A property value as a filter compares it (owned).
fn owned_filter_value(value: &PropertyValue) -> FilterValue {
    match value {
        PropertyValue::Null | PropertyValue::Binary(_) => FilterValue::Null,
        PropertyValue::Bool(flag) => FilterValue::Bool(*flag),
        PropertyValue::Long(number) => FilterValue::Integer(*number),
        PropertyValue::Double(number) => FilterValue::Float(*number),
        PropertyValue::String(text) => FilterValue::String(text.clone()),
        PropertyValue::Timestamp(millis) => FilterValue::Timestamp(*millis),
        PropertyValue::Uuid(bytes) => FilterValue::Uuid(*bytes),
    }
}

/// Compiles a configured rule. Its `sql_parameters` serve the SQL filter and the action
/// alike, so each part keeps (and shows) them all.
pub fn compile(config: &RuleConfig, created_at: i64) -> Result<Rule, RuleError> {
    let parameters = filter_values(&config.parameters);
    let filter = match &config.filter {
        FilterConfig::True => Filter::True,
        FilterConfig::Sql(expression) => Filter::Sql(
            SqlFilter::parse_with_parameters(expression, &parameters).map_err(|error| {
                RuleError {
                    rule: config.name.clone(),
                    part: "sql_filter",
                    error,
                }
            })?,
        ),
        FilterConfig::Correlation(correlation) => {
            Filter::Correlation(correlation_filter(correlation))
        }
    };
    let action = match &config.action {
        Some(expression) => Some(
            SqlRuleAction::parse_with_parameters(expression, &parameters).map_err(|error| {
                RuleError {
                    rule: config.name.clone(),
                    part: "sql_action",
                    error,
                }
            })?,
        ),
        None => None,
    };
    Ok(Rule {
        name: config.name.clone(),
        filter_parameters: match filter {
            Filter::Sql(_) => config.parameters.clone(),
            _ => Vec::new(),
        },
        action_parameters: match action {
            Some(_) => config.parameters.clone(),
            None => Vec::new(),
        },
        filter,
        action,
        created_at,
    })
}

fn correlation_filter(config: &CorrelationFilterConfig) -> CorrelationFilter {
    CorrelationFilter {
        correlation_id: config.correlation_id.clone(),
        message_id: config.message_id.clone(),
        to: config.to.clone(),
        reply_to: config.reply_to.clone(),
        label: config.subject.clone(),
        session_id: config.session_id.clone(),
        reply_to_session_id: config.reply_to_session_id.clone(),
        content_type: config.content_type.clone(),
        properties: config
            .properties
            .iter()
            .map(|(name, literal)| {
                let value = match literal {
                    PropertyLiteral::String(text) => FilterValue::String(text.clone()),
                    PropertyLiteral::Integer(number) => FilterValue::Integer(*number),
                    PropertyLiteral::Float(number) => FilterValue::Float(*number),
                    PropertyLiteral::Bool(flag) => FilterValue::Bool(*flag),
                };
                (name.clone(), value)
            })
            .collect(),
    }
}

/// Converts a broker property value to a filter value.
pub fn filter_value(value: &PropertyValue) -> FilterValueRef<'_> {
    match value {
        PropertyValue::Null | PropertyValue::Binary(_) => FilterValueRef::Null,
        PropertyValue::Bool(flag) => FilterValueRef::Bool(*flag),
        PropertyValue::Long(number) => FilterValueRef::Integer(*number),
        PropertyValue::Double(number) => FilterValueRef::Float(*number),
        PropertyValue::String(text) => FilterValueRef::String(text),
        PropertyValue::Timestamp(millis) => FilterValueRef::Timestamp(*millis),
        PropertyValue::Uuid(bytes) => FilterValueRef::Uuid(*bytes),
    }
}

/// Converts a filter value (an action's result) to a broker property value.
pub fn property_value(value: &FilterValue) -> PropertyValue {
    match value {
        FilterValue::Null => PropertyValue::Null,
        FilterValue::Bool(flag) => PropertyValue::Bool(*flag),
        FilterValue::Integer(number) => PropertyValue::Long(*number),
        FilterValue::Float(number) => PropertyValue::Double(*number),
        FilterValue::String(text) => PropertyValue::String(text.clone()),
        FilterValue::Timestamp(millis) => PropertyValue::Timestamp(*millis),
        FilterValue::Duration(millis) => PropertyValue::Long(*millis),
        FilterValue::Uuid(bytes) => PropertyValue::Uuid(*bytes),
    }
}

/// A message as a topic sees it while evaluating rules.
pub struct FilterView<'a> {
    /// The message.
    pub message: &'a Message,
    /// The topic's enqueued time for it (unix ms).
    pub enqueued_time: i64,
    /// Its system properties, read once per publish and only when a rule asks for one
    /// (issue 16: the default rule, `1=1`, asks for none, and reading them was 190
    /// instructions a message).
    pub system: std::cell::OnceCell<crate::broker::message::System<'a>>,
}

impl<'a> FilterView<'a> {
    /// A view of `message` enqueued at `enqueued_time` (unix ms).
    pub fn new(message: &'a Message, enqueued_time: i64) -> Self {
        FilterView {
            message,
            enqueued_time,
            system: std::cell::OnceCell::new(),
        }
    }

    /// The message's system properties.
    pub fn system(&self) -> &crate::broker::message::System<'a> {
        self.system.get_or_init(|| self.message.system())
    }
}

fn text(value: Option<&str>) -> Option<FilterValueRef<'_>> {
    value.map(FilterValueRef::String)
}

impl FilterMessage for FilterView<'_> {
    fn system_property(&self, property: SystemProperty) -> Option<FilterValueRef<'_>> {
        let system = self.system();
        match property {
            SystemProperty::MessageId => text(system.message_id()),
            SystemProperty::CorrelationId => text(system.correlation_id()),
            SystemProperty::To => text(system.to()),
            SystemProperty::ReplyTo => text(system.reply_to()),
            SystemProperty::Label => text(system.subject()),
            SystemProperty::SessionId => text(system.session_id()),
            SystemProperty::ReplyToSessionId => text(system.reply_to_session_id()),
            SystemProperty::ContentType => text(system.content_type()),
            SystemProperty::EnqueuedTimeUtc => Some(FilterValueRef::Timestamp(self.enqueued_time)),
            SystemProperty::ScheduledEnqueueTimeUtc => self
                .message
                .extras()
                .scheduled_enqueue_time
                .map(|at| FilterValueRef::Timestamp(at.0)),
            SystemProperty::TimeToLive => self
                .message
                .header()
                .time_to_live
                .map(|ttl| FilterValueRef::Duration(ttl.as_millis() as i64)),
            SystemProperty::Size => {
                Some(FilterValueRef::Integer(self.message.encoded_size() as i64))
            }
            SystemProperty::DeliveryCount => Some(FilterValueRef::Integer(0)),
            _ => None,
        }
    }

    fn user_property(&self, name: &str) -> Option<FilterValueRef<'_>> {
        self.message
            .extras()
            .user_properties
            .iter()
            .find(|(key, _)| property_names_equal(key, name))
            .map(|(_, value)| filter_value(value))
    }

    fn property_lookup_cost(&self) -> u64 {
        self.message.extras().user_properties.len() as u64 + 1
    }
}
