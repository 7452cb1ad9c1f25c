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

use std::time::{Duration, SystemTime};

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
/// The namespace of the types XML Schema lacks, as .NET's DataContractSerializer writes them
/// (`guid`).
pub const SERIALIZATION_NAMESPACE: &str = "http://schemas.microsoft.com/2003/10/Serialization/";
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
/// the real service. .NET writes a `Guid` as `guid` in the serialization namespace (Python reads
/// it back as its text).
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
    /// `guid` (.NET's serialization namespace), in RFC 4122 (text) byte order.
    Guid([u8; 16]),
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
            PropertyValue::Guid(_) => "guid",
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
            PropertyValue::Guid(bytes) => crate::config::parameters::guid_text(bytes),
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
    /// `SqlFilterCount` (api-version 2024-05): SQL, true and false filters of all its
    /// subscriptions.
    pub sql_filter_count: u64,
    /// `CorrelationFilterCount` (api-version 2024-05).
    pub correlation_filter_count: u64,
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

mod parse;
mod render;
mod time;

pub use parse::*;
pub use render::*;
pub use time::*;

#[cfg(test)]
#[path = "atom_tests.rs"]
mod tests;
