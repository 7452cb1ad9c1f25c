//! Validated entity settings: queues, topics, subscriptions and their rules.
//!
//! These are plain data. A value built by [`crate::config::Config::from_toml_str`] has passed
//! every check in `validate.rs`; one built by hand should be checked with
//! [`crate::config::Config::validate`]. The `new` constructors are the single source of the
//! documented defaults.

use std::time::Duration;

use super::names::DEFAULT_RULE_NAME;

/// Default peek-lock duration of queues and subscriptions (Service Bus: 60 seconds).
pub const DEFAULT_LOCK_DURATION: Duration = Duration::from_secs(60);
/// Default number of deliveries before a message is dead-lettered.
pub const DEFAULT_MAX_DELIVERY_COUNT: u32 = 10;
/// Default window in which duplicate message ids are detected (10 minutes).
pub const DEFAULT_DUPLICATE_DETECTION_WINDOW: Duration = Duration::from_secs(600);
/// Default entity size limit in megabytes.
pub const DEFAULT_MAX_SIZE_IN_MEGABYTES: u64 = 1024;
/// Default per-message size limit in kilobytes (the Standard tier's 256 KB).
pub const DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES: u64 = 256;
/// Largest per-message size limit accepted, in kilobytes (the Premium tier's 100 MB).
pub const MAX_MESSAGE_SIZE_LIMIT_IN_KILOBYTES: u64 = 102_400;

/// Whether an entity takes sends and gives out messages (Service Bus `EntityStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntityStatus {
    /// Sends and receives (the default).
    #[default]
    Active,
    /// Neither sends nor receives.
    Disabled,
    /// Receives only.
    SendDisabled,
    /// Sends only.
    ReceiveDisabled,
}

impl EntityStatus {
    /// Every status, in the order of the documentation.
    pub const ALL: [EntityStatus; 4] = [
        EntityStatus::Active,
        EntityStatus::Disabled,
        EntityStatus::SendDisabled,
        EntityStatus::ReceiveDisabled,
    ];

    /// The Service Bus spelling (`Active`, `Disabled`, `SendDisabled`, `ReceiveDisabled`).
    pub fn as_str(self) -> &'static str {
        match self {
            EntityStatus::Active => "Active",
            EntityStatus::Disabled => "Disabled",
            EntityStatus::SendDisabled => "SendDisabled",
            EntityStatus::ReceiveDisabled => "ReceiveDisabled",
        }
    }

    /// Reads a status, any case.
    pub fn parse(text: &str) -> Option<EntityStatus> {
        EntityStatus::ALL
            .into_iter()
            .find(|status| status.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// Whether sends are accepted.
    pub fn allows_send(self) -> bool {
        matches!(self, EntityStatus::Active | EntityStatus::ReceiveDisabled)
    }

    /// Whether messages are given out.
    pub fn allows_receive(self) -> bool {
        matches!(self, EntityStatus::Active | EntityStatus::SendDisabled)
    }
}

/// A queue and its behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    /// Queue name, unique case-insensitively across queues and topics.
    pub name: String,
    /// How long a peek-lock holds a message before it is released for redelivery.
    pub lock_duration: Duration,
    /// Deliveries after which a message is dead-lettered (`MaxDeliveryCountExceeded`).
    pub max_delivery_count: u32,
    /// Time to live for messages that set none; `None` means unlimited.
    pub default_message_time_to_live: Option<Duration>,
    /// Whether expired messages go to the dead-letter queue instead of being dropped.
    pub dead_lettering_on_message_expiration: bool,
    /// Whether receivers must accept a session (messages need a session id).
    pub requires_session: bool,
    /// Whether repeated message ids within the window are dropped.
    pub requires_duplicate_detection: bool,
    /// How long message ids are remembered for duplicate detection.
    pub duplicate_detection_history_time_window: Duration,
    /// Idle time after which the queue deletes itself; `None` means never.
    pub auto_delete_on_idle: Option<Duration>,
    /// Queue or topic every accepted message is forwarded to.
    pub forward_to: Option<String>,
    /// Queue or topic dead-lettered messages are forwarded to.
    pub forward_dead_lettered_messages_to: Option<String>,
    /// Total size limit of the queue's messages, in megabytes.
    pub max_size_in_megabytes: u64,
    /// Size limit of a single message, in kilobytes.
    pub max_message_size_in_kilobytes: u64,
    /// Whether the queue takes sends and gives out messages.
    pub status: EntityStatus,
    /// Whether messages are spread over 16 partitions (sequence numbers carry the
    /// partition in their top 16 bits; order holds per partition). Fixed at creation.
    pub enable_partitioning: bool,
    /// Free text kept for the application (the admin API's `UserMetadata`).
    pub user_metadata: Option<String>,
}

