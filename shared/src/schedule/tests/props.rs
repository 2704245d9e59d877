//! Property tests: random valid expressions (built from field generators that also record
//! what each field means), random zones (DST-tricky ones included) and random starts in
//! 2000-2100. An independent matcher, written from the field meanings, checks each fire.
//! Plus: no input makes `Schedule::parse` panic.

use std::collections::BTreeSet;

use chrono::{
    DateTime, Datelike as _, LocalResult, NaiveDateTime, TimeZone as _, Timelike as _, Utc,
};
use chrono_tz::Tz;
use proptest::prelude::*;

use super::now;
use crate::schedule::{Kind, Schedule, ScheduleError};

/// What one generated field means.
#[derive(Debug, Clone, Default)]
struct Spec {
    /// The values it matches (day-of-week 7 already folded onto 0).
    values: BTreeSet<u32>,
    /// The field as written starts with `*` or `?`.
    starts_with_star: bool,
    /// It uses L, W or # (only day fields): the date is then checked with croner's rule.
    special: bool,
    /// A whole-field `*`: every value, including years outside the generated range.
    any: bool,
}

#[derive(Debug, Clone)]
struct Generated {
    text: String,
    sec: Spec,
    min: Spec,
    hour: Spec,
    dom: Spec,
    month: Spec,
    dow: Spec,
    year: Option<Spec>,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

#[derive(Debug, Clone, Copy, PartialEq)]
enum F {
    Sec,
    Min,
    Hour,
    Dom,
    Month,
    Dow,
    Year,
}

fn bounds(f: F) -> (u32, u32) {
    match f {
        F::Sec | F::Min => (0, 59),
        F::Hour => (0, 23),
        F::Dom => (1, 31),
        F::Month => (1, 12),
        F::Dow => (0, 7),
        // Generated years stay in 2026-2100 (from `now()` on); `*/s` still starts at 1970.
        F::Year => (2026, 2100),
    }
}

fn name(f: F, v: u32) -> Option<String> {
    match f {
        F::Month => Some(MONTHS[(v - 1) as usize].to_owned()),
        F::Dow if v < 7 => Some(DAYS[v as usize].to_lowercase()),
        _ => None,
    }
}

fn fold(f: F, values: impl IntoIterator<Item = u32>) -> BTreeSet<u32> {
    values
        .into_iter()
        .map(|v| if f == F::Dow && v == 7 { 0 } else { v })
        .collect()
}

/// One list item and the values it matches.
fn item(f: F) -> BoxedStrategy<(String, Spec)> {
    let (min, max) = bounds(f);
    let value = (min..=max, any::<bool>()).prop_map(move |(v, use_name)| {
        let text = match name(f, v) {
            Some(n) if use_name => n,
            _ => v.to_string(),
        };
        (
            text,
            Spec {
                values: fold(f, [v]),
                ..Spec::default()
            },
        )
    });
    let range = (min..=max, min..=max).prop_map(move |(a, b)| {
        let (a, b) = (a.min(b), a.max(b));
        (
            format!("{a}-{b}"),
            Spec {
                values: fold(f, a..=b),
                ..Spec::default()
            },
        )
    });
    let stepped = (min..=max, min..=max, 1..=max.clamp(1, 30)).prop_map(move |(a, b, s)| {
        let (a, b) = (a.min(b), a.max(b));
        (
            format!("{a}-{b}/{s}"),
            Spec {
                values: fold(f, (a..=b).step_by(s as usize)),
                ..Spec::default()
            },
        )
    });
    let star_step = (1..=max.clamp(1, 30)).prop_map(move |s| {
        let (first, last) = if f == F::Year {
            (1970, 2999)
        } else {
            (min, max)
        };
        (
            format!("*/{s}"),
            Spec {
                values: fold(f, (first..=last).step_by(s as usize)),
                starts_with_star: true,
                ..Spec::default()
            },
        )
    });
    let mut choices = vec![
        (4, value.boxed()),
        (2, range.boxed()),
        (2, stepped.boxed()),
        (1, star_step.boxed()),
    ];
    if f == F::Dom {
        let special = prop_oneof![
            Just("L".to_owned()),
            Just("LW".to_owned()),
            (1..=31u32).prop_map(|d| format!("{d}W")),
        ]
        .prop_map(|text| {
            (
                text,
                Spec {
                    special: true,
                    ..Spec::default()
                },
            )
        });
        choices.push((1, special.boxed()));
    }
    if f == F::Dow {
        let special = prop_oneof![
            (0..=7u32, 1..=5u32).prop_map(|(d, n)| format!("{d}#{n}")),
            (0..=7u32).prop_map(|d| format!("{d}L")),
        ]
        .prop_map(|text| {
            (
                text,
                Spec {
                    special: true,
                    ..Spec::default()
                },
            )
        });
        choices.push((1, special.boxed()));
    }
    proptest::strategy::Union::new_weighted(choices).boxed()
}

/// A whole field: `*` or a list of one to three items.
fn field(f: F) -> BoxedStrategy<(String, Spec)> {
    let (min, max) = bounds(f);
    let star = Just((
        "*".to_owned(),
        Spec {
            values: fold(f, min..=max),
            starts_with_star: true,
            special: false,
            any: true,
        },
    ));
    let list = prop::collection::vec(item(f), 1..=3).prop_map(|items| {
        let text = items
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let mut spec = Spec {
            starts_with_star: items[0].1.starts_with_star,
            ..Spec::default()
        };
        for (_, s) in items {
            spec.values.extend(s.values);
            spec.special |= s.special;
        }
        (text, spec)
    });
    prop_oneof![1 => star, 3 => list].boxed()
}

fn expression() -> impl Strategy<Value = Generated> {
    (
        0..3usize,
        field(F::Sec),
        field(F::Min),
        field(F::Hour),
        field(F::Dom),
        field(F::Month),
        field(F::Dow),
        field(F::Year),
    )
        .prop_map(|(shape, sec, min, hour, dom, month, dow, year)| {
            let five = format!("{} {} {} {} {}", min.0, hour.0, dom.0, month.0, dow.0);
            let (text, sec, year) = match shape {
                0 => (
                    five,
                    Spec {
                        values: [0].into(),
                        ..Spec::default()
                    },
                    None,
                ),
                1 => (format!("{} {five}", sec.0), sec.1, None),
                _ => (format!("{} {five} {}", sec.0, year.0), sec.1, Some(year.1)),
            };
            Generated {
                text,
                sec,
                min: min.1,
                hour: hour.1,
                dom: dom.1,
                month: month.1,
                dow: dow.1,
                year,
            }
        })
}

/// The meaning of a simple field (numbers, `*`, ranges, steps, lists), for the
/// hand-picked DST-prone fields below.
fn spec_of(f: F, text: &str) -> Spec {
    let (min, max) = bounds(f);
    let mut spec = Spec {
        starts_with_star: text.starts_with('*'),
        any: text == "*",
        ..Spec::default()
    };
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse::<usize>().unwrap_or(1)),
            None => (item, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (a.parse().unwrap_or(min), b.parse().unwrap_or(max)),
            None if range == "*" => (min, max),
            None => {
                let v = range.parse().unwrap_or(min);
                (v, v)
            }
        };
        spec.values.extend(fold(f, (a..=b).step_by(step)));
    }
    spec
}

