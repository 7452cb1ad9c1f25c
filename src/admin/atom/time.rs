//! Durations (ISO 8601 and .NET `TimeSpan` text) and timestamps as the REST API writes them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;

/// Whether a duration means "unlimited" (at least `TimeSpan.MaxValue`'s whole days).
pub fn is_unlimited(duration: Duration) -> bool {
    duration.as_secs() >= UNLIMITED_DAYS * SECONDS_PER_DAY
}

/// Parses a non-negative ISO 8601 / `xs:duration` (`PT1M`, `P14D`, `P1DT2H`, `PT0.5S`,
/// `P10675199DT2H48M5.4775807S`) or a .NET `TimeSpan` text (`00:01:00`, `1.02:03:04.5`).
/// Years count 365 days, months 30, weeks 7 (as .NET's `XmlConvert` does). Fractions are kept to
/// the nanosecond. `None` on anything else, negative durations included.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    match text.strip_prefix('P') {
        Some(rest) => parse_iso_duration(rest),
        None => parse_timespan(text),
    }
}

pub(super) fn parse_iso_duration(rest: &str) -> Option<Duration> {
    let (date_part, time_part) = match rest.split_once('T') {
        Some((date, time)) => {
            if time.is_empty() {
                return None;
            }
            (date, Some(time))
        }
        None => (rest, None),
    };
    if date_part.is_empty() && time_part.is_none() {
        return None;
    }
    let mut total = Duration::ZERO;
    let mut add = |number: &str, unit_seconds: u64, fraction_allowed: bool| -> Option<()> {
        let part = number_times(number, unit_seconds, fraction_allowed)?;
        total = total.checked_add(part)?;
        Some(())
    };
    let mut number_start = 0;
    let mut last_unit_rank = 0;
    for (index, character) in date_part.char_indices() {
        if character.is_ascii_digit() {
            continue;
        }
        let (rank, seconds) = match character {
            'Y' => (1, 365 * SECONDS_PER_DAY),
            'M' => (2, 30 * SECONDS_PER_DAY),
            'W' => (3, 7 * SECONDS_PER_DAY),
            'D' => (4, SECONDS_PER_DAY),
            _ => return None,
        };
        if rank <= last_unit_rank {
            return None;
        }
        last_unit_rank = rank;
        add(&date_part[number_start..index], seconds, false)?;
        number_start = index + character.len_utf8();
    }
    if number_start != date_part.len() {
        return None;
    }
    if let Some(time) = time_part {
        let mut number_start = 0;
        let mut last_unit_rank = 0;
        for (index, character) in time.char_indices() {
            if character.is_ascii_digit() || character == '.' || character == ',' {
                continue;
            }
            let (rank, seconds, fraction_allowed) = match character {
                'H' => (1, 3600, false),
                'M' => (2, 60, false),
                'S' => (3, 1, true),
                _ => return None,
            };
            if rank <= last_unit_rank {
                return None;
            }
            last_unit_rank = rank;
            add(&time[number_start..index], seconds, fraction_allowed)?;
            number_start = index + character.len_utf8();
        }
        if number_start != time.len() {
            return None;
        }
    }
    Some(total)
}

/// `number × unit_seconds`, where `number` is digits with an optional fraction (seconds only).
pub(super) fn number_times(
    number: &str,
    unit_seconds: u64,
    fraction_allowed: bool,
) -> Option<Duration> {
    let (whole, fraction) = match number.split_once(['.', ',']) {
        Some((whole, fraction)) if fraction_allowed => (whole, Some(fraction)),
        Some(_) => return None,
        None => (number, None),
    };
    if whole.is_empty() && fraction.is_none_or(str::is_empty) {
        return None;
    }
    let whole_value: u64 = if whole.is_empty() {
        0
    } else {
        if !whole.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        whole.parse().ok()?
    };
    let seconds = whole_value.checked_mul(unit_seconds)?;
    let nanoseconds = match fraction {
        Some(fraction) => parse_fraction_nanoseconds(fraction)?,
        None => 0,
    };
    Some(Duration::new(seconds, nanoseconds))
}

/// Digits after the decimal point as nanoseconds (extra digits truncated).
pub(super) fn parse_fraction_nanoseconds(fraction: &str) -> Option<u32> {
    if fraction.is_empty() || !fraction.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let mut nanoseconds: u32 = 0;
    for position in 0..9 {
        let digit = fraction
            .as_bytes()
            .get(position)
            .map_or(0, |byte| byte - b'0');
        nanoseconds = nanoseconds * 10 + u32::from(digit);
    }
    Some(nanoseconds)
}

