//! Warnings for pinned schedules whose wall-clock times a daylight-saving change skips or
//! repeats (`cronq check`; the rules are in the "Daylight-saving time" section of
//! `docs/config.md`).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Timelike as _, Utc};
use chrono_tz::Tz;
use croner::Cron;

use super::zone::{self, Transition};

/// The longest horizon looked at, in years.
const MAX_YEARS: i64 = 100;

/// How many local times a warning lists before "and N more".
const LISTED: usize = 3;

/// Which way the clocks moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DstChange {
    /// A range of local times does not exist: the schedule runs once, right after it.
    SpringForward,
    /// A range of local times occurs twice: the schedule runs once, at the first pass.
    FallBack,
}

/// A pinned schedule's fire time that a daylight-saving change skips or repeats.
///
/// Display, for one time and for several:
/// `fires at 02:30 which does not exist on 2027-03-14 in America/New_York (clocks spring forward): it runs at 03:00 EDT instead`,
/// `fires at 02:00, 02:30 which do not exist on ...: they run once, at 03:00 EDT instead`,
/// `fires at 01:30 which occurs twice on 2026-11-01 in America/New_York (clocks fall back): it runs once, at the first pass (01:30 EDT)`,
/// `fires at 01:00, 01:30 which occur twice on ...: each runs once, at the first pass (EDT)`.
/// More than three times are listed as `01:00, 01:01, 01:02 and 57 more times`; seconds
/// are shown when a time has them; the run time gets its date when it is on another day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DstWarning {
    /// Which way the clocks moved.
    pub change: DstChange,
    /// The schedule's zone.
    pub zone: Tz,
    /// The local date of the affected times.
    pub date: NaiveDate,
    /// The first affected local times, at most three.
    pub times: Vec<NaiveTime>,
    /// How many local times are affected in all.
    pub count: usize,
    /// When the first affected time actually runs.
    pub runs_at: DateTime<Tz>,
}

impl fmt::Display for DstWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let with_seconds = self.times.iter().any(|t| t.second() != 0);
        let time_format = if with_seconds { "%H:%M:%S" } else { "%H:%M" };
        let listed: Vec<String> = self
            .times
            .iter()
            .map(|t| t.format(time_format).to_string())
            .collect();
        write!(f, "fires at {}", listed.join(", "))?;
        let more = self.count.saturating_sub(self.times.len());
        if more > 0 {
            write!(
                f,
                " and {more} more {}",
                if more == 1 { "time" } else { "times" }
            )?;
        }
        let one = self.count == 1;
        // A gap can swallow a whole day (Samoa, 2011-12-30): then the date is shown too.
        let runs_at_format = if self.runs_at.date_naive() == self.date {
            format!("{time_format} %Z")
        } else {
            format!("%Y-%m-%d {time_format} %Z")
        };
        let runs_at = self.runs_at.format(&runs_at_format);
        match self.change {
            DstChange::SpringForward => write!(
                f,
                " which {} not exist on {} in {} (clocks spring forward): {} at {runs_at} instead",
                if one { "does" } else { "do" },
                self.date,
                self.zone.name(),
                if one { "it runs" } else { "they run once," },
            ),
            DstChange::FallBack => {
                write!(
                    f,
                    " which {} twice on {} in {} (clocks fall back): ",
                    if one { "occurs" } else { "occur" },
                    self.date,
                    self.zone.name(),
                )?;
                if one {
                    write!(f, "it runs once, at the first pass ({runs_at})")
                } else {
                    write!(
                        f,
                        "each runs once, at the first pass ({})",
                        self.runs_at.format("%Z")
                    )
                }
            }
        }
    }
}

/// The offset changes of each zone over a window, found once and reused by every pinned
/// schedule of that zone (finding them costs one zone lookup per hour of the window; a
/// year is 8,784 lookups).
#[derive(Debug, Default)]
pub struct TransitionCache {
    zones: HashMap<(Tz, i64, i64), Vec<Transition>>,
}

impl TransitionCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The transitions of `tz` in `(start, end]`, computed on first use.
    fn transitions(&mut self, tz: Tz, start: i64, end: i64) -> &[Transition] {
        self.zones
            .entry((tz, start, end))
            .or_insert_with(|| zone::transitions(tz, start, end))
    }
}

/// The warnings for a pinned schedule over `(from, from + horizon]`; the zone's
/// transitions come from `cache` when one is given.
pub(super) fn warnings(
    cron: &Cron,
    tz: Tz,
    from: DateTime<Utc>,
    horizon: Duration,
    cache: Option<&mut TransitionCache>,
) -> Vec<DstWarning> {
    let start = from.timestamp();
    let end = start.saturating_add(i64::try_from(horizon.as_secs()).unwrap_or(i64::MAX));
    // Probing is hourly: look at most MAX_YEARS ahead, and only within 1900-3000
    // (-2208988800 and 32503680000), past any year field.
    let end = end.min(start.saturating_add(MAX_YEARS * 366 * 86_400));
    let (start, end) = (start.max(-2_208_988_800), end.min(32_503_680_000));
    let found = |transitions: &[Transition]| {
        transitions
            .iter()
            .filter_map(|t| warning(cron, tz, *t))
            .collect()
    };
    match cache {
        Some(cache) => found(cache.transitions(tz, start, end)),
        None => found(&zone::transitions(tz, start, end)),
    }
}

/// The warning for one transition, if a matching local time falls in it.
fn warning(cron: &Cron, tz: Tz, t: Transition) -> Option<DstWarning> {
    // The local times the change skips or repeats: [at + min offset, at + max offset).
    let (lo, hi) = (t.at + t.before.min(t.after), t.at + t.before.max(t.after));
    let window_start = DateTime::from_timestamp(lo, 0)?;
    let window_end = DateTime::from_timestamp(hi, 0)?;
    let mut times = Vec::new();
    let mut first: Option<NaiveDateTime> = None;
    let mut count = 0usize;
    let mut cursor = window_start;
    let mut inclusive = true;
    while let Ok(m) = cron.find_next_occurrence(&cursor, inclusive) {
        if m >= window_end {
            break;
        }
        count += 1;
        first.get_or_insert(m.naive_utc());
        if times.len() < LISTED {
            times.push(m.time());
        }
        cursor = m;
        inclusive = false;
    }
    let first = first?;
    let spring = t.after > t.before;
    Some(DstWarning {
        change: if spring {
            DstChange::SpringForward
        } else {
            DstChange::FallBack
        },
        zone: tz,
        date: first.date(),
        times,
        count,
        runs_at: zone::pinned_instant(tz, first).with_timezone(&tz),
    })
}
