//! The ATOM/XML codec of the Service Bus administration REST API: request bodies in, response
//! bodies out. Pure: no I/O, no clock reads, no knowledge of the broker.
//!
//! What it must match is what `azure-servicebus` 7.15 (Python) and `@azure/service-bus` 7.9.5
//! (JavaScript) send and parse:
//!
//! - **Requests** are `<entry><content type="application/xml"><QueueDescription …>` (or
//!   `TopicDescription`, `SubscriptionDescription`, `RuleDescription`). Python writes the ATOM
//!   part with an `ns0:` prefix and the description in the default namespace; JavaScript writes
//!   default namespaces everywhere and `p4:type` / `l28:` prefixes inside rules. The parser
//!   therefore matches **local names only**, accepts elements in any order and ignores elements
//!   it does not know (`AuthorizationRules`, `EntityAvailabilityStatus`, runtime counters echoed
//!   back by an update, …). A value it cannot read is an [`AtomError`] naming element and value.
//! - **Responses** are written in the shape the service returns: elements in the order of the
//!   REST reference (the Python model's `MODEL_CLASS_ATTRIBUTES`), every element the JavaScript
//!   deserializer insists on (`getString`/`getBoolean`/`getInteger` throw when one is missing),
//!   the description namespace as default namespace with `i` bound to XML Schema instance
//!   (JavaScript reads the rule-property type from the literal attribute `i:type` and strips
//!   exactly five characters, `d6p1:`, from its value), and an entry `id` whose URL path is the
//!   entity path (JavaScript takes the entity names from it).
//!
//! Durations are ISO 8601 / `xs:duration` text (`PT1M`, `P14D`, `PT0.5S`). The value Service Bus
//! uses for "unlimited", `TimeSpan.MaxValue` = `P10675199DT2H48M5.4775807S`, is represented as
//! `None` in the fields where Service Bus means "unlimited" (`DefaultMessageTimeToLive`,
//! `AutoDeleteOnIdle`); since "unlimited" is also the default of those fields, `None` there means
//! "absent or unlimited", which is the same thing. Timestamps are written with seven fractional
//! digits and `Z`, as the service does.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quick_xml::Reader;
use quick_xml::Writer;
use quick_xml::XmlVersion;
use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};

/// The ATOM namespace of `entry`, `feed`, `content`, `title`, `link`.
pub const ATOM_NAMESPACE: &str = "http://www.w3.org/2005/Atom";
/// The namespace of the Service Bus descriptions (`QueueDescription`, `Filter`, …).
pub const SERVICE_BUS_NAMESPACE: &str =
    "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";
/// The namespace of the `CountDetails` children (`ActiveMessageCount`, …), prefixed `d2p1`.
pub const COUNT_DETAILS_NAMESPACE: &str =
    "http://schemas.microsoft.com/netservices/2011/06/servicebus";
/// XML Schema instance, bound to `i` in responses (`i:type="SqlFilter"`).
pub const XML_SCHEMA_INSTANCE_NAMESPACE: &str = "http://www.w3.org/2001/XMLSchema-instance";
/// XML Schema, bound to `d6p1` on typed rule-property values (`i:type="d6p1:string"`).
pub const XML_SCHEMA_NAMESPACE: &str = "http://www.w3.org/2001/XMLSchema";
/// `TimeSpan.MaxValue` as Service Bus writes it: the wire form of "unlimited".
pub const UNLIMITED_DURATION: &str = "P10675199DT2H48M5.4775807S";

/// Durations of at least this many days are "unlimited" (`TimeSpan.MaxValue` is 10675199 days
/// and a little more; Python echoes it back rounded down to microseconds).
const UNLIMITED_DAYS: u64 = 10_675_199;
/// Deepest element nesting accepted in a request body; real bodies nest six deep.
const MAX_DEPTH: usize = 32;
/// Seconds per day.
const SECONDS_PER_DAY: u64 = 86_400;

/// Why a request body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AtomError {
    /// The body is not well-formed XML (or nests too deep).
    #[error("the body is not well-formed XML: {0}")]
    Malformed(String),
    /// The body holds no description inside `<entry><content>`.
    #[error("the body holds no {expected} inside <entry><content>")]
    MissingDescription {
        /// The description element that was expected, e.g. `QueueDescription`.
        expected: &'static str,
    },
    /// The body describes another kind of entity than the one addressed.
    #[error("expected a {expected} but the body holds a {found}")]
    WrongDescription {
        /// The description element that was expected.
        expected: &'static str,
        /// The description element found instead.
        found: String,
    },
    /// An element holds a value that cannot be read.
    #[error("element <{element}> has the invalid value '{value}': {reason}")]
    InvalidValue {
        /// The local name of the element (or `element@attribute`).
        element: String,
        /// The offending text, as received.
        value: String,
        /// What was expected instead.
        reason: &'static str,
    },
}

/// The kind of entity a PUT body describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `QueueDescription`.
    Queue,
    /// `TopicDescription`.
    Topic,
    /// `SubscriptionDescription`.
    Subscription,
    /// `RuleDescription`.
    Rule,
}

