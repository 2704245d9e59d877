//! The JSON shapes of a job's status, a run and a dead letter: one each, for the command
//! line's `--json` output and the dashboard's API (which adds fields of its own to them).

use chrono::{DateTime, Utc};
use cronq_shared::broker::Folded;
use cronq_shared::config::Job;
use cronq_shared::control::Pause;
use cronq_shared::jobs::Revision;
use cronq_shared::runlog::{Run, RunOutput};
use serde_json::{Value, json};

use crate::output;

/// A job's status: its schedule, next fire (UTC and the job's zone), pause flag and last
/// run.
pub fn job(
    job: &Job,
    next: Option<DateTime<Utc>>,
    paused: Option<&Pause>,
    last: Option<&Run>,
) -> Value {
    json!({
        "job": job.name.as_str(),
        "schedule": job.schedule.as_str(),
        "timezone": job.timezone.name(),
        "queue": job.queue.as_str(),
        "next": next.map(|t| json!({
            "utc": output::utc(t),
            "local": output::local(&t.with_timezone(&job.timezone)),
        })),
        "paused": paused.map(|p| json!({ "since": output::utc(p.since), "note": p.note })),
        "last": last.map(|r| json!({
            "key": r.key.to_string(),
            "outcome": r.outcome.as_str(),
            "at": output::utc(r.started_at),
            "error": r.error,
        })),
    })
}

/// Adds a job's parents (`after`) and children (the jobs that run after it) to its [`job`]
/// object, each only when there are any.
pub fn chain(row: &mut Value, job: &Job, children: &[&str]) {
    if !job.parents().is_empty() {
        let parents: Vec<&str> = job.parents().iter().map(|p| p.as_str()).collect();
        row["after"] = json!(parents);
    }
    if !children.is_empty() {
        row["children"] = json!(children);
    }
}

/// Adds whether a live consumer serves the job to its [`job`] object: `served` is
/// `"served"`, `"unserved"` or `"no consumer"` (null when not known), `unserved_reason`
/// says why when it is not served.
pub fn served(row: &mut Value, served: Option<&cronq_shared::registry::serving::Service>) {
    row["served"] = json!(served.map(|s| s.as_str()));
    row["unserved_reason"] = json!(served.and_then(|s| s.reason()));
}

/// One run of the history; `published_at` is null when not known (see
/// [`cronq_shared::runlog::Run::published_at`]).
pub fn run(r: &Run) -> Value {
    json!({
        "key": r.key.to_string(),
        "job": r.job.as_str(),
        "attempt": r.attempt,
        "consumer": r.consumer,
        "scheduled_at": r.key.scheduled_at().map(output::utc_ms),
        "published_at": r.published_at.map(output::utc_ms),
        "started_at": output::utc_ms(r.started_at),
        "publish_lateness_ms": r.publish_lateness().map(|d| d.num_milliseconds()),
        "start_lateness_ms": r.start_lateness().map(|d| d.num_milliseconds()),
        "duration_ms": u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
        "outcome": r.outcome.as_str(),
        "error": r.error,
    })
}

/// A run with its output (`null` when none was kept).
pub fn run_with_output(r: &Run, output: Option<&RunOutput>) -> Value {
    let mut value = run(r);
    value["output"] = serde_json::to_value(output).unwrap_or(Value::Null);
    value
}

/// One revision of a runtime job (`cronq job get --json`, `GET /api/v1/jobs/NAME`): its
/// definition as TOML text (`null` for a delete), who wrote it and when.
pub fn revision(rev: &Revision) -> Value {
    json!({
        "job": rev.name,
        "revision": rev.revision,
        "by": rev.by,
        "at": output::utc(rev.at),
        "spec": rev.spec,
    })
}

/// One dead run: its oldest letter, without its body, and how many copies of it the
/// dead-letter queue holds (see [`cronq_shared::broker::Folded`]).
pub fn dead_letter(f: &Folded) -> Value {
    let l = &f.letter;
    json!({
        "key": l.key,
        "job": l.job,
        "queue": l.queue.as_ref().map(|q| q.as_str()),
        "attempts": l.attempts,
        "reason": l.reason,
        "last_error": l.last_error,
        "dead_lettered_at": output::utc(l.dead_lettered_at),
        "copies": f.copies,
    })
}
