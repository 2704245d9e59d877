//! The same-second herd warning: many jobs whose next fire is one and the same second
//! (all at `0 * * * *`, say) hit the broker, the ledger and the consumers at once.
//!
//! Method, cheap at a million jobs: jobs are counted per distinct schedule while the config
//! loads (one hash lookup per job; jobs that share a schedule share its parsed state, so
//! the lookup mostly compares pointers), then each distinct schedule's next fire within
//! [`HORIZON`] is computed once and its jobs are added to that second. The second with the
//! most jobs is warned about when it holds more than [`SHARE_PERCENT`] % of the jobs and at
//! least [`MIN_JOBS`]. It looks at each schedule's *next* fire only: schedules of different
//! periods that meet later (`@hourly` and `*/30 * * * *` at the next full hour but one) are
//! counted only where their next fires meet.
//!
//! Invariant: a warning, never a problem; only `now` anchors the look-ahead.

// Counted once per job of a load: a fast hash (the keys are the config file's own).
use foldhash::HashMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use super::report::Report;
use crate::schedule::Schedule;

/// How far ahead a next fire counts.
pub(super) const HORIZON: Duration = Duration::from_secs(24 * 3600);

/// A second is a herd above this share of all jobs ...
pub(super) const SHARE_PERCENT: usize = 10;

/// ... and with at least this many jobs.
pub(super) const MIN_JOBS: usize = 100;

/// Jobs counted per distinct schedule.
#[derive(Default)]
pub(super) struct Herd {
    by_schedule: HashMap<Schedule, usize>,
    jobs: usize,
}

impl Herd {
    /// Counts one job with `schedule`.
    pub(super) fn add(&mut self, schedule: &Schedule) {
        self.jobs += 1;
        match self.by_schedule.get_mut(schedule) {
            Some(n) => *n += 1,
            None => {
                self.by_schedule.insert(schedule.clone(), 1);
            }
        }
    }

    /// Warns about the busiest next-fire second after `now`, if it is a herd.
    pub(super) fn warn(self, now: DateTime<Utc>, out: &mut Report) {
        if self.jobs < MIN_JOBS {
            return;
        }
        let end = now + chrono::Duration::from_std(HORIZON).unwrap_or(chrono::Duration::MAX);
        let mut by_second: HashMap<DateTime<Utc>, (usize, Vec<&Schedule>)> = HashMap::default();
        for (schedule, n) in &self.by_schedule {
            if let Some(t) = schedule.next_after(now).filter(|t| *t <= end) {
                let (count, schedules) = by_second.entry(t).or_default();
                *count += n;
                schedules.push(schedule);
            }
        }
        let Some((second, (count, mut schedules))) = by_second
            .into_iter()
            .max_by_key(|(t, (count, _))| (*count, std::cmp::Reverse(*t)))
        else {
            return;
        };
        if count < MIN_JOBS || count * 100 <= self.jobs * SHARE_PERCENT {
            return;
        }
        schedules.sort_by_key(|s| std::cmp::Reverse(self.by_schedule[*s]));
        let shown: Vec<String> = schedules
            .iter()
            .take(3)
            .map(|s| format!("{:?}", s.as_str()))
            .collect();
        let more = if schedules.len() > 3 { ", …" } else { "" };
        out.warn(
            "",
            "",
            format!(
                "{count} of {} jobs ({}%) fire in the same second, {} (schedules {}{more}): a herd that loads the broker and the consumers at once; spread them with H in a cron field (such as \"H * * * *\") or with jitter",
                self.jobs,
                count * 100 / self.jobs,
                second.to_rfc3339_opts(SecondsFormat::Secs, true),
                shown.join(", "),
            ),
        );
    }
}
