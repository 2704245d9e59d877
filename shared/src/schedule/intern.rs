//! Sharing parsed schedules while loading a config: one parse per distinct (text, zone).
//!
//! Invariant: every schedule an [`Interner`] hands out was parsed with the `now` it was
//! created with, so a shared result is exactly what a fresh parse would have returned.

// Looked up once per job of a load: a fast hash (the keys are the config file's own).
use foldhash::HashMap;
use foldhash::HashMapExt as _;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::error::ScheduleError;
use super::{Bounds, Schedule};

/// Parses schedules as of one `now`, reusing the result for a (text, zone) it has seen:
/// the jobs that share a schedule share its parsed state, and pay for the parse and the
/// never-fires check once.
#[derive(Debug)]
pub struct Interner {
    now: DateTime<Utc>,
    /// By zone, then by the text as written (a lookup by `&str` allocates nothing).
    seen: HashMap<Tz, HashMap<String, Result<Schedule, ScheduleError>>>,
    /// Bounded schedules, by the unbounded one and the bounds: jobs with the same
    /// schedule and the same `start_at`/`end_at` share one.
    bounded: HashMap<(Schedule, Bounds), Schedule>,
}

impl Interner {
    /// An empty interner whose parses check from `now` on (see [`Schedule::parse_at`]).
    pub fn new(now: DateTime<Utc>) -> Self {
        Self {
            now,
            seen: HashMap::new(),
            bounded: HashMap::new(),
        }
    }

    /// [`Schedule::parse_at`] of `text` in `tz` at this interner's `now`, shared with every
    /// earlier call for the same text and zone.
    ///
    /// # Errors
    /// As [`Schedule::parse_at`].
    pub fn parse(&mut self, text: &str, tz: Tz) -> Result<Schedule, ScheduleError> {
        let by_text = self.seen.entry(tz).or_default();
        if let Some(parsed) = by_text.get(text) {
            return parsed.clone();
        }
        let parsed = Schedule::parse_at(text, tz, self.now);
        by_text.insert(text.to_owned(), parsed.clone());
        parsed
    }

    /// [`Schedule::parse_for_job`] of `text` for `job`: a text with no `H` item is shared
    /// as by [`Interner::parse`]; one with `H` is shared by the jobs it resolves alike for
    /// (at most as many parses as the values `H` can take, not one per job).
    ///
    /// # Errors
    /// As [`Schedule::parse_for_job`].
    pub fn parse_for_job(
        &mut self,
        text: &str,
        tz: Tz,
        job: &str,
    ) -> Result<Schedule, ScheduleError> {
        let resolved = match super::hash::resolve(text, Some(job)) {
            Ok(Some(resolved)) => resolved,
            Ok(None) => return self.parse(text, tz),
            Err(e) => return Err(e),
        };
        // `\n` never occurs in a schedule that parses: text and resolution stay apart.
        let key = format!("{text}\n{resolved}");
        let by_text = self.seen.entry(tz).or_default();
        if let Some(parsed) = by_text.get(&key) {
            return parsed.clone();
        }
        let parsed = Schedule::parse_for_job(text, tz, job, self.now);
        by_text.insert(key, parsed.clone());
        parsed
    }

    /// [`Schedule::bounded`], shared with every earlier call for an equal schedule and
    /// equal bounds.
    pub fn bounded(&mut self, schedule: &Schedule, bounds: Bounds) -> Schedule {
        self.bounded
            .entry((schedule.clone(), bounds))
            .or_insert_with(|| schedule.bounded(bounds))
            .clone()
    }

    /// The `now` its parses check from.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// How many distinct (text, zone) pairs were parsed.
    pub fn len(&self) -> usize {
        self.seen.values().map(HashMap::len).sum()
    }

    /// Whether nothing was parsed yet.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_parse_per_text_and_zone() {
        let now: DateTime<Utc> = "2026-01-15T00:00:00Z".parse().unwrap();
        let mut interner = Interner::new(now);
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let a = interner.parse("0 9 * * MON", berlin).unwrap();
        let b = interner.parse("0 9 * * MON", berlin).unwrap();
        let utc = interner.parse("0 9 * * MON", Tz::UTC).unwrap();
        assert!(a.shares_parsed(&b));
        assert!(!a.shares_parsed(&utc), "another zone is another schedule");
        assert_eq!(a, Schedule::parse_at("0 9 * * MON", berlin, now).unwrap());
        assert!(
            !a.shares_parsed(&Schedule::parse_at("0 9 * * MON", berlin, now).unwrap()),
            "a fresh parse is not shared, but equal"
        );
        let bad = interner.parse("0 9 30 2 *", berlin).unwrap_err();
        assert_eq!(interner.parse("0 9 30 2 *", berlin).unwrap_err(), bad);
        assert_eq!(interner.len(), 3, "two good schedules and one bad");
        let bounds = Bounds {
            start: Some(now),
            end: None,
        };
        let x = interner.bounded(&a, bounds);
        assert!(x.shares_parsed(&interner.bounded(&b, bounds)));
        assert_ne!(x, a, "bounds are part of a schedule");
    }
}