/// `[d.]hh:mm:ss[.fffffff]`, the .NET `TimeSpan` text some users pass through the JS SDK.
pub(super) fn parse_timespan(text: &str) -> Option<Duration> {
    let mut parts = text.split(':');
    let (first, minutes, seconds) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (days, hours) = match first.split_once('.') {
        Some((days, hours)) => (days, hours),
        None => ("0", first),
    };
    let digits = |text: &str| -> Option<u64> {
        if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    };
    let (days, hours, minutes) = (digits(days)?, digits(hours)?, digits(minutes)?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    let (whole_seconds, nanoseconds) = match seconds.split_once('.') {
        Some((whole, fraction)) => (digits(whole)?, parse_fraction_nanoseconds(fraction)?),
        None => (digits(seconds)?, 0),
    };
    if whole_seconds > 59 {
        return None;
    }
    let total = days
        .checked_mul(SECONDS_PER_DAY)?
        .checked_add(hours * 3600 + minutes * 60 + whole_seconds)?;
    Some(Duration::new(total, nanoseconds))
}

/// Writes a duration as .NET does: `P{d}DT{h}H{m}M{s}[.fffffff]S` with zero parts left out,
/// `PT0S` for zero, sub-100-ns precision dropped (`PT1M`, `P14D`, `PT0.5S`).
pub fn format_duration(duration: Duration) -> String {
    let total_seconds = duration.as_secs();
    let ticks = duration.subsec_nanos() / 100;
    let days = total_seconds / SECONDS_PER_DAY;
    let hours = (total_seconds % SECONDS_PER_DAY) / 3600;
    let minutes = (total_seconds % 3600) / 60;
    let seconds = total_seconds % 60;
    let mut text = String::from("P");
    if days > 0 {
        text.push_str(&format!("{days}D"));
    }
    if hours == 0 && minutes == 0 && seconds == 0 && ticks == 0 {
        if days == 0 {
            text.push_str("T0S");
        }
        return text;
    }
    text.push('T');
    if hours > 0 {
        text.push_str(&format!("{hours}H"));
    }
    if minutes > 0 {
        text.push_str(&format!("{minutes}M"));
    }
    if seconds > 0 || ticks > 0 {
        text.push_str(&seconds.to_string());
        if ticks > 0 {
            let fraction = format!("{ticks:07}");
            text.push('.');
            text.push_str(fraction.trim_end_matches('0'));
        }
        text.push('S');
    }
    text
}

/// Writes a duration where `None` means unlimited ([`UNLIMITED_DURATION`]).
pub fn format_duration_or_unlimited(duration: Option<Duration>) -> String {
    match duration {
        Some(duration) if !is_unlimited(duration) => format_duration(duration),
        _ => UNLIMITED_DURATION.to_string(),
    }
}

/// Writes a UTC timestamp as the service does: `2026-11-24T10:00:00.1234567Z` (always seven
/// fractional digits). Times outside years 1–9999 are clamped to that range.
pub fn format_timestamp(time: SystemTime) -> String {
    let (seconds, nanoseconds): (i64, u32) = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => (
            i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            after.subsec_nanos(),
        ),
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            if before.subsec_nanos() == 0 {
                (whole.saturating_neg(), 0)
            } else {
                (
                    whole.saturating_neg().saturating_sub(1),
                    1_000_000_000 - before.subsec_nanos(),
                )
            }
        }
    };
    // 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z relative to the Unix epoch.
    const MINIMUM: i64 = -62_135_596_800;
    const MAXIMUM: i64 = 253_402_300_799;
    let (seconds, nanoseconds) = if seconds < MINIMUM {
        (MINIMUM, 0)
    } else if seconds > MAXIMUM {
        (MAXIMUM, 999_999_999)
    } else {
        (seconds, nanoseconds)
    };
    let days = seconds.div_euclid(SECONDS_PER_DAY as i64);
    let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY as i64);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:07}Z",
        second_of_day / 3600,
        (second_of_day % 3600) / 60,
        second_of_day % 60,
        nanoseconds / 100
    )
}

/// Parses an `xs:dateTime` (`2020-01-02T03:04:05[.fff…][Z|±hh:mm]`; no zone = UTC, as Python's
/// naive `isoformat()` comes out) into a UTC `SystemTime`.
pub fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut date_parts = date.splitn(3, '-');
    let year: i64 = fixed_digits(date_parts.next()?, 4)?;
    let month: i64 = fixed_digits(date_parts.next()?, 2)?;
    let day: i64 = fixed_digits(date_parts.next()?, 2)?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // Split off the zone designator.
    let (clock, offset_seconds) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else if let Some(position) = time.rfind(['+', '-']) {
        let (clock, zone) = time.split_at(position);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (hours, minutes) = zone.get(1..)?.split_once(':')?;
        let hours: i64 = fixed_digits(hours, 2)?;
        let minutes: i64 = fixed_digits(minutes, 2)?;
        if hours > 14 || minutes > 59 {
            return None;
        }
        (clock, sign * (hours * 3600 + minutes * 60))
    } else {
        (time, 0)
    };
    let mut clock_parts = clock.splitn(3, ':');
    let hour: i64 = fixed_digits(clock_parts.next()?, 2)?;
    let minute: i64 = fixed_digits(clock_parts.next()?, 2)?;
    let second_text = clock_parts.next()?;
    let (whole_second, nanoseconds) = match second_text.split_once('.') {
        Some((whole, fraction)) => (
            fixed_digits::<i64>(whole, 2)?,
            parse_fraction_nanoseconds(fraction)?,
        ),
        None => (fixed_digits::<i64>(second_text, 2)?, 0),
    };
    if hour > 24 || minute > 59 || whole_second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds =
        days * SECONDS_PER_DAY as i64 + hour * 3600 + minute * 60 + whole_second - offset_seconds;
    let nanoseconds = Duration::from_nanos(u64::from(nanoseconds));
    if seconds >= 0 {
        Some(UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs()) + nanoseconds)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(seconds.unsigned_abs()))
            .map(|time| time + nanoseconds)
    }
}

pub(super) fn fixed_digits<T: std::str::FromStr>(text: &str, length: usize) -> Option<T> {
    if text.len() != length || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

pub(super) fn is_leap_year(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

pub(super) fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(super) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let shifted_month = (month + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
pub(super) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
