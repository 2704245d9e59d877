//! A job's `schedules` (a union of several schedules) and its exclusions (`exclude`, and
//! the dates of the calendars it names), carried by its one [`Schedule`] so that every
//! reader of fire times (planning, catch-up, backfill, `cronq next`, accounting, alerts)
//! sees the same times (G4).
//!
//! Owns: combining members into one schedule, reading an exclusion, and the search that
//! skips excluded instants. Invariant: [`Schedule::next_after`] of a combined schedule is
//! still a pure function of the config and its argument, strictly increasing, and never
//! yields one instant twice: the union takes the earliest next instant of its members, so
//! an instant several members share comes once.
//!
//! Exclusion rules (also in `docs/config.md`):
//! - a date `YYYY-MM-DD` excludes every occurrence whose local date (in the job's zone)
//!   is that date;
//! - a cron expression excludes every occurrence whose local time it matches; a 5-field
//!   expression has minute resolution (it excludes the whole matching minute, any
//!   second), 6 and 7 fields match to the second.
//!
//! Skipping runs of excluded instants is quick when the exclusion covers whole local days
//! (a date, or a cron expression whose time fields are all `*`) or whole minutes (5
//! fields, or a seconds field `*`): the
//! search jumps to the day's or minute's end instead of stepping through each instant.
//! The search gives up after [`MAX_SKIPPED`] excluded candidates in one call (then the
//! schedule has no next fire); the config check asks for a next fire from load time on,
//! so a config whose exclusions remove every occurrence is refused.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, TimeDelta, TimeZone as _, Timelike as _, Utc};
use chrono_tz::Tz;
use croner::Cron;

use super::error::ScheduleError;
use super::{Bounds, Parsed, Schedule, hash, parse, zone};

/// How many excluded candidates one search skips before it gives up.
pub(super) const MAX_SKIPPED: usize = 100_000;

/// What a combined schedule adds to its first member.
#[derive(Debug)]
pub(super) struct Controls {
    /// The first member, as parsed (the combined schedule evaluates its kind itself).
    pub(super) first: Schedule,
    /// The other members of the union (unbounded, without controls of their own).
    pub(super) also: Vec<Schedule>,
    /// What is taken out of the union.
    pub(super) exclude: Exclusions,
}

impl PartialEq for Controls {
    fn eq(&self, other: &Self) -> bool {
        self.first == other.first && self.also == other.also && self.exclude == other.exclude
    }
}

/// A job's exclusions: cron expressions and local dates.
#[derive(Debug, Clone, Default)]
pub struct Exclusions {
    crons: Vec<CronExclusion>,
    dates: Arc<BTreeSet<NaiveDate>>,
    /// How they were written, for the schedule's description: each expression and date
    /// of `exclude`, then `calendar NAME` for each calendar.
    shown: Vec<String>,
}

impl PartialEq for Exclusions {
    fn eq(&self, other: &Self) -> bool {
        self.shown == other.shown && self.dates == other.dates
    }
}

/// One cron exclusion.
#[derive(Debug, Clone)]
struct CronExclusion {
    cron: Cron,
    /// 5 fields: matches the whole minute, whatever the second.
    minutes: bool,
    /// 5 fields, or a seconds field `*`: a match covers the rest of its minute.
    whole_minutes: bool,
    /// Its time fields are all `*`: it matches whole local days.
    whole_days: bool,
}

impl Exclusions {
    /// No exclusion.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether nothing is excluded.
    pub fn is_empty(&self) -> bool {
        self.crons.is_empty() && self.dates.is_empty()
    }

