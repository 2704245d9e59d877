//! Test-only: the occurrence the consumer's unit tests deliver, one place for its fields.

use cronq_shared::key::OccurrenceKey;
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::JobName;

/// The first attempt of `job`'s occurrence scheduled at 2026-11-29T19:30:00Z (UTC).
pub(crate) fn occurrence(job: &str) -> Occurrence {
    let at = "2026-11-29T19:30:00Z".parse().expect("a time");
    let job = JobName::new(job).expect("a job name");
    Occurrence {
        key: OccurrenceKey::scheduled(job.clone(), at),
        job,
        scheduled_at: at,
        scheduled_local: at.fixed_offset(),
        timezone: "UTC".into(),
        trigger: Trigger::Schedule,
        attempt: 1,
        payload: serde_json::Value::Null,
        epoch: 0,
        published_at: at,
        deadline: None,
        last_error: None,
        traceparent: None,
    }
}