/// Expressions whose times sit where zones change their clocks (00:00-03:00, 23:00).
fn dst_prone_expression() -> impl Strategy<Value = Generated> {
    let minute = prop::sample::select(vec![
        "0", "30", "45", "0,30", "15-45/15", "*/15", "*", "*/20",
    ]);
    let hour = prop::sample::select(vec![
        "0", "1", "2", "3", "23", "1-2", "2-3", "0,1,2,23", "0-3", "*", "*/2", "22-23",
    ]);
    let days = prop::sample::select(vec![
        ("*", "*", "*"),
        ("*", "*", "0"),
        ("1-15", "*", "*"),
        ("*", "3,4,9,10,11", "*"),
        ("5-12", "*", "SUN"),
    ]);
    (minute, hour, days).prop_map(|(minute, hour, (dom, month, dow))| Generated {
        text: format!("{minute} {hour} {dom} {month} {dow}"),
        sec: spec_of(F::Sec, "0"),
        min: spec_of(F::Min, minute),
        hour: spec_of(F::Hour, hour),
        dom: spec_of(F::Dom, dom),
        month: spec_of(F::Month, month),
        dow: if dow == "SUN" {
            spec_of(F::Dow, "0")
        } else {
            spec_of(F::Dow, dow)
        },
        year: None,
    })
}

const ZONES: &[Tz] = &[
    chrono_tz::UTC,
    chrono_tz::America::New_York,
    chrono_tz::Europe::Berlin,
    chrono_tz::Australia::Sydney,
    chrono_tz::America::Santiago,
    chrono_tz::America::Havana,
    chrono_tz::Australia::Lord_Howe,
    chrono_tz::Pacific::Chatham,
    chrono_tz::Pacific::Apia,
    chrono_tz::Africa::Casablanca,
    chrono_tz::Asia::Tehran,
    chrono_tz::Europe::Dublin,
    chrono_tz::America::St_Johns,
    chrono_tz::Asia::Kolkata,
];