    /// Adds one `exclude` entry: a date `YYYY-MM-DD`, or a 5, 6 or 7-field cron
    /// expression (`H` items take the job's values, as in its schedule).
    ///
    /// # Errors
    /// A text that is neither; the message reads after the text, as a [`ScheduleError`]'s.
    pub fn add(&mut self, text: &str, job: &str) -> Result<(), ScheduleError> {
        let trimmed = text.trim();
        if looks_like_date(trimmed) {
            let date = NaiveDate::parse_from_str(trimmed, "%Y-%m-%d")
                .map_err(|_| ScheduleError::NotAnExclusion)?;
            Arc::make_mut(&mut self.dates).insert(date);
            self.shown.push(trimmed.to_owned());
            return Ok(());
        }
        if trimmed.starts_with('@') {
            return Err(ScheduleError::NotAnExclusion);
        }
        if trimmed.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let resolved = hash::resolve(trimmed, Some(job))?;
        let expression = resolved.as_deref().unwrap_or(trimmed);
        // The zone only matters for a year-bounded expression's last fire, unused here.
        let parsed = parse::cron(expression, Tz::UTC)?;
        let parts: Vec<&str> = expression.split_whitespace().collect();
        let minutes = parts.len() == 5;
        let time_fields = if minutes { &parts[..2] } else { &parts[..3] };
        self.crons.push(CronExclusion {
            cron: parsed.cron,
            minutes,
            whole_minutes: minutes || parts[0] == "*",
            whole_days: time_fields.iter().all(|f| *f == "*"),
        });
        self.shown.push(trimmed.to_owned());
        Ok(())
    }

    /// Adds the dates of the calendar `name`.
    pub fn add_calendar(&mut self, name: &str, dates: &Arc<BTreeSet<NaiveDate>>) {
        if self.dates.is_empty() {
            // The calendar's own set, shared by every job that names only it.
            self.dates = Arc::clone(dates);
        } else {
            Arc::make_mut(&mut self.dates).extend(dates.iter().copied());
        }
        self.shown.push(format!("calendar {name}"));
    }

    /// Every excluded date, of `exclude` and of the calendars.
    pub fn dates(&self) -> &BTreeSet<NaiveDate> {
        &self.dates
    }

    /// Where the search goes on from when `t` is excluded (an instant at or after `t`
    /// that is strictly before the next instant that may be kept), or `None` when `t` is
    /// kept.
    fn skip(&self, tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = t.with_timezone(&tz).naive_local();
        if self.dates.contains(&local.date()) {
            return Some(end_of_day(tz, t, local.date()));
        }
        let as_utc = Utc.from_utc_datetime(&local);
        let minute = as_utc.with_second(0).unwrap_or(as_utc);
        for e in &self.crons {
            let probe = if e.minutes { &minute } else { &as_utc };
            if e.cron.is_time_matching(probe).unwrap_or(false) {
                if e.whole_days {
                    return Some(end_of_day(tz, t, local.date()));
                }
                if e.whole_minutes && zone::offset_secs(tz, t.timestamp()) % 60 == 0 {
                    // A whole-minute offset: the local minute ends with the UTC one.
                    let end = t.timestamp() - t.timestamp().rem_euclid(60) + 60;
                    return Some(just_before(end).max(t));
                }
                return Some(t);
            }
        }
        None
    }
}

/// Whether `text` is written as a date, `NNNN-NN-NN` (no cron field has this form).
fn looks_like_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// The last nanosecond before Unix second `secs`.
fn just_before(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0)
        .map_or(DateTime::<Utc>::MAX_UTC, |t| t - TimeDelta::nanoseconds(1))
}

/// Just before the first instant of the local day after `date` (a search strictly after
/// it finds that instant first); `t` itself if that cannot be worked out.
fn end_of_day(tz: Tz, t: DateTime<Utc>, date: NaiveDate) -> DateTime<Utc> {
    let Some(next) = date.succ_opt().and_then(|d| d.and_hms_opt(0, 0, 0)) else {
        return t;
    };
    let start = zone::pinned_instant(tz, next);
    just_before(start.timestamp()).max(t)
}

