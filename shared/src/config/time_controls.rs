//! A job's fire times as its config says them: `schedule`, or `schedules` (a union), less
//! `exclude` and the dates of the `calendars` it names, resolved into its one
//! [`Schedule`] (`crate::schedule` computes the times; see `docs/config.md`).
//!
//! Invariant: a job gets a schedule only when every one of these fields is valid; each bad
//! entry is a problem naming the job and the field, and the rest are still checked.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono_tz::Tz;

use super::calendars::Calendar;
use super::raw::{RawJob, describe};
use super::report::Report;
use super::suggest::did_you_mean;
use crate::schedule::{Exclusions, Interner, Schedule, ScheduleError};

/// The job's schedule with its union and exclusions, or `None` after reporting why not.
pub(super) fn resolve_schedule(
    raw: &RawJob,
    tz: Tz,
    job: &str,
    calendars: &BTreeMap<Arc<str>, Calendar>,
    schedules: &mut Interner,
    out: &mut Report,
) -> Option<Schedule> {
    let scope = raw.scope.as_str();
    let before = out.problems.len();
    let mut members = Vec::new();
    match (raw.own.schedule.as_deref(), raw.own.schedules.as_deref()) {
        (Some(_), Some(_)) => out.problem(
            scope,
            "schedules",
            "is set together with schedule: give schedule = \"…\" for one schedule or schedules = [\"…\", \"…\"] for several, not both",
        ),
        (Some(text), None) => match schedules.parse_for_job(text, tz, job) {
            Ok(s) => members.push(s),
            Err(e) => out.problem(scope, "schedule", schedule_message(text, &e)),
        },
        (None, Some([])) => out.problem(
            scope,
            "schedules",
            "is empty: give at least one schedule, such as [\"0 9 * * MON-FRI\", \"0 11 * * SAT\"]",
        ),
        (None, Some(texts)) => {
            for text in texts {
                match schedules.parse_for_job(text, tz, job) {
                    Ok(s) => members.push(s),
                    Err(e) => out.problem(scope, "schedules", schedule_message(text, &e)),
                }
            }
        }
        (None, None) if raw.rejected.contains(&"schedule") || raw.rejected.contains(&"schedules") => {}
        (None, None) => out.problem(
            scope,
            "schedule",
            "is required: a cron expression such as \"30 3 * * *\", or \"@every 5m\"",
        ),
    }
    let mut exclude = Exclusions::new();
    for item in raw.own.exclude.iter().flatten() {
        let text = match item {
            toml::Value::String(s) => s.clone(),
            toml::Value::Datetime(d) => d.to_string(),
            other => {
                out.problem(
                    scope,
                    "exclude",
                    format!(
                        "expected a date such as \"2026-12-25\" or a cron expression such as \"0 12 * * *\", got {}",
                        describe(other)
                    ),
                );
                continue;
            }
        };
        if let Err(e) = exclude.add(&text, job) {
            out.problem(scope, "exclude", schedule_message(&text, &e));
        }
    }
    for name in raw.own.calendars.iter().flatten() {
        match calendars.get(name.as_str()) {
            Some(calendar) => exclude.add_calendar(name, &calendar.dates),
            None => {
                let hint = match did_you_mean(name, calendars.keys().map(|k| &**k)) {
                    Some(s) => format!("; did you mean \"{s}\"?"),
                    None => String::new(),
                };
                out.problem(
                    scope,
                    "calendars",
                    format!("{name:?} is not a [calendars.NAME] of this file{hint}: define it, or remove it from the list"),
                );
            }
        }
    }
    if out.problems.len() > before || members.is_empty() {
        return None;
    }
    let field = if raw.own.exclude.is_some() || raw.own.calendars.is_some() {
        "exclude"
    } else {
        "schedules"
    };
    match Schedule::combine(members, exclude, schedules.now()) {
        Ok(s) => Some(s),
        Err(e) => {
            out.problem(scope, field, e.to_string());
            None
        }
    }
}

/// `"TEXT" <error>`: the schedule error's text reads after the schedule as written.
pub(super) fn schedule_message(text: &str, error: &ScheduleError) -> String {
    let message = error.to_string();
    if message.starts_with('"') {
        format!("{text:?}: {message}")
    } else {
        format!("{text:?} {message}")
    }
}
