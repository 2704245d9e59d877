//! Schedules: cron expressions (via `croner`) and epoch-aligned `@every`, evaluated in a
//! job's IANA zone with cronie's daylight-saving rules (listed below, and for users in
//! `docs/config.md`).
//!
//! Owns: parsing a schedule string (with messages that name the field) and computing fire
//! instants. Leaves to the producer: deciding which instants are due. Invariant:
//! [`Schedule::next_after`] is a pure function of the schedule and its argument (no clock,
//! no process start), strictly increasing, so every producer computes the same keys (G4).
//!
//! Daylight saving, as cronie does it:
//! - a schedule whose minute or hour field starts with `*` (`*`, `*/15`; `@hourly` too)
//!   runs by elapsed time: through both passes of a repeated hour, not at all inside a
//!   skipped one. croner's own zone-aware search does exactly this for such patterns;
//! - every other schedule is *pinned* to wall-clock times: it is evaluated on the naive
//!   local time (croner against the naive time as if it were UTC), and each matching
//!   local time maps to one instant: itself, the first of two passes, or the first instant
//!   after a gap. That mapping is monotone, so equal instants collapse into one fire;
//! - `@every D` fires when `unix_seconds % D == 0`, in UTC, with no DST at all.
//!
//! A parsed schedule is shared, not copied: [`Schedule`] is a pointer to immutable parsed
//! state (croner's is ≈ 5 KiB per cron expression), and [`Interner`] hands out one parsed
//! value per distinct (text, zone), so a million jobs over a few thousand schedules hold a
//! few thousand parsed expressions.

mod dst;
mod error;
mod fields;
mod intern;
mod parse;
#[cfg(test)]
mod tests;
mod zone;

use std::sync::Arc;
use std::time::Duration;

use chrono::{
    DateTime, Datelike as _, NaiveDate, NaiveDateTime, SubsecRound as _, TimeZone as _, Utc,
};
use chrono_tz::Tz;
use croner::Cron;

pub use dst::{DstChange, DstWarning, TransitionCache};
pub use error::ScheduleError;
pub use intern::Interner;

/// A parsed schedule in a zone. Two schedules are equal when their text and zone are.
///
/// Cloning is cheap: clones share the parsed state, which never changes after parsing.
#[derive(Debug, Clone)]
pub struct Schedule {
    inner: Arc<Parsed>,
}

/// What a [`Schedule`] points to.
#[derive(Debug)]
struct Parsed {
    text: String,
    tz: Tz,
    kind: Kind,
}

#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per distinct schedule, behind the Schedule's Arc: boxing would add a pointer chase to every next_after for a few hundred bytes per @every"
)]
enum Kind {
    /// `@every`: the duration and the same in whole seconds (>= 1).
    Every {
        every: Duration,
        secs: i64,
    },
    Cron(CronSchedule),
}

#[derive(Debug)]
struct CronSchedule {
    cron: Cron,
    /// cronie's rule: neither the minute nor the hour field starts with `*`.
    pinned: bool,
    /// The last fire instant, for a year field with a last year.
    last: Option<DateTime<Utc>>,
    /// The last year the year field names, if it is not a plain `*`.
    last_year: Option<i32>,
}