impl Schedule {
    /// The union of `members` (each parsed for the job, unbounded and plain) less
    /// `exclude`: the job's `schedules` and its exclusions. One member and no exclusion is
    /// that member itself. Its text (what [`Schedule::as_str`] shows) lists the members,
    /// separated by ` | `, then ` except ` and the exclusions.
    ///
    /// # Errors
    /// [`ScheduleError::NeverFires`] when no instant after `now` is left (within
    /// 100,000 excluded candidates in one search).
    /// [`ScheduleError::Empty`] when `members` is empty.
    pub fn combine(
        members: Vec<Schedule>,
        exclude: Exclusions,
        now: DateTime<Utc>,
    ) -> Result<Schedule, ScheduleError> {
        let Some(first) = members.first().cloned() else {
            return Err(ScheduleError::Empty);
        };
        if members.len() == 1 && exclude.is_empty() {
            return Ok(first);
        }
        let join =
            |f: &dyn Fn(&Schedule) -> String| members.iter().map(f).collect::<Vec<_>>().join(" | ");
        let mut text = join(&|s: &Schedule| s.as_str().to_owned());
        let resolved = members.iter().any(|s| s.resolved().is_some()).then(|| {
            join(&|s: &Schedule| s.resolved().unwrap_or(s.as_str()).to_owned()).into_boxed_str()
        });
        if !exclude.is_empty() {
            text.push_str(" except ");
            text.push_str(&exclude.shown.join(", "));
        }
        let p = &*first.inner;
        let schedule = Schedule {
            inner: Arc::new(Parsed {
                text,
                resolved,
                bounds: Bounds::default(),
                tz: p.tz,
                kind: p.kind.clone(),
                controls: Some(Arc::new(Controls {
                    first: first.clone(),
                    also: members[1..].to_vec(),
                    exclude,
                })),
            }),
        };
        if schedule.next_after(now).is_none() {
            return Err(ScheduleError::NeverFires {
                reason: if schedule
                    .inner
                    .controls
                    .as_ref()
                    .is_some_and(|c| c.exclude.is_empty())
                {
                    "none of its schedules has a time from now on".to_owned()
                } else {
                    "its exclusions remove every occurrence from now on".to_owned()
                },
            });
        }
        Ok(schedule)
    }

    /// The schedules of a combined schedule's union, each as written (for checks that look
    /// at each one, such as the daylight-saving warnings); `None` for a plain schedule.
    pub fn members(&self) -> Option<impl Iterator<Item = &Schedule>> {
        self.inner
            .controls
            .as_ref()
            .map(|c| std::iter::once(&c.first).chain(&c.also))
    }

    /// The dates this schedule excludes (of `exclude` and its calendars); empty for most.
    pub fn excluded_dates(&self) -> Option<&BTreeSet<NaiveDate>> {
        self.inner
            .controls
            .as_ref()
            .map(|c| c.exclude.dates())
            .filter(|d| !d.is_empty())
    }

    /// The next fire strictly after `after`, of the union less the exclusions, without
    /// the bounds.
    pub(super) fn next_controlled(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let Some(controls) = &self.inner.controls else {
            return self.next_unbounded(after);
        };
        let tz = self.inner.tz;
        let mut after = after;
        for _ in 0..MAX_SKIPPED {
            let t = controls
                .also
                .iter()
                .filter_map(|s| s.next_after(after))
                .chain(self.next_unbounded(after))
                .min()?;
            match controls.exclude.skip(tz, t) {
                None => return Some(t),
                Some(to) => after = to,
            }
        }
        None
    }
}

