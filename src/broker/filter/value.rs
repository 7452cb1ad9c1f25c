//! Typed property values seen by filters and rule actions.
//!
//! [`FilterValue`] is the owned form (stored in correlation filters, produced by rule actions);
//! [`FilterValueRef`] is the borrowed form a message hands to the evaluator so that matching a
//! filter never copies a string. Both follow the type set of Service Bus properties: the .NET
//! `long`/`int` family collapses into [`FilterValue::Integer`], `float`/`double`/`decimal` into
//! [`FilterValue::Float`], `DateTime` into [`FilterValue::Timestamp`] and `TimeSpan` into
//! [`FilterValue::Duration`].
//!
//! This module owns no evaluation rules; it only describes values.

use std::fmt;

/// An owned property value.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterValue {
    /// SQL `NULL`: a property present with no value, or an unknown result.
    Null,
    /// A boolean (`System.Boolean`).
    Bool(bool),
    /// Any integral number, widened to 64 bits (`System.Int64`).
    Integer(i64),
    /// Any floating or decimal number (`System.Double`).
    Float(f64),
    /// A Unicode string, compared ordinally (case-sensitive).
    String(String),
    /// An instant, in milliseconds since the Unix epoch, UTC (`System.DateTime`).
    Timestamp(i64),
    /// A span of time in milliseconds (`System.TimeSpan`), e.g. `sys.TimeToLive`.
    Duration(i64),
    /// A UUID in RFC 4122 byte order (`System.Guid`).
    Uuid([u8; 16]),
}

/// A borrowed property value; what [`super::FilterMessage`] implementations return.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FilterValueRef<'a> {
    /// See [`FilterValue::Null`].
    Null,
    /// See [`FilterValue::Bool`].
    Bool(bool),
    /// See [`FilterValue::Integer`].
    Integer(i64),
    /// See [`FilterValue::Float`].
    Float(f64),
    /// See [`FilterValue::String`].
    String(&'a str),
    /// See [`FilterValue::Timestamp`].
    Timestamp(i64),
    /// See [`FilterValue::Duration`].
    Duration(i64),
    /// See [`FilterValue::Uuid`].
    Uuid([u8; 16]),
}

/// The type of a value, used in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// [`FilterValue::Null`].
    Null,
    /// [`FilterValue::Bool`].
    Bool,
    /// [`FilterValue::Integer`].
    Integer,
    /// [`FilterValue::Float`].
    Float,
    /// [`FilterValue::String`].
    String,
    /// [`FilterValue::Timestamp`].
    Timestamp,
    /// [`FilterValue::Duration`].
    Duration,
    /// [`FilterValue::Uuid`].
    Uuid,
}

impl fmt::Display for ValueType {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ValueType::Null => "null",
            ValueType::Bool => "boolean",
            ValueType::Integer => "integer",
            ValueType::Float => "float",
            ValueType::String => "string",
            ValueType::Timestamp => "timestamp",
            ValueType::Duration => "duration",
            ValueType::Uuid => "uuid",
        };
        formatter.write_str(name)
    }
}

impl FilterValue {
    /// Borrows this value.
    pub fn as_value_ref(&self) -> FilterValueRef<'_> {
        match self {
            FilterValue::Null => FilterValueRef::Null,
            FilterValue::Bool(value) => FilterValueRef::Bool(*value),
            FilterValue::Integer(value) => FilterValueRef::Integer(*value),
            FilterValue::Float(value) => FilterValueRef::Float(*value),
            FilterValue::String(value) => FilterValueRef::String(value),
            FilterValue::Timestamp(value) => FilterValueRef::Timestamp(*value),
            FilterValue::Duration(value) => FilterValueRef::Duration(*value),
            FilterValue::Uuid(value) => FilterValueRef::Uuid(*value),
        }
    }

    /// The type of this value.
    pub fn value_type(&self) -> ValueType {
        self.as_value_ref().value_type()
    }
}