/// The independent matcher: does local wall time `t` match the generated expression?
fn matches(g: &Generated, schedule: &Schedule, t: NaiveDateTime) -> bool {
    let has = |spec: &Spec, v: u32| spec.any || spec.values.contains(&v);
    let year = u32::try_from(t.year()).unwrap_or(0);
    if !(has(&g.sec, t.second())
        && has(&g.min, t.minute())
        && has(&g.hour, t.hour())
        && has(&g.month, t.month())
        && g.year.as_ref().is_none_or(|y| has(y, year)))
    {
        return false;
    }
    if g.dom.special || g.dow.special {
        // L, W and # are month-dependent: use croner's date rule (the rest is checked above).
        let Kind::Cron(c) = &schedule.inner.kind else {
            return false;
        };
        let weekday = croner::Weekday::from_days_from_sunday(t.weekday().num_days_from_sunday());
        return c
            .cron
            .pattern
            .day_match(t.year(), t.month(), t.day(), weekday)
            .unwrap_or(false);
    }
    let dom = has(&g.dom, t.day());
    let dow = has(&g.dow, t.weekday().num_days_from_sunday());
    if g.dom.starts_with_star || g.dow.starts_with_star {
        dom && dow
    } else {
        dom || dow
    }
}

fn offset(tz: Tz, t: DateTime<Utc>) -> i64 {
    crate::schedule::zone::offset_secs(tz, t.timestamp())
}

/// A pinned fire whose local time does not match must be the end of a gap that swallowed
/// a matching local time.
fn is_gap_fire(g: &Generated, schedule: &Schedule, tz: Tz, t: DateTime<Utc>) -> bool {
    let jump = offset(tz, t) - offset(tz, t - chrono::Duration::seconds(1));
    if jump <= 0 {
        return false;
    }
    let local = t.with_timezone(&tz).naive_local();
    (1..=jump).any(|back| matches(g, schedule, local - chrono::Duration::seconds(back)))
}

/// A start instant: `within` seconds into `year`, or, with `near`, within two days of one
/// of the zone's transitions in that year.
fn start_near(tz: Tz, year: i32, within: i64, near: Option<(usize, i64)>) -> DateTime<Utc> {
    let from = at_secs(year);
    let instant = match near {
        None => from + within,
        Some((pick, offset)) => {
            let transitions = crate::schedule::zone::transitions(tz, from, at_secs(year + 1));
            match transitions.len() {
                0 => from + within,
                n => transitions[pick % n].at + offset,
            }
        }
    };
    DateTime::from_timestamp(instant, 0).unwrap_or_default()
}