impl Kind {
    /// The local name of the description element of this kind.
    pub fn element_name(self) -> &'static str {
        match self {
            Kind::Queue => "QueueDescription",
            Kind::Topic => "TopicDescription",
            Kind::Subscription => "SubscriptionDescription",
            Kind::Rule => "RuleDescription",
        }
    }

    fn from_element_name(name: &str) -> Option<Kind> {
        match name {
            "QueueDescription" => Some(Kind::Queue),
            "TopicDescription" => Some(Kind::Topic),
            "SubscriptionDescription" => Some(Kind::Subscription),
            "RuleDescription" => Some(Kind::Rule),
            _ => None,
        }
    }
}

/// `EntityStatus`: whether an entity accepts sends and receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntityStatus {
    /// Sends and receives allowed (the default).
    Active,
    /// Neither sends nor receives.
    Disabled,
    /// Receives only.
    SendDisabled,
    /// Sends only.
    ReceiveDisabled,
}

impl EntityStatus {
    /// The wire spelling (`Active`, `Disabled`, `SendDisabled`, `ReceiveDisabled`).
    pub fn as_str(self) -> &'static str {
        match self {
            EntityStatus::Active => "Active",
            EntityStatus::Disabled => "Disabled",
            EntityStatus::SendDisabled => "SendDisabled",
            EntityStatus::ReceiveDisabled => "ReceiveDisabled",
        }
    }

    fn parse(text: &str) -> Option<EntityStatus> {
        [
            EntityStatus::Active,
            EntityStatus::Disabled,
            EntityStatus::SendDisabled,
            EntityStatus::ReceiveDisabled,
        ]
        .into_iter()
        .find(|status| status.as_str().eq_ignore_ascii_case(text))
    }
}

/// A queue's settable properties, as a PUT body carries them. `None` = the element was absent
/// (the service default applies); see [`QueueDescription::with_defaults`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueDescription {
    /// `LockDuration`: how long a peek-lock lasts.
    pub lock_duration: Option<Duration>,
    /// `MaxSizeInMegabytes`.
    pub max_size_in_megabytes: Option<u64>,
    /// `RequiresDuplicateDetection`.
    pub requires_duplicate_detection: Option<bool>,
    /// `RequiresSession`.
    pub requires_session: Option<bool>,
    /// `DefaultMessageTimeToLive`; `None` = absent or unlimited (the default).
    pub default_message_time_to_live: Option<Duration>,
    /// `DeadLetteringOnMessageExpiration`.
    pub dead_lettering_on_message_expiration: Option<bool>,
    /// `DuplicateDetectionHistoryTimeWindow`.
    pub duplicate_detection_history_time_window: Option<Duration>,
    /// `MaxDeliveryCount`.
    pub max_delivery_count: Option<u32>,
    /// `EnableBatchedOperations`.
    pub enable_batched_operations: Option<bool>,
    /// `Status`.
    pub status: Option<EntityStatus>,
    /// `ForwardTo`, as sent: Python sends a full `sb://host/entity` address, JS the bare name.
    /// An empty element reads as `None`.
    pub forward_to: Option<String>,
    /// `UserMetadata`; an empty element reads as `None`.
    pub user_metadata: Option<String>,
    /// `AutoDeleteOnIdle`; `None` = absent or unlimited (the default).
    pub auto_delete_on_idle: Option<Duration>,
    /// `EnablePartitioning`.
    pub enable_partitioning: Option<bool>,
    /// `ForwardDeadLetteredMessagesTo`, as sent (see `forward_to`).
    pub forward_dead_lettered_messages_to: Option<String>,
    /// `EnableExpress`.
    pub enable_express: Option<bool>,
    /// `MaxMessageSizeInKilobytes` (api-version 2021-05; premium only on the real service).
    pub max_message_size_in_kilobytes: Option<u64>,
}

/// A topic's settable properties, as a PUT body carries them. `None` = absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicDescription {
    /// `DefaultMessageTimeToLive`; `None` = absent or unlimited (the default).
    pub default_message_time_to_live: Option<Duration>,
    /// `MaxSizeInMegabytes`.
    pub max_size_in_megabytes: Option<u64>,
    /// `RequiresDuplicateDetection`.
    pub requires_duplicate_detection: Option<bool>,
    /// `DuplicateDetectionHistoryTimeWindow`.
    pub duplicate_detection_history_time_window: Option<Duration>,
    /// `EnableBatchedOperations`.
    pub enable_batched_operations: Option<bool>,
    /// `Status`.
    pub status: Option<EntityStatus>,
    /// `UserMetadata`; an empty element reads as `None`.
    pub user_metadata: Option<String>,
    /// `SupportOrdering`.
    pub support_ordering: Option<bool>,
    /// `AutoDeleteOnIdle`; `None` = absent or unlimited (the default).
    pub auto_delete_on_idle: Option<Duration>,
    /// `EnablePartitioning`.
    pub enable_partitioning: Option<bool>,
    /// `EnableExpress`.
    pub enable_express: Option<bool>,
    /// `MaxMessageSizeInKilobytes`.
    pub max_message_size_in_kilobytes: Option<u64>,
}

