//! The dashboard's operations, shared by the JSON API (`super::api`) and the pages' forms
//! (`super::pages`): each takes checked input and returns what happened, or an [`ApiError`]
//! with a status and a message. They call what the operations commands call
//! (`crate::ops`, `cronq_consumer::replay`), so both behave alike.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use cronq_consumer::replay::{self, Plan, Selector};
use cronq_shared::config::Job;
use cronq_shared::jobs::{Revision, current};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::names::JobName;
use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::{
    Backfilled, NextFire, PauseShown, Paused, ReplayReport, Replayed, Resumed, Triggered,
};
use super::auth::Refusal;
use super::read::within;
use super::source::Source;
use crate::ops::backfill::{CONFIRM_ABOVE, Preview};
use crate::ops::lookup;
use crate::output;

/// An error answered as `{"error": MESSAGE}` with its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong and what to do.
    pub message: String,
}

impl ApiError {
    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 503: a store or the queue did not answer.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        Self {
            status: StatusCode::from_u16(r.status).unwrap_or(StatusCode::FORBIDDEN),
            message: r.message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// The job `name`: a job of the config file, or a runtime job of the job store resolved
/// against the config (with its current revision), or 404 with a "did you mean".
///
/// # Errors
/// 404 naming the config file and the likely job; 409 for a runtime job that does not
/// resolve against the config; 503 when the job store cannot be read.
pub async fn find(source: &Source, name: &str) -> Result<(Job, Option<Revision>), ApiError> {
    let config = source.config();
    if let Some(job) = config.job(name) {
        return Ok((job.clone(), None));
    }
    let not_found = |e: crate::settings::UsageError| ApiError {
        status: StatusCode::NOT_FOUND,
        message: e.0,
    };
    let Ok(runtime) = JobName::new(name) else {
        return Err(lookup::job(&config, name).err().map_or_else(
            || ApiError::bad_request(format!("no job {name:?}")),
            not_found,
        ));
    };
    if config.runtime.jobs {
        let rev = within(current(&*source.stores.jobs, &runtime))
            .await
            .map_err(|e| ApiError::unavailable(format!("the job store: {e}")))?;
        if let Some(rev) = rev
            && let Some(spec) = &rev.spec
        {
            return match config.runtime_job(spec) {
                Ok(job) => Ok((job, Some(rev))),
                Err(problems) => Err(ApiError {
                    status: StatusCode::CONFLICT,
                    message: format!(
                        "runtime job {name:?} (revision {}) does not resolve against {}: {problems}",
                        rev.revision,
                        config.path.display()
                    ),
                }),
            };
        }
    }
    match lookup::job(&config, name) {
        Ok(job) => Ok((job.clone(), None)),
        Err(e) => Err(not_found(e)),
    }
}

/// The job `name`, as [`find`] finds it.
///
/// # Errors
/// As [`find`].
pub async fn job(source: &Source, name: &str) -> Result<Job, ApiError> {
    find(source, name).await.map(|(job, _)| job)
}

/// Pauses `job` fleet-wide with `note`.
///
/// # Errors
/// 404 for an unknown job; 503 when the control store cannot be written.
pub async fn pause(source: &Source, name: &str, note: Option<String>) -> Result<Paused, ApiError> {
    let job = job(source, name).await?;
    let note = note.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    let pause = within(source.stores.control.pause(&job.name, note))
        .await
        .map_err(|e| {
            ApiError::unavailable(format!("while pausing job {:?}: {e}", job.name.as_str()))
        })?
        .pause;
    tracing::info!(job = %job.name, "dashboard: paused");
    Ok(Paused {
        job: job.name.to_string(),
        paused: PauseShown {
            since: output::utc(pause.since),
            note: pause.note,
        },
        message: format!(
            "paused job {:?}; its occurrences are not published until it is resumed",
            job.name.as_str()
        ),
    })
}

/// Resumes `job`.
///
/// # Errors
/// 404 for an unknown job; 503 when the control store cannot be written.
pub async fn resume(source: &Source, name: &str) -> Result<Resumed, ApiError> {
    let job = job(source, name).await?;
    let was = within(source.stores.control.resume(&job.name))
        .await
        .map_err(|e| {
            ApiError::unavailable(format!("while resuming job {:?}: {e}", job.name.as_str()))
        })?;
    tracing::info!(job = %job.name, was_paused = was, "dashboard: resumed");
    let message = if was {
        format!(
            "resumed job {:?}; occurrences missed while paused are not caught up (use backfill)",
            job.name.as_str()
        )
    } else {
        format!("job {:?} was not paused", job.name.as_str())
    };
    Ok(Resumed {
        job: job.name.to_string(),
        was_paused: was,
        message,
    })
}

/// Asks the leader to run `job` once now (or at `at`, a future RFC 3339 instant), with
/// `payload` (JSON text) replacing the configured one when given.
///
/// # Errors
/// 404 for an unknown job; 400 for a payload that is not JSON or an `at` that is not a
/// future instant; 503 when the control store cannot be written.
pub async fn trigger(
    source: &Source,
    name: &str,
    payload: Option<&str>,
    at: Option<&str>,
) -> Result<Triggered, ApiError> {
    let job = job(source, name).await?;
    let payload = crate::ops::trigger::payload(payload)
        .map_err(|e| ApiError::bad_request(format!("payload {e}")))?;
    let at = at
        .map(|text| crate::ops::trigger::at(text, chrono::Utc::now()))
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("at {e}")))?;
    let key = within(
        source
            .stores
            .control
            .request_trigger_at(&job.name, payload, at),
    )
    .await
    .map_err(|e| {
        ApiError::unavailable(format!(
            "while requesting a trigger of job {:?}: {e}",
            job.name.as_str()
        ))
    })?;
    tracing::info!(job = %job.name, key = %key, "dashboard: triggered");
    let when = match at {
        Some(at) => format!(
            " at {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        None => String::new(),
    };
    Ok(Triggered {
        job: job.name.to_string(),
        key: key.to_string(),
        at,
        message: format!("requested occurrence {key}; the leading producer publishes it{when}"),
    })
}

/// Cancels the occurrence `key` for `who` (`crate::ops::cancel`).
///
/// # Errors
/// 400 for a text that is not an occurrence key; 404 when no occurrence `key` is known;
/// 409 when it ended already; 503 when the ledger cannot be written.
pub async fn cancel(source: &Source, key: &str, who: &str) -> Result<Value, ApiError> {
    let key = crate::ops::cancel::key(key).map_err(ApiError::bad_request)?;
    let cancelled = within(crate::ops::cancel::cancel(
        &*source.stores.ledger,
        &key,
        who,
    ))
    .await
    .map_err(|e| ApiError::unavailable(format!("while cancelling {key}: {e}")))?;
    if let Some(message) = crate::ops::cancel::refusal(&key, &cancelled) {
        let status = match cancelled {
            cronq_shared::ledger::Cancelled::Unknown => StatusCode::NOT_FOUND,
            _ => StatusCode::CONFLICT,
        };
        return Err(ApiError { status, message });
    }
    tracing::info!(job = %key.job(), key = %key, who, "dashboard: cancelled");
    Ok(crate::ops::cancel::json(&key, &cancelled))
}

/// A backfill request: `dry_run` only counts; more than 10,000 occurrences need `confirm`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Backfill {
    /// First instant (RFC 3339), inclusive.
    pub from: String,
    /// Last instant (RFC 3339), inclusive.
    pub to: String,
    /// Only count.
    #[serde(default)]
    pub dry_run: bool,
    /// Allow more than 10,000 occurrences.
    #[serde(default)]
    pub confirm: bool,
}

