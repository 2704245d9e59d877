//! Property tests of unions and exclusions (`Schedule::combine`): for random members,
//! exclusions, zones and starts, the combined schedule yields exactly the instants an
//! independent oracle computes: the members' own instants merged, each once, less those
//! whose local time an exclusion (written here as a plain predicate) matches.

use chrono::{DateTime, Datelike as _, NaiveDate, NaiveDateTime, TimeDelta, Timelike as _, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;

use super::now;
use crate::schedule::{Exclusions, Schedule};

const MEMBERS: [&str; 8] = [
    "@every 7s",
    "*/5 * * * * *",
    "0 */3 * * * *",
    "0 9 * * MON-FRI",
    "0 11 * * SAT",
    "30 2 * * *",
    "@hourly",
    "*/20 * * * *",
];

/// An exclusion as written, and what it means for a local time.
type Rule = (&'static str, fn(&NaiveDateTime) -> bool);

const RULES: [Rule; 5] = [
    ("5-59/2 * * * * *", |t| {
        t.second() >= 5 && t.second() % 2 == 1
    }),
    ("10-29 * * * *", |t| (10..30).contains(&t.minute())),
    ("* 12 * * *", |t| t.hour() == 12),
    ("* * * * SUN", |t| t.weekday() == chrono::Weekday::Sun),
    ("0 9 * * WED", |t| {
        t.weekday() == chrono::Weekday::Wed && t.hour() == 9 && t.minute() == 0
    }),
];

const ZONES: [&str; 5] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
];

fn case() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<i64>, usize, i64)> {
    (
        proptest::collection::vec(0..MEMBERS.len(), 1..4),
        proptest::collection::vec(0..RULES.len(), 0..3),
        proptest::collection::vec(0..10i64, 0..3),
        0..ZONES.len(),
        // Seconds into 2026 (transitions of every zone included).
        0..365 * 86_400i64,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_combined_schedule_is_the_union_less_the_exclusions(
        (members, rules, days, zone, offset) in case()
    ) {
        let tz: Tz = ZONES[zone].parse().unwrap();
        let start = DateTime::from_timestamp(1_767_225_600 + offset, 0).unwrap();
        let plain: Vec<Schedule> = members
            .iter()
            .map(|i| Schedule::parse_for_job(MEMBERS[*i], tz, "job", now()).unwrap())
            .collect();
        let mut exclude = Exclusions::new();
        for r in &rules {
            exclude.add(RULES[*r].0, "job").unwrap();
        }
        let start_date = start.with_timezone(&tz).date_naive();
        let dates: Vec<NaiveDate> = days.iter().map(|d| start_date + TimeDelta::days(*d)).collect();
        for d in &dates {
            exclude.add(&d.to_string(), "job").unwrap();
        }
        let Ok(combined) = Schedule::combine(plain.clone(), exclude, now()) else {
            // Only when everything is excluded, which these pools never do (no rule
            // matches every time of a member).
            return Err(TestCaseError::fail("refused"));
        };
        let got: Vec<DateTime<Utc>> = combined.iter_after(start).take(25).collect();
        prop_assert_eq!(got.len(), 25);
        prop_assert!(got.windows(2).all(|w| w[0] < w[1]), "strictly increasing, never twice");
        let end = got[got.len() - 1];
        let mut want: Vec<DateTime<Utc>> = plain
            .iter()
            .flat_map(|s| s.iter_after(start).take_while(|t| *t <= end).collect::<Vec<_>>())
            .collect();
        want.sort();
        want.dedup();
        want.retain(|t| {
            let local = t.with_timezone(&tz).naive_local();
            !dates.contains(&local.date()) && !rules.iter().any(|r| (RULES[*r].1)(&local))
        });
        prop_assert_eq!(got, want);
    }
}
