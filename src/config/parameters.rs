//! Values for a rule's SQL `@parameters`: what `sql_parameters` on a configured rule, the
//! `Parameters` of an ATOM rule description and the `sql-parameters` map of `add-rule` give.
//!
//! Service Bus keeps each value with its .NET type and shows it back with that type (an `int`
//! stays an `int`, a `long` a `long`), so a value here is typed the same way; the SQL parser
//! sees it as the filter value of that type (see `broker::rules`). Instants and spans keep
//! .NET's precision, 100-ns ticks. This module owns the TOML spelling of the values too:
//! TOML has strings, integers, floats, booleans and date-times, and a one-key table names the
//! types it lacks (`{ duration = "PT1M" }`, `{ guid = "…" }`) or forces one
//! (`{ long = 3 }`, `{ int = 3 }`).

use std::time::Duration;

/// 100-ns ticks in a millisecond.
pub const TICKS_PER_MILLISECOND: i64 = 10_000;
/// 100-ns ticks in a second.
pub const TICKS_PER_SECOND: i64 = 10_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// A parameter's value, typed as Service Bus types it.
#[derive(Debug, Clone, PartialEq)]
pub enum ParameterValue {
    /// `string`.
    String(String),
    /// `int` (`System.Int32`; also what `short` and `byte` become).
    Int(i32),
    /// `long` (`System.Int64`).
    Long(i64),
    /// `double` (`System.Double`; also what `float` and `decimal` become).
    Double(f64),
    /// `boolean`.
    Bool(bool),
    /// `dateTime`: an instant in 100-ns ticks since the Unix epoch, UTC.
    DateTime(i64),
    /// `duration` (`System.TimeSpan`) in 100-ns ticks; may be negative.
    Duration(i64),
    /// `guid`, in RFC 4122 (text) byte order.
    Guid([u8; 16]),
}

/// A rule's parameters as given: the name (with or without `@`) and the value, in order.
pub type SqlParameters = Vec<(String, ParameterValue)>;

impl ParameterValue {
    /// The XML Schema name of the type (what the ATOM wire writes after `d6p1:`).
    pub fn type_name(&self) -> &'static str {
        match self {
            ParameterValue::String(_) => "string",
            ParameterValue::Int(_) => "int",
            ParameterValue::Long(_) => "long",
            ParameterValue::Double(_) => "double",
            ParameterValue::Bool(_) => "boolean",
            ParameterValue::DateTime(_) => "dateTime",
            ParameterValue::Duration(_) => "duration",
            ParameterValue::Guid(_) => "guid",
        }
    }

    /// An integer typed as the Python SDK and the TOML reader type it: `int` when it fits in
    /// 32 bits, `long` otherwise.
    pub fn integer(number: i64) -> ParameterValue {
        match i32::try_from(number) {
            Ok(small) => ParameterValue::Int(small),
            Err(_) => ParameterValue::Long(number),
        }
    }

    /// The value as short readable text (`'red'`, `3`, `2024-05-06T07:08:09Z`, `1m`),
    /// for logs and the explorer.
    pub fn display_text(&self) -> String {
        match self {
            ParameterValue::String(text) => format!("'{}'", text.replace('\'', "''")),
            ParameterValue::Int(number) => number.to_string(),
            ParameterValue::Long(number) => number.to_string(),
            ParameterValue::Double(number) => number.to_string(),
            ParameterValue::Bool(flag) => flag.to_string(),
            ParameterValue::DateTime(ticks) => datetime_text(*ticks),
            ParameterValue::Duration(ticks) => duration_text(*ticks),
            ParameterValue::Guid(bytes) => guid_text(bytes),
        }
    }
}

/// The name a parameter is matched by: its name without the leading `@`.
pub fn parameter_key(name: &str) -> &str {
    name.strip_prefix('@').unwrap_or(name)
}

