//! Tests of the ATOM codec's durations and timestamps (`atom/time.rs`): what the SDKs and
//! .NET write, read back, and what the service writes.

use super::*;

#[test]
fn durations_are_read() {
    let cases = [
        ("PT1M", Duration::from_secs(60)),
        ("PT45S", Duration::from_secs(45)),
        ("P14D", Duration::from_secs(14 * 86_400)),
        ("PT1H30M", minutes(90)),
        ("P1DT2H3M4S", Duration::from_secs(86_400 + 7_384)),
        ("PT0.5S", Duration::from_millis(500)),
        ("PT1H0.5S", Duration::from_millis(3_600_500)),
        ("PT.25S", Duration::from_millis(250)),
        ("PT0S", Duration::ZERO),
        ("P0D", Duration::ZERO),
        ("P1W", Duration::from_secs(7 * 86_400)),
        ("P1Y", Duration::from_secs(365 * 86_400)),
        ("P1M", Duration::from_secs(30 * 86_400)),
        ("PT90M", minutes(90)),
        ("PT1.123456789123S", Duration::new(1, 123_456_789)),
        ("00:05:00", minutes(5)),
        ("1.02:03:04.5", Duration::new(93_784, 500_000_000)),
        (
            UNLIMITED_DURATION,
            Duration::new(922_337_203_685, 477_580_700),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_duration(text), Some(expected), "{text}");
    }
    for text in [
        "",
        "P",
        "PT",
        "1M",
        "-PT1M",
        "PT1",
        "P1H",
        "PT1D",
        "PT1M1H",
        "P1.5D",
        "PT1.5M",
        "PTS",
        "PT1S2",
        "P99999999999999999999D",
        "P213503982334602D",
        "25:00:00",
        "00:61:00",
        "abc",
    ] {
        assert_eq!(parse_duration(text), None, "{text}");
    }
}

#[test]
fn durations_are_written_as_dotnet_does() {
    let cases = [
        (Duration::ZERO, "PT0S"),
        (Duration::from_secs(60), "PT1M"),
        (minutes(10), "PT10M"),
        (Duration::from_secs(14 * 86_400), "P14D"),
        (Duration::from_secs(86_400 + 7_384), "P1DT2H3M4S"),
        (Duration::from_millis(500), "PT0.5S"),
        (Duration::from_millis(3_600_500), "PT1H0.5S"),
        (Duration::new(5, 123_456_789), "PT5.1234567S"),
    ];
    for (duration, text) in cases {
        assert_eq!(format_duration(duration), text);
    }
    assert_eq!(
        format_duration(parse_duration(UNLIMITED_DURATION).unwrap()),
        UNLIMITED_DURATION
    );
    assert_eq!(format_duration_or_unlimited(None), UNLIMITED_DURATION);
    assert_eq!(
        format_duration_or_unlimited(Some(Duration::from_secs(u64::MAX))),
        UNLIMITED_DURATION
    );
    assert_eq!(format_duration_or_unlimited(Some(minutes(1))), "PT1M");
}

#[test]
fn timestamps_are_written_with_seven_digits() {
    assert_eq!(format_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.0000000Z");
    assert_eq!(
        format_timestamp(at(1_795_514_400, 123_456_789)),
        "2026-11-24T10:00:00.1234567Z"
    );
    assert_eq!(
        format_timestamp(at(951_782_400, 0)),
        "2000-02-29T00:00:00.0000000Z"
    );
    let before_epoch = UNIX_EPOCH - Duration::new(1, 500_000_000);
    assert_eq!(
        format_timestamp(before_epoch),
        "1969-12-31T23:59:58.5000000Z"
    );
    let year_one = UNIX_EPOCH - Duration::from_secs(62_135_596_800);
    assert_eq!(format_timestamp(year_one), "0001-01-01T00:00:00.0000000Z");
    let too_early = UNIX_EPOCH - Duration::from_secs(70_000_000_000);
    assert_eq!(format_timestamp(too_early), "0001-01-01T00:00:00.0000000Z");
    assert_eq!(
        format_timestamp(at(300_000_000_000, 0)),
        "9999-12-31T23:59:59.9999999Z"
    );
}

#[test]
fn timestamps_are_read_with_any_zone() {
    let expected = at(1_577_934_245, 0);
    for text in [
        "2020-01-02T03:04:05Z",
        "2020-01-02T03:04:05.000Z",
        "2020-01-02T03:04:05+00:00",
        "2020-01-02T03:04:05",
        "2020-01-02T04:04:05+01:00",
        "2020-01-01T22:04:05-05:00",
    ] {
        assert_eq!(parse_timestamp(text), Some(expected), "{text}");
    }
    assert_eq!(
        parse_timestamp("2026-11-24T10:00:00.1234567Z"),
        Some(at(1_795_514_400, 123_456_700))
    );
    assert_eq!(
        parse_timestamp("0001-01-01T00:00:00Z"),
        Some(UNIX_EPOCH - Duration::from_secs(62_135_596_800))
    );
    for text in [
        "2020-13-01T00:00:00Z",
        "2019-02-29T00:00:00Z",
        "2020-01-02",
        "2020-01-02T3:04:05Z",
        "2020-01-02T03:04:05+1:00",
        "yesterday",
    ] {
        assert_eq!(parse_timestamp(text), None, "{text}");
    }
}
