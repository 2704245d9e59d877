//! What a parsed schedule is (`@every`, or a cron expression) and the searches over a
//! cron expression that cronq adds to croner's: pinned (wall-clock) fires, whether any
//! date matches, the last fire of a year-bounded expression.
//!
//! Invariant: the searches are pure functions of the expression, the zone and their
//! argument; pinned local times map to instants through [`super::zone::pinned_instant`].

use std::time::Duration;

use chrono::{DateTime, Datelike as _, NaiveDate, NaiveDateTime, TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::Cron;

use super::zone;

/// What a schedule is: `@every`, a cron expression, or one instant (a one-shot job's `at`).
#[derive(Debug, Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per distinct schedule, behind the Schedule's Arc: boxing would add a pointer chase to every next_after for a few hundred bytes per @every"
)]
pub(super) enum Kind {
    /// `@every`: the duration and the same in whole seconds (>= 1).
    Every {
        every: Duration,
        secs: i64,
    },
    Cron(CronSchedule),
    /// A one-shot job's `at`: fires once, at this instant (see `super::once`).
    Once(DateTime<Utc>),
    /// A job that runs after other jobs (`after`), these: it never fires on its own; its
    /// occurrences follow its parents' (see `super::after`).
    After(Box<[crate::names::JobName]>),
}

/// A cron expression compiled by croner, with what cronq's searches need besides it.
#[derive(Debug, Clone)]
pub(super) struct CronSchedule {
    pub(super) cron: Cron,
    /// cronie's rule: neither the minute nor the hour field starts with `*`.
    pub(super) pinned: bool,
    /// The last fire instant, for a year field with a last year.
    pub(super) last: Option<DateTime<Utc>>,
    /// The last year the year field names, if it is not a plain `*`.
    pub(super) last_year: Option<i32>,
}

impl CronSchedule {
    /// The next fire of a pinned schedule: walk matching local times from the local time
    /// of `after`, map each to its instant, and return the first one past `after`.
    ///
    /// Local times at or before `after`'s own map to instants at or before `after`
    /// (monotone mapping); the only skipped candidates are the rest of a repeated hour
    /// when `after` lies in its second pass, and times in a gap mapped onto `after`.
    pub(super) fn next_pinned(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = naive_as_utc(after.with_timezone(&tz).naive_local());
        loop {
            let candidate = self.cron.find_next_occurrence(&cursor, false).ok()?;
            let instant = zone::pinned_instant(tz, candidate.naive_utc());
            if instant > after {
                return Some(instant);
            }
            cursor = candidate;
        }
    }

    /// Whether some date on or after `from` matches the date fields (year, month, day).
    /// The Gregorian calendar, weekdays included, repeats every 400 years, so a year is
    /// only searched if no year of its class modulo 400 was (the first, partial year
    /// aside): at most 401 years are searched.
    pub(super) fn has_date_from(&self, from: NaiveDate) -> bool {
        let p = &self.cron.pattern;
        let end = self.last_year.unwrap_or(from.year() + 401);
        let mut searched = [false; 400];
        for year in from.year()..=end {
            if !p.year_match(year).unwrap_or(false) {
                continue;
            }
            if year != from.year() {
                let class = &mut searched[year.rem_euclid(400) as usize];
                if *class {
                    continue;
                }
                *class = true;
            }
            for month in 1..=12u32 {
                if !p.month_match(month).unwrap_or(false) {
                    continue;
                }
                let Some(first) = NaiveDate::from_ymd_opt(year, month, 1) else {
                    continue;
                };
                let first_weekday = first.weekday().num_days_from_sunday();
                for day in 1..=croner::time::days_in_month(year, month) {
                    if (year, month) == (from.year(), from.month()) && day < from.day() {
                        continue;
                    }
                    let weekday =
                        croner::Weekday::from_days_from_sunday((first_weekday + day - 1) % 7);
                    if p.day_match(year, month, day, weekday).unwrap_or(false) {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// The last fire instant of a schedule whose year field ends at `last_year`.
    pub(super) fn last_fire(&self, tz: Tz, last_year: i32) -> Option<DateTime<Utc>> {
        let end = NaiveDate::from_ymd_opt(last_year, 12, 31)?.and_hms_opt(23, 59, 59)?;
        let mut candidate = self
            .cron
            .find_previous_occurrence(&naive_as_utc(end), true)
            .ok()?;
        if self.pinned {
            return Some(zone::pinned_instant(tz, candidate.naive_utc()));
        }
        // Elapsed time: the later pass of a repeated time; a time in a gap never fires.
        loop {
            match tz.from_local_datetime(&candidate.naive_utc()) {
                chrono::LocalResult::Single(t) => return Some(t.with_timezone(&Utc)),
                chrono::LocalResult::Ambiguous(a, b) => return Some(a.max(b).with_timezone(&Utc)),
                chrono::LocalResult::None => {
                    candidate = self.cron.find_previous_occurrence(&candidate, false).ok()?;
                }
            }
        }
    }
}

/// croner searches up to the year 5000; a cron schedule has no fires from 4999 on.
/// (4999-01-01T00:00:00Z)
pub(super) const CRON_END: i64 = 95_586_048_000;

/// The earliest instant a cron search starts from: 0002-01-01T00:00:00Z.
pub(super) fn cron_start() -> DateTime<Utc> {
    DateTime::from_timestamp(-62_104_060_800, 0).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// A naive local time as a UTC value, so croner evaluates it as a plain calendar time.
fn naive_as_utc(local: NaiveDateTime) -> DateTime<Utc> {
    Utc.from_utc_datetime(&local)
}
