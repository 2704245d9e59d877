//! Unit tests: syntax, semantics of each feature, error texts, never-firing detection,
//! `@every`, DST warnings and the zones with unusual transitions.

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use chrono_tz::UTC;

use super::{at, now};
use crate::schedule::{DstChange, Schedule, ScheduleError};

fn parse(text: &str) -> Schedule {
    parse_in(text, UTC)
}

fn parse_in(text: &str, tz: Tz) -> Schedule {
    Schedule::parse_at(text, tz, now()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn error(text: &str) -> String {
    match Schedule::parse_at(text, UTC, now()) {
        Ok(_) => panic!("{text:?} parsed"),
        Err(e) => e.to_string(),
    }
}

/// The first `n` fires after `from`, as RFC 3339 UTC strings.
fn fires(schedule: &Schedule, from: &str, n: usize) -> Vec<String> {
    schedule
        .iter_after(at(from))
        .take(n)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .collect()
}

#[test]
fn five_six_and_seven_fields() {
    assert_eq!(
        fires(&parse("30 3 * * *"), "2026-01-01T00:00:00Z", 2),
        ["2026-01-01T03:30:00Z", "2026-01-02T03:30:00Z"]
    );
    assert_eq!(
        fires(&parse("15 30 3 * * *"), "2026-01-01T00:00:00Z", 2),
        ["2026-01-01T03:30:15Z", "2026-01-02T03:30:15Z"]
    );
    assert_eq!(
        fires(&parse("0 30 3 1 1 * 2027,2029"), "2026-01-01T00:00:00Z", 3),
        ["2027-01-01T03:30:00Z", "2029-01-01T03:30:00Z"]
    );
    assert_eq!(
        error("* * * *"),
        "is not a cron expression: expected 5, 6 or 7 fields, got 4"
    );
    assert_eq!(
        error("* * * * * * * *"),
        "is not a cron expression: expected 5, 6 or 7 fields, got 8"
    );
}

#[test]
fn whitespace_and_case_are_tolerated() {
    assert_eq!(
        fires(&parse("  0\t9  *  jan  mon  "), "2026-01-01T00:00:00Z", 1),
        ["2026-01-05T09:00:00Z"]
    );
}

#[test]
fn names_ranges_lists_and_steps() {
    // Mondays to Fridays of March and December, at 09:00.
    assert_eq!(
        fires(&parse("0 9 * MAR,DEC MON-FRI"), "2026-02-27T00:00:00Z", 3),
        [
            "2026-03-02T09:00:00Z",
            "2026-03-03T09:00:00Z",
            "2026-03-04T09:00:00Z"
        ]
    );
    // FRI-SUN wraps to Sunday as 7.
    assert_eq!(
        fires(&parse("0 9 * * FRI-SUN"), "2026-01-01T00:00:00Z", 4),
        [
            "2026-01-02T09:00:00Z",
            "2026-01-03T09:00:00Z",
            "2026-01-04T09:00:00Z",
            "2026-01-09T09:00:00Z"
        ]
    );
    // SUN-SUN (and 0-SUN) is Sunday alone, not the whole week 0-7.
    for sundays in ["0 9 * * SUN-SUN", "0 9 * * 0-SUN", "0 9 * * sun-sun"] {
        assert_eq!(
            fires(&parse(sundays), "2026-01-01T00:00:00Z", 2),
            ["2026-01-04T09:00:00Z", "2026-01-11T09:00:00Z"],
            "{sundays}"
        );
    }
    assert_eq!(
        fires(&parse("10-30/10,45 8 * * *"), "2026-01-01T00:00:00Z", 5),
        [
            "2026-01-01T08:10:00Z",
            "2026-01-01T08:20:00Z",
            "2026-01-01T08:30:00Z",
            "2026-01-01T08:45:00Z",
            "2026-01-02T08:10:00Z"
        ]
    );
    assert_eq!(
        fires(&parse("*/20 * * * *"), "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-01T00:20:00Z",
            "2026-01-01T00:40:00Z",
            "2026-01-01T01:00:00Z"
        ]
    );
}

#[test]
fn last_weekday_and_nth() {
    // L: last day of the month.
    assert_eq!(
        fires(&parse("0 0 L * *"), "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-31T00:00:00Z",
            "2026-02-28T00:00:00Z",
            "2026-03-31T00:00:00Z"
        ]
    );
    // 15W: the weekday nearest the 15th (2026-02-15 is a Sunday: Monday 16th).
    assert_eq!(
        fires(&parse("0 0 15W * *"), "2026-02-01T00:00:00Z", 1),
        ["2026-02-16T00:00:00Z"]
    );
    // LW: the last weekday (2026-05-31 is a Sunday: Friday 29th).
    assert_eq!(
        fires(&parse("0 0 LW * *"), "2026-05-01T00:00:00Z", 1),
        ["2026-05-29T00:00:00Z"]
    );
    // 5#2: the second Friday.
    assert_eq!(
        fires(&parse("0 0 * * 5#2"), "2026-01-01T00:00:00Z", 2),
        ["2026-01-09T00:00:00Z", "2026-02-13T00:00:00Z"]
    );
    // 5L: the last Friday.
    assert_eq!(
        fires(&parse("0 0 * * FRIL"), "2026-01-01T00:00:00Z", 2),
        ["2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z"]
    );
}

#[test]
fn day_of_week_0_and_7_are_sunday() {
    let sundays = ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"];
    assert_eq!(
        fires(&parse("0 0 * * 0"), "2026-01-01T00:00:00Z", 2),
        sundays
    );
    assert_eq!(
        fires(&parse("0 0 * * 7"), "2026-01-01T00:00:00Z", 2),
        sundays
    );
    assert_eq!(
        fires(&parse("0 0 * * SUN"), "2026-01-01T00:00:00Z", 2),
        sundays
    );
}

#[test]
fn restricted_day_of_month_and_day_of_week_match_either() {
    // The 13th, and every Friday (2026-02-13 is both: one fire).
    assert_eq!(
        fires(&parse("0 0 13 * FRI"), "2026-02-01T00:00:00Z", 4),
        [
            "2026-02-06T00:00:00Z",
            "2026-02-13T00:00:00Z",
            "2026-02-20T00:00:00Z",
            "2026-02-27T00:00:00Z"
        ]
    );
    // crontab: a day field starting with `*` is unrestricted, so both must match:
    // odd days that are Mondays.
    assert_eq!(
        fires(&parse("0 0 */2 * MON"), "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-05T00:00:00Z",
            "2026-01-19T00:00:00Z",
            "2026-02-09T00:00:00Z"
        ]
    );
    // `?` is `*`.
    assert_eq!(
        fires(&parse("0 0 ? * MON"), "2026-01-01T00:00:00Z", 2),
        ["2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"]
    );
}

#[test]
fn descriptors() {
    let cases = [
        ("@yearly", ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"]),
        (
            "@annually",
            ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"],
        ),
        ("@monthly", ["2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"]),
        ("@weekly", ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"]),
        ("@daily", ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"]),
        (
            "@midnight",
            ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"],
        ),
        ("@hourly", ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"]),
        ("@DAILY", ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"]),
        ("@Hourly", ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"]),
    ];
    for (text, want) in cases {
        assert_eq!(
            fires(&parse(text), "2026-01-01T00:00:00Z", 2),
            want,
            "{text}"
        );
    }
    assert!(parse("@hourly").is_pinned().eq(&false));
    assert!(parse("@daily").is_pinned());
}

#[test]
fn every_is_aligned_to_the_unix_epoch() {
    let s = parse("@every 90s");
    assert_eq!(s.is_every(), Some(Duration::from_secs(90)));
    assert!(!s.is_pinned());
    // 2026-01-01T00:00:00Z is 1767225600 = 90 * 19635840.
    assert_eq!(
        fires(&s, "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-01T00:01:30Z",
            "2026-01-01T00:03:00Z",
            "2026-01-01T00:04:30Z"
        ]
    );
    // Any start gives the same grid.
    assert_eq!(
        fires(&s, "2026-01-01T00:01:29.999Z", 1),
        ["2026-01-01T00:01:30Z"]
    );
    assert_eq!(
        fires(&s, "2026-01-01T00:01:30Z", 1),
        ["2026-01-01T00:03:00Z"]
    );
    // Zones do not matter.
    let berlin = parse_in("@every 90s", chrono_tz::Europe::Berlin);
    assert_eq!(
        fires(&berlin, "2026-03-29T00:59:00Z", 2),
        ["2026-03-29T01:00:00Z", "2026-03-29T01:01:30Z"]
    );
    assert_eq!(
        fires(&parse("@every 1h 30m"), "2026-01-01T00:00:00Z", 1),
        ["2026-01-01T01:30:00Z"]
    );
    assert_eq!(
        fires(&parse("@EVERY 1s"), "2026-01-01T00:00:00Z", 2),
        ["2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"]
    );
}

#[test]
fn error_messages_name_the_field_and_the_allowed_values() {
    let cases = [
        (
            "",
            "is empty: give a cron expression, such as \"30 3 * * *\", or \"@every 5m\"",
        ),
        (
            "   ",
            "is empty: give a cron expression, such as \"30 3 * * *\", or \"@every 5m\"",
        ),
        (
            "61 0 * * *",
            "is not a cron expression: minute 61 is outside 0-59",
        ),
        (
            "0 61 * * *",
            "is not a cron expression: hour 61 is outside 0-23",
        ),
        (
            "0 0 24 * * *",
            "is not a cron expression: hour 24 is outside 0-23",
        ),
        (
            "0 0 32 * *",
            "is not a cron expression: day-of-month 32 is outside 1-31",
        ),
        (
            "0 0 0 * *",
            "is not a cron expression: day-of-month 0 is outside 1-31",
        ),
        (
            "0 0 * 13 *",
            "is not a cron expression: month 13 is outside 1-12 or JAN-DEC",
        ),
        (
            "0 0 * * 8",
            "is not a cron expression: day-of-week 8 is outside 0-7 or SUN-SAT",
        ),
        (
            "60 0 0 * * *",
            "is not a cron expression: second 60 is outside 0-59",
        ),
        (
            "0 0 0 * * * 1969",
            "is not a cron expression: year 1969 is outside 1970-2999",
        ),
        (
            "0 99999999999 * * *",
            "is not a cron expression: hour 99999999999 is outside 0-23",
        ),
        (
            "0 x * * *",
            "is not a cron expression: hour \"x\" is not a value in 0-23",
        ),
        (
            "0 MON * * *",
            "is not a cron expression: hour \"MON\" is not a value in 0-23",
        ),
        (
            "0 0 * FOO *",
            "is not a cron expression: month \"FOO\" is not a value in 1-12 or JAN-DEC",
        ),
        (
            "0 0 * * MOM",
            "is not a cron expression: day-of-week \"MOM\" is not a value in 0-7 or SUN-SAT",
        ),
        (
            "-5 * * * *",
            "is not a cron expression: minute \"-5\" is not a value in 0-59",
        ),
        (
            "0 5-2 * * *",
            "is not a cron expression: hour range \"5-2\" goes backwards: write the smaller value first",
        ),
        (
            "*/0 * * * *",
            "is not a cron expression: minute step in \"*/0\" must be a number in 1-59",
        ),
        (
            "*/x * * * *",
            "is not a cron expression: minute step in \"*/x\" must be a number in 1-59",
        ),
        (
            "5/10 * * * *",
            "is not a cron expression: minute \"5/10\" needs * or a range before the /: write \"*/10\" or \"5-59/10\"",
        ),
        (
            "1,,2 * * * *",
            "is not a cron expression: minute \"1,,2\" has an empty list item",
        ),
        (
            "0 0 * * 5#6",
            "is not a cron expression: day-of-week \"5#6\": the number after # must be 1-5",
        ),
        (
            "0 0 3#2 * *",
            "is not a cron expression: day-of-month \"3#2\": # is only allowed in day-of-week",
        ),
        (
            "0 0 * * 5W",
            "is not a cron expression: day-of-week \"5W\": W is only allowed in day-of-month",
        ),
        (
            "0 0 * * L",
            "is not a cron expression: day-of-week \"L\" needs a weekday before L, such as 5L for the last Friday of the month",
        ),
        (
            "0 0 L5 * *",
            "is not a cron expression: day-of-month \"L5\" is not valid: use L (last day), LW (last weekday) or a day with W, such as 15W",
        ),
        (
            "5L * * * *",
            "is not a cron expression: minute \"5L\": L, W, # and ? are only allowed in day-of-month and day-of-week",
        ),
        (
            "? * * * *",
            "is not a cron expression: minute \"?\": L, W, # and ? are only allowed in day-of-month and day-of-week",
        ),
        (
            "@foo",
            "is not a schedule: unknown descriptor \"@foo\"; use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or \"@every DURATION\"",
        ),
        (
            "@reboot",
            "is not a schedule: unknown descriptor \"@reboot\"; use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or \"@every DURATION\"",
        ),
        (
            "@daily 5",
            "is not a schedule: unknown descriptor \"@daily 5\"; use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or \"@every DURATION\"",
        ),
        (
            "@every",
            "is not a schedule: @every needs a duration, such as \"@every 5m\"",
        ),
        (
            "@every 5x",
            "\"5x\" is not a duration: use a number and a unit, such as \"90s\", \"5m\" or \"1h 30m\"",
        ),
        (
            "@every 1.5s",
            "\"1.5s\" is not a whole number of seconds: @every needs whole seconds, such as \"90s\"",
        ),
        (
            "@every 500ms",
            "\"500ms\" is shorter than 1s: @every needs at least one second",
        ),
        (
            "@every 0s",
            "\"0s\" is shorter than 1s: @every needs at least one second",
        ),
        (
            "@every 1500ms",
            "\"1500ms\" is not a whole number of seconds: @every needs whole seconds, such as \"90s\"",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(error(text), want, "{text:?}");
    }
}

#[test]
fn field_errors_carry_the_field_name() {
    let err = Schedule::parse_at("0 0 * 13 *", UTC, now()).unwrap_err();
    assert!(
        matches!(err, ScheduleError::Field { field: "month", .. }),
        "{err:?}"
    );
}

#[test]
fn schedules_that_can_never_fire_are_refused() {
    let cases = [
        (
            "0 0 30 2 *",
            "can never fire: no date matches its day-of-month, month and day-of-week fields",
        ),
        (
            "0 0 31 4,6,9,11 *",
            "can never fire: no date matches its day-of-month, month and day-of-week fields",
        ),
        (
            "0 0 0 1 1 * 2020",
            "can never fire: its last year, 2020, is past",
        ),
        (
            "0 0 0 31 4 * 2027",
            "can never fire: no date from now on matches its day-of-month, month, day-of-week and year fields",
        ),
        (
            "0 0 0 1 1 * 2026",
            "can never fire: its last time, 2026-01-01T00:00:00+00:00, is past",
        ),
        (
            "0 0 0 30 2 * 2026-2999",
            "can never fire: no date from now on matches its day-of-month, month, day-of-week and year fields",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(error(text), want, "{text:?}");
    }
    // Far years are searched too (past the 400-year calendar cycle from now).
    assert_eq!(
        fires(&parse("0 0 0 1 1 * 2990"), "2026-01-01T00:00:00Z", 2),
        ["2990-01-01T00:00:00Z"]
    );
    assert_eq!(
        fires(
            &parse("0 0 0 29 2 * 2100,2500,2800"),
            "2026-01-01T00:00:00Z",
            2
        ),
        ["2800-02-29T00:00:00Z"]
    );
    // Rare but possible: February 29, or the 31st combined with a weekday.
    assert_eq!(
        fires(&parse("0 0 29 2 *"), "2026-01-01T00:00:00Z", 2),
        ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]
    );
    assert_eq!(
        fires(&parse("0 0 30 2 MON"), "2026-02-01T00:00:00Z", 1),
        ["2026-02-02T00:00:00Z"]
    );
}

#[test]
fn a_schedule_with_a_last_year_ends() {
    let s = parse("0 0 12 31 12 * 2027");
    let last = at("2027-12-31T12:00:00Z");
    assert_eq!(s.iter_after(now()).collect::<Vec<_>>(), [last]);
    assert_eq!(s.next_after(last), None);
    assert_eq!(s.next_after(at("2090-01-01T00:00:00Z")), None);
    // Elapsed-time schedule with a year: ends at its last minute.
    let s = parse("0 * 23 31 12 * 2026");
    assert_eq!(
        s.next_after(at("2026-12-31T23:58:30Z")),
        Some(at("2026-12-31T23:59:00Z"))
    );
    assert_eq!(s.next_after(at("2026-12-31T23:59:00Z")), None);
}

#[test]
fn pinned_follows_cronie() {
    for (text, pinned) in [
        ("30 2 * * *", true),
        ("0 1-2 * * *", true),
        ("0 1,2 * * *", true),
        ("0 */2 * * *", false),
        ("*/15 * * * *", false),
        ("* 2 * * *", false),
        ("0 * * * *", false),
        ("*/10 0 3 * * *", true),
        ("@hourly", false),
        ("@daily", true),
        ("@every 5m", false),
    ] {
        assert_eq!(parse(text).is_pinned(), pinned, "{text}");
    }
}

#[test]
fn accessors() {
    let s = parse_in(" 30 2 * * * ", chrono_tz::Asia::Shanghai);
    assert_eq!(s.as_str(), " 30 2 * * * ");
    assert_eq!(s.timezone(), chrono_tz::Asia::Shanghai);
    assert_eq!(s.is_every(), None);
}

fn warnings(text: &str, tz: Tz, from: &str, days: u64) -> Vec<String> {
    parse_in(text, tz)
        .dst_warnings(at(from), Duration::from_secs(days * 86_400))
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn dst_warnings_for_pinned_schedules() {
    use chrono_tz::America::New_York;
    assert_eq!(
        warnings("30 2 * * *", New_York, "2027-01-01T00:00:00Z", 365),
        [
            "fires at 02:30 which does not exist on 2027-03-14 in America/New_York (clocks spring forward): it runs at 03:00 EDT instead"
        ]
    );
    assert_eq!(
        warnings("30 1 * * *", New_York, "2026-06-01T00:00:00Z", 200),
        [
            "fires at 01:30 which occurs twice on 2026-11-01 in America/New_York (clocks fall back): it runs once, at the first pass (01:30 EDT)"
        ]
    );
    assert_eq!(
        warnings("0,30 2 * * *", New_York, "2026-01-01T00:00:00Z", 365),
        [
            "fires at 02:00, 02:30 which do not exist on 2026-03-08 in America/New_York (clocks spring forward): they run once, at 03:00 EDT instead"
        ]
    );
    assert_eq!(
        warnings("0-59 1 * * *", New_York, "2026-06-01T00:00:00Z", 200),
        [
            "fires at 01:00, 01:01, 01:02 and 57 more times which occur twice on 2026-11-01 in America/New_York (clocks fall back): each runs once, at the first pass (EDT)"
        ]
    );
    assert_eq!(
        warnings("30 15 10 * * *", New_York, "2026-01-01T00:00:00Z", 365),
        Vec::<String>::new()
    );
    assert_eq!(
        warnings("30 15 2 * * *", New_York, "2026-01-01T00:00:00Z", 365),
        [
            "fires at 02:15:30 which does not exist on 2026-03-08 in America/New_York (clocks spring forward): it runs at 03:00:00 EDT instead"
        ]
    );
    // Outside the horizon: nothing.
    assert!(warnings("30 2 * * *", New_York, "2026-03-09T00:00:00Z", 30).is_empty());
    // Elapsed-time schedules have no warnings.
    assert!(warnings("*/15 * * * *", New_York, "2026-01-01T00:00:00Z", 365).is_empty());
    assert!(warnings("@every 1h", New_York, "2026-01-01T00:00:00Z", 365).is_empty());

    let w = parse_in("30 2 * * *", chrono_tz::Europe::Berlin).dst_warnings(
        at("2026-01-01T00:00:00Z"),
        Duration::from_secs(365 * 86_400),
    );
    assert_eq!(w.len(), 2);
    assert_eq!(w[0].change, DstChange::SpringForward);
    assert_eq!(w[0].count, 1);
    assert_eq!(w[0].runs_at.with_timezone(&Utc), at("2026-03-29T01:00:00Z"));
    assert_eq!(w[1].change, DstChange::FallBack);
    assert_eq!(w[1].runs_at.with_timezone(&Utc), at("2026-10-25T00:30:00Z"));
    assert_eq!(
        w[1].to_string(),
        "fires at 02:30 which occurs twice on 2026-10-25 in Europe/Berlin (clocks fall back): it runs once, at the first pass (02:30 CEST)"
    );
}

#[test]
fn dst_warnings_with_a_shared_transition_cache_are_the_same() {
    use chrono_tz::America::{Havana, New_York, Santiago};
    use chrono_tz::Australia::Lord_Howe;
    use chrono_tz::Europe::Berlin;
    let mut cache = crate::schedule::TransitionCache::new();
    let from = at("2026-01-01T00:00:00Z");
    let horizon = Duration::from_secs(366 * 86_400);
    let mut warned = 0;
    for tz in [New_York, Berlin, Havana, Santiago, Lord_Howe, UTC] {
        for text in [
            "30 2 * * *",
            "0 0 * * *",
            "45 1 * * *",
            "15 1,2 * * SUN",
            "*/15 * * * *",
        ] {
            let s = parse_in(text, tz);
            let fresh = s.dst_warnings(from, horizon);
            assert_eq!(s.dst_warnings_cached(from, horizon, &mut cache), fresh);
            warned += fresh.len();
        }
    }
    assert!(warned >= 10, "the zones must give warnings: {warned}");
    // Another window is not served from the first one's transitions.
    let s = parse_in("30 2 * * *", New_York);
    let later = at("2027-06-01T00:00:00Z");
    assert_eq!(
        s.dst_warnings_cached(later, horizon, &mut cache),
        s.dst_warnings(later, horizon)
    );
}

#[test]
fn dst_warnings_in_zones_with_midnight_or_half_hour_changes() {
    use chrono_tz::America::{Havana, Santiago};
    use chrono_tz::Australia::Lord_Howe;
    assert_eq!(
        warnings("45 1 * * *", Lord_Howe, "2026-01-01T00:00:00Z", 365),
        [
            "fires at 01:45 which occurs twice on 2026-04-05 in Australia/Lord_Howe (clocks fall back): it runs once, at the first pass (01:45 +11)"
        ]
    );
    assert_eq!(
        warnings("15 2 * * *", Lord_Howe, "2026-01-01T00:00:00Z", 365),
        [
            "fires at 02:15 which does not exist on 2026-10-04 in Australia/Lord_Howe (clocks spring forward): it runs at 02:30 +11 instead"
        ]
    );
    assert_eq!(
        warnings("@daily", Santiago, "2026-01-01T00:00:00Z", 365),
        [
            "fires at 00:00 which does not exist on 2026-09-06 in America/Santiago (clocks spring forward): it runs at 01:00 -03 instead"
        ]
    );
    assert_eq!(
        warnings("30 23 * * *", Santiago, "2026-01-01T00:00:00Z", 365),
        [
            "fires at 23:30 which occurs twice on 2026-04-04 in America/Santiago (clocks fall back): it runs once, at the first pass (23:30 -03)"
        ]
    );
    assert_eq!(
        warnings("30 0 * * *", Havana, "2026-01-01T00:00:00Z", 365),
        [
            "fires at 00:30 which does not exist on 2026-03-08 in America/Havana (clocks spring forward): it runs at 01:00 CDT instead",
            "fires at 00:30 which occurs twice on 2026-11-01 in America/Havana (clocks fall back): it runs once, at the first pass (00:30 CDT)"
        ]
    );
}

#[test]
fn midnight_and_half_hour_transitions_fire_once_in_order() {
    use chrono_tz::America::{Havana, Santiago};
    use chrono_tz::Australia::Lord_Howe;
    let cases: [(&str, Tz, &str, &[&str]); 6] = [
        // Santiago springs forward 2026-09-06 00:00 -04 -> 01:00 -03 (04:00Z).
        (
            "@daily",
            Santiago,
            "2026-09-05T00:00:00Z",
            &[
                "2026-09-05T04:00:00Z",
                "2026-09-06T04:00:00Z",
                "2026-09-07T03:00:00Z",
            ],
        ),
        // Santiago falls back 2026-04-05 00:00 -03 -> 04-04 23:00 -04 (03:00Z).
        (
            "30 23 * * *",
            Santiago,
            "2026-04-03T03:00:00Z",
            &[
                "2026-04-04T02:30:00Z",
                "2026-04-05T02:30:00Z",
                "2026-04-06T03:30:00Z",
            ],
        ),
        (
            "30 * * * *",
            Santiago,
            "2026-04-05T01:00:00Z",
            &[
                "2026-04-05T01:30:00Z",
                "2026-04-05T02:30:00Z",
                "2026-04-05T03:30:00Z",
                "2026-04-05T04:30:00Z",
            ],
        ),
        // Havana springs forward 2026-03-08 00:00 CST -> 01:00 CDT (05:00Z).
        (
            "0 0 * * *",
            Havana,
            "2026-03-07T00:00:00Z",
            &[
                "2026-03-07T05:00:00Z",
                "2026-03-08T05:00:00Z",
                "2026-03-09T04:00:00Z",
            ],
        ),
        // Lord Howe falls back 2026-04-05 02:00 +11 -> 01:30 +10:30 (15:00Z on 04-04):
        // 01:45 is repeated. Elapsed time runs both passes.
        (
            "45 * * * *",
            Lord_Howe,
            "2026-04-04T13:00:00Z",
            &[
                "2026-04-04T13:45:00Z",
                "2026-04-04T14:45:00Z",
                "2026-04-04T15:15:00Z",
                "2026-04-04T16:15:00Z",
            ],
        ),
        // Lord Howe springs forward 2026-10-04 02:00 +10:30 -> 02:30 +11 (15:30Z on 10-03).
        (
            "15 2 * * *",
            Lord_Howe,
            "2026-10-02T00:00:00Z",
            &[
                "2026-10-02T15:45:00Z",
                "2026-10-03T15:30:00Z",
                "2026-10-04T15:15:00Z",
            ],
        ),
    ];
    for (text, tz, from, want) in cases {
        let got: Vec<String> = parse_in(text, tz)
            .iter_after(at(from))
            .take(want.len())
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .collect();
        assert_eq!(got, want, "{text} in {}", tz.name());
    }
}

/// Every 5 minutes for 3 hours either side of each 2026 transition of the zones with
/// unusual changes: the next fires are later than the start and strictly increasing.
#[test]
fn sweep_around_unusual_transitions_never_goes_back() {
    use chrono_tz::America::{Havana, New_York, Santiago};
    use chrono_tz::Australia::Lord_Howe;
    use chrono_tz::Europe::Berlin;
    let patterns = [
        "0 0 * * *",
        "30 0 * * *",
        "0 1-2 * * *",
        "45 1 * * *",
        "*/15 * * * *",
        "0 * * * *",
        "30 23 * * *",
        "10 0,1,2,23 * * *",
    ];
    let zones = [Havana, Santiago, Lord_Howe, New_York, Berlin];
    for tz in zones {
        let transitions = crate::schedule::zone::transitions(
            tz,
            at("2026-01-01T00:00:00Z").timestamp(),
            at("2027-01-01T00:00:00Z").timestamp(),
        );
        assert_eq!(transitions.len(), 2, "{}", tz.name());
        for pattern in patterns {
            let s = parse_in(pattern, tz);
            for t in &transitions {
                let center = DateTime::from_timestamp(t.at, 0).unwrap();
                for step in -36..=36 {
                    let start = center + chrono::Duration::minutes(5 * step);
                    let mut prev = start;
                    for next in s.iter_after(start).take(4) {
                        assert!(
                            next > prev,
                            "{pattern} in {} from {start}: {next} <= {prev}",
                            tz.name()
                        );
                        prev = next;
                    }
                }
            }
        }
    }
}

/// Samoa skipped 2011-12-30 entirely (UTC-10 to UTC+14 at 2011-12-30T10:00Z): a pinned
/// time that day runs at the first instant after the gap; elapsed time skips the day.
#[test]
fn a_skipped_whole_day_runs_pinned_times_once_after_it() {
    use chrono_tz::Pacific::Apia;
    let pinned: Vec<_> = parse_in("0 9 * * *", Apia)
        .iter_after(at("2011-12-29T00:00:00Z"))
        .take(3)
        .collect();
    assert_eq!(
        pinned,
        [
            at("2011-12-29T19:00:00Z"), // 12-29 09:00 -10
            at("2011-12-30T10:00:00Z"), // 12-30 09:00 does not exist: 12-31 00:00 +14
            at("2011-12-30T19:00:00Z"), // 12-31 09:00 +14
        ]
    );
    let elapsed: Vec<_> = parse_in("0 */12 * * *", Apia)
        .iter_after(at("2011-12-29T00:00:00Z"))
        .take(4)
        .collect();
    assert_eq!(
        elapsed,
        [
            at("2011-12-29T10:00:00Z"), // 12-29 00:00 -10
            at("2011-12-29T22:00:00Z"), // 12-29 12:00 -10
            at("2011-12-30T10:00:00Z"), // 12-31 00:00 +14
            at("2011-12-30T22:00:00Z"), // 12-31 12:00 +14
        ]
    );
    assert_eq!(
        parse_in("0 9 * * *", Apia)
            .dst_warnings(
                at("2011-06-01T00:00:00Z"),
                Duration::from_secs(300 * 86_400)
            )
            .iter()
            .map(ToString::to_string)
            .filter(|w| w.contains("2011-12-30"))
            .collect::<Vec<_>>(),
        [
            "fires at 09:00 which does not exist on 2011-12-30 in Pacific/Apia (clocks spring forward): it runs at 2011-12-31 00:00 +14 instead"
        ]
    );
}