/// A subscription's settable properties, as a PUT body carries them. `None` = absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubscriptionDescription {
    /// `LockDuration`.
    pub lock_duration: Option<Duration>,
    /// `RequiresSession`.
    pub requires_session: Option<bool>,
    /// `DefaultMessageTimeToLive`; `None` = absent or unlimited (the default).
    pub default_message_time_to_live: Option<Duration>,
    /// `DeadLetteringOnMessageExpiration`.
    pub dead_lettering_on_message_expiration: Option<bool>,
    /// `DeadLetteringOnFilterEvaluationExceptions`.
    pub dead_lettering_on_filter_evaluation_exceptions: Option<bool>,
    /// `DefaultRuleDescription`: the `$Default` rule to create with the subscription (JS
    /// `defaultRuleOptions`); `None` = the usual true filter.
    pub default_rule: Option<RuleDescription>,
    /// `MaxDeliveryCount`.
    pub max_delivery_count: Option<u32>,
    /// `EnableBatchedOperations`.
    pub enable_batched_operations: Option<bool>,
    /// `Status`.
    pub status: Option<EntityStatus>,
    /// `ForwardTo`, as sent (full `sb://` address from Python, bare name from JS).
    pub forward_to: Option<String>,
    /// `UserMetadata`; an empty element reads as `None`.
    pub user_metadata: Option<String>,
    /// `ForwardDeadLetteredMessagesTo`, as sent.
    pub forward_dead_lettered_messages_to: Option<String>,
    /// `AutoDeleteOnIdle`; `None` = absent or unlimited (the default).
    pub auto_delete_on_idle: Option<Duration>,
}

/// A rule: filter, action and (optionally) its name as the body spells it.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleDescription {
    /// `Name`; the URL names the rule too, and wins.
    pub name: Option<String>,
    /// `Filter`; an absent filter reads as [`RuleFilter::True`], the service default.
    pub filter: RuleFilter,
    /// `Action`; absent or `EmptyRuleAction` reads as [`RuleAction::None`].
    pub action: RuleAction,
}

impl Default for RuleDescription {
    fn default() -> Self {
        RuleDescription {
            name: None,
            filter: RuleFilter::True,
            action: RuleAction::None,
        }
    }
}

/// A rule's filter (`Filter i:type=…`).
#[derive(Debug, Clone, PartialEq)]
pub enum RuleFilter {
    /// `SqlFilter`: a SQL-92 subset expression, with optional `@parameter` values.
    Sql {
        /// `SqlExpression`.
        expression: String,
        /// `Parameters`: values for `@name` placeholders (rarely used; empty when absent).
        parameters: Vec<(String, PropertyValue)>,
    },
    /// `CorrelationFilter`: equality on system and application properties.
    Correlation(CorrelationFilter),
    /// `TrueFilter` (written as SQL `1=1`).
    True,
    /// `FalseFilter` (written as SQL `1=0`).
    False,
}

/// The fields of a correlation filter; every one present must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CorrelationFilter {
    /// `CorrelationId`.
    pub correlation_id: Option<String>,
    /// `MessageId`.
    pub message_id: Option<String>,
    /// `To`.
    pub to: Option<String>,
    /// `ReplyTo`.
    pub reply_to: Option<String>,
    /// `Label` (the SDKs' `subject`).
    pub label: Option<String>,
    /// `SessionId`.
    pub session_id: Option<String>,
    /// `ReplyToSessionId`.
    pub reply_to_session_id: Option<String>,
    /// `ContentType`.
    pub content_type: Option<String>,
    /// `Properties`: application properties, in body order.
    pub properties: Vec<(String, PropertyValue)>,
}

/// A rule's action (`Action i:type=…`).
#[derive(Debug, Clone, PartialEq)]
pub enum RuleAction {
    /// `EmptyRuleAction`, or no `Action` element.
    None,
    /// `SqlRuleAction`.
    Sql {
        /// `SqlExpression`, e.g. `SET sys.label = 'x'`.
        expression: String,
        /// `Parameters` (empty when absent).
        parameters: Vec<(String, PropertyValue)>,
    },
}

/// A typed value of a correlation-filter property or a SQL parameter, as
/// `<Value i:type="d6p1:…">` carries it.
///
/// Python writes `string`, `int` (≤ 2^31−1), `long`, `double`, `boolean`, `dateTime` and
/// `duration`; JavaScript writes `string`, `double` (every number), `boolean` and `dateTime`.
/// JavaScript reads back only `int`, `double`, `string`, `boolean` and `dateTime` and throws on
/// anything else, so a `long` or `duration` created from Python breaks JS `getRule`, as against
/// the real service.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    /// `xs:string`.
    String(String),
    /// `xs:int` (also accepted: `short`, `byte`, `unsignedByte`, `unsignedShort`).
    Int(i32),
    /// `xs:long` (also accepted: `unsignedInt`).
    Long(i64),
    /// `xs:double` (also accepted: `float`, `decimal`).
    Double(f64),
    /// `xs:boolean`.
    Boolean(bool),
    /// `xs:dateTime`, normalised to UTC.
    DateTime(SystemTime),
    /// `xs:duration`.
    Duration(Duration),
}

