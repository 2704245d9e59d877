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
//! - `@every D` fires when `unix_seconds % D == 0`, in UTC, with no DST at all;
//! - a one-shot (`at = T`, [`Schedule::once`]) fires once, at the instant `T`.
//!
//! A parsed schedule is shared, not copied: [`Schedule`] is a pointer to immutable parsed
//! state (croner's is ≈ 5 KiB per cron expression), and [`Interner`] hands out one parsed
//! value per distinct (text, zone), so a million jobs over a few thousand schedules hold a
//! few thousand parsed expressions.

mod after;
mod alike;
pub mod catchup;
mod controls;
mod dst;
mod error;
mod fields;
mod hash;
mod intern;
mod kind;
mod once;
mod parse;
#[cfg(test)]
mod tests;
mod zone;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Datelike as _, SubsecRound as _, Utc};
use chrono_tz::Tz;

pub use alike::Alike;
pub use controls::Exclusions;
pub use dst::{DstChange, DstWarning, TransitionCache};
pub use error::ScheduleError;
pub use intern::Interner;

use self::kind::{CRON_END, Kind, cron_start};

/// A parsed schedule in a zone. Two schedules are equal when their text (as written and
/// with `H` resolved) and zone are.
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
    /// The text with each `H` item replaced by its value for the job, if it has any.
    resolved: Option<Box<str>>,
    /// `start_at` and `end_at`: no fire before or after them.
    bounds: Bounds,
    tz: Tz,
    kind: Kind,
    /// `schedules` beyond the first and the exclusions (`controls`); `None` for most.
    controls: Option<Arc<controls::Controls>>,
}

/// A job's `start_at` and `end_at`: the first and last instants it may fire at (both
/// included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// No fire before it.
    pub start: Option<DateTime<Utc>>,
    /// No fire after it.
    pub end: Option<DateTime<Utc>>,
}