impl QueueConfig {
    /// A queue with every setting at its default.
    pub fn new(name: impl Into<String>) -> QueueConfig {
        QueueConfig {
            name: name.into(),
            lock_duration: DEFAULT_LOCK_DURATION,
            max_delivery_count: DEFAULT_MAX_DELIVERY_COUNT,
            default_message_time_to_live: None,
            dead_lettering_on_message_expiration: false,
            requires_session: false,
            requires_duplicate_detection: false,
            duplicate_detection_history_time_window: DEFAULT_DUPLICATE_DETECTION_WINDOW,
            auto_delete_on_idle: None,
            forward_to: None,
            forward_dead_lettered_messages_to: None,
            max_size_in_megabytes: DEFAULT_MAX_SIZE_IN_MEGABYTES,
            max_message_size_in_kilobytes: DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES,
            status: EntityStatus::Active,
            enable_partitioning: false,
            user_metadata: None,
        }
    }
}

/// A topic: messages sent to it are copied to each subscription whose rules match.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    /// Topic name, unique case-insensitively across queues and topics.
    pub name: String,
    /// Time to live for messages that set none; `None` means unlimited.
    pub default_message_time_to_live: Option<Duration>,
    /// Whether repeated message ids within the window are dropped.
    pub requires_duplicate_detection: bool,
    /// How long message ids are remembered for duplicate detection.
    pub duplicate_detection_history_time_window: Duration,
    /// Idle time after which the topic deletes itself; `None` means never.
    pub auto_delete_on_idle: Option<Duration>,
    /// Total size limit of the topic's messages, in megabytes.
    pub max_size_in_megabytes: u64,
    /// Size limit of a single message, in kilobytes.
    pub max_message_size_in_kilobytes: u64,
    /// The topic's subscriptions, unique case-insensitively within the topic.
    pub subscriptions: Vec<SubscriptionConfig>,
    /// Whether the topic takes sends (`ReceiveDisabled` and `Active` do).
    pub status: EntityStatus,
    /// Whether messages are spread over 16 partitions (its subscriptions are partitioned
    /// alike). Fixed at creation.
    pub enable_partitioning: bool,
    /// Free text kept for the application (the admin API's `UserMetadata`).
    pub user_metadata: Option<String>,
}

impl TopicConfig {
    /// A topic with every setting at its default and no subscriptions.
    pub fn new(name: impl Into<String>) -> TopicConfig {
        TopicConfig {
            name: name.into(),
            default_message_time_to_live: None,
            requires_duplicate_detection: false,
            duplicate_detection_history_time_window: DEFAULT_DUPLICATE_DETECTION_WINDOW,
            auto_delete_on_idle: None,
            max_size_in_megabytes: DEFAULT_MAX_SIZE_IN_MEGABYTES,
            max_message_size_in_kilobytes: DEFAULT_MAX_MESSAGE_SIZE_IN_KILOBYTES,
            subscriptions: Vec::new(),
            status: EntityStatus::Active,
            enable_partitioning: false,
            user_metadata: None,
        }
    }
}

/// A topic subscription: a queue-like view fed by the topic through its rules.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionConfig {
    /// Subscription name, unique case-insensitively within its topic.
    pub name: String,
    /// How long a peek-lock holds a message before it is released for redelivery.
    pub lock_duration: Duration,
    /// Deliveries after which a message is dead-lettered (`MaxDeliveryCountExceeded`).
    pub max_delivery_count: u32,
    /// Time to live for messages that set none; `None` means unlimited.
    pub default_message_time_to_live: Option<Duration>,
    /// Whether expired messages go to the dead-letter queue instead of being dropped.
    pub dead_lettering_on_message_expiration: bool,
    /// Whether a message whose filter fails to evaluate is dead-lettered (Service Bus
    /// default: true) rather than skipped.
    pub dead_lettering_on_filter_evaluation_exceptions: bool,
    /// Whether receivers must accept a session (messages need a session id).
    pub requires_session: bool,
    /// Queue or topic every accepted message is forwarded to.
    pub forward_to: Option<String>,
    /// Queue or topic dead-lettered messages are forwarded to.
    pub forward_dead_lettered_messages_to: Option<String>,
    /// Idle time after which the subscription deletes itself; `None` means never.
    pub auto_delete_on_idle: Option<Duration>,
    /// Rules deciding which topic messages this subscription receives (any match copies the
    /// message once); never empty after loading, unique case-insensitively.
    pub rules: Vec<RuleConfig>,
    /// Whether the subscription gives out messages (`SendDisabled` and `Active` do).
    pub status: EntityStatus,
    /// Free text kept for the application (the admin API's `UserMetadata`).
    pub user_metadata: Option<String>,
}