impl FilterValueRef<'_> {
    /// Copies this value into an owned [`FilterValue`].
    pub fn to_owned_value(&self) -> FilterValue {
        match *self {
            FilterValueRef::Null => FilterValue::Null,
            FilterValueRef::Bool(value) => FilterValue::Bool(value),
            FilterValueRef::Integer(value) => FilterValue::Integer(value),
            FilterValueRef::Float(value) => FilterValue::Float(value),
            FilterValueRef::String(value) => FilterValue::String(value.to_owned()),
            FilterValueRef::Timestamp(value) => FilterValue::Timestamp(value),
            FilterValueRef::Duration(value) => FilterValue::Duration(value),
            FilterValueRef::Uuid(value) => FilterValue::Uuid(value),
        }
    }

    /// The type of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            FilterValueRef::Null => ValueType::Null,
            FilterValueRef::Bool(_) => ValueType::Bool,
            FilterValueRef::Integer(_) => ValueType::Integer,
            FilterValueRef::Float(_) => ValueType::Float,
            FilterValueRef::String(_) => ValueType::String,
            FilterValueRef::Timestamp(_) => ValueType::Timestamp,
            FilterValueRef::Duration(_) => ValueType::Duration,
            FilterValueRef::Uuid(_) => ValueType::Uuid,
        }
    }
}

impl From<&str> for FilterValue {
    fn from(value: &str) -> Self {
        FilterValue::String(value.to_owned())
    }
}

impl From<String> for FilterValue {
    fn from(value: String) -> Self {
        FilterValue::String(value)
    }
}

impl From<i64> for FilterValue {
    fn from(value: i64) -> Self {
        FilterValue::Integer(value)
    }
}

impl From<f64> for FilterValue {
    fn from(value: f64) -> Self {
        FilterValue::Float(value)
    }
}

impl From<bool> for FilterValue {
    fn from(value: bool) -> Self {
        FilterValue::Bool(value)
    }
}

/// Length of the canonical text form of a UUID (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
pub const UUID_TEXT_LENGTH: usize = 36;

/// Writes the canonical lowercase hyphenated form of `uuid` into `buffer` and returns it,
/// without allocating. This is the form `System.Guid.ToString()` produces.
pub fn format_uuid<'buffer>(
    uuid: &[u8; 16],
    buffer: &'buffer mut [u8; UUID_TEXT_LENGTH],
) -> &'buffer str {
    const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut position = 0;
    for (index, byte) in uuid.iter().enumerate() {
        if matches!(index, 4 | 6 | 8 | 10) {
            buffer[position] = b'-';
            position += 1;
        }
        buffer[position] = HEX_DIGITS[usize::from(byte >> 4)];
        buffer[position + 1] = HEX_DIGITS[usize::from(byte & 0x0f)];
        position += 2;
    }
    // Invariant: the buffer holds only ASCII hex digits and hyphens written above.
    std::str::from_utf8(buffer).unwrap_or_default()
}

/// Parses the canonical hyphenated form of a UUID (either case); `None` if malformed.
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let bytes = text.as_bytes();
    if bytes.len() != UUID_TEXT_LENGTH {
        return None;
    }
    let mut uuid = [0u8; 16];
    let mut nibbles = bytes
        .iter()
        .enumerate()
        .filter(|(index, _)| !matches!(index, 8 | 13 | 18 | 23));
    for byte in &mut uuid {
        let high = hex_value(*nibbles.next()?.1)?;
        let low = hex_value(*nibbles.next()?.1)?;
        *byte = (high << 4) | low;
    }
    let hyphens_in_place = [8, 13, 18, 23].iter().all(|&index| bytes[index] == b'-');
    hyphens_in_place.then_some(uuid)
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_round_trips_through_text() {
        let uuid = [
            0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17,
            0x40, 0x00,
        ];
        let mut buffer = [0u8; UUID_TEXT_LENGTH];
        let text = format_uuid(&uuid, &mut buffer);
        assert_eq!(text, "123e4567-e89b-12d3-a456-426614174000");
        assert_eq!(parse_uuid(text), Some(uuid));
        assert_eq!(
            parse_uuid("123E4567-E89B-12D3-A456-426614174000"),
            Some(uuid)
        );
        assert_eq!(parse_uuid("123e4567ze89b-12d3-a456-426614174000"), None);
        assert_eq!(parse_uuid("123e4567-e89b-12d3-a456-42661417400"), None);
    }
}