impl PropertyValue {
    /// The `xs:` type name written after `d6p1:`.
    pub fn type_name(&self) -> &'static str {
        match self {
            PropertyValue::String(_) => "string",
            PropertyValue::Int(_) => "int",
            PropertyValue::Long(_) => "long",
            PropertyValue::Double(_) => "double",
            PropertyValue::Boolean(_) => "boolean",
            PropertyValue::DateTime(_) => "dateTime",
            PropertyValue::Duration(_) => "duration",
        }
    }

    /// The value as element text.
    pub fn to_text(&self) -> String {
        match self {
            PropertyValue::String(text) => text.clone(),
            PropertyValue::Int(value) => value.to_string(),
            PropertyValue::Long(value) => value.to_string(),
            PropertyValue::Double(value) => format_double(*value),
            PropertyValue::Boolean(value) => value.to_string(),
            PropertyValue::DateTime(time) => format_timestamp(*time),
            PropertyValue::Duration(duration) => format_duration(*duration),
        }
    }
}

/// The five message counters of `CountDetails`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageCounts {
    /// `ActiveMessageCount`: available to receive now.
    pub active: u64,
    /// `DeadLetterMessageCount`.
    pub dead_letter: u64,
    /// `ScheduledMessageCount`: scheduled, not yet active.
    pub scheduled: u64,
    /// `TransferMessageCount`: waiting to be forwarded.
    pub transfer: u64,
    /// `TransferDeadLetterMessageCount`: forwarding failed.
    pub transfer_dead_letter: u64,
}

impl MessageCounts {
    /// `MessageCount`: the total over the five counters (saturating).
    pub fn total(&self) -> u64 {
        self.active
            .saturating_add(self.dead_letter)
            .saturating_add(self.scheduled)
            .saturating_add(self.transfer)
            .saturating_add(self.transfer_dead_letter)
    }
}

/// The runtime facts rendered into a queue entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRuntime {
    /// `SizeInBytes`.
    pub size_in_bytes: u64,
    /// `CountDetails`; `MessageCount` is their total.
    pub counts: MessageCounts,
    /// `CreatedAt` (and the entry's `published`).
    pub created_at: SystemTime,
    /// `UpdatedAt` (and the entry's `updated`).
    pub updated_at: SystemTime,
    /// `AccessedAt`.
    pub accessed_at: SystemTime,
}

/// The runtime facts rendered into a topic entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRuntime {
    /// `SizeInBytes`.
    pub size_in_bytes: u64,
    /// `SubscriptionCount`.
    pub subscription_count: u64,
    /// `CountDetails` (the SDKs read only `ScheduledMessageCount` of a topic).
    pub counts: MessageCounts,
    /// `CreatedAt`.
    pub created_at: SystemTime,
    /// `UpdatedAt`.
    pub updated_at: SystemTime,
    /// `AccessedAt`.
    pub accessed_at: SystemTime,
}

/// The runtime facts rendered into a subscription entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRuntime {
    /// `CountDetails`; `MessageCount` is their total.
    pub counts: MessageCounts,
    /// `CreatedAt`.
    pub created_at: SystemTime,
    /// `UpdatedAt`.
    pub updated_at: SystemTime,
    /// `AccessedAt`.
    pub accessed_at: SystemTime,
}

/// What `GET /$namespaceinfo` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// `Name`: the namespace name (first label of the host).
    pub name: String,
    /// `Alias` (geo-DR alias); usually `None`.
    pub alias: Option<String>,
    /// `CreatedTime`.
    pub created_at: SystemTime,
    /// `ModifiedTime`.
    pub modified_at: SystemTime,
    /// `MessagingUnits` (the SDKs read it only for Premium); `None` omits the element.
    pub messaging_units: Option<u32>,
}

// ---------------------------------------------------------------------------------------------
// Service defaults
// ---------------------------------------------------------------------------------------------

/// Service default lock duration: one minute.
pub const DEFAULT_LOCK_DURATION: Duration = Duration::from_secs(60);
/// Service default duplicate-detection window: ten minutes.
pub const DEFAULT_DUPLICATE_DETECTION_WINDOW: Duration = Duration::from_secs(600);
/// Service default maximum size in megabytes.
pub const DEFAULT_MAX_SIZE_IN_MEGABYTES: u64 = 1024;
/// Service default maximum delivery count.
pub const DEFAULT_MAX_DELIVERY_COUNT: u32 = 10;
/// Service default maximum message size (Standard tier) in kilobytes.
pub const DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES: u64 = 256;

