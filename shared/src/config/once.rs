//! A one-shot job's `at`: read as an RFC 3339 instant or a local date-time in the job's
//! zone (as `start_at` is), refused beside `schedule`, and warned about when it is past.
//!
//! Invariant: a one-shot's schedule is [`Schedule::once`] of a whole-second instant, so its
//! key `JOB@<at in UTC>` is the same in every process (G4). A past `at` is valid: the job
//! has no fire after now, and runs only if a leader's catch-up covers it (its `catchup`
//! policy and `catchup_window`, after an outage that spanned it).

use chrono::{DateTime, SecondsFormat, Timelike as _, Utc};
use chrono_tz::Tz;

use super::bounds::instant;
use super::raw::RawJob;
use super::report::Report;
use crate::schedule::Schedule;

/// The schedule of a job with `at = …` (`None` without one); a problem (and `None`) when it is unreadable, has
/// a fraction of a second, or comes with a `schedule`; a warning when it is before `now`.
pub(super) fn resolve_once(
    raw: &RawJob,
    tz: Tz,
    now: DateTime<Utc>,
    scope: &str,
    out: &mut Report,
) -> Option<Schedule> {
    let at = raw.own.at.as_ref()?;
    if let Some(schedule) = raw.own.schedule.as_deref() {
        out.problem(
            scope,
            "at",
            format!(
                "is set together with schedule = {schedule:?}: a job runs either on a schedule or once at `at`; remove one of them"
            ),
        );
        return None;
    }
    if raw.own.schedules.is_some() || raw.own.exclude.is_some() || raw.own.calendars.is_some() {
        out.problem(
            scope,
            "at",
            "is set together with schedules, exclude or calendars: a one-shot job runs once at `at`; remove them",
        );
        return None;
    }
    let t = match instant(at, tz) {
        Ok(t) => t,
        Err(message) => {
            out.problem(scope, "at", message);
            return None;
        }
    };
    let show = |t: DateTime<Utc>| {
        t.with_timezone(&tz)
            .to_rfc3339_opts(SecondsFormat::AutoSi, false)
    };
    if t.nanosecond() != 0 {
        out.problem(
            scope,
            "at",
            format!(
                "{} has a fraction of a second: occurrences are on whole seconds; drop the fraction",
                show(t)
            ),
        );
        return None;
    }
    if t <= now {
        out.warn(
            scope,
            "at",
            format!(
                "{} is past: this one-shot job will not run unless a leader's catch-up covers it (catchup and catchup_window); move at, or remove the job",
                show(t)
            ),
        );
    }
    Some(Schedule::once(t, tz))
}
