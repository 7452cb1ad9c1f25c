//! The view of a message that filters and rule actions read: [`FilterMessage`], implemented by
//! the broker's message type, and the [`SystemProperty`] catalogue behind `sys.` names.
//!
//! The names are those the Service Bus documentation lists for broker properties ("Messages,
//! payloads, and serialization"), matched case-insensitively, plus the newer SDK aliases
//! (`Subject` for `Label`, `EnqueuedTime` for `EnqueuedTimeUtc`, …).

use super::value::FilterValueRef;

/// Read access to one message's properties, implemented by the broker.
///
/// Returning `None` means "not set": a missing user property or an unset system property both
/// evaluate as SQL unknown (`NULL`). `Some(FilterValueRef::Null)` is a property that is present
/// with a null value: `EXISTS` is true for it and `IS NULL` is true as well.
pub trait FilterMessage {
    /// The value of a system property, or `None` when the message does not carry it.
    ///
    /// Expected types: text properties as [`FilterValueRef::String`] (pass the string form of
    /// an AMQP message-id or correlation-id of another type, as the .NET client exposes it: SQL
    /// comparisons are typed, so a UUID would not equal a string literal); times as
    /// [`FilterValueRef::Timestamp`]; `TimeToLive` as [`FilterValueRef::Duration`]; counters and
    /// sizes as [`FilterValueRef::Integer`]; `LockToken` as [`FilterValueRef::Uuid`];
    /// `ForcePersistence` as [`FilterValueRef::Bool`]; `State` as its name
    /// (`"Active"`, `"Deferred"`, `"Scheduled"`).
    fn system_property(&self, property: SystemProperty) -> Option<FilterValueRef<'_>>;

    /// The value of an application (user) property. Service Bus property names are
    /// case-insensitive: the lookup must match `name` that way (see [`property_names_equal`]).
    fn user_property(&self, name: &str) -> Option<FilterValueRef<'_>>;

    /// Steps one property lookup costs, charged to the evaluation's fuel: the number of
    /// properties a lookup may pass over (a message that keeps them in a list), at least 1.
    fn property_lookup_cost(&self) -> u64 {
        1
    }
}

impl<T: FilterMessage + ?Sized> FilterMessage for &T {
    fn system_property(&self, property: SystemProperty) -> Option<FilterValueRef<'_>> {
        (**self).system_property(property)
    }

    fn user_property(&self, name: &str) -> Option<FilterValueRef<'_>> {
        (**self).user_property(name)
    }

    fn property_lookup_cost(&self) -> u64 {
        (**self).property_lookup_cost()
    }
}

/// A broker property addressable as `sys.<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SystemProperty {
    /// `MessageId` (AMQP `message-id`).
    MessageId,
    /// `CorrelationId` (AMQP `correlation-id`).
    CorrelationId,
    /// `To` (AMQP `to`).
    To,
    /// `ReplyTo` (AMQP `reply-to`).
    ReplyTo,
    /// `Label`, called `Subject` by current SDKs (AMQP `subject`).
    Label,
    /// `SessionId` (AMQP `group-id`).
    SessionId,
    /// `ReplyToSessionId` (AMQP `reply-to-group-id`).
    ReplyToSessionId,
    /// `ContentType` (AMQP `content-type`).
    ContentType,
    /// `PartitionKey`.
    PartitionKey,
    /// `ViaPartitionKey`, called `TransactionPartitionKey` by current SDKs.
    ViaPartitionKey,
    /// `DeadLetterSource` (read-only).
    DeadLetterSource,
    /// `EnqueuedTimeUtc` (read-only).
    EnqueuedTimeUtc,
    /// `ScheduledEnqueueTimeUtc`.
    ScheduledEnqueueTimeUtc,
    /// `ExpiresAtUtc` (read-only; AMQP `absolute-expiry-time`).
    ExpiresAtUtc,
    /// `LockedUntilUtc` (read-only).
    LockedUntilUtc,
    /// `SequenceNumber` (read-only).
    SequenceNumber,
    /// `EnqueuedSequenceNumber` (read-only).
    EnqueuedSequenceNumber,
    /// `DeliveryCount` (read-only).
    DeliveryCount,
    /// `TimeToLive`.
    TimeToLive,
    /// `Size` in bytes (read-only).
    Size,
    /// `State` (read-only).
    State,
    /// `LockToken` (read-only).
    LockToken,
    /// `ForcePersistence`.
    ForcePersistence,
}

