//! Warnings: legal but risky settings of one job, collected into `Config::warnings`.
//!
//! Invariant: a warning never makes a config invalid; only `now` anchors the look-ahead.
//!
//! The look-ahead (fire-time sampling, DST transitions) is the costly part of loading a
//! large config, and it depends only on the schedule text and zone: it is memoised per
//! load in [`Memo`], and the interval is sampled only for jobs whose settings need it. A
//! zone's DST transitions are found once per load, whatever the number of distinct
//! pinned schedules in it.

// Looked up once per job of a load: a fast hash (the keys are the config file's own).
use foldhash::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::error::Problem;
use super::report::Report;
use super::{Catchup, Job};
use crate::schedule::{Schedule, TransitionCache};

/// How far ahead `cronq check` looks for daylight-saving transitions.
const DST_HORIZON: Duration = Duration::from_secs(366 * 24 * 3600);

/// How many upcoming fire times are sampled to find a cron schedule's shortest interval.
const INTERVAL_SAMPLES: usize = 64;

/// Look-ahead results of one load, by zone and schedule text.
#[derive(Default)]
pub(super) struct Memo {
    intervals: HashMap<Tz, HashMap<String, Option<Duration>>>,
    /// DST warning texts (without the scope), shared by jobs of the same schedule.
    dst: HashMap<Tz, HashMap<String, Vec<String>>>,
    /// Each zone's transitions over the DST horizon, shared by every schedule in it.
    zones: TransitionCache,
}

/// The memoised value for `schedule`, computed by `compute` on first use. The lookup
/// allocates nothing: only a new entry copies the text.
fn memoised<'m, T>(
    memo: &'m mut HashMap<Tz, HashMap<String, T>>,
    schedule: &Schedule,
    compute: impl FnOnce() -> T,
) -> &'m T {
    let by_text = memo.entry(schedule.timezone()).or_default();
    // A text with `H` means another schedule per job: its resolution is part of the key.
    let key: std::borrow::Cow<'_, str> = match schedule.resolved() {
        None => schedule.as_str().into(),
        Some(resolved) => format!("{}\n{resolved}", schedule.as_str()).into(),
    };
    if !by_text.contains_key(&*key) {
        by_text.insert(key.clone().into_owned(), compute());
    }
    &by_text[&*key]
}

/// Legal but risky combinations of one job.
pub(super) fn warn_risky(
    job: &Job,
    scope: &str,
    now: DateTime<Utc>,
    memo: &mut Memo,
    out: &mut Report,
) {
    let fmt = |d: Duration| humantime::format_duration(d).to_string();
    // Only these two warnings need the interval: skip the sampling for everyone else.
    let needs_interval = !job.jitter.is_zero() || job.catchup == Catchup::All;
    let interval = if needs_interval {
        *memoised(&mut memo.intervals, &job.schedule, || {
            shortest_interval(&job.schedule, now)
        })
    } else {
        None
    };
    if let Some(interval) = interval {
        if !job.jitter.is_zero() && job.jitter >= interval {
            out.warn(
                scope,
                "jitter",
                format!(
                    "{} is not shorter than the schedule's interval ({}): an occurrence may be published after the next one",
                    fmt(job.jitter),
                    fmt(interval)
                ),
            );
        }
        if job.catchup == Catchup::All && job.catchup_window < interval {
            out.warn(
                scope,
                "catchup_window",
                format!(
                    "{} is shorter than the schedule's interval ({}): catchup = \"all\" can recover at most one missed occurrence",
                    fmt(job.catchup_window),
                    fmt(interval)
                ),
            );
        }
    }
    if let Some(deadline) = job.deadline
        && !job.jitter.is_zero()
        && deadline <= job.jitter
    {
        out.warn(
            scope,
            "deadline",
            format!(
                "{} is not longer than jitter ({}): occurrences delayed by jitter will be recorded as missed",
                fmt(deadline),
                fmt(job.jitter)
            ),
        );
    }
    if job.catchup != Catchup::None && job.retention < job.catchup_window {
        out.warn(
            scope,
            "retention",
            format!(
                "{} is shorter than catchup_window ({}): an occurrence published again by catch-up after its record expired would run again",
                fmt(job.retention),
                fmt(job.catchup_window)
            ),
        );
    }
    let Memo { dst, zones, .. } = memo;
    let texts = memoised(dst, &job.schedule, || {
        dst_warnings(&job.schedule, now, DST_HORIZON, zones)
    });
    let found: Vec<Problem> = texts
        .iter()
        .map(|text| Problem::new(scope, "schedule", text.clone()))
        .collect();
    out.warnings.extend(found);
}

/// Warnings for a pinned schedule whose wall-clock time falls into a daylight-saving
/// transition within `horizon` after `from` (`cronq check` prints them; see the
/// "Daylight-saving time" section of `docs/config.md`), each as `"30 2 * * *" fires at 02:30 which …` (the caller adds the scope).
fn dst_warnings(
    schedule: &Schedule,
    from: DateTime<Utc>,
    horizon: Duration,
    zones: &mut TransitionCache,
) -> Vec<String> {
    // A union (`schedules`): each of its schedules, named as written.
    if let Some(members) = schedule.members() {
        return members
            .flat_map(|m| {
                m.dst_warnings_cached(from, horizon, zones)
                    .into_iter()
                    .map(|w| format!("{:?} {w}", m.as_str()))
            })
            .collect();
    }
    schedule
        .dst_warnings_cached(from, horizon, zones)
        .into_iter()
        .map(|w| format!("{:?} {w}", schedule.as_str()))
        .collect()
}

/// The interval of an `@every` schedule, or the shortest gap between a cron schedule's
/// upcoming fire times, sampled after `now`.
fn shortest_interval(schedule: &Schedule, now: DateTime<Utc>) -> Option<Duration> {
    if let Some(every) = schedule.is_every() {
        return Some(every);
    }
    let times: Vec<_> = schedule.iter_after(now).take(INTERVAL_SAMPLES).collect();
    times
        .windows(2)
        .filter_map(|w| (w[1] - w[0]).to_std().ok())
        .min()
}
