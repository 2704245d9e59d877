//! The rules that turn what the leader reads (the run history as it grows, the running
//! attempts the consumers report, the queues they serve) into [`Event`]s. Pure: the
//! alerts loop (`super`) reads, these decide.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use cronq_shared::config::{AlertKind, Config, Job};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::registry::{Beat, InFlight, Role};
use cronq_shared::runlog::{Outcome, Run};

use super::notice::Event;

fn human(d: TimeDelta) -> String {
    let d = d.to_std().unwrap_or_default();
    // Whole seconds read better in an alert than milliseconds, past the first second.
    let d = if d.as_secs() >= 1 {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(u64::from(d.subsec_millis()))
    };
    humantime::format_duration(d).to_string()
}

fn human_std(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// What one run of the history raises: its events, and whether it is a success that
/// resolves its job's open alerts (the kinds it raised itself excepted).
pub(super) fn from_run(run: &Run, job: Option<&Job>) -> Vec<Event> {
    let mut events = Vec::new();
    let event = |kind: AlertKind, summary: String| Event {
        kind,
        job: Some(run.job.to_string()),
        subject: run.key.to_string(),
        summary,
        at: run.started_at + TimeDelta::from_std(run.duration).unwrap_or_default(),
    };
    let error = run.error.as_deref().unwrap_or("no error recorded");
    match run.outcome {
        Outcome::Failed => events.push(event(
            AlertKind::DeadLettered,
            format!(
                "attempt {} failed and was the last: dead-lettered ({error}); `cronq dlq replay` runs it again",
                run.attempt
            ),
        )),
        Outcome::Missed => events.push(event(
            AlertKind::Missed,
            format!("not run: {error}"),
        )),
        Outcome::Retrying => events.push(event(
            AlertKind::AttemptFailed,
            format!("attempt {} failed ({error}); it will be retried", run.attempt),
        )),
        _ => {}
    }
    let ran = matches!(
        run.outcome,
        Outcome::Succeeded | Outcome::Failed | Outcome::Retrying
    );
    let Some(job) = job.filter(|j| ran && j.sla.watches_runs()) else {
        return events;
    };
    if let Some(e) = run.key.scheduled_at().and_then(|at| {
        late_start(
            job,
            run.key.as_str(),
            at,
            run.attempt,
            run.started_at,
            &run.consumer,
        )
    }) {
        events.push(e);
    }
    if let Some(max) = job.sla.max_duration
        && run.duration > max
    {
        events.push(event(
            AlertKind::TooLong,
            format!(
                "attempt {} ran for {} on {} (sla.max_duration {})",
                run.attempt,
                human_std(run.duration),
                run.consumer,
                human_std(max)
            ),
        ));
    }
    events
}

/// A running attempt that started later than its job's `sla.start_within`.
pub(super) fn running_late(attempt: &InFlight, job: &Job, consumer: &str) -> Option<Event> {
    let scheduled = attempt.key.parse::<OccurrenceKey>().ok()?.scheduled_at()?;
    late_start(
        job,
        &attempt.key,
        scheduled,
        attempt.attempt,
        attempt.started_at,
        consumer,
    )
}

/// Attempt `attempt` of `key` (scheduled at `scheduled`), started at `started_at` on
/// `consumer`, if that is later than its job's `sla.start_within`.
fn late_start(
    job: &Job,
    key: &str,
    scheduled: DateTime<Utc>,
    attempt: u32,
    started_at: DateTime<Utc>,
    consumer: &str,
) -> Option<Event> {
    let within = job.sla.start_within?;
    let late = started_at - scheduled;
    (late > TimeDelta::from_std(within).unwrap_or(TimeDelta::MAX)).then(|| Event {
        kind: AlertKind::LateStart,
        job: Some(job.name.to_string()),
        subject: key.to_owned(),
        summary: format!(
            "attempt {attempt} started {} after its scheduled time on {consumer} (sla.start_within {})",
            human(late),
            human_std(within)
        ),
        at: started_at,
    })
}

/// A running attempt past its job's `sla.max_duration` at `now`.
pub(super) fn running_long(
    attempt: &InFlight,
    job: &Job,
    consumer: &str,
    now: DateTime<Utc>,
) -> Option<Event> {
    let max = job.sla.max_duration?;
    let ran = now - attempt.started_at;
    (ran > TimeDelta::from_std(max).unwrap_or(TimeDelta::MAX)).then(|| Event {
        kind: AlertKind::TooLong,
        job: Some(attempt.job.clone()),
        subject: attempt.key.clone(),
        summary: format!(
            "attempt {} has been running for {} on {consumer} (sla.max_duration {})",
            attempt.attempt,
            human(ran),
            human_std(max)
        ),
        at: now,
    })
}

/// An occurrence of `job` scheduled at `at` that has not started by `now`, past its
/// `sla.start_within`.
pub(super) fn not_started(job: &Job, at: DateTime<Utc>, now: DateTime<Utc>) -> Option<Event> {
    let within = job.sla.start_within?;
    Some(Event {
        kind: AlertKind::LateStart,
        job: Some(job.name.to_string()),
        subject: OccurrenceKey::scheduled(job.name.clone(), at).to_string(),
        summary: format!(
            "not started {} after its scheduled time (sla.start_within {}): is a consumer of queue {} running?",
            human(now - at),
            human_std(within),
            job.queue
        ),
        at: now,
    })
}

/// No success of `job` since `since`, at `now`, past its `sla.success_within`.
pub(super) fn no_success(
    job: &Job,
    since: DateTime<Utc>,
    last: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<Event> {
    let within = job.sla.success_within?;
    (now - since > TimeDelta::from_std(within).unwrap_or(TimeDelta::MAX)).then(|| Event {
        kind: AlertKind::NoSuccess,
        job: Some(job.name.to_string()),
        subject: job.name.to_string(),
        summary: match last {
            Some(at) => format!(
                "no success for {} (sla.success_within {}): the last was at {}",
                human(now - at),
                human_std(within),
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            None => format!(
                "no success for {} (sla.success_within {}), none in the run history",
                human(now - since),
                human_std(within)
            ),
        },
        at: now,
    })
}

/// The queues the config's jobs publish to that no live consumer (or standalone) serves.
pub(super) fn unserved_queues(config: &Config, beats: &[Beat]) -> BTreeSet<String> {
    let mut queues: BTreeSet<String> = config.queues().iter().map(ToString::to_string).collect();
    for beat in beats {
        if !matches!(beat.role, Role::Consumer | Role::Standalone) {
            continue;
        }
        match beat.serves.as_ref().and_then(|s| s.queues.as_ref()) {
            // Every queue of its config's jobs.
            None => return BTreeSet::new(),
            Some(served) => {
                for q in served {
                    queues.remove(q);
                }
            }
        }
    }
    queues
}