impl QueueDescription {
    /// The same description with every absent setting replaced by the Service Bus default
    /// (durations whose default is unlimited stay `None`; texts stay `None`).
    pub fn with_defaults(&self) -> QueueDescription {
        QueueDescription {
            lock_duration: Some(self.lock_duration.unwrap_or(DEFAULT_LOCK_DURATION)),
            max_size_in_megabytes: Some(
                self.max_size_in_megabytes
                    .unwrap_or(DEFAULT_MAX_SIZE_IN_MEGABYTES),
            ),
            requires_duplicate_detection: Some(self.requires_duplicate_detection.unwrap_or(false)),
            requires_session: Some(self.requires_session.unwrap_or(false)),
            default_message_time_to_live: self.default_message_time_to_live,
            dead_lettering_on_message_expiration: Some(
                self.dead_lettering_on_message_expiration.unwrap_or(false),
            ),
            duplicate_detection_history_time_window: Some(
                self.duplicate_detection_history_time_window
                    .unwrap_or(DEFAULT_DUPLICATE_DETECTION_WINDOW),
            ),
            max_delivery_count: Some(
                self.max_delivery_count
                    .unwrap_or(DEFAULT_MAX_DELIVERY_COUNT),
            ),
            enable_batched_operations: Some(self.enable_batched_operations.unwrap_or(true)),
            status: Some(self.status.unwrap_or(EntityStatus::Active)),
            forward_to: self.forward_to.clone(),
            user_metadata: self.user_metadata.clone(),
            auto_delete_on_idle: self.auto_delete_on_idle,
            enable_partitioning: Some(self.enable_partitioning.unwrap_or(false)),
            forward_dead_lettered_messages_to: self.forward_dead_lettered_messages_to.clone(),
            enable_express: Some(self.enable_express.unwrap_or(false)),
            max_message_size_in_kilobytes: Some(
                self.max_message_size_in_kilobytes
                    .unwrap_or(DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES),
            ),
        }
    }
}

impl TopicDescription {
    /// The same description with every absent setting replaced by the Service Bus default.
    pub fn with_defaults(&self) -> TopicDescription {
        TopicDescription {
            default_message_time_to_live: self.default_message_time_to_live,
            max_size_in_megabytes: Some(
                self.max_size_in_megabytes
                    .unwrap_or(DEFAULT_MAX_SIZE_IN_MEGABYTES),
            ),
            requires_duplicate_detection: Some(self.requires_duplicate_detection.unwrap_or(false)),
            duplicate_detection_history_time_window: Some(
                self.duplicate_detection_history_time_window
                    .unwrap_or(DEFAULT_DUPLICATE_DETECTION_WINDOW),
            ),
            enable_batched_operations: Some(self.enable_batched_operations.unwrap_or(true)),
            status: Some(self.status.unwrap_or(EntityStatus::Active)),
            user_metadata: self.user_metadata.clone(),
            support_ordering: Some(self.support_ordering.unwrap_or(true)),
            auto_delete_on_idle: self.auto_delete_on_idle,
            enable_partitioning: Some(self.enable_partitioning.unwrap_or(false)),
            enable_express: Some(self.enable_express.unwrap_or(false)),
            max_message_size_in_kilobytes: Some(
                self.max_message_size_in_kilobytes
                    .unwrap_or(DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES),
            ),
        }
    }
}

