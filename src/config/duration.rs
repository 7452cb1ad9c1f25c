//! Duration text used throughout the configuration file.
//!
//! Two spellings are accepted, both case-insensitive and exact to the nanosecond:
//!
//! - ISO-8601 durations as Service Bus writes them: `PT1M`, `P14D`, `PT0.5S`, `P1DT2H30M`,
//!   `P2W`. Years and months are rejected because they have no fixed length.
//! - Humane forms: a number with a unit (`ns`, `us`, `ms`, `s`, `m`, `h`, `d`), optionally
//!   chained from the largest unit down: `500ms`, `1.5s`, `14d`, `1h30m`.
//!
//! This module only converts text; whether zero or a given range is acceptable is decided by
//! the validation that knows which setting the value belongs to.

use std::time::Duration;

const NANOS_PER_SECOND: u128 = 1_000_000_000;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;
const NANOS_PER_DAY: u128 = 24 * NANOS_PER_HOUR;
const NANOS_PER_WEEK: u128 = 7 * NANOS_PER_DAY;

/// Fraction digits kept when scaling; more than 18 cannot change a nanosecond count.
const MAX_FRACTION_DIGITS: u32 = 18;

/// ISO-8601 date designators, in the order they must appear.
const ISO_DATE_UNITS: &[(&str, u128)] = &[("w", NANOS_PER_WEEK), ("d", NANOS_PER_DAY)];
/// ISO-8601 time designators (after `T`), in the order they must appear.
const ISO_TIME_UNITS: &[(&str, u128)] = &[
    ("h", NANOS_PER_HOUR),
    ("m", NANOS_PER_MINUTE),
    ("s", NANOS_PER_SECOND),
];
/// Humane units, largest first; chained components must follow this order.
const HUMANE_UNITS: &[(&str, u128)] = &[
    ("d", NANOS_PER_DAY),
    ("h", NANOS_PER_HOUR),
    ("m", NANOS_PER_MINUTE),
    ("s", NANOS_PER_SECOND),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// Parses an ISO-8601 (`PT1M`) or humane (`30s`) duration.
///
/// The error quotes the offending text and says what was expected.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let nanos = match trimmed.strip_prefix(['P', 'p']) {
        Some(body) => parse_iso8601(body),
        None => parse_humane(trimmed),
    };
    nanos
        .and_then(nanos_to_duration)
        .map_err(|reason| format!("invalid duration {text:?}: {reason}"))
}

/// Formats a duration in the humane form, e.g. `1m30s`, `500ms`, `1.5s`, `14d`.
///
/// The output is accepted by [`parse_duration`] and yields the same duration.
pub fn format_duration(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".to_string();
    }
    let total_seconds = duration.as_secs();
    let nanos = duration.subsec_nanos();
    let mut text = String::new();
    let parts = [
        (total_seconds / 86_400, "d"),
        (total_seconds % 86_400 / 3_600, "h"),
        (total_seconds % 3_600 / 60, "m"),
    ];
    for (value, unit) in parts {
        if value > 0 {
            text.push_str(&format!("{value}{unit}"));
        }
    }
    let seconds = total_seconds % 60;
    if nanos == 0 {
        if seconds > 0 {
            text.push_str(&format!("{seconds}s"));
        }
    } else if seconds > 0 {
        let fraction = format!("{nanos:09}");
        text.push_str(&format!("{seconds}.{}s", fraction.trim_end_matches('0')));
    } else if nanos.is_multiple_of(1_000_000) {
        text.push_str(&format!("{}ms", nanos / 1_000_000));
    } else if nanos.is_multiple_of(1_000) {
        text.push_str(&format!("{}us", nanos / 1_000));
    } else {
        text.push_str(&format!("{nanos}ns"));
    }
    text
}

/// A non-negative decimal number kept exact: `whole` plus `fraction / 10^fraction_digits`.
struct Decimal {
    whole: u128,
    fraction: u128,
    fraction_digits: u32,
}

