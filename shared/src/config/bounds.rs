//! A job's `start_at` and `end_at`: read as RFC 3339 instants or local date-times in the
//! job's zone, checked against each other, and warned about when `end_at` is past.
//!
//! Invariant: the bounds are instants (UTC); the schedule applies them
//! ([`crate::schedule::Schedule::bounded`]), so every reader of fire times (the producer's
//! planning and catch-up, `cronq next`) sees the same bounded times (G4).

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, TimeZone as _, Utc};
use chrono_tz::Tz;
use toml::Value;

use super::raw::RawJob;
use super::report::Report;
use crate::schedule::Bounds;

/// The job's bounds; each bad one is a problem (and left unset), `end_at` not after
/// `start_at` a problem, an `end_at` before `now` a warning.
pub(super) fn resolve_bounds(
    raw: &RawJob,
    tz: Tz,
    now: DateTime<Utc>,
    scope: &str,
    out: &mut Report,
) -> Bounds {
    let mut read = |field: &'static str, value: Option<&Value>| {
        let value = value?;
        match instant(value, tz) {
            Ok(t) => Some(t),
            Err(message) => {
                out.problem(scope, field, message);
                None
            }
        }
    };
    let start = read("start_at", raw.own.start_at.as_ref());
    let end = read("end_at", raw.own.end_at.as_ref());
    let show = |t: DateTime<Utc>| {
        t.with_timezone(&tz)
            .to_rfc3339_opts(SecondsFormat::AutoSi, false)
    };
    if let (Some(start), Some(end)) = (start, end)
        && end <= start
    {
        out.problem(
            scope,
            "end_at",
            format!(
                "{} is not after start_at ({}): the job would never run; make end_at later",
                show(end),
                show(start)
            ),
        );
        return Bounds::default();
    }
    if let Some(end) = end.filter(|e| *e < now) {
        out.warn(
            scope,
            "end_at",
            format!(
                "{} is past: the job has no more occurrences; remove it or move end_at",
                show(end)
            ),
        );
    }
    Bounds { start, end }
}

/// An RFC 3339 instant, or a local date-time (or date, at midnight) in `tz`; a string or a
/// TOML date-time.
pub(super) fn instant(value: &Value, tz: Tz) -> Result<DateTime<Utc>, String> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Datetime(d) => d.to_string(),
        other => {
            return Err(format!(
                "expected an RFC 3339 instant such as \"2026-12-01T09:00:00+01:00\", or a local date-time in the job's zone, got {}",
                other.type_str()
            ));
        }
    };
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let local = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f"))
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M"))
        .or_else(|_| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d").map(|d| d.and_time(Default::default()))
        })
        .map_err(|_| {
            format!(
                "{text:?} is not a date-time: use RFC 3339 such as \"2026-12-01T09:00:00+01:00\", or a local date-time in the job's zone such as \"2026-12-01T09:00:00\""
            )
        })?;
    match tz.from_local_datetime(&local) {
        chrono::LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
        // A repeated local time: its first pass.
        chrono::LocalResult::Ambiguous(a, b) => Ok(a.min(b).with_timezone(&Utc)),
        chrono::LocalResult::None => Err(format!(
            "{text:?} does not exist in {} (a daylight-saving gap): give another time or an RFC 3339 instant with its offset",
            tz.name()
        )),
    }
}
