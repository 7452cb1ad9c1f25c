//! [`CorrelationFilter`]: equality matching on a fixed set of system properties and any number
//! of user properties, combined with AND.
//!
//! System properties compare as strings, case-sensitively. User properties compare by value:
//! same type and equal, except that integers and floats compare numerically; a string `"2"`
//! does not match the integer `2`. Matching never fails.

use std::io::Write;

use super::message::{FilterMessage, SystemProperty};
use super::value::{FilterValue, FilterValueRef, UUID_TEXT_LENGTH, format_uuid};

/// A correlation filter; `None` fields are not checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CorrelationFilter {
    /// Required `sys.CorrelationId`.
    pub correlation_id: Option<String>,
    /// Required `sys.MessageId`.
    pub message_id: Option<String>,
    /// Required `sys.To`.
    pub to: Option<String>,
    /// Required `sys.ReplyTo`.
    pub reply_to: Option<String>,
    /// Required `sys.Label` (`Subject`).
    pub label: Option<String>,
    /// Required `sys.SessionId`.
    pub session_id: Option<String>,
    /// Required `sys.ReplyToSessionId`.
    pub reply_to_session_id: Option<String>,
    /// Required `sys.ContentType`.
    pub content_type: Option<String>,
    /// Required user properties, by name (looked up case-insensitively by the message).
    pub properties: Vec<(String, FilterValue)>,
}

impl CorrelationFilter {
    /// Whether the filter checks nothing (and so matches every message).
    pub fn is_empty(&self) -> bool {
        self.system_conditions()
            .all(|(_, expected)| expected.is_none())
            && self.properties.is_empty()
    }

    /// Property lookups a match may make at most (every user property it names, plus the
    /// system properties): what its evaluation is charged.
    pub fn lookups(&self) -> u64 {
        self.properties.len() as u64 + 1
    }

    /// Whether every set field matches `message`.
    pub fn matches<M: FilterMessage + ?Sized>(&self, message: &M) -> bool {
        let system_match = self.system_conditions().all(|(property, expected)| {
            let Some(expected) = expected else {
                return true;
            };
            message
                .system_property(property)
                .is_some_and(|value| text_equals(value, expected))
        });
        system_match
            && self.properties.iter().all(|(name, expected)| {
                message
                    .user_property(name)
                    .is_some_and(|value| values_equal(value, expected.as_value_ref()))
            })
    }

    fn system_conditions(&self) -> impl Iterator<Item = (SystemProperty, Option<&str>)> {
        [
            (SystemProperty::CorrelationId, &self.correlation_id),
            (SystemProperty::MessageId, &self.message_id),
            (SystemProperty::To, &self.to),
            (SystemProperty::ReplyTo, &self.reply_to),
            (SystemProperty::Label, &self.label),
            (SystemProperty::SessionId, &self.session_id),
            (SystemProperty::ReplyToSessionId, &self.reply_to_session_id),
            (SystemProperty::ContentType, &self.content_type),
        ]
        .into_iter()
        .map(|(property, expected)| (property, expected.as_deref()))
    }
}

/// Compares a system property's text form with `expected`, without allocating.
fn text_equals(value: FilterValueRef<'_>, expected: &str) -> bool {
    match value {
        FilterValueRef::String(text) => text == expected,
        FilterValueRef::Uuid(uuid) => {
            let mut buffer = [0u8; UUID_TEXT_LENGTH];
            format_uuid(&uuid, &mut buffer) == expected
        }
        FilterValueRef::Integer(number) => {
            let mut buffer = [0u8; 20];
            let capacity = buffer.len();
            let mut cursor = &mut buffer[..];
            if write!(cursor, "{number}").is_err() {
                return false;
            }
            let written = capacity - cursor.len();
            buffer.get(..written) == Some(expected.as_bytes())
        }
        _ => false,
    }
}

/// Value equality for user properties: numeric across integer / float, otherwise same type.
fn values_equal(value: FilterValueRef<'_>, expected: FilterValueRef<'_>) -> bool {
    match (value, expected) {
        // Precision loss above 2^53 matches C#'s implicit long → double conversion.
        (FilterValueRef::Integer(left), FilterValueRef::Float(right)) => left as f64 == right,
        (FilterValueRef::Float(left), FilterValueRef::Integer(right)) => left == right as f64,
        (left, right) => left == right,
    }
}