impl SubscriptionConfig {
    /// A subscription with every setting at its default and the `$Default` true rule.
    pub fn new(name: impl Into<String>) -> SubscriptionConfig {
        SubscriptionConfig {
            name: name.into(),
            lock_duration: DEFAULT_LOCK_DURATION,
            max_delivery_count: DEFAULT_MAX_DELIVERY_COUNT,
            default_message_time_to_live: None,
            dead_lettering_on_message_expiration: false,
            dead_lettering_on_filter_evaluation_exceptions: true,
            requires_session: false,
            forward_to: None,
            forward_dead_lettered_messages_to: None,
            auto_delete_on_idle: None,
            rules: vec![RuleConfig::default_rule()],
            status: EntityStatus::Active,
            user_metadata: None,
        }
    }
}

/// A subscription rule: a filter and an optional action applied to matching messages.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleConfig {
    /// Rule name, unique case-insensitively within its subscription.
    pub name: String,
    /// Which messages the rule matches.
    pub filter: FilterConfig,
    /// SQL action text (e.g. `SET sys.Label = 'big'`), validated by the SQL module.
    pub action: Option<String>,
    /// Values of the `@parameters` the SQL filter and action use (`sql_parameters`; Service
    /// Bus's `Parameters`), typed; empty when there are none.
    pub parameters: super::SqlParameters,
}

impl RuleConfig {
    /// The `$Default` rule: matches every message, no action.
    pub fn default_rule() -> RuleConfig {
        RuleConfig {
            name: DEFAULT_RULE_NAME.to_string(),
            filter: FilterConfig::True,
            action: None,
            parameters: Vec::new(),
        }
    }
}

/// A rule's filter.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterConfig {
    /// Matches every message (the `$Default` rule's filter).
    True,
    /// SQL filter text, kept verbatim; parsed and validated by the SQL module.
    Sql(String),
    /// Matches on system properties and application properties by equality.
    Correlation(CorrelationFilterConfig),
}

/// A correlation filter: every field that is set must equal the message's value.
/// At least one field (or property) is set.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CorrelationFilterConfig {
    /// Expected `correlation-id`.
    pub correlation_id: Option<String>,
    /// Expected `message-id`.
    pub message_id: Option<String>,
    /// Expected `to` address.
    pub to: Option<String>,
    /// Expected `reply-to` address.
    pub reply_to: Option<String>,
    /// Expected `subject` (the .NET SDK's `Label`).
    pub subject: Option<String>,
    /// Expected `group-id` (session id).
    pub session_id: Option<String>,
    /// Expected `reply-to-group-id`.
    pub reply_to_session_id: Option<String>,
    /// Expected `content-type`.
    pub content_type: Option<String>,
    /// Expected application properties, in the order written in the file.
    pub properties: Vec<(String, PropertyLiteral)>,
}

impl CorrelationFilterConfig {
    /// Whether no field and no property is set (such a filter is rejected).
    pub fn is_empty(&self) -> bool {
        let fields = [
            &self.correlation_id,
            &self.message_id,
            &self.to,
            &self.reply_to,
            &self.subject,
            &self.session_id,
            &self.reply_to_session_id,
            &self.content_type,
        ];
        fields.iter().all(|field| field.is_none()) && self.properties.is_empty()
    }
}

/// A typed application-property value in a correlation filter, as written in TOML.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyLiteral {
    /// A TOML string.
    String(String),
    /// A TOML integer.
    Integer(i64),
    /// A TOML float.
    Float(f64),
    /// A TOML boolean.
    Bool(bool),
}