/// Test-only view of a date's first instant (`end_of_day` plus a nanosecond).
#[cfg(test)]
pub(super) fn day_start(tz: Tz, date: NaiveDate) -> DateTime<Utc> {
    let t = zone::pinned_instant(tz, date.and_hms_opt(0, 0, 0).expect("midnight exists"));
    end_of_day(tz, t, date.pred_opt().expect("a day before")) + TimeDelta::nanoseconds(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn now() -> DateTime<Utc> {
        at("2026-01-01T00:00:00Z")
    }

    fn plain(text: &str, tz: Tz) -> Schedule {
        Schedule::parse_for_job(text, tz, "job", now()).unwrap()
    }

    fn exclusions(items: &[&str]) -> Exclusions {
        let mut e = Exclusions::new();
        for item in items {
            e.add(item, "job").unwrap();
        }
        e
    }

    fn times(s: &Schedule, from: &str, n: usize) -> Vec<String> {
        s.iter_after(at(from))
            .take(n)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%S").to_string())
            .collect()
    }

    #[test]
    fn a_union_yields_each_instant_once_in_order() {
        let s = Schedule::combine(
            vec![
                plain("0 9 * * MON-FRI", Tz::UTC),
                plain("0 9,11 * * *", Tz::UTC),
            ],
            Exclusions::new(),
            now(),
        )
        .unwrap();
        // 2026-01-02 is a Friday.
        assert_eq!(
            times(&s, "2026-01-02T00:00:00Z", 4),
            [
                "2026-01-02T09:00:00",
                "2026-01-02T11:00:00",
                "2026-01-03T09:00:00",
                "2026-01-03T11:00:00"
            ]
        );
        assert_eq!(s.as_str(), "0 9 * * MON-FRI | 0 9,11 * * *");
        assert!(s.is_every().is_none());
    }

    #[test]
    fn excluded_seconds_minutes_and_dates_never_fire() {
        let every = plain("@every 1s", Tz::UTC);
        let s =
            Schedule::combine(vec![every.clone()], exclusions(&["*/2 * * * * *"]), now()).unwrap();
        assert_eq!(
            times(&s, "2026-01-01T00:00:00Z", 3),
            [
                "2026-01-01T00:00:01",
                "2026-01-01T00:00:03",
                "2026-01-01T00:00:05"
            ]
        );
        // 5 fields: the whole minute.
        let s =
            Schedule::combine(vec![every.clone()], exclusions(&["0-58 * * * *"]), now()).unwrap();
        assert_eq!(
            times(&s, "2026-01-01T00:00:00Z", 2),
            ["2026-01-01T00:59:00", "2026-01-01T00:59:01"]
        );
        // A date, in the job's zone: Berlin's 2026-01-02 is 01-01T23:00Z to 01-02T23:00Z.
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let s = Schedule::combine(
            vec![plain("@every 1s", berlin)],
            exclusions(&["2026-01-02"]),
            now(),
        )
        .unwrap();
        assert_eq!(
            times(&s, "2026-01-01T22:59:58Z", 3),
            [
                "2026-01-01T22:59:59",
                "2026-01-02T23:00:00",
                "2026-01-02T23:00:01"
            ]
        );
        assert_eq!(s.as_str(), "@every 1s except 2026-01-02");
        // Weekends, as whole days.
        let s = Schedule::combine(
            vec![plain("*/10 * * * * *", Tz::UTC)],
            exclusions(&["* * * * SAT,SUN"]),
            now(),
        )
        .unwrap();
        // 2026-01-03 is a Saturday.
        assert_eq!(
            times(&s, "2026-01-02T23:59:45Z", 2),
            ["2026-01-02T23:59:50", "2026-01-05T00:00:00"]
        );
    }

    #[test]
    fn each_member_of_a_union_gets_its_daylight_saving_warnings() {
        let ny: Tz = "America/New_York".parse().unwrap();
        let s = Schedule::combine(
            vec![plain("0 12 * * *", ny), plain("30 2 * * *", ny)],
            Exclusions::new(),
            now(),
        )
        .unwrap();
        let horizon = std::time::Duration::from_secs(366 * 86_400);
        let warned: Vec<usize> = s
            .members()
            .unwrap()
            .map(|m| m.dst_warnings(now(), horizon).len())
            .collect();
        assert_eq!(warned, [0, 1], "02:30 is skipped on 2026-03-08");
    }

    #[test]
    fn an_exclusion_of_everything_is_refused() {
        let err = Schedule::combine(
            vec![plain("0 12 * * *", Tz::UTC)],
            exclusions(&["0 12 * * *"]),
            now(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "can never fire: its exclusions remove every occurrence from now on"
        );
        let mut e = Exclusions::new();
        let refused = "is not an exclusion: use a date such as \"2026-12-25\" or a cron expression such as \"0 12 * * *\"";
        assert_eq!(e.add("@daily", "job").unwrap_err().to_string(), refused);
        assert_eq!(e.add("2026-02-30", "job").unwrap_err().to_string(), refused);
    }

    #[test]
    fn a_day_starts_where_the_zone_says() {
        let santiago: Tz = "America/Santiago".parse().unwrap();
        // Midnight does not exist on 2026-09-06 there (spring forward at 00:00).
        let d = NaiveDate::from_ymd_opt(2026, 9, 6).unwrap();
        let start = day_start(santiago, d);
        assert_eq!(start.with_timezone(&santiago).date_naive(), d);
        assert!(
            (start - TimeDelta::seconds(1))
                .with_timezone(&santiago)
                .date_naive()
                < d
        );
    }
}