/// Counts, and unless `dry_run` requests, the backfill of `job` over `from..=to`.
///
/// # Errors
/// 404 for an unknown job; 400 for a bad or reversed range, or a large one unconfirmed;
/// 503 when the control store cannot be written.
pub async fn backfill(source: &Source, name: &str, req: &Backfill) -> Result<Backfilled, ApiError> {
    let job = job(source, name).await?;
    let from = lookup::instant("from", req.from.trim()).map_err(|e| ApiError::bad_request(e.0))?;
    let to = lookup::instant("to", req.to.trim()).map_err(|e| ApiError::bad_request(e.0))?;
    if from > to {
        return Err(ApiError::bad_request(format!(
            "from {} is after to {}: the range is empty; swap them",
            output::utc(from),
            output::utc(to)
        )));
    }
    let schedule = job.schedule.clone();
    let preview = tokio::task::spawn_blocking(move || Preview::of(&schedule, from, to))
        .await
        .map_err(|e| ApiError::unavailable(format!("counting the occurrences failed: {e}")))?;
    let mut done = Backfilled {
        job: job.name.to_string(),
        from: output::utc(from),
        to: output::utc(to),
        count: preview.count,
        shown: preview.shown.clone(),
        dry_run: true,
        request: None,
        message: String::new(),
    };
    if req.dry_run || preview.count == 0 {
        let message = if preview.count == 0 {
            format!(
                "job {:?} has no occurrence in this range: nothing to backfill",
                job.name.as_str()
            )
        } else {
            format!(
                "dry run: backfill would publish {} occurrences of job {:?}; nothing was changed",
                preview.shown,
                job.name.as_str()
            )
        };
        done.message = message;
        return Ok(done);
    }
    if preview.count > CONFIRM_ABOVE && !req.confirm {
        return Err(ApiError::bad_request(format!(
            "the range covers {} occurrences, more than {CONFIRM_ABOVE}: confirm it (\"confirm\": true), or narrow it",
            preview.shown
        )));
    }
    let id = within(source.stores.control.request_backfill(&job.name, from, to))
        .await
        .map_err(|e| {
            ApiError::unavailable(format!(
                "while requesting a backfill of job {:?}: {e}",
                job.name.as_str()
            ))
        })?;
    tracing::info!(job = %job.name, count = preview.count, "dashboard: backfill requested");
    done.dry_run = false;
    done.request = Some(id);
    done.message = format!(
        "requested backfill of {} occurrences of job {:?}; already-succeeded ones do not run again",
        preview.shown,
        job.name.as_str()
    );
    Ok(done)
}

