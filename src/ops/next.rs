//! How `cronq next` parses `--from` and shows a preview of fire times: the jobs' next
//! times (a job with parents: their common times), as text or one JSON document. Pure:
//! it reads no store and no clock but `--from`'s default.

use chrono::{DateTime, SecondsFormat, Utc};
use cronq_shared::config::{Config, Job};
use serde_json::json;

use crate::ops::lookup;
use crate::settings::UsageError;

/// A job and its next fire times.
pub type Preview<'c> = (&'c Job, Vec<DateTime<Utc>>);

/// `--from`'s instant (now when not given).
///
/// # Errors
/// A usage error for a text that is not an RFC 3339 instant.
pub fn from(text: Option<&str>) -> Result<DateTime<Utc>, UsageError> {
    Ok(match text {
        None => Utc::now(),
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|e| {
                UsageError(format!(
                    "--from {text:?} is not an RFC 3339 instant such as 2026-03-08T06:00:00Z: {e}"
                ))
            })?
            .with_timezone(&Utc),
    })
}

/// The next `count` fire times after `from` of `config`'s jobs, or of `job` alone.
///
/// # Errors
/// A usage error for an unknown `job`.
pub fn previews<'c>(
    config: &'c Config,
    job: Option<&str>,
    from: DateTime<Utc>,
    count: usize,
) -> Result<Vec<Preview<'c>>, UsageError> {
    let jobs: Vec<&Job> = match job {
        Some(name) => vec![find_job(config, name)?],
        None => config.jobs.iter().collect(),
    };
    Ok(jobs
        .into_iter()
        .map(|job| {
            (
                job,
                // A job with parents (`after`): their common scheduled times.
                config.times_after(job, from).take(count).collect(),
            )
        })
        .collect())
}

/// `--job J`: the job, or the lookup's error under the flag's name.
pub fn find_job<'a>(config: &'a Config, name: &str) -> Result<&'a Job, UsageError> {
    lookup::job(config, name).map_err(|UsageError(e)| UsageError(format!("--job: {e}")))
}

/// An instant in UTC to the second, as RFC 3339.
fn utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `{"from": ..., "jobs": [...]}`: each job with its next times in UTC and in its zone.
pub fn to_json(from: DateTime<Utc>, previews: &[Preview<'_>]) -> serde_json::Value {
    let jobs: Vec<_> = previews
        .iter()
        .map(|(job, times)| {
            let next: Vec<_> = times
                .iter()
                .map(|t| {
                    json!({
                        "utc": utc(*t),
                        "local": t.with_timezone(&job.timezone).to_rfc3339_opts(SecondsFormat::Secs, false),
                    })
                })
                .collect();
            let mut doc = json!({
                "job": job.name.as_str(),
                "schedule": job.schedule.as_str(),
                "timezone": job.timezone.name(),
                "next": next,
            });
            if let Some(resolved) = job.schedule.resolved() {
                doc["resolved"] = json!(resolved);
            }
            doc
        })
        .collect();
    json!({ "from": utc(from), "jobs": jobs })
}

/// Each job's heading and its next times, one a line, in its zone then in UTC.
pub fn print_table(previews: &[Preview<'_>], count: usize) {
    for (i, (job, times)) in previews.iter().enumerate() {
        if i > 0 {
            println!();
        }
        match job.schedule.resolved() {
            None => println!(
                "{} ({:?} in {})",
                job.name,
                job.schedule.as_str(),
                job.timezone.name()
            ),
            Some(resolved) => println!(
                "{} ({:?}, H resolved to {resolved:?}, in {})",
                job.name,
                job.schedule.as_str(),
                job.timezone.name()
            ),
        }
        for t in times {
            let local = t.with_timezone(&job.timezone);
            println!(
                "  {}  {}",
                local.format("%Y-%m-%d %H:%M:%S %:z %Z"),
                utc(*t)
            );
        }
        if times.len() < count {
            println!("  (no further fire times)");
        }
    }
}