impl Decimal {
    fn parse(text: &str) -> Result<Decimal, String> {
        let (whole_text, fraction_text) = match text.split_once('.') {
            Some((whole, fraction)) => (whole, fraction),
            None => (text, ""),
        };
        let well_formed = !whole_text.is_empty()
            && whole_text.bytes().all(|byte| byte.is_ascii_digit())
            && fraction_text.bytes().all(|byte| byte.is_ascii_digit())
            && !(text.contains('.') && fraction_text.is_empty());
        if !well_formed {
            return Err(format!("{text:?} is not a number"));
        }
        let whole = whole_text
            .parse::<u64>()
            .map_err(|_| format!("{text:?} is too large"))?;
        let kept: String = fraction_text
            .chars()
            .take(MAX_FRACTION_DIGITS as usize)
            .collect();
        let fraction = if kept.is_empty() {
            0
        } else {
            kept.parse::<u128>()
                .map_err(|_| format!("{text:?} is not a number"))?
        };
        Ok(Decimal {
            whole: u128::from(whole),
            fraction,
            fraction_digits: kept.len() as u32,
        })
    }

    /// This number of `unit_nanos`, in nanoseconds (sub-nanosecond remainders are dropped).
    fn scale(&self, unit_nanos: u128) -> Option<u128> {
        let whole = self.whole.checked_mul(unit_nanos)?;
        let fraction = self.fraction.checked_mul(unit_nanos)? / 10u128.pow(self.fraction_digits);
        whole.checked_add(fraction)
    }
}

/// Splits `30s` / `1h30m` / `1DT2H` bodies into (number, unit) pairs.
fn components(text: &str) -> Result<Vec<(Decimal, String)>, String> {
    let mut pairs = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|character: char| !(character.is_ascii_digit() || character == '.'))
            .unwrap_or(rest.len());
        let (number_text, after_number) = rest.split_at(number_end);
        if number_text.is_empty() {
            return Err(format!("expected a number at {after_number:?}"));
        }
        let unit_end = after_number
            .find(|character: char| !character.is_alphabetic())
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_end);
        if unit.is_empty() {
            return Err(format!("number {number_text} has no unit"));
        }
        pairs.push((Decimal::parse(number_text)?, unit.to_ascii_lowercase()));
        rest = after_unit;
    }
    Ok(pairs)
}

/// Sums components whose units come from `units`, each at most once and in order.
fn sum_components(text: &str, units: &[(&str, u128)], part: &str) -> Result<u128, String> {
    let mut remaining = units;
    let mut total: u128 = 0;
    for (number, unit) in components(text)? {
        let Some(position) = remaining.iter().position(|(name, _)| *name == unit) else {
            let expected: Vec<&str> = units.iter().map(|(name, _)| *name).collect();
            return Err(format!(
                "unexpected unit {unit:?} in {part} (expected {} in that order, each once)",
                expected.join(", ")
            ));
        };
        let nanos = number
            .scale(remaining[position].1)
            .ok_or_else(|| "value is too large".to_string())?;
        total = total
            .checked_add(nanos)
            .ok_or_else(|| "value is too large".to_string())?;
        remaining = &remaining[position + 1..];
    }
    Ok(total)
}

fn parse_iso8601(body: &str) -> Result<u128, String> {
    let (date, time) = match body.split_once(['T', 't']) {
        Some((date, time)) => (date, Some(time)),
        None => (body, None),
    };
    if date.is_empty() && time.is_none_or(str::is_empty) {
        return Err("ISO-8601 duration has no components (write e.g. PT1M)".to_string());
    }
    if time == Some("") {
        return Err("'T' must be followed by hours, minutes or seconds".to_string());
    }
    if date.to_ascii_lowercase().contains(['y', 'm']) {
        return Err("years and months have no fixed length; use days (D) or weeks (W)".to_string());
    }
    let date_nanos = sum_components(date, ISO_DATE_UNITS, "the date part")?;
    let time_nanos = sum_components(time.unwrap_or(""), ISO_TIME_UNITS, "the time part")?;
    date_nanos
        .checked_add(time_nanos)
        .ok_or_else(|| "value is too large".to_string())
}

fn parse_humane(text: &str) -> Result<u128, String> {
    if text.is_empty() {
        return Err("expected e.g. \"30s\" or \"PT30S\", found nothing".to_string());
    }
    sum_components(text, HUMANE_UNITS, "a humane duration")
        .map_err(|reason| format!("{reason} (write e.g. \"500ms\", \"30s\", \"5m\" or \"PT1M\")"))
}