/// Checks a rule's parameters: every name has a character besides `@`, and no name is given
/// twice (the parser matches `@p`, `p` and `@P` alike, so two of them would be ambiguous).
pub fn check_parameters(parameters: &[(String, ParameterValue)]) -> Result<(), String> {
    for (index, (name, _)) in parameters.iter().enumerate() {
        if parameter_key(name).is_empty() {
            return Err(format!("parameter name {name:?} is empty"));
        }
        let duplicate = parameters[..index]
            .iter()
            .find(|(earlier, _)| names_equal(parameter_key(earlier), parameter_key(name)));
        if let Some((earlier, _)) = duplicate {
            return Err(format!(
                "parameters {earlier:?} and {name:?} name the same parameter (names match with or without '@', ignoring case)"
            ));
        }
    }
    Ok(())
}

/// Whether two parameter names are the same name: equal ignoring case, as the SQL parser
/// matches them (property names compare the same way).
fn names_equal(left: &str, right: &str) -> bool {
    left.chars()
        .flat_map(char::to_uppercase)
        .eq(right.chars().flat_map(char::to_uppercase))
}

/// A GUID's text, lower-case and hyphenated 8-4-4-4-12.
pub fn guid_text(bytes: &[u8; 16]) -> String {
    let mut text = String::with_capacity(36);
    for (index, byte) in bytes.iter().enumerate() {
        if matches!(index, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// Reads a GUID's hyphenated text, in either case, braces allowed.
pub fn parse_guid(text: &str) -> Option<[u8; 16]> {
    let text = text.trim();
    let text = text
        .strip_prefix('{')
        .and_then(|inner| inner.strip_suffix('}'))
        .unwrap_or(text);
    let bytes = text.as_bytes();
    if bytes.len() != 36 || [8, 13, 18, 23].iter().any(|&at| bytes[at] != b'-') {
        return None;
    }
    let digits: Vec<u8> = bytes.iter().copied().filter(|byte| *byte != b'-').collect();
    if digits.len() != 32 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut guid = [0u8; 16];
    for (index, pair) in digits.chunks(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        guid[index] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(guid)
}

/// A span in ticks from a duration (saturating at `i64::MAX` ticks).
pub fn ticks_of(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos() / 100).unwrap_or(i64::MAX)
}

/// A non-negative span of ticks as a duration (negative spans give zero).
pub fn duration_of(ticks: i64) -> Duration {
    let ticks = ticks.max(0) as u64;
    Duration::new(
        ticks / TICKS_PER_SECOND as u64,
        (ticks % TICKS_PER_SECOND as u64) as u32 * 100,
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// An instant's RFC 3339 text in UTC, with the fraction when there is one
/// (`2024-05-06T07:08:09.1234567Z`).
pub fn datetime_text(ticks: i64) -> String {
    let seconds = ticks.div_euclid(TICKS_PER_SECOND);
    let fraction = ticks.rem_euclid(TICKS_PER_SECOND);
    let (year, month, day) = civil_from_days(seconds.div_euclid(SECONDS_PER_DAY));
    let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let mut text = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    );
    if fraction > 0 {
        text.push('.');
        text.push_str(format!("{fraction:07}").trim_end_matches('0'));
    }
    text.push('Z');
    text
}

/// A span as the configuration writes durations (`1m30s`, `-1d2h`, `500ms`).
pub fn duration_text(ticks: i64) -> String {
    let magnitude = duration_of(ticks.checked_abs().unwrap_or(i64::MAX));
    let text = crate::config::duration::format_duration(magnitude);
    if ticks < 0 { format!("-{text}") } else { text }
}

/// Reads a span: an optional `-`, then what the configuration's durations accept
/// (`PT1M30S`, `90s`, `1h30m`).
pub fn parse_duration_ticks(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let ticks = ticks_of(crate::config::duration::parse_duration(magnitude)?);
    Ok(if negative { -ticks } else { ticks })
}

/// The ticks of a TOML date-time; one without an offset is read as UTC.
fn datetime_ticks(datetime: &toml::value::Datetime) -> Result<i64, String> {
    let (Some(date), Some(time)) = (datetime.date, datetime.time) else {
        return Err(format!(
            "{datetime} is not a date and time (write e.g. 2024-05-06T07:08:09Z)"
        ));
    };
    let days = days_from_civil(
        i64::from(date.year),
        i64::from(date.month),
        i64::from(date.day),
    );
    let offset_minutes = match datetime.offset {
        Some(toml::value::Offset::Custom { minutes }) => i64::from(minutes),
        Some(toml::value::Offset::Z) | None => 0,
    };
    let seconds = days * SECONDS_PER_DAY
        + i64::from(time.hour) * 3600
        + i64::from(time.minute) * 60
        + i64::from(time.second)
        - offset_minutes * 60;
    Ok(seconds * TICKS_PER_SECOND + i64::from(time.nanosecond) / 100)
}

/// A parameter value as TOML writes it (see the module docs); the error says what is wrong.
pub fn from_toml(value: &toml::Value) -> Result<ParameterValue, String> {
    Ok(match value {
        toml::Value::String(text) => ParameterValue::String(text.clone()),
        toml::Value::Integer(number) => ParameterValue::integer(*number),
        toml::Value::Float(number) => ParameterValue::Double(*number),
        toml::Value::Boolean(flag) => ParameterValue::Bool(*flag),
        toml::Value::Datetime(datetime) => ParameterValue::DateTime(datetime_ticks(datetime)?),
        toml::Value::Table(table) if table.len() == 1 => {
            let Some((kind, inner)) = table.iter().next() else {
                return Err(TYPED_FORMS.to_string());
            };
            typed_from_toml(kind, inner)?
        }
        _ => {
            return Err(format!(
                "{} is not a parameter value: {TYPED_FORMS}",
                value.type_str()
            ));
        }
    })
}

const TYPED_FORMS: &str = "write a string, integer, float, bool or date-time, or a table of one key: { int = 1 }, { long = 1 }, { double = 1.0 }, { duration = \"PT1M\" }, { guid = \"…\" }";

fn typed_from_toml(kind: &str, inner: &toml::Value) -> Result<ParameterValue, String> {
    let wrong = || format!("{{ {kind} = {inner} }} is not a valid {kind}");
    Ok(match (kind, inner) {
        ("int", toml::Value::Integer(number)) => {
            ParameterValue::Int(i32::try_from(*number).map_err(|_| {
                format!("{number} does not fit an int (32 bits): write {{ long = {number} }}")
            })?)
        }
        ("long", toml::Value::Integer(number)) => ParameterValue::Long(*number),
        ("double", toml::Value::Float(number)) => ParameterValue::Double(*number),
        ("double", toml::Value::Integer(number)) => ParameterValue::Double(*number as f64),
        ("string", toml::Value::String(text)) => ParameterValue::String(text.clone()),
        ("duration", toml::Value::String(text)) => {
            ParameterValue::Duration(parse_duration_ticks(text)?)
        }
        ("guid", toml::Value::String(text)) => {
            ParameterValue::Guid(parse_guid(text).ok_or_else(|| {
                format!("{text:?} is not a GUID (write e.g. 0f8fad5b-d9cb-469f-a165-70867728950e)")
            })?)
        }
        ("int" | "long" | "double" | "string" | "duration" | "guid", _) => return Err(wrong()),
        _ => return Err(format!("unknown type {kind:?}: {TYPED_FORMS}")),
    })
}

/// A parameter value as TOML text that [`from_toml`] reads back equal.
pub fn to_toml(value: &ParameterValue) -> String {
    match value {
        ParameterValue::String(text) => toml::Value::String(text.clone()).to_string(),
        ParameterValue::Int(number) => number.to_string(),
        ParameterValue::Long(number) if i32::try_from(*number).is_ok() => {
            format!("{{ long = {number} }}")
        }
        ParameterValue::Long(number) => number.to_string(),
        ParameterValue::Double(number) => toml::Value::Float(*number).to_string(),
        ParameterValue::Bool(flag) => flag.to_string(),
        ParameterValue::DateTime(ticks) => datetime_text(*ticks),
        ParameterValue::Duration(ticks) => {
            format!("{{ duration = \"{}\" }}", duration_text(*ticks))
        }
        ParameterValue::Guid(bytes) => format!("{{ guid = \"{}\" }}", guid_text(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<ParameterValue, String> {
        let table: toml::Table = toml::from_str(&format!("value = {text}")).expect("TOML");
        from_toml(&table["value"])
    }

    #[test]
    fn toml_values_take_the_service_types() {
        assert_eq!(read("\"red\""), Ok(ParameterValue::String("red".into())));
        assert_eq!(read("3"), Ok(ParameterValue::Int(3)));
        assert_eq!(read("5000000000"), Ok(ParameterValue::Long(5_000_000_000)));
        assert_eq!(read("{ long = 3 }"), Ok(ParameterValue::Long(3)));
        assert_eq!(read("0.5"), Ok(ParameterValue::Double(0.5)));
        assert_eq!(read("true"), Ok(ParameterValue::Bool(true)));
        // 2024-05-06T07:08:09.5Z: 1_714_979_289.5 s after the epoch.
        let at = ParameterValue::DateTime(17_149_792_895_000_000);
        assert_eq!(read("2024-05-06T07:08:09.5Z"), Ok(at.clone()));
        assert_eq!(read("2024-05-06T09:08:09.5+02:00"), Ok(at));
        assert_eq!(
            read("{ duration = \"PT1M30S\" }"),
            Ok(ParameterValue::Duration(900_000_000))
        );
        assert_eq!(
            read("{ duration = \"-90s\" }"),
            Ok(ParameterValue::Duration(-900_000_000))
        );
        let guid = read("{ guid = \"0f8fad5b-d9cb-469f-a165-70867728950e\" }");
        assert!(
            matches!(guid, Ok(ParameterValue::Guid(bytes)) if bytes[0] == 0x0f && bytes[15] == 0x0e)
        );
    }

    #[test]
    fn wrong_toml_values_say_what_to_write() {
        let error = read("[1, 2]").expect_err("an array is no value");
        assert!(error.contains("{ duration"), "{error}");
        let error = read("{ int = 5000000000 }").expect_err("too big");
        assert!(error.contains("long"), "{error}");
        let error = read("{ guid = \"nope\" }").expect_err("not a GUID");
        assert!(error.contains("GUID"), "{error}");
        let error = read("{ colour = 1 }").expect_err("unknown type");
        assert!(error.contains("colour"), "{error}");
        let error = read("2024-05-06").expect_err("a date alone");
        assert!(error.contains("date and time"), "{error}");
    }

    #[test]
    fn every_value_renders_as_toml_that_reads_back_equal() {
        for value in [
            ParameterValue::String("it's \"quoted\"".into()),
            ParameterValue::Int(-7),
            ParameterValue::Long(7),
            ParameterValue::Long(i64::MIN),
            ParameterValue::Double(0.25),
            ParameterValue::Double(3.0),
            ParameterValue::Bool(false),
            ParameterValue::DateTime(17_149_792_891_234_567),
            ParameterValue::DateTime(-1),
            ParameterValue::Duration(900_000_001),
            ParameterValue::Duration(-36_000_000_000),
            ParameterValue::Guid([0xab; 16]),
        ] {
            let text = to_toml(&value);
            assert_eq!(read(&text), Ok(value), "{text}");
        }
    }

    #[test]
    fn names_are_checked_once_each_with_or_without_at() {
        let value = || ParameterValue::Int(1);
        assert!(check_parameters(&[("@a".into(), value()), ("b".into(), value())]).is_ok());
        let error = check_parameters(&[("@Size".into(), value()), ("size".into(), value())])
            .expect_err("the same name twice");
        assert!(error.contains("@Size") && error.contains("size"), "{error}");
        assert!(check_parameters(&[("@".into(), value())]).is_err());
    }
}