/// Which dead letters to replay: some keys, or all (of one job, when given).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Replay {
    /// These keys.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Every letter (of `job`, when given).
    #[serde(default)]
    pub all: bool,
    /// Only this job's letters.
    #[serde(default)]
    pub job: Option<String>,
    /// Only show what would be replayed.
    #[serde(default)]
    pub dry_run: bool,
}

/// Replays (or, dry, lists) the selected dead letters, with the rules of `cronq dlq
/// replay`. `config` is the file's with the runtime jobs merged in (`super::view`): a
/// letter of a runtime job is replayed as one of a file job.
///
/// # Errors
/// 400 without a selector or for a malformed key; 404 for an unknown job; 503 when the
/// queue or the ledger cannot be reached (letters not yet replayed stay).
pub async fn replay(
    source: &Source,
    config: &cronq_shared::config::Config,
    req: &Replay,
) -> Result<ReplayReport, ApiError> {
    let job = match req.job.as_deref().map(str::trim).filter(|j| !j.is_empty()) {
        Some(name) => Some(job(source, name).await?.name.clone()),
        None => None,
    };
    let keys = req
        .keys
        .iter()
        .map(|k| {
            k.trim()
                .parse::<OccurrenceKey>()
                .map_err(|e| ApiError::bad_request(format!("key {k:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !req.all && keys.is_empty() && job.is_none() {
        return Err(ApiError::bad_request(
            "select the letters to replay: \"keys\", \"job\" or \"all\": true (with \"dry_run\": true to preview)",
        ));
    }
    // One walk per selected key, or one for all (of a job).
    let selectors: Vec<Selector> = if keys.is_empty() {
        vec![Selector {
            job: job.clone(),
            key: None,
            all: req.all || job.is_some(),
        }]
    } else {
        keys.into_iter()
            .map(|key| Selector {
                job: job.clone(),
                key: Some(key),
                all: false,
            })
            .collect()
    };
    let mut entries = Vec::new();
    let mut replayed = 0;
    let mut listed = 0;
    for selector in &selectors {
        let report = replay::replay(
            &*source.broker,
            &*source.stores.ledger,
            config,
            selector,
            source.keyring.as_deref(),
            req.dry_run,
        )
        .await
        .map_err(|e| ApiError::unavailable(format!("{:#}", anyhow::Error::new(e))))?;
        replayed += report.replayed;
        listed = report.listed;
        entries.extend(report.entries.into_iter().map(|e| Replayed {
            key: e.key,
            job: e.job,
            reason: e.reason,
            result: match e.plan {
                Plan::WouldReplay => "would replay".into(),
                Plan::Replayed => "replayed".into(),
                Plan::Kept(why) => format!("kept: {why}"),
                Plan::Gone => "gone (taken by another replay)".into(),
            },
        }));
    }
    tracing::info!(
        replayed,
        selected = entries.len(),
        dry_run = req.dry_run,
        "dashboard: dead-letter replay"
    );
    let message = if entries.is_empty() {
        format!("no dead letter matches ({listed} in the dead-letter queue)")
    } else if req.dry_run {
        let would = entries
            .iter()
            .filter(|e| e.result == "would replay")
            .count();
        format!(
            "dry run: {would} of {} selected letters would be replayed; nothing was changed",
            entries.len()
        )
    } else {
        format!("replayed {replayed} of {} selected letters", entries.len())
    };
    Ok(ReplayReport {
        dry_run: req.dry_run,
        replayed,
        entries,
        message,
    })
}

/// The next `n` fire times of `job` after `now`, each marked when the zone's UTC offset
/// differs from that of the fire before it (or of `now`, for the first): a daylight-saving
/// (or other) transition lies between.
pub fn next_fires(job: &Job, now: DateTime<Utc>, n: usize) -> Vec<NextFire> {
    fires(job, now, job.schedule.iter_after(now).take(n))
}

/// [`next_fires`] of a job of `config`: for a job with parents (`after`), the times its
/// parents share.
pub fn next_fires_in(
    config: &cronq_shared::config::Config,
    job: &Job,
    now: DateTime<Utc>,
    n: usize,
) -> Vec<NextFire> {
    fires(job, now, config.times_after(job, now).take(n))
}

/// `times` of `job` as [`next_fires`] shows them.
fn fires(
    job: &Job,
    now: DateTime<Utc>,
    times: impl Iterator<Item = DateTime<Utc>>,
) -> Vec<NextFire> {
    use chrono::Offset as _;
    let zone = job.timezone;
    let offset = |t: DateTime<Utc>| t.with_timezone(&zone).offset().fix();
    let mut before = offset(now);
    times
        .map(|t| {
            let here = offset(t);
            let transition = (here != before).then(|| format!("UTC offset {before} → {here}"));
            before = here;
            NextFire {
                utc: output::utc(t),
                local: output::local(&t.with_timezone(&zone)),
                transition,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_fires_mark_the_daylight_saving_change() {
        let config = cronq_shared::config::Config::from_toml(
            "[[job]]\nname = \"r\"\nschedule = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\ncommand = [\"true\"]\n",
            std::path::Path::new("cronq.toml"),
        )
        .unwrap();
        let job = &config.jobs[0];
        let now: DateTime<Utc> = "2026-10-23T12:00:00Z".parse().unwrap();
        let fires = next_fires(job, now, 4);
        let marks: Vec<_> = fires.iter().map(|f| f.transition.as_deref()).collect();
        assert_eq!(
            marks,
            [None, None, Some("UTC offset +02:00 → +01:00"), None],
            "{fires:?}"
        );
        // 02:30 of the 25th happens twice: it runs at the first, still +02:00.
        assert_eq!(fires[1].local, "2026-10-25T02:30:00+02:00");
        assert_eq!(fires[2].local, "2026-10-26T02:30:00+01:00");
    }
}
