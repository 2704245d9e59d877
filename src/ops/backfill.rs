//! Backfill rules shared by `cronq backfill` and the dashboard: how many occurrences a
//! range covers (shown before anything is published) and when a range is large enough to
//! need a confirmation.

use chrono::{DateTime, TimeDelta, Utc};
use cronq_shared::schedule::Schedule;

/// More occurrences than this need a confirmation (`--yes`, or the dashboard's checkbox).
pub const CONFIRM_ABOVE: usize = 10_000;

/// Counting stops here: the exact number of a huge range does not matter.
const COUNT_CAP: usize = 1_000_000;

/// How many occurrences a backfill range covers, and that number as shown to people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// Occurrences with `from <= t <= to` (past [`COUNT_CAP`] for cron schedules: more).
    pub count: usize,
    /// `count`, or `more than 1000000` when counting stopped.
    pub shown: String,
}

impl Preview {
    /// The preview of `schedule` over `from..=to`.
    pub fn of(schedule: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Self {
        let count = count(schedule, from, to);
        let shown = if count > COUNT_CAP && schedule.is_every().is_none() {
            format!("more than {COUNT_CAP}")
        } else {
            count.to_string()
        };
        Self { count, shown }
    }
}

/// Occurrences with `from <= t <= to` (the range the producer's backfill walks): exact for
/// `@every`, counted up to just past [`COUNT_CAP`] for cron schedules.
fn count(schedule: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> usize {
    if let Some(every) = schedule.is_every() {
        // Epoch-aligned: k * every for every k with from <= k * every <= to.
        let step = i64::try_from(every.as_secs()).unwrap_or(i64::MAX).max(1);
        let first = from.timestamp() + (step - from.timestamp().rem_euclid(step)) % step;
        let first = if from.timestamp_subsec_nanos() > 0 && from.timestamp() % step == 0 {
            first + step
        } else {
            first
        };
        let n = if first > to.timestamp() {
            0
        } else {
            (to.timestamp() - first) / step + 1
        };
        return usize::try_from(n).unwrap_or(usize::MAX);
    }
    schedule
        .iter_after(from - TimeDelta::nanoseconds(1))
        .take_while(|t| *t <= to)
        .take(COUNT_CAP + 1)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_matches_walking_the_schedule() {
        let walk = |s: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>| {
            s.iter_after(from - TimeDelta::nanoseconds(1))
                .take_while(|t| *t <= to)
                .count()
        };
        for spec in ["@every 1s", "@every 7s", "@every 90s"] {
            let s = Schedule::parse(spec, chrono_tz::UTC).unwrap();
            let base: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
            for (a, b) in [(0, 0), (0, 1), (3, 200), (1, 1000), (5, 4)] {
                let from = base + TimeDelta::seconds(a) + TimeDelta::milliseconds(a * 100 % 1000);
                let to = base + TimeDelta::seconds(b);
                if from <= to {
                    assert_eq!(
                        count(&s, from, to),
                        walk(&s, from, to),
                        "{spec} {from} {to}"
                    );
                }
            }
        }
    }
}