fn nanos_to_duration(nanos: u128) -> Result<Duration, String> {
    let seconds =
        u64::try_from(nanos / NANOS_PER_SECOND).map_err(|_| "value is too large".to_string())?;
    // The remainder of a division by 10^9 always fits in u32.
    let subsecond = (nanos % NANOS_PER_SECOND) as u32;
    Ok(Duration::new(seconds, subsecond))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Duration {
        match parse_duration(text) {
            Ok(duration) => duration,
            Err(message) => panic!("{text:?} should parse: {message}"),
        }
    }

    fn rejected(text: &str) -> String {
        match parse_duration(text) {
            Ok(duration) => panic!("{text:?} should be rejected, got {duration:?}"),
            Err(message) => message,
        }
    }

    #[test]
    fn iso8601_forms_parse() {
        assert_eq!(parsed("PT1M"), Duration::from_secs(60));
        assert_eq!(parsed("P14D"), Duration::from_secs(14 * 86_400));
        assert_eq!(parsed("PT0.5S"), Duration::from_millis(500));
        assert_eq!(parsed("P1DT2H30M"), Duration::from_secs(86_400 + 9_000));
        assert_eq!(parsed("PT1H30M15.5S"), Duration::from_millis(5_415_500));
        assert_eq!(parsed("PT10M"), Duration::from_secs(600));
        assert_eq!(parsed("P2W"), Duration::from_secs(14 * 86_400));
        assert_eq!(parsed("PT0.2S"), Duration::from_millis(200));
        assert_eq!(parsed("PT0S"), Duration::ZERO);
    }

    #[test]
    fn iso8601_is_case_insensitive_and_trimmed() {
        assert_eq!(parsed(" pt1m "), Duration::from_secs(60));
        assert_eq!(parsed("p1dt1h"), Duration::from_secs(90_000));
    }

    #[test]
    fn humane_forms_parse() {
        assert_eq!(parsed("500ms"), Duration::from_millis(500));
        assert_eq!(parsed("30s"), Duration::from_secs(30));
        assert_eq!(parsed("5m"), Duration::from_secs(300));
        assert_eq!(parsed("1h"), Duration::from_secs(3_600));
        assert_eq!(parsed("14d"), Duration::from_secs(14 * 86_400));
        assert_eq!(parsed("1.5s"), Duration::from_millis(1_500));
        assert_eq!(parsed("200ms"), Duration::from_millis(200));
        assert_eq!(parsed("250us"), Duration::from_micros(250));
        assert_eq!(parsed("7ns"), Duration::from_nanos(7));
        assert_eq!(parsed("1h30m"), Duration::from_secs(5_400));
        assert_eq!(parsed("1m30.25s"), Duration::from_millis(90_250));
        assert_eq!(parsed("30S"), Duration::from_secs(30));
    }

    #[test]
    fn fractions_are_exact() {
        assert_eq!(parsed("0.1s"), Duration::from_millis(100));
        assert_eq!(parsed("PT0.000000001S"), Duration::from_nanos(1));
        assert_eq!(parsed("0.0000000019s"), Duration::from_nanos(1));
        assert_eq!(parsed("1.25h"), Duration::from_secs(4_500));
    }

    #[test]
    fn garbage_is_rejected_with_the_value_quoted() {
        for text in [
            "", "abc", "30", "s", "1.s", ".5s", "1..5s", "5x", "-5s", "PT", "P", "P1DT", "PT1D",
            "PT1S1M", "PT1M1M", "1s1m", "1m1m", "P1Y", "P1M", "P1.5", "PT5", "5 s", "1e3s",
        ] {
            let message = rejected(text);
            assert!(
                message.contains(&format!("{text:?}")),
                "message for {text:?} should quote it: {message}"
            );
        }
    }

    #[test]
    fn rejection_explains_what_is_expected() {
        assert!(rejected("30").contains("no unit"));
        assert!(rejected("P1Y").contains("years and months"));
        assert!(rejected("soon").contains("write e.g."));
    }

    #[test]
    fn overflow_is_rejected_not_panicking() {
        assert!(rejected("99999999999999999999s").contains("too large"));
        assert!(rejected("P99999999999999999D").contains("too large"));
        assert!(rejected("18446744073709551615d").contains("too large"));
    }

    #[test]
    fn format_is_humane() {
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_secs(60)), "1m");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(1_500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(14 * 86_400)), "14d");
        assert_eq!(
            format_duration(Duration::from_secs(86_400 + 9_000)),
            "1d2h30m"
        );
        assert_eq!(format_duration(Duration::from_micros(250)), "250us");
        assert_eq!(format_duration(Duration::from_nanos(7)), "7ns");
    }

    #[test]
    fn format_round_trips_through_parse() {
        for duration in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(1_500),
            Duration::from_millis(200),
            Duration::from_millis(61_001),
            Duration::new(93_784, 5),
            Duration::from_secs(14 * 86_400),
        ] {
            assert_eq!(parsed(&format_duration(duration)), duration);
        }
    }
}
