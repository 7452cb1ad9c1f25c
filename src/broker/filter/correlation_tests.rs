//! Tests of correlation filters: system properties as case-sensitive strings, user properties
//! by value, AND across all set fields.

use super::test_message::TestMessage;
use super::{CorrelationFilter, Filter, FilterValue, SystemProperty};

fn filter() -> CorrelationFilter {
    CorrelationFilter::default()
}

#[test]
fn empty_filter_matches_everything() {
    assert!(filter().is_empty());
    assert!(filter().matches(&TestMessage::standard()));
}

#[test]
fn each_system_field_must_equal_the_message() {
    let message = TestMessage::standard();
    let cases = [
        (
            CorrelationFilter {
                correlation_id: Some("order-42".into()),
                ..filter()
            },
            true,
        ),
        (
            CorrelationFilter {
                correlation_id: Some("ORDER-42".into()),
                ..filter()
            },
            false,
        ),
        (
            CorrelationFilter {
                message_id: Some("message-1".into()),
                ..filter()
            },
            true,
        ),
        (
            CorrelationFilter {
                to: Some("store-5".into()),
                ..filter()
            },
            true,
        ),
        (
            CorrelationFilter {
                reply_to: Some("replies".into()),
                ..filter()
            },
            true,
        ),
        (
            CorrelationFilter {
                label: Some("service bus rocks".into()),
                ..filter()
            },
            true,
        ),
        (
            CorrelationFilter {
                session_id: Some("session-a".into()),
                ..filter()
            },
            true,
        ),
        (
            CorrelationFilter {
                content_type: Some("application/json".into()),
                ..filter()
            },
            true,
        ),
        (
            CorrelationFilter {
                content_type: Some("text/plain".into()),
                ..filter()
            },
            false,
        ),
        (
            CorrelationFilter {
                reply_to_session_id: Some("x".into()),
                ..filter()
            },
            false,
        ),
    ];
    for (candidate, expected) in cases {
        assert_eq!(candidate.matches(&message), expected, "{candidate:?}");
        assert!(!candidate.is_empty());
    }
}

#[test]
fn user_properties_compare_by_value_and_numerically() {
    let message = TestMessage::standard();
    let with = |name: &str, value: FilterValue| CorrelationFilter {
        properties: vec![(name.to_owned(), value)],
        ..filter()
    };
    assert!(with("color", FilterValue::from("red")).matches(&message));
    assert!(with("COLOR", FilterValue::from("red")).matches(&message));
    assert!(!with("color", FilterValue::from("Red")).matches(&message));
    assert!(with("quantity", FilterValue::Integer(10)).matches(&message));
    assert!(with("quantity", FilterValue::Float(10.0)).matches(&message));
    assert!(with("price", FilterValue::Float(2.5)).matches(&message));
    assert!(!with("text_number", FilterValue::Integer(10)).matches(&message));
    assert!(!with("quantity", FilterValue::from("10")).matches(&message));
    assert!(with("flag", FilterValue::Bool(true)).matches(&message));
    assert!(with("nothing", FilterValue::Null).matches(&message));
    assert!(!with("missing", FilterValue::Null).matches(&message));
}

#[test]
fn all_conditions_combine_with_and() {
    let message = TestMessage::standard();
    let mut combined = CorrelationFilter {
        label: Some("service bus rocks".into()),
        reply_to: Some("replies".into()),
        properties: vec![
            ("color".into(), FilterValue::from("red")),
            ("quantity".into(), FilterValue::Integer(10)),
        ],
        ..filter()
    };
    assert_eq!(
        Filter::Correlation(combined.clone()).evaluate(&message),
        Ok(true)
    );
    combined
        .properties
        .push(("priority".into(), FilterValue::from("low")));
    assert!(!combined.matches(&message));
}

#[test]
fn non_string_identifiers_compare_by_their_text() {
    let mut message = TestMessage::standard();
    message
        .system
        .insert(SystemProperty::MessageId, FilterValue::Integer(-42));
    message.system.insert(
        SystemProperty::CorrelationId,
        FilterValue::Uuid(super::test_message::UUID_VALUE),
    );
    let by_number = CorrelationFilter {
        message_id: Some("-42".into()),
        ..filter()
    };
    let by_uuid = CorrelationFilter {
        correlation_id: Some("123e4567-e89b-12d3-a456-426614174000".into()),
        ..filter()
    };
    assert!(by_number.matches(&message));
    assert!(by_uuid.matches(&message));
    let changed = message.with_user("color", FilterValue::from("blue"));
    let by_color = CorrelationFilter {
        properties: vec![("color".into(), FilterValue::from("red"))],
        ..filter()
    };
    assert!(!by_color.matches(&changed));
}
