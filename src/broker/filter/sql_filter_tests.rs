//! Table-driven tests of SQL filters against [`TestMessage::standard`], plus property tests
//! that parsing and evaluating arbitrary text never panics.

use proptest::prelude::*;

use super::test_message::TestMessage;
use super::{Filter, FilterValue, SqlFilter, SyntaxErrorKind};

/// What a filter expression should do with the standard message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expected {
    Match,
    NoMatch,
    EvaluationError,
    /// Rejected by the parser at this 1-based column.
    SyntaxError(usize),
}

use Expected::{EvaluationError, Match, NoMatch, SyntaxError};

const CASES: &[(&str, Expected)] = &[
    // constants and the TrueFilter / FalseFilter forms
    ("1=1", Match),
    ("1=0", NoMatch),
    ("TRUE", Match),
    ("FALSE", NoMatch),
    ("NULL", NoMatch),
    ("NULL = NULL", NoMatch),
    // comparisons, names case-insensitive, values case-sensitive
    ("color = 'red'", Match),
    ("color = 'Red'", NoMatch),
    ("COLOR = 'red'", Match),
    ("user.color = 'red'", Match),
    ("USER.Color = 'red'", Match),
    ("color <> 'blue'", Match),
    ("color != 'red'", NoMatch),
    ("quantity = 10", Match),
    ("quantity > 9", Match),
    ("quantity >= 10", Match),
    ("quantity < 10", NoMatch),
    ("quantity <= 10", Match),
    ("größe = 3", Match),
    // numeric promotion and literals
    ("quantity = 10.0", Match),
    ("price > 2", Match),
    ("price = 2.5", Match),
    ("price < quantity", Match),
    ("quantity = 1e1", Match),
    ("quantity = 0.1E2", Match),
    ("101.5E5 = 10150000", Match),
    ("0.5E-2 = .005", Match),
    // arithmetic and precedence
    ("price * 4 = quantity", Match),
    ("quantity + 2 * 3 = 16", Match),
    ("(quantity + 2) * 3 = 36", Match),
    ("quantity - 2 - 3 = 5", Match),
    ("quantity / 3 = 3", Match),
    ("quantity / 4.0 = 2.5", Match),
    ("quantity % 3 = 1", Match),
    ("-quantity = -10", Match),
    ("- -quantity = 10", Match),
    ("+quantity = 10", Match),
    ("negative * -1 = 5", Match),
    ("-9223372036854775808 < big", Match),
    ("big + 1 < 0", Match),
    ("big * 2 = -2", Match),
    ("9223372036854775807 + 1 = -9223372036854775808", Match),
    ("quantity / zero = 1", EvaluationError),
    ("quantity % zero = 1", EvaluationError),
    ("price / 0 > 1000", Match),
    ("zero / 0.0 <> zero / 0.0", Match),
    ("zero / 0.0 = zero / 0.0", NoMatch),
    // booleans and values used as conditions
    ("flag = TRUE", Match),
    ("flag", Match),
    ("NOT flag", NoMatch),
    ("NOT NOT flag", Match),
    ("flag <> FALSE", Match),
    ("flag > FALSE", EvaluationError),
    ("color", EvaluationError),
    // type errors follow C# operator binding
    ("color = 10", EvaluationError),
    ("text_number = 10", EvaluationError),
    ("text_number = '10'", Match),
    ("color > 'a'", EvaluationError),
    ("color - 1 = 0", EvaluationError),
    ("-color = 'x'", EvaluationError),
    ("flag + 1 = 2", EvaluationError),
    ("color + 1 = 'red1'", Match),
    ("color + '-' + priority = 'red-high'", Match),
    ("'n=' + quantity = 'n=10'", Match),
    ("'p=' + price + flag = 'p=2.5True'", Match),
    // unknown (missing / null) in three-valued logic
    ("missing = 1", NoMatch),
    ("missing <> 1", NoMatch),
    ("NOT (missing = 1)", NoMatch),
    ("missing = 1 OR color = 'red'", Match),
    ("missing = 1 OR color = 'blue'", NoMatch),
    ("NOT (missing = 1 OR color = 'blue')", NoMatch),
    ("missing = 1 AND color = 'blue'", NoMatch),
    ("NOT (missing = 1 AND color = 'blue')", Match),
    ("missing = 1 AND color = 'red'", NoMatch),
    ("NOT (missing = 1 AND color = 'red')", NoMatch),
    ("nothing = NULL", NoMatch),
    ("nothing = 1", NoMatch),
    ("missing + 1 = 2", NoMatch),
    ("missing LIKE '%'", NoMatch),
    ("NOT (missing LIKE '%')", NoMatch),
    ("missing IN (1, 2)", NoMatch),
    ("missing NOT IN (1, 2)", NoMatch),
    ("quantity IN (1, NULL)", NoMatch),
    ("quantity NOT IN (1, NULL)", NoMatch),
    ("quantity IN (10, NULL)", Match),
    ("missing", NoMatch),
    ("NOT missing", NoMatch),
    // IS [NOT] NULL and EXISTS
    ("nothing IS NULL", Match),
    ("missing IS NULL", Match),
    ("color IS NULL", NoMatch),
    ("color IS NOT NULL", Match),
    ("missing is not null", NoMatch),
    ("EXISTS(color)", Match),
    ("EXISTS(nothing)", Match),
    ("EXISTS(missing)", NoMatch),
    ("NOT EXISTS(missing)", Match),
    ("exists (user.COLOR)", Match),
    ("EXISTS(sys.Label)", Match),
    ("EXISTS(sys.ReplyToSessionId)", NoMatch),
    // system properties
    ("sys.Label = 'service bus rocks'", Match),
    ("sys.label LIKE '%bus%'", Match),
    ("SYS.LABEL LIKE '%BUS%'", NoMatch),
    ("sys.Subject = sys.Label", Match),
    ("sys.[Label] = 'service bus rocks'", Match),
    ("sys.MessageId = 'message-1'", Match),
    ("sys.messageid = 'xxxx'", NoMatch),
    ("sys.CorrelationId LIKE 'order-%'", Match),
    ("sys.To IN ('store-4', 'store-5')", Match),
    ("sys.To NOT IN ('store-4', 'store-5')", NoMatch),
    ("sys.ReplyTo = 'replies'", Match),
    ("sys.SessionId = 'session-a'", Match),
    ("sys.ContentType = 'application/json'", Match),
    ("sys.SequenceNumber = 17", Match),
    ("sys.DeliveryCount > 1", Match),
    ("sys.Size < 1024", Match),
    ("sys.ReplyToSessionId = 'x'", NoMatch),
    ("sys.ReplyToSessionId IS NULL", Match),
    ("sys.EnqueuedTime = sys.EnqueuedTimeUtc", Match),
    // timestamps and durations
    ("sys.EnqueuedTimeUtc > created", Match),
    ("sys.EnqueuedTimeUtc - created > sys.TimeToLive", Match),
    ("created + sys.TimeToLive < sys.EnqueuedTimeUtc", Match),
    ("duration < sys.TimeToLive", Match),
    ("duration + duration = sys.TimeToLive", Match),
    ("-duration < duration", Match),
    ("sys.EnqueuedTimeUtc = 5", EvaluationError),
    ("created + created > created", EvaluationError),
    // LIKE
    ("color LIKE 'r%'", Match),
    ("color LIKE 'r_d'", Match),
    ("color LIKE 'r_'", NoMatch),
    ("color NOT LIKE 'b%'", Match),
    ("color NOT LIKE 'r%'", NoMatch),
    ("percent LIKE '50\\%' ESCAPE '\\'", Match),
    ("percent LIKE '5\\%' ESCAPE '\\'", NoMatch),
    ("under LIKE 'a!_b' ESCAPE '!'", Match),
    ("color LIKE 'r!_d' ESCAPE '!'", NoMatch),
    ("percent LIKE '50%'", Match),
    ("name LIKE 'O''%'", Match),
    ("name = 'O''Brien'", Match),
    ("color LIKE pattern", NoMatch),
    ("sys.Label LIKE pattern", Match),
    ("percent LIKE '50\\%' ESCAPE [escape]", Match),
    ("percent LIKE '50%' ESCAPE escape", SyntaxError(27)),
    ("color LIKE 'r' + '%'", Match),
    ("quantity LIKE '1%'", EvaluationError),
    ("color LIKE 5", EvaluationError),
    ("color LIKE 'r%' ESCAPE quantity", EvaluationError),
    ("color LIKE 'r%' ESCAPE missing", NoMatch),
    // IN
    ("color IN ('red', 'blue')", Match),
    ("color IN ('blue')", NoMatch),
    ("color NOT IN ('blue', 'green')", Match),
    ("quantity IN (5, 10.0)", Match),
    ("quantity IN (1, 2 * 5)", Match),
    ("color IN ('blue', 3)", EvaluationError),
    ("color IN ('red', 3)", Match),
    // identifiers
    ("[Property With Space] = 'spaced'", Match),
    ("\"Contoso & Northwind\" = 'quoted'", Match),
    ("[HR-EmployeeID] = 7", Match),
    ("user.[HR-EmployeeID] = 7", Match),
    ("[and] = 'keyword'", Match),
    // functions
    ("property('color') = 'red'", Match),
    ("P('sys.Label') = 'service bus rocks'", Match),
    ("p('user.' + 'quantity') = 10", Match),
    ("p('sys.Nope') = 1", EvaluationError),
    ("p(quantity) = 1", EvaluationError),
    ("newid() = newid()", NoMatch),
    ("uuid_value = uuid_value", Match),
    ("uuid_value = 'x'", EvaluationError),
    // keywords are case-insensitive; AND binds tighter than OR
    ("color = 'red' and quantity = 10", Match),
    ("color = 'blue' Or Quantity = 10", Match),
    ("not color = 'blue'", Match),
    ("color like 'r%'", Match),
    ("color = 'blue' AND quantity = 1 OR flag", Match),
    ("color = 'blue' AND (quantity = 1 OR flag)", NoMatch),
    ("NOT color = 'blue' AND flag", Match),
    ("color = 'blue' OR color = 'green' OR color = 'red'", Match),
    (
        "color = 'red' AND quantity = 10 AND price > 2 AND flag AND sys.Label LIKE '%bus%'",
        Match,
    ),
    // AND / OR stop at the first deciding operand
    ("color = 'red' OR quantity / zero = 1", Match),
    ("color = 'blue' AND quantity / zero = 1", NoMatch),
    ("quantity / zero = 1 OR color = 'red'", EvaluationError),
    // syntax errors, with the column they point at
    ("", SyntaxError(1)),
    ("color =", SyntaxError(8)),
    ("color = 'red' AND", SyntaxError(18)),
    ("(color = 'red'", SyntaxError(15)),
    ("color = 'red')", SyntaxError(14)),
    ("color = 'red", SyntaxError(9)),
    ("color == 'red'", SyntaxError(8)),
    ("quantity = 99999999999999999999", SyntaxError(12)),
    ("color = 'red' quantity = 1", SyntaxError(15)),
    ("1", SyntaxError(1)),
    ("quantity + 1", SyntaxError(1)),
    ("quantity + (color = 'red') = 1", SyntaxError(12)),
    ("quantity = 1 = 1", SyntaxError(14)),
    ("color # 'x'", SyntaxError(7)),
    ("[unterminated = 1", SyntaxError(1)),
    ("@undefined = 1", SyntaxError(1)),
    ("quantity = 1e", SyntaxError(12)),
    ("NOT 5", SyntaxError(5)),
    ("EXISTS(quantity + 1)", SyntaxError(17)),
    ("color IS 'red'", SyntaxError(10)),
    ("missing + 1 IS NULL", SyntaxError(1)),
    ("NULL IS NULL", SyntaxError(1)),
    ("newid() IS NULL", SyntaxError(1)),
    ("nofunc(1) = 1", SyntaxError(1)),
    ("and = 1", SyntaxError(1)),
    ("foo.bar = 1", SyntaxError(1)),
    ("sys.Colour = 'x'", SyntaxError(5)),
    ("color IN ()", SyntaxError(11)),
    ("color LIKE 'r%' ESCAPE 'ab'", SyntaxError(24)),
    ("color LIKE 'r\\' ESCAPE '\\'", SyntaxError(12)),
    ("color = 'red' AND AND", SyntaxError(19)),
    ("color = []", SyntaxError(9)),
    ("quantity = 1 +", SyntaxError(15)),
    ("user. = 1", SyntaxError(7)),
];