impl Schedule {
    /// Parses `text` for zone `tz`, and checks that it fires at least once from now on.
    ///
    /// Accepts 5 fields (`min hour dom month dow`), 6 (seconds first) or 7 (trailing year);
    /// names, ranges, lists, steps, `L`, `W`, `#`; the descriptors `@yearly`, `@annually`,
    /// `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly` (any case); and
    /// `@every DURATION` in whole seconds.
    ///
    /// ```
    /// use chrono::{DateTime, Utc};
    /// use cronq_shared::schedule::Schedule;
    ///
    /// let schedule = Schedule::parse("30 3 * * *", chrono_tz::Asia::Shanghai).unwrap();
    /// let from: DateTime<Utc> = "2026-11-29T00:00:00Z".parse().unwrap();
    /// let next = schedule.next_after(from).unwrap();
    /// assert_eq!(next.to_rfc3339(), "2026-11-29T19:30:00+00:00"); // 03:30 on the 30th, CST
    /// assert_eq!(schedule.next_after(next).unwrap().to_rfc3339(), "2026-11-30T19:30:00+00:00");
    ///
    /// let err = Schedule::parse("61 0 * * *", chrono_tz::UTC).unwrap_err();
    /// assert_eq!(err.to_string(), "is not a cron expression: minute 61 is outside 0-59");
    /// ```
    ///
    /// # Errors
    /// When the text is not a schedule, or one that can never fire from now on; see
    /// [`ScheduleError`] for every message.
    pub fn parse(text: &str, tz: Tz) -> Result<Self, ScheduleError> {
        Self::parse_at(text, tz, Utc::now())
    }