/// Every accepted `sys.` name, canonical names first; looked up case-insensitively.
const SYSTEM_PROPERTY_NAMES: &[(&str, SystemProperty)] = &[
    ("MessageId", SystemProperty::MessageId),
    ("CorrelationId", SystemProperty::CorrelationId),
    ("To", SystemProperty::To),
    ("ReplyTo", SystemProperty::ReplyTo),
    ("Label", SystemProperty::Label),
    ("SessionId", SystemProperty::SessionId),
    ("ReplyToSessionId", SystemProperty::ReplyToSessionId),
    ("ContentType", SystemProperty::ContentType),
    ("PartitionKey", SystemProperty::PartitionKey),
    ("ViaPartitionKey", SystemProperty::ViaPartitionKey),
    ("DeadLetterSource", SystemProperty::DeadLetterSource),
    ("EnqueuedTimeUtc", SystemProperty::EnqueuedTimeUtc),
    (
        "ScheduledEnqueueTimeUtc",
        SystemProperty::ScheduledEnqueueTimeUtc,
    ),
    ("ExpiresAtUtc", SystemProperty::ExpiresAtUtc),
    ("LockedUntilUtc", SystemProperty::LockedUntilUtc),
    ("SequenceNumber", SystemProperty::SequenceNumber),
    (
        "EnqueuedSequenceNumber",
        SystemProperty::EnqueuedSequenceNumber,
    ),
    ("DeliveryCount", SystemProperty::DeliveryCount),
    ("TimeToLive", SystemProperty::TimeToLive),
    ("Size", SystemProperty::Size),
    ("State", SystemProperty::State),
    ("LockToken", SystemProperty::LockToken),
    ("ForcePersistence", SystemProperty::ForcePersistence),
    ("Subject", SystemProperty::Label),
    ("TransactionPartitionKey", SystemProperty::ViaPartitionKey),
    ("EnqueuedTime", SystemProperty::EnqueuedTimeUtc),
    (
        "ScheduledEnqueueTime",
        SystemProperty::ScheduledEnqueueTimeUtc,
    ),
    ("ExpiresAt", SystemProperty::ExpiresAtUtc),
    ("LockedUntil", SystemProperty::LockedUntilUtc),
];

/// The kind of value a writable system property holds; `SET` converts to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemPropertyKind {
    /// A string.
    Text,
    /// A [`super::FilterValue::Timestamp`].
    Timestamp,
    /// A [`super::FilterValue::Duration`].
    Duration,
    /// A [`super::FilterValue::Bool`].
    Bool,
}

impl SystemProperty {
    /// Finds a system property by its name (without `sys.`), ignoring case.
    pub fn from_name(name: &str) -> Option<SystemProperty> {
        SYSTEM_PROPERTY_NAMES
            .iter()
            .find(|(candidate, _)| candidate.eq_ignore_ascii_case(name))
            .map(|(_, property)| *property)
    }

    /// The canonical (BrokeredMessage) name of this property.
    pub fn name(self) -> &'static str {
        SYSTEM_PROPERTY_NAMES
            .iter()
            .find(|(_, property)| *property == self)
            .map_or("", |(name, _)| name)
    }

    /// What a rule action may store in this property, or `None` when it is read-only.
    pub fn writable_kind(self) -> Option<SystemPropertyKind> {
        match self {
            SystemProperty::MessageId
            | SystemProperty::CorrelationId
            | SystemProperty::To
            | SystemProperty::ReplyTo
            | SystemProperty::Label
            | SystemProperty::SessionId
            | SystemProperty::ReplyToSessionId
            | SystemProperty::ContentType
            | SystemProperty::PartitionKey
            | SystemProperty::ViaPartitionKey => Some(SystemPropertyKind::Text),
            SystemProperty::ScheduledEnqueueTimeUtc => Some(SystemPropertyKind::Timestamp),
            SystemProperty::TimeToLive => Some(SystemPropertyKind::Duration),
            SystemProperty::ForcePersistence => Some(SystemPropertyKind::Bool),
            SystemProperty::DeadLetterSource
            | SystemProperty::EnqueuedTimeUtc
            | SystemProperty::ExpiresAtUtc
            | SystemProperty::LockedUntilUtc
            | SystemProperty::SequenceNumber
            | SystemProperty::EnqueuedSequenceNumber
            | SystemProperty::DeliveryCount
            | SystemProperty::Size
            | SystemProperty::State
            | SystemProperty::LockToken => None,
        }
    }
}

/// Compares two property names the way Service Bus does: case-insensitively
/// (like .NET `OrdinalIgnoreCase`), without allocating.
pub fn property_names_equal(left: &str, right: &str) -> bool {
    if left.is_ascii() && right.is_ascii() {
        return left.eq_ignore_ascii_case(right);
    }
    left.chars()
        .flat_map(char::to_uppercase)
        .eq(right.chars().flat_map(char::to_uppercase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_property_names_ignore_case_and_accept_aliases() {
        assert_eq!(
            SystemProperty::from_name("label"),
            Some(SystemProperty::Label)
        );
        assert_eq!(
            SystemProperty::from_name("SUBJECT"),
            Some(SystemProperty::Label)
        );
        assert_eq!(
            SystemProperty::from_name("enqueuedtime"),
            Some(SystemProperty::EnqueuedTimeUtc)
        );
        assert_eq!(SystemProperty::from_name("Colour"), None);
        assert_eq!(SystemProperty::Label.name(), "Label");
    }

    #[test]
    fn every_system_property_has_a_canonical_name() {
        for (_, property) in SYSTEM_PROPERTY_NAMES {
            assert_eq!(SystemProperty::from_name(property.name()), Some(*property));
        }
    }

    #[test]
    fn property_names_compare_without_case() {
        assert!(property_names_equal("Color", "cOLOR"));
        assert!(property_names_equal("Größe", "GRÖSSE"));
        assert!(property_names_equal("ÉTAT", "état"));
        assert!(!property_names_equal("color", "colour"));
    }
}
