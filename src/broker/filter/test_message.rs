//! A [`FilterMessage`] for tests: a map of system properties and a list of user properties,
//! plus the standard message the table-driven tests run against.

use std::collections::HashMap;

use super::message::{FilterMessage, SystemProperty, property_names_equal};
use super::value::{FilterValue, FilterValueRef};

/// Enqueued time of [`TestMessage::standard`]: 2023-11-14T22:13:20Z.
pub(super) const ENQUEUED_TIME: i64 = 1_700_000_000_000;
/// The `uuid_value` user property of [`TestMessage::standard`].
pub(super) const UUID_VALUE: [u8; 16] = [
    0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00,
];

/// An in-memory message.
#[derive(Debug, Clone, Default)]
pub(super) struct TestMessage {
    /// Set system properties.
    pub(super) system: HashMap<SystemProperty, FilterValue>,
    /// User properties in insertion order; looked up ignoring case.
    pub(super) user: Vec<(String, FilterValue)>,
}

impl TestMessage {
    /// A message carrying every value type the grammar can meet.
    pub(super) fn standard() -> TestMessage {
        let system = [
            (SystemProperty::MessageId, FilterValue::from("message-1")),
            (SystemProperty::CorrelationId, FilterValue::from("order-42")),
            (SystemProperty::To, FilterValue::from("store-5")),
            (SystemProperty::ReplyTo, FilterValue::from("replies")),
            (
                SystemProperty::Label,
                FilterValue::from("service bus rocks"),
            ),
            (SystemProperty::SessionId, FilterValue::from("session-a")),
            (
                SystemProperty::ContentType,
                FilterValue::from("application/json"),
            ),
            (
                SystemProperty::EnqueuedTimeUtc,
                FilterValue::Timestamp(ENQUEUED_TIME),
            ),
            (SystemProperty::SequenceNumber, FilterValue::Integer(17)),
            (SystemProperty::DeliveryCount, FilterValue::Integer(2)),
            (SystemProperty::TimeToLive, FilterValue::Duration(60_000)),
            (SystemProperty::Size, FilterValue::Integer(512)),
        ];
        let user = [
            ("color", FilterValue::from("red")),
            ("Quantity", FilterValue::Integer(10)),
            ("price", FilterValue::Float(2.5)),
            ("priority", FilterValue::from("high")),
            ("flag", FilterValue::Bool(true)),
            ("nothing", FilterValue::Null),
            ("created", FilterValue::Timestamp(ENQUEUED_TIME - 1_000_000)),
            ("duration", FilterValue::Duration(30_000)),
            ("Property With Space", FilterValue::from("spaced")),
            ("Contoso & Northwind", FilterValue::from("quoted")),
            ("HR-EmployeeID", FilterValue::Integer(7)),
            ("and", FilterValue::from("keyword")),
            ("pattern", FilterValue::from("%bus%")),
            ("escape", FilterValue::from("\\")),
            ("name", FilterValue::from("O'Brien")),
            ("percent", FilterValue::from("50%")),
            ("under", FilterValue::from("a_b")),
            ("zero", FilterValue::Integer(0)),
            ("big", FilterValue::Integer(i64::MAX)),
            ("negative", FilterValue::Integer(-5)),
            ("text_number", FilterValue::from("10")),
            ("uuid_value", FilterValue::Uuid(UUID_VALUE)),
            ("Größe", FilterValue::Integer(3)),
        ];
        TestMessage {
            system: system.into_iter().collect(),
            user: user
                .into_iter()
                .map(|(name, value)| (name.to_owned(), value))
                .collect(),
        }
    }

    /// Sets (or replaces) a user property.
    pub(super) fn with_user(mut self, name: &str, value: FilterValue) -> TestMessage {
        self.user
            .retain(|(existing, _)| !property_names_equal(existing, name));
        self.user.push((name.to_owned(), value));
        self
    }
}

impl FilterMessage for TestMessage {
    fn system_property(&self, property: SystemProperty) -> Option<FilterValueRef<'_>> {
        self.system.get(&property).map(FilterValue::as_value_ref)
    }

    fn user_property(&self, name: &str) -> Option<FilterValueRef<'_>> {
        self.user
            .iter()
            .find(|(candidate, _)| property_names_equal(candidate, name))
            .map(|(_, value)| value.as_value_ref())
    }
}