impl SubscriptionDescription {
    /// The same description with every absent setting replaced by the Service Bus default
    /// (`DeadLetteringOnFilterEvaluationExceptions` defaults to `true`).
    pub fn with_defaults(&self) -> SubscriptionDescription {
        SubscriptionDescription {
            lock_duration: Some(self.lock_duration.unwrap_or(DEFAULT_LOCK_DURATION)),
            requires_session: Some(self.requires_session.unwrap_or(false)),
            default_message_time_to_live: self.default_message_time_to_live,
            dead_lettering_on_message_expiration: Some(
                self.dead_lettering_on_message_expiration.unwrap_or(false),
            ),
            dead_lettering_on_filter_evaluation_exceptions: Some(
                self.dead_lettering_on_filter_evaluation_exceptions
                    .unwrap_or(true),
            ),
            default_rule: self.default_rule.clone(),
            max_delivery_count: Some(
                self.max_delivery_count
                    .unwrap_or(DEFAULT_MAX_DELIVERY_COUNT),
            ),
            enable_batched_operations: Some(self.enable_batched_operations.unwrap_or(true)),
            status: Some(self.status.unwrap_or(EntityStatus::Active)),
            forward_to: self.forward_to.clone(),
            user_metadata: self.user_metadata.clone(),
            forward_dead_lettered_messages_to: self.forward_dead_lettered_messages_to.clone(),
            auto_delete_on_idle: self.auto_delete_on_idle,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

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
struct Element {
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

fn malformed(reader: &Reader<&[u8]>, message: impl std::fmt::Display) -> AtomError {
    AtomError::Malformed(format!(
        "{message} (near byte {})",
        reader.buffer_position()
    ))
}

/// Reads the whole body into an [`Element`] tree. Entity references other than the five
/// predefined ones and character references are refused (no DTD expansion).
fn parse_tree(body: &str) -> Result<Element, AtomError> {
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

fn attach(stack: &mut [Element], root: &mut Option<Element>, element: Element) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(element),
        None => *root = Some(element),
    }
}

fn element_from(start: &BytesStart<'_>, reader: &Reader<&[u8]>) -> Result<Element, AtomError> {
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
fn content_description(tree: &Element) -> Option<&Element> {
    if Kind::from_element_name(&tree.name).is_some() {
        return Some(tree);
    }
    if tree.name != "entry" {
        return None;
    }
    tree.child("content")?.children.first()
}

fn description(tree: &Element, kind: Kind) -> Result<&Element, AtomError> {
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
struct Field<'a>(&'a Element);

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

fn parse_boolean(text: &str) -> Option<bool> {
    match text {
        "1" => Some(true),
        "0" => Some(false),
        _ if text.eq_ignore_ascii_case("true") => Some(true),
        _ if text.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

/// Reads a `RuleDescription` or `DefaultRuleDescription` element.
fn rule_from(element: &Element) -> Result<RuleDescription, AtomError> {
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

fn sql_expression(element: &Element) -> Result<String, AtomError> {
    element
        .child("SqlExpression")
        .and_then(|expression| Field(expression).text())
        .ok_or_else(|| AtomError::InvalidValue {
            element: format!("{}/SqlExpression", element.name),
            value: String::new(),
            reason: "a SQL filter or action needs a non-empty SqlExpression",
        })
}

fn parameters(element: &Element) -> Result<Vec<(String, PropertyValue)>, AtomError> {
    match element.child("Parameters") {
        Some(parameters) => key_values(parameters),
        None => Ok(Vec::new()),
    }
}

fn filter_from(element: &Element) -> Result<RuleFilter, AtomError> {
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

fn action_from(element: &Element) -> Result<RuleAction, AtomError> {
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
fn key_values(element: &Element) -> Result<Vec<(String, PropertyValue)>, AtomError> {
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
            "string" | "anyURI" | "guid" => PropertyValue::String(value.text.clone()),
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
fn parse_double(text: &str) -> Option<f64> {
    match text {
        "INF" => Some(f64::INFINITY),
        "-INF" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok(),
    }
}

/// `xs:double` as .NET writes it: `INF`, `-INF`, `NaN`, otherwise the shortest round-trip form.
fn format_double(value: f64) -> String {
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

// ---------------------------------------------------------------------------------------------
// Durations and timestamps
// ---------------------------------------------------------------------------------------------

/// Whether a duration means "unlimited" (at least `TimeSpan.MaxValue`'s whole days).
pub fn is_unlimited(duration: Duration) -> bool {
    duration.as_secs() >= UNLIMITED_DAYS * SECONDS_PER_DAY
}

/// Parses a non-negative ISO 8601 / `xs:duration` (`PT1M`, `P14D`, `P1DT2H`, `PT0.5S`,
/// `P10675199DT2H48M5.4775807S`) or a .NET `TimeSpan` text (`00:01:00`, `1.02:03:04.5`).
/// Years count 365 days, months 30, weeks 7 (as .NET's `XmlConvert` does). Fractions are kept to
/// the nanosecond. `None` on anything else, negative durations included.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    match text.strip_prefix('P') {
        Some(rest) => parse_iso_duration(rest),
        None => parse_timespan(text),
    }
}

fn parse_iso_duration(rest: &str) -> Option<Duration> {
    let (date_part, time_part) = match rest.split_once('T') {
        Some((date, time)) => {
            if time.is_empty() {
                return None;
            }
            (date, Some(time))
        }
        None => (rest, None),
    };
    if date_part.is_empty() && time_part.is_none() {
        return None;
    }
    let mut total = Duration::ZERO;
    let mut add = |number: &str, unit_seconds: u64, fraction_allowed: bool| -> Option<()> {
        let part = number_times(number, unit_seconds, fraction_allowed)?;
        total = total.checked_add(part)?;
        Some(())
    };
    let mut number_start = 0;
    let mut last_unit_rank = 0;
    for (index, character) in date_part.char_indices() {
        if character.is_ascii_digit() {
            continue;
        }
        let (rank, seconds) = match character {
            'Y' => (1, 365 * SECONDS_PER_DAY),
            'M' => (2, 30 * SECONDS_PER_DAY),
            'W' => (3, 7 * SECONDS_PER_DAY),
            'D' => (4, SECONDS_PER_DAY),
            _ => return None,
        };
        if rank <= last_unit_rank {
            return None;
        }
        last_unit_rank = rank;
        add(&date_part[number_start..index], seconds, false)?;
        number_start = index + character.len_utf8();
    }
    if number_start != date_part.len() {
        return None;
    }
    if let Some(time) = time_part {
        let mut number_start = 0;
        let mut last_unit_rank = 0;
        for (index, character) in time.char_indices() {
            if character.is_ascii_digit() || character == '.' || character == ',' {
                continue;
            }
            let (rank, seconds, fraction_allowed) = match character {
                'H' => (1, 3600, false),
                'M' => (2, 60, false),
                'S' => (3, 1, true),
                _ => return None,
            };
            if rank <= last_unit_rank {
                return None;
            }
            last_unit_rank = rank;
            add(&time[number_start..index], seconds, fraction_allowed)?;
            number_start = index + character.len_utf8();
        }
        if number_start != time.len() {
            return None;
        }
    }
    Some(total)
}

/// `number × unit_seconds`, where `number` is digits with an optional fraction (seconds only).
fn number_times(number: &str, unit_seconds: u64, fraction_allowed: bool) -> Option<Duration> {
    let (whole, fraction) = match number.split_once(['.', ',']) {
        Some((whole, fraction)) if fraction_allowed => (whole, Some(fraction)),
        Some(_) => return None,
        None => (number, None),
    };
    if whole.is_empty() && fraction.is_none_or(str::is_empty) {
        return None;
    }
    let whole_value: u64 = if whole.is_empty() {
        0
    } else {
        if !whole.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        whole.parse().ok()?
    };
    let seconds = whole_value.checked_mul(unit_seconds)?;
    let nanoseconds = match fraction {
        Some(fraction) => parse_fraction_nanoseconds(fraction)?,
        None => 0,
    };
    Some(Duration::new(seconds, nanoseconds))
}

/// Digits after the decimal point as nanoseconds (extra digits truncated).
fn parse_fraction_nanoseconds(fraction: &str) -> Option<u32> {
    if fraction.is_empty() || !fraction.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let mut nanoseconds: u32 = 0;
    for position in 0..9 {
        let digit = fraction
            .as_bytes()
            .get(position)
            .map_or(0, |byte| byte - b'0');
        nanoseconds = nanoseconds * 10 + u32::from(digit);
    }
    Some(nanoseconds)
}

/// `[d.]hh:mm:ss[.fffffff]`, the .NET `TimeSpan` text some users pass through the JS SDK.
fn parse_timespan(text: &str) -> Option<Duration> {
    let mut parts = text.split(':');
    let (first, minutes, seconds) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (days, hours) = match first.split_once('.') {
        Some((days, hours)) => (days, hours),
        None => ("0", first),
    };
    let digits = |text: &str| -> Option<u64> {
        if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    };
    let (days, hours, minutes) = (digits(days)?, digits(hours)?, digits(minutes)?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    let (whole_seconds, nanoseconds) = match seconds.split_once('.') {
        Some((whole, fraction)) => (digits(whole)?, parse_fraction_nanoseconds(fraction)?),
        None => (digits(seconds)?, 0),
    };
    if whole_seconds > 59 {
        return None;
    }
    let total = days
        .checked_mul(SECONDS_PER_DAY)?
        .checked_add(hours * 3600 + minutes * 60 + whole_seconds)?;
    Some(Duration::new(total, nanoseconds))
}

/// Writes a duration as .NET does: `P{d}DT{h}H{m}M{s}[.fffffff]S` with zero parts left out,
/// `PT0S` for zero, sub-100-ns precision dropped (`PT1M`, `P14D`, `PT0.5S`).
pub fn format_duration(duration: Duration) -> String {
    let total_seconds = duration.as_secs();
    let ticks = duration.subsec_nanos() / 100;
    let days = total_seconds / SECONDS_PER_DAY;
    let hours = (total_seconds % SECONDS_PER_DAY) / 3600;
    let minutes = (total_seconds % 3600) / 60;
    let seconds = total_seconds % 60;
    let mut text = String::from("P");
    if days > 0 {
        text.push_str(&format!("{days}D"));
    }
    if hours == 0 && minutes == 0 && seconds == 0 && ticks == 0 {
        if days == 0 {
            text.push_str("T0S");
        }
        return text;
    }
    text.push('T');
    if hours > 0 {
        text.push_str(&format!("{hours}H"));
    }
    if minutes > 0 {
        text.push_str(&format!("{minutes}M"));
    }
    if seconds > 0 || ticks > 0 {
        text.push_str(&seconds.to_string());
        if ticks > 0 {
            let fraction = format!("{ticks:07}");
            text.push('.');
            text.push_str(fraction.trim_end_matches('0'));
        }
        text.push('S');
    }
    text
}

/// Writes a duration where `None` means unlimited ([`UNLIMITED_DURATION`]).
pub fn format_duration_or_unlimited(duration: Option<Duration>) -> String {
    match duration {
        Some(duration) if !is_unlimited(duration) => format_duration(duration),
        _ => UNLIMITED_DURATION.to_string(),
    }
}

/// Writes a UTC timestamp as the service does: `2026-11-24T10:00:00.1234567Z` (always seven
/// fractional digits). Times outside years 1–9999 are clamped to that range.
pub fn format_timestamp(time: SystemTime) -> String {
    let (seconds, nanoseconds): (i64, u32) = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => (
            i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            after.subsec_nanos(),
        ),
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            if before.subsec_nanos() == 0 {
                (whole.saturating_neg(), 0)
            } else {
                (
                    whole.saturating_neg().saturating_sub(1),
                    1_000_000_000 - before.subsec_nanos(),
                )
            }
        }
    };
    // 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z relative to the Unix epoch.
    const MINIMUM: i64 = -62_135_596_800;
    const MAXIMUM: i64 = 253_402_300_799;
    let (seconds, nanoseconds) = if seconds < MINIMUM {
        (MINIMUM, 0)
    } else if seconds > MAXIMUM {
        (MAXIMUM, 999_999_999)
    } else {
        (seconds, nanoseconds)
    };
    let days = seconds.div_euclid(SECONDS_PER_DAY as i64);
    let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY as i64);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:07}Z",
        second_of_day / 3600,
        (second_of_day % 3600) / 60,
        second_of_day % 60,
        nanoseconds / 100
    )
}

/// Parses an `xs:dateTime` (`2020-01-02T03:04:05[.fff…][Z|±hh:mm]`; no zone = UTC, as Python's
/// naive `isoformat()` comes out) into a UTC `SystemTime`.
pub fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut date_parts = date.splitn(3, '-');
    let year: i64 = fixed_digits(date_parts.next()?, 4)?;
    let month: i64 = fixed_digits(date_parts.next()?, 2)?;
    let day: i64 = fixed_digits(date_parts.next()?, 2)?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // Split off the zone designator.
    let (clock, offset_seconds) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else if let Some(position) = time.rfind(['+', '-']) {
        let (clock, zone) = time.split_at(position);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (hours, minutes) = zone.get(1..)?.split_once(':')?;
        let hours: i64 = fixed_digits(hours, 2)?;
        let minutes: i64 = fixed_digits(minutes, 2)?;
        if hours > 14 || minutes > 59 {
            return None;
        }
        (clock, sign * (hours * 3600 + minutes * 60))
    } else {
        (time, 0)
    };
    let mut clock_parts = clock.splitn(3, ':');
    let hour: i64 = fixed_digits(clock_parts.next()?, 2)?;
    let minute: i64 = fixed_digits(clock_parts.next()?, 2)?;
    let second_text = clock_parts.next()?;
    let (whole_second, nanoseconds) = match second_text.split_once('.') {
        Some((whole, fraction)) => (
            fixed_digits::<i64>(whole, 2)?,
            parse_fraction_nanoseconds(fraction)?,
        ),
        None => (fixed_digits::<i64>(second_text, 2)?, 0),
    };
    if hour > 24 || minute > 59 || whole_second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds =
        days * SECONDS_PER_DAY as i64 + hour * 3600 + minute * 60 + whole_second - offset_seconds;
    let nanoseconds = Duration::from_nanos(u64::from(nanoseconds));
    if seconds >= 0 {
        Some(UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs()) + nanoseconds)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(seconds.unsigned_abs()))
            .map(|time| time + nanoseconds)
    }
}

fn fixed_digits<T: std::str::FromStr>(text: &str, length: usize) -> Option<T> {
    if text.len() != length || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn is_leap_year(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let shifted_month = (month + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// A small wrapper over `quick_xml::Writer` writing into memory.
struct XmlOut {
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

fn boolean_text(value: Option<bool>) -> &'static str {
    if value.unwrap_or(false) {
        "true"
    } else {
        "false"
    }
}

/// The namespace name for a base URL (`https://host:port`): see [`namespace_name_of_host`].
fn namespace_name(base_url: &str) -> String {
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
fn entry(
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

const DESCRIPTION_ATTRIBUTES: [(&str, &str); 2] = [
    ("xmlns", SERVICE_BUS_NAMESPACE),
    ("xmlns:i", XML_SCHEMA_INSTANCE_NAMESPACE),
];

fn count_details(out: &mut XmlOut, counts: &MessageCounts) {
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

fn duration_text(duration: Option<Duration>, default: Duration) -> String {
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

fn key_values_out(out: &mut XmlOut, element: &str, pairs: &[(String, PropertyValue)]) {
    if pairs.is_empty() {
        out.empty(element, &[]);
        return;
    }
    out.start(element, &[]);
    for (key, value) in pairs {
        out.start("KeyValueOfstringanyType", &[]);
        out.leaf("Key", key);
        let type_name = format!("d6p1:{}", value.type_name());
        out.leaf_with(
            "Value",
            &[("xmlns:d6p1", XML_SCHEMA_NAMESPACE), ("i:type", &type_name)],
            &value.to_text(),
        );
        out.end("KeyValueOfstringanyType");
    }
    out.end(element);
}

fn sql_filter_out(
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

fn rule_body(out: &mut XmlOut, rule: &RuleDescription, name: &str, created_at: SystemTime) {
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

#[cfg(test)]
#[path = "atom_tests.rs"]
mod tests;