    /// [`Schedule::parse`], with "now" given: the never-fires check looks from `now` on.
    ///
    /// # Errors
    /// As [`Schedule::parse`].
    pub fn parse_at(text: &str, tz: Tz, now: DateTime<Utc>) -> Result<Self, ScheduleError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let kind = if trimmed.starts_with('@') {
            parse::descriptor(trimmed, tz)?
        } else {
            Kind::Cron(parse::cron(trimmed, tz)?)
        };
        let schedule = Self {
            inner: Arc::new(Parsed {
                text: text.to_owned(),
                tz,
                kind,
            }),
        };
        schedule.check_fires(now)?;
        Ok(schedule)
    }

    /// The first fire instant strictly after `after`, or `None` when the schedule has no
    /// more (a 7-field expression whose years are past). Pure: no clock is read.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.inner.kind {
            Kind::Every { secs, .. } => {
                let next = after
                    .timestamp()
                    .div_euclid(*secs)
                    .checked_add(1)?
                    .checked_mul(*secs)?;
                DateTime::from_timestamp(next, 0)
            }
            Kind::Cron(c) => {
                if c.last.is_some_and(|last| after >= last) || after.timestamp() >= CRON_END {
                    return None;
                }
                // Fires are on whole seconds: strictly after `after` is strictly after
                // its whole second. Before year 2 the zone arithmetic could leave chrono's
                // range; no schedule is asked about such times, so they start at year 2.
                let after = after.trunc_subsecs(0).max(cron_start());
                if c.pinned {
                    c.next_pinned(self.inner.tz, after)
                } else {
                    c.cron
                        .find_next_occurrence(&after.with_timezone(&self.inner.tz), false)
                        .ok()
                        .map(|t| t.with_timezone(&Utc))
                }
            }
        }
    }

    /// The fire instants strictly after `after`, in order.
    pub fn iter_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after), move |t| self.next_after(*t))
    }

    /// The schedule as written in the config.
    pub fn as_str(&self) -> &str {
        &self.inner.text
    }

    /// The zone the schedule is evaluated in.
    pub fn timezone(&self) -> Tz {
        self.inner.tz
    }

    /// Whether the schedule is pinned to wall-clock times (cronie's rule: a cron
    /// expression whose minute and hour fields both do not start with `*`). Pinned
    /// schedules run once for a time a DST change skips or repeats; the others run by
    /// elapsed time. `@every` is not pinned.
    pub fn is_pinned(&self) -> bool {
        matches!(&self.inner.kind, Kind::Cron(c) if c.pinned)
    }

    /// The interval of an `@every` schedule.
    pub fn is_every(&self) -> Option<Duration> {
        match &self.inner.kind {
            Kind::Every { every, .. } => Some(*every),
            Kind::Cron(_) => None,
        }
    }

    /// The daylight-saving changes in `(from, from + horizon]` that move or merge a fire
    /// time of this schedule: a local time skipped by a spring-forward, or repeated by a
    /// fall-back. Empty for schedules that are not pinned (they run by elapsed time).
    /// Looks at most 100 years ahead, within the years 1900-3000; costs one zone lookup
    /// per hour of horizon.
    pub fn dst_warnings(&self, from: DateTime<Utc>, horizon: Duration) -> Vec<DstWarning> {
        match &self.inner.kind {
            Kind::Cron(c) if c.pinned => dst::warnings(&c.cron, self.inner.tz, from, horizon, None),
            _ => Vec::new(),
        }
    }

    /// [`Schedule::dst_warnings`], reusing the zone's transitions from `cache` (filled on
    /// first use of a zone and window), so a load with many pinned schedules in one zone
    /// probes that zone once. The warnings are the same as without the cache.
    pub fn dst_warnings_cached(
        &self,
        from: DateTime<Utc>,
        horizon: Duration,
        cache: &mut TransitionCache,
    ) -> Vec<DstWarning> {
        match &self.inner.kind {
            Kind::Cron(c) if c.pinned => {
                dst::warnings(&c.cron, self.inner.tz, from, horizon, Some(cache))
            }
            _ => Vec::new(),
        }
    }

    /// Whether `self` and `other` share one parsed state (the same [`Interner`] made
    /// both from the same text and zone, or one is a clone of the other).
    pub fn shares_parsed(&self, other: &Schedule) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Fails when the schedule has no fire time after `now`.
    fn check_fires(&self, now: DateTime<Utc>) -> Result<(), ScheduleError> {
        let never = |reason: String| Err(ScheduleError::NeverFires { reason });
        let c = match &self.inner.kind {
            Kind::Every { .. } => {
                return match self.next_after(now) {
                    Some(_) => Ok(()),
                    None => never("its next time is out of range".to_owned()),
                };
            }
            Kind::Cron(c) => c,
        };
        let today = now.with_timezone(&self.inner.tz).date_naive();
        if let Some(year) = c.last_year.filter(|y| *y < today.year()) {
            return never(format!("its last year, {year}, is past"));
        }
        // A cheap date-level search first: an impossible date (February 30) would
        // otherwise make croner walk to the year 5000.
        if !c.has_date_from(today) {
            return never(if c.last_year.is_some() {
                "no date from now on matches its day-of-month, month, day-of-week and year fields"
                    .to_owned()
            } else {
                "no date matches its day-of-month, month and day-of-week fields".to_owned()
            });
        }
        if self.next_after(now).is_some() {
            return Ok(());
        }
        match c.last {
            Some(last) if last <= now => never(format!(
                "its last time, {}, is past",
                last.with_timezone(&self.inner.tz).to_rfc3339()
            )),
            _ => never(format!(
                "none of its times from now on exist in {}",
                self.inner.tz.name()
            )),
        }
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
            || (self.inner.text == other.inner.text && self.inner.tz == other.inner.tz)
    }
}

impl Eq for Schedule {}

impl CronSchedule {
    /// The next fire of a pinned schedule: walk matching local times from the local time
    /// of `after`, map each to its instant, and return the first one past `after`.
    ///
    /// Local times at or before `after`'s own map to instants at or before `after`
    /// (monotone mapping); the only skipped candidates are the rest of a repeated hour
    /// when `after` lies in its second pass, and times in a gap mapped onto `after`.
    fn next_pinned(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
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
    fn has_date_from(&self, from: NaiveDate) -> bool {
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
    fn last_fire(&self, tz: Tz, last_year: i32) -> Option<DateTime<Utc>> {
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
const CRON_END: i64 = 95_586_048_000;

/// The earliest instant a cron search starts from: 0002-01-01T00:00:00Z.
fn cron_start() -> DateTime<Utc> {
    DateTime::from_timestamp(-62_104_060_800, 0).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// A naive local time as a UTC value, so croner evaluates it as a plain calendar time.
fn naive_as_utc(local: NaiveDateTime) -> DateTime<Utc> {
    Utc.from_utc_datetime(&local)
}