impl Bounds {
    /// Whether neither bound is set.
    pub fn is_none(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }
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
        Self::parse_with(text, tz, None, now)
    }

    /// [`Schedule::parse_at`] for the job called `job`: each `H` item of a cron field
    /// (`H`, `H/STEP`, `H(A-B)`, `H(A-B)/STEP`) takes a value derived from the job's name
    /// (see `docs/config.md`), the same in every process and every version (G4).
    ///
    /// ```
    /// use chrono::{DateTime, Utc};
    /// use cronq_shared::schedule::Schedule;
    ///
    /// let now: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
    /// let s = Schedule::parse_for_job("H H * * *", chrono_tz::UTC, "backup", now).unwrap();
    /// assert_eq!(s.as_str(), "H H * * *");
    /// assert_eq!(s.resolved(), Some("12 20 * * *"));
    /// ```
    ///
    /// # Errors
    /// As [`Schedule::parse_at`], and for a malformed `H` item (`H(30-10)`, `H/0`, `H` in
    /// the year field).
    pub fn parse_for_job(
        text: &str,
        tz: Tz,
        job: &str,
        now: DateTime<Utc>,
    ) -> Result<Self, ScheduleError> {
        Self::parse_with(text, tz, Some(job), now)
    }

    /// This schedule limited to `bounds`: [`Schedule::next_after`] skips the fires before
    /// `bounds.start` and ends after `bounds.end`. The never-fires check of the parse saw
    /// the schedule unbounded (an `end_at` that is past is the config's warning).
    pub fn bounded(&self, bounds: Bounds) -> Self {
        let p = &*self.inner;
        Self {
            inner: Arc::new(Parsed {
                text: p.text.clone(),
                resolved: p.resolved.clone(),
                bounds,
                tz: p.tz,
                kind: p.kind.clone(),
                controls: p.controls.clone(),
            }),
        }
    }

    /// The job's `start_at` and `end_at`.
    pub fn bounds(&self) -> Bounds {
        self.inner.bounds
    }

    fn parse_with(
        text: &str,
        tz: Tz,
        job: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Self, ScheduleError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let resolved = hash::resolve(trimmed, job)?;
        let kind = if trimmed.starts_with('@') {
            parse::descriptor(trimmed, tz)?
        } else {
            Kind::Cron(parse::cron(resolved.as_deref().unwrap_or(trimmed), tz)?)
        };
        let schedule = Self {
            inner: Arc::new(Parsed {
                text: text.to_owned(),
                resolved: resolved.map(String::into_boxed_str),
                bounds: Bounds::default(),
                tz,
                kind,
                controls: None,
            }),
        };
        schedule.check_fires(now)?;
        Ok(schedule)
    }

    /// The first fire instant strictly after `after`, or `None` when the schedule has no
    /// more (a 7-field expression whose years are past, or past its `end_at`). Pure: no
    /// clock is read.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let Bounds { start, end } = self.inner.bounds;
        let after = match start {
            // Strictly after a nanosecond before the start: the start itself may fire.
            Some(start) if after < start => start - chrono::Duration::nanoseconds(1),
            _ => after,
        };
        let next = self.next_controlled(after)?;
        match end {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }

    /// [`Schedule::next_after`] without the bounds.
    pub(super) fn next_unbounded(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
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
            Kind::Once(at) => (after < *at).then_some(*at),
            Kind::After(_) => None,
        }
    }

    /// The fire instants strictly after `after`, in order.
    pub fn iter_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after), move |t| self.next_after(*t))
    }

    /// Whether another job (or copy) holds this parsed schedule too: the jobs of a config
    /// that write a schedule alike share one (`intern`).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.inner) > 1
    }

    /// The schedule as written in the config.
    pub fn as_str(&self) -> &str {
        &self.inner.text
    }

    /// The schedule with each `H` item replaced by its value for the job; `None` when it
    /// has no `H`.
    pub fn resolved(&self) -> Option<&str> {
        self.inner.resolved.as_deref()
    }

    /// The zone the schedule is evaluated in.
    pub fn timezone(&self) -> Tz {
        self.inner.tz
    }

    /// Whether the schedule is pinned to wall-clock times (cronie's rule: a cron
    /// expression whose minute and hour fields both do not start with `*`). Pinned
    /// schedules run once for a time a DST change skips or repeats; the others run by
    /// elapsed time. `@every` is not pinned.
    /// Test-only: the searches read the pinned flag directly.
    #[cfg(test)]
    pub(crate) fn is_pinned(&self) -> bool {
        matches!(&self.inner.kind, Kind::Cron(c) if c.pinned)
    }

    /// The interval of an `@every` schedule.
    /// `None` for a union or a schedule with exclusions (see [`Schedule::combine`]).
    pub fn is_every(&self) -> Option<Duration> {
        if self.inner.controls.is_some() {
            return None;
        }
        match &self.inner.kind {
            Kind::Every { every, .. } => Some(*every),
            Kind::Cron(_) | Kind::Once(_) | Kind::After(_) => None,
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
    /// Test-only: it checks the sharing that [`Interner`] promises.
    #[cfg(test)]
    pub(crate) fn shares_parsed(&self, other: &Schedule) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Fails when the schedule has no fire time after `now`.
    fn check_fires(&self, now: DateTime<Utc>) -> Result<(), ScheduleError> {
        let never = |reason: String| Err(ScheduleError::NeverFires { reason });
        let c = match &self.inner.kind {
            Kind::Every { .. } => {
                return match self.next_unbounded(now) {
                    Some(_) => Ok(()),
                    None => never("its next time is out of range".to_owned()),
                };
            }
            Kind::Cron(c) => c,
            // A past one-shot is the config's warning, not a parse error.
            Kind::Once(_) | Kind::After(_) => return Ok(()),
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
        if self.next_unbounded(now).is_some() {
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
            || (self.inner.text == other.inner.text
                && self.inner.resolved == other.inner.resolved
                && self.inner.bounds == other.inner.bounds
                && self.inner.tz == other.inner.tz
                && self.inner.controls == other.inner.controls)
    }
}

impl Eq for Schedule {}

impl std::hash::Hash for Schedule {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // What `eq` compares.
        self.inner.text.hash(state);
        self.inner.resolved.hash(state);
        self.inner.bounds.hash(state);
        self.inner.tz.hash(state);
    }
}