/// The properties every run of fires must have (see the module docs).
fn check_fires(g: &Generated, tz: Tz, start: DateTime<Utc>) -> Result<(), TestCaseError> {
    let schedule = match Schedule::parse_at(&g.text, tz, now()) {
        Ok(s) => s,
        // Generated fields can combine into something that never fires (Feb 30).
        Err(ScheduleError::NeverFires { .. }) => return Ok(()),
        Err(e) => panic!("{:?} did not parse: {e}", g.text),
    };
    // cronie's rule, from what the generator wrote.
    let pinned = !(g.min.starts_with_star || g.hour.starts_with_star);
    prop_assert_eq!(schedule.is_pinned(), pinned, "{:?}", g.text);
    let mut prev = start;
    for t in schedule.iter_after(start).take(6) {
        prop_assert!(t > prev, "{:?} in {}: {t} after {prev}", g.text, tz.name());
        let local = t.with_timezone(&tz).naive_local();
        if !matches(g, &schedule, local) {
            prop_assert!(
                pinned && is_gap_fire(g, &schedule, tz, t),
                "{:?} in {}: {t} (local {local}) does not match",
                g.text,
                tz.name()
            );
        }
        if pinned {
            // A repeated local time runs at its first pass only.
            if let LocalResult::Ambiguous(a, b) = tz.from_local_datetime(&local) {
                prop_assert_eq!(
                    t,
                    a.min(b).with_timezone(&Utc),
                    "{:?} in {}",
                    g.text,
                    tz.name()
                );
            }
        }
        // Nothing was skipped: no whole minute between two fires matches (for a pinned
        // schedule, unless it is the second pass of a repeated time).
        if t - prev <= chrono::Duration::days(2) {
            let next_minute = (prev.timestamp().div_euclid(60) + 1) * 60;
            let mut u = DateTime::from_timestamp(next_minute, 0).unwrap_or(t);
            while u < t {
                let local_u = u.with_timezone(&tz).naive_local();
                if u > prev && matches(g, &schedule, local_u) {
                    let second_pass = matches!(
                        tz.from_local_datetime(&local_u),
                        LocalResult::Ambiguous(a, b) if a.min(b).with_timezone(&Utc) < u
                    );
                    prop_assert!(
                        pinned && second_pass,
                        "{:?} in {}: skipped {u} (local {local_u}) between {prev} and {t}",
                        g.text,
                        tz.name()
                    );
                }
                u += chrono::Duration::minutes(1);
            }
        }
        // Resuming anywhere between two fires gives the same next fire.
        let mid = prev + (t - prev) / 2;
        prop_assert_eq!(
            schedule.next_after(mid),
            Some(t),
            "{:?} in {} from {}",
            g.text,
            tz.name(),
            mid
        );
        prop_assert_eq!(
            schedule.next_after(t - chrono::Duration::seconds(1)),
            Some(t)
        );
        prev = t;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn fires_increase_and_match_the_fields_in_local_time(
        g in expression(),
        zone in 0..ZONES.len(),
        year in 2000..2100i32,
        within in 0..365 * 86_400i64,
        near in proptest::option::of((0..8usize, -2 * 86_400..2 * 86_400i64)),
    ) {
        let tz = ZONES[zone];
        check_fires(&g, tz, start_near(tz, year, within, near))?;
    }

    #[test]
    fn dst_prone_fires_increase_and_match_the_fields_in_local_time(
        g in dst_prone_expression(),
        zone in 0..ZONES.len(),
        year in 2000..2100i32,
        pick in 0..8usize,
        offset in -2 * 86_400..2 * 86_400i64,
    ) {
        let tz = ZONES[zone];
        check_fires(&g, tz, start_near(tz, year, 0, Some((pick, offset))))?;
    }

    #[test]
    fn every_fires_on_multiples_of_its_interval(
        secs in 1u64..200_000,
        zone in 0..ZONES.len(),
        start in at_secs(2000)..at_secs(2100),
    ) {
        let schedule = Schedule::parse_at(&format!("@every {secs}s"), ZONES[zone], now())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let start_t = DateTime::from_timestamp(start, 0).unwrap_or_default();
        let mut prev = start;
        for t in schedule.iter_after(start_t).take(3) {
            let t = t.timestamp();
            prop_assert!(t > prev);
            prop_assert!(t - prev <= secs as i64);
            prop_assert_eq!(t % secs as i64, 0);
            prev = t;
        }
    }

    #[test]
    fn parse_never_panics_on_arbitrary_text(text in "\\PC{0,40}", zone in 0..ZONES.len()) {
        let _ = Schedule::parse_at(&text, ZONES[zone], now());
    }

    #[test]
    fn parse_never_panics_on_cron_like_text(
        tokens in prop::collection::vec(
            prop_oneof![
                Just("*"), Just("?"), Just("L"), Just("W"), Just("LW"), Just("#"), Just("/"),
                Just("-"), Just(","), Just("0"), Just("1"), Just("7"), Just("8"), Just("23"),
                Just("24"), Just("31"), Just("32"), Just("59"), Just("60"), Just("99999999999"),
                Just("MON"), Just("sun"), Just("JAN"), Just("dec"), Just("5#3"), Just("5#0"),
                Just("5L"), Just("15W"), Just("*/0"), Just("*/15"), Just("1-5"), Just("5-1"),
                Just("1970"), Just("2999"), Just("3000"), Just("@daily"), Just("@every"),
                Just("@hourly"), Just("1h"), Just("500ms"), Just("+"), Just("é"), Just("٣"),
            ],
            0..10,
        ),
        separators in prop::collection::vec(prop_oneof![Just(" "), Just(""), Just("\t"), Just(",")], 10),
        zone in 0..ZONES.len(),
    ) {
        let mut text = String::new();
        for (token, sep) in tokens.iter().zip(separators.iter().cycle()) {
            text.push_str(token);
            text.push_str(sep);
        }
        if let Ok(schedule) = Schedule::parse_at(&text, ZONES[zone], now()) {
            let _ = schedule.next_after(now());
        }
    }
}

fn at_secs(year: i32) -> i64 {
    Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0)
        .single()
        .map_or(0, |t| t.timestamp())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any instant chrono can hold, any schedule kind, any zone: no panic, and a result is
    /// always later than the start.
    #[test]
    fn next_after_never_panics_on_extreme_instants(
        secs in DateTime::<Utc>::MIN_UTC.timestamp()..=DateTime::<Utc>::MAX_UTC.timestamp(),
        which in 0..5usize,
        zone in 0..ZONES.len(),
    ) {
        let text = ["30 2 * * *", "*/15 * * * *", "@every 7s", "0 0 0 1 1 * 2990", "0 0 L * *"][which];
        let schedule = Schedule::parse_at(text, ZONES[zone], now())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let start = DateTime::from_timestamp(secs, 0).unwrap_or_default();
        if let Some(t) = schedule.next_after(start) {
            prop_assert!(t > start);
        }
        let _ = schedule.dst_warnings(start, std::time::Duration::from_secs(u64::MAX));
    }
}