fn outcome(expression: &str, message: &TestMessage) -> Expected {
    match SqlFilter::parse(expression) {
        Err(error) => SyntaxError(error.column()),
        Ok(filter) => match filter.evaluate(message) {
            Ok(true) => Match,
            Ok(false) => NoMatch,
            Err(_) => EvaluationError,
        },
    }
}

#[test]
fn sql_filters_match_the_expected_table() {
    assert!(CASES.len() >= 80);
    let message = TestMessage::standard();
    let failures: Vec<String> = CASES
        .iter()
        .filter_map(|&(expression, expected)| {
            let actual = outcome(expression, &message);
            let detail = match SqlFilter::parse(expression) {
                Err(error) => error.to_string(),
                Ok(filter) => format!("{:?}", filter.evaluate(&message)),
            };
            (actual != expected).then(|| {
                format!("{expression:?}: expected {expected:?}, got {actual:?} ({detail})")
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn filter_keeps_its_original_text() {
    let text = "sys.Label LIKE '%bus%'  OR user.tag IN ('queue', 'topic')";
    let filter = SqlFilter::parse(text).map(|filter| filter.expression().to_owned());
    assert_eq!(filter.as_deref(), Ok(text));
}

#[test]
fn syntax_errors_report_line_and_expectation() {
    let error = SqlFilter::parse("color = 'red' AND\n  quantity > ").err();
    let error = error.map(|error| (error.line(), error.column(), error.kind().clone()));
    assert_eq!(
        error,
        Some((
            2,
            14,
            SyntaxErrorKind::Unexpected {
                expected: "an expression",
                found: "end of input".to_owned()
            }
        ))
    );
}

#[test]
fn parameters_are_substituted_at_parse_time() {
    let parameters = [
        ("@minimum".to_owned(), FilterValue::Integer(5)),
        ("Wanted".to_owned(), FilterValue::from("red")),
    ];
    let filter =
        SqlFilter::parse_with_parameters("quantity > @minimum AND color = @WANTED", &parameters);
    let result = filter.map(|filter| filter.evaluate(&TestMessage::standard()));
    assert_eq!(result, Ok(Ok(true)));
}

#[test]
fn overlong_and_overdeep_expressions_are_rejected() {
    let long = format!("color = '{}'", "x".repeat(1100));
    let long_error = SqlFilter::parse(&long).err().map(|error| error.column());
    assert_eq!(long_error, Some(1025));
    let deep = format!("{}1 = 1{}", "(".repeat(100), ")".repeat(100));
    let deep_error = SqlFilter::parse(&deep)
        .err()
        .map(|error| error.kind().clone());
    assert_eq!(deep_error, Some(SyntaxErrorKind::TooDeep(64)));
    let nested = format!("{}1 = 1{}", "(".repeat(60), ")".repeat(60));
    assert!(SqlFilter::parse(&nested).is_ok());
}

#[test]
fn filter_enum_dispatches_to_each_kind() {
    let message = TestMessage::standard();
    let sql = SqlFilter::parse("quantity = 10").map(Filter::Sql);
    assert_eq!(Filter::True.evaluate(&message), Ok(true));
    assert_eq!(Filter::False.evaluate(&message), Ok(false));
    assert_eq!(sql.map(|filter| filter.evaluate(&message)), Ok(Ok(true)));
}

proptest! {
    #[test]
    fn parsing_arbitrary_text_never_panics(text in "\\PC{0,120}") {
        let _ = SqlFilter::parse(&text);
    }

    #[test]
    fn parsing_and_evaluating_token_soup_never_panics(
        words in proptest::collection::vec(
            prop_oneof![
                Just("color"), Just("quantity"), Just("sys.Label"), Just("missing"),
                Just("'r%'"), Just("10"), Just("2.5"), Just("NULL"), Just("TRUE"),
                Just("AND"), Just("OR"), Just("NOT"), Just("LIKE"), Just("IN"), Just("IS"),
                Just("ESCAPE"), Just("EXISTS"), Just("("), Just(")"), Just(","), Just("="),
                Just("<>"), Just("<"), Just("+"), Just("-"), Just("*"), Just("/"), Just("%"),
                Just("p("), Just("zero"), Just("[a]"),
            ],
            0..24,
        )
    ) {
        let text = words.join(" ");
        if let Ok(filter) = SqlFilter::parse(&text) {
            let _ = filter.evaluate(&TestMessage::standard());
        }
    }
}
