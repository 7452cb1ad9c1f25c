//! Tests of SQL rule actions: parsing, `SET` / `REMOVE` on user and system properties, ordering,
//! conversions and failures.

use super::test_message::{ENQUEUED_TIME, TestMessage, UUID_VALUE};
use super::{
    FilterEvaluationError, FilterValue, PropertyChange, PropertyTarget, SqlRuleAction,
    SyntaxErrorKind, SystemProperty,
};

fn apply(action: &str) -> Result<Vec<PropertyChange>, String> {
    let action = SqlRuleAction::parse(action).map_err(|error| error.to_string())?;
    action
        .apply(&TestMessage::standard())
        .map_err(|error| error.to_string())
}

fn set_user(name: &str, value: FilterValue) -> PropertyChange {
    PropertyChange::Set {
        target: PropertyTarget::User(name.to_owned()),
        value,
    }
}

fn set_system(property: SystemProperty, value: FilterValue) -> PropertyChange {
    PropertyChange::Set {
        target: PropertyTarget::System(property),
        value,
    }
}

#[test]
fn documented_example_sets_removes_and_sets_system_property() {
    let changes =
        apply("SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';");
    assert_eq!(
        changes,
        Ok(vec![
            set_user("quantity", FilterValue::Integer(5)),
            PropertyChange::Remove {
                target: PropertyTarget::User("priority".to_owned()),
            },
            set_system(SystemProperty::CorrelationId, FilterValue::from("low")),
        ])
    );
}

#[test]
fn statements_separate_with_commas_and_keywords_ignore_case() {
    let changes = apply(
        "set source = 'routedOrders', remove [HR-EmployeeID] , SET sys.Subject = sys.Label + '!'",
    );
    assert_eq!(
        changes,
        Ok(vec![
            set_user("source", FilterValue::from("routedOrders")),
            PropertyChange::Remove {
                target: PropertyTarget::User("HR-EmployeeID".to_owned()),
            },
            set_system(
                SystemProperty::Label,
                FilterValue::from("service bus rocks!")
            ),
        ])
    );
}

#[test]
fn later_statements_see_earlier_changes() {
    let changes = apply("SET a = 1; SET b = a + 1; REMOVE color; SET c = color IS NULL");
    assert!(changes.is_err(), "a predicate is not a SET value");
    let changes = apply("SET a = 1; SET b = A + 1; REMOVE color; SET c = p('color')");
    assert_eq!(
        changes,
        Ok(vec![
            set_user("a", FilterValue::Integer(1)),
            set_user("b", FilterValue::Integer(2)),
            PropertyChange::Remove {
                target: PropertyTarget::User("color".to_owned()),
            },
            set_user("c", FilterValue::Null),
        ])
    );
    let system = apply("SET sys.To = 'x'; SET seen = sys.To; REMOVE sys.To; SET gone = sys.To");
    assert_eq!(
        system.map(|changes| changes.into_iter().skip(1).step_by(2).collect::<Vec<_>>()),
        Ok(vec![
            set_user("seen", FilterValue::from("x")),
            set_user("gone", FilterValue::Null),
        ])
    );
}

#[test]
fn set_converts_to_the_existing_or_system_type() {
    assert_eq!(
        apply("SET price = 3"),
        Ok(vec![set_user("price", FilterValue::Float(3.0))])
    );
    assert_eq!(
        apply("SET quantity = 2.5"),
        Ok(vec![set_user("quantity", FilterValue::Float(2.5))])
    );
    assert_eq!(
        apply("SET sys.MessageId = uuid_value"),
        Ok(vec![set_system(
            SystemProperty::MessageId,
            FilterValue::from("123e4567-e89b-12d3-a456-426614174000"),
        )])
    );
    assert_eq!(
        apply("SET sys.ScheduledEnqueueTimeUtc = sys.EnqueuedTimeUtc + duration"),
        Ok(vec![set_system(
            SystemProperty::ScheduledEnqueueTimeUtc,
            FilterValue::Timestamp(ENQUEUED_TIME + 30_000),
        )])
    );
    assert_eq!(
        apply("SET sys.TimeToLive = duration; SET sys.SessionId = missing"),
        Ok(vec![
            set_system(SystemProperty::TimeToLive, FilterValue::Duration(30_000)),
            set_system(SystemProperty::SessionId, FilterValue::Null),
        ])
    );
    let copied = apply("SET copy = uuid_value");
    assert_eq!(
        copied,
        Ok(vec![set_user("copy", FilterValue::Uuid(UUID_VALUE))])
    );
}

#[test]
fn set_reports_evaluation_errors() {
    let message = TestMessage::standard();
    let wrong_type = SqlRuleAction::parse("SET sys.Label = 5").map(|action| action.apply(&message));
    assert_eq!(
        wrong_type,
        Ok(Err(FilterEvaluationError::InvalidAssignment {
            property: "Label",
            value: super::ValueType::Integer,
        }))
    );
    let divide =
        SqlRuleAction::parse("SET a = quantity / zero").map(|action| action.apply(&message));
    assert_eq!(divide, Ok(Err(FilterEvaluationError::DivisionByZero)));
}

#[test]
fn rule_action_syntax_errors_name_the_column() {
    let cases: &[(&str, usize)] = &[
        ("", 1),
        ("SET", 4),
        ("SET a 1", 7),
        ("SET a = ", 9),
        ("SET a = 1 SET b = 2", 11),
        ("UPDATE a = 1", 1),
        ("SET sys.SequenceNumber = 1", 5),
        ("REMOVE sys.DeliveryCount", 8),
        ("SET sys.Nope = 1", 9),
        ("SET a = 1;; REMOVE", 19),
        ("SET a = (1", 11),
    ];
    for &(text, column) in cases {
        let error = SqlRuleAction::parse(text).err().map(|error| error.column());
        assert_eq!(error, Some(column), "{text:?}");
    }
    let read_only = SqlRuleAction::parse("SET sys.DeliveryCount = 1").err();
    assert_eq!(
        read_only.map(|error| error.kind().clone()),
        Some(SyntaxErrorKind::ReadOnlySystemProperty(
            "DeliveryCount".to_owned()
        ))
    );
}

#[test]
fn action_keeps_text_and_caps_statement_count() {
    let text = "SET a = 1;";
    let action = SqlRuleAction::parse(text).map(|action| action.expression().to_owned());
    assert_eq!(action.as_deref(), Ok(text));
    let too_many = vec!["SET a = 1"; 33].join(";");
    let error = SqlRuleAction::parse(&too_many)
        .err()
        .map(|error| error.kind().clone());
    assert_eq!(error, Some(SyntaxErrorKind::TooManyStatements(32)));
    let enough = vec!["SET a = 1"; 32].join(";");
    assert!(SqlRuleAction::parse(&enough).is_ok());
}

#[test]
fn set_new_identifier_on_message_id_gives_text() {
    let changes = apply("SET sys.MessageId = newid()");
    let Ok(changes) = changes else {
        panic!("newid() action failed: {changes:?}");
    };
    let [
        PropertyChange::Set {
            value: FilterValue::String(text),
            ..
        },
    ] = changes.as_slice()
    else {
        panic!("unexpected changes {changes:?}");
    };
    assert!(super::parse_uuid(text).is_some(), "{text}");
}
