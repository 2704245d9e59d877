//! The consumer's metrics, through the `metrics` facade (served by the binary's admin
//! address). Labels are low-cardinality only: job names from the config, outcomes; never a
//! key, never a job name taken from an unknown message. How many job names get a series of
//! their own is bounded where the recorder is installed (`[metrics] job_label_limit`, the
//! policy in `cronq_shared::job_labels`), not here.

use std::time::Duration;

/// Label for messages whose job is not in the config (or unreadable).
pub(crate) const UNKNOWN_JOB: &str = cronq_shared::job_labels::UNKNOWN;

/// `cronq_attempts_total{job,outcome}`.
pub(crate) fn attempt(job: &str, outcome: &str) {
    metrics::counter!("cronq_attempts_total", "job" => job.to_owned(), "outcome" => outcome.to_owned())
        .increment(1);
}

/// `cronq_attempt_duration_seconds{job}`.
pub(crate) fn duration(job: &str, took: Duration) {
    metrics::histogram!("cronq_attempt_duration_seconds", "job" => job.to_owned())
        .record(took.as_secs_f64());
}

/// `cronq_duplicates_acked_total{job}`.
pub(crate) fn duplicate(job: &str) {
    metrics::counter!("cronq_duplicates_acked_total", "job" => job.to_owned()).increment(1);
}

/// `cronq_dead_lettered_total{job}`.
pub(crate) fn dead_lettered(job: &str) {
    metrics::counter!("cronq_dead_lettered_total", "job" => job.to_owned()).increment(1);
}

/// `cronq_messages_refused_total{reason}`: a message dead-lettered without running, by why
/// (`unauthenticated`, `malformed`, `unknown_job`, `no_handler`): forged messages show here.
pub(crate) fn refused(reason: &'static str) {
    metrics::counter!("cronq_messages_refused_total", "reason" => reason).increment(1);
}

/// `cronq_redeliveries_total`.
pub(crate) fn redelivery() {
    metrics::counter!("cronq_redeliveries_total").increment(1);
}
