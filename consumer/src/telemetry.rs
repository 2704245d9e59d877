//! The consumer's metrics, through the `metrics` facade (served by the binary's admin
//! address). Labels are low-cardinality only: job names from the config, outcomes; never a
//! key, never a job name taken from an unknown message. How many job names get a series of
//! their own is bounded where the recorder is installed (`[metrics] job_label_limit`, the
//! policy in `cronq_shared::job_labels`), not here.
//!
//! Owns: [`Metrics`], the per-job handles of one consumer. A handle is registered with the
//! recorder the first time its job uses it (so no series appears before its first event,
//! and the label policy decides its `job` label then, once) and kept: every later event is
//! an atomic add, not a key built, a label decided and a series looked up in the registry.
//! The handles of at most [`CACHED_JOBS`] jobs are kept; the events of jobs past them are
//! registered each time, as without a cache, so a consumer of a million jobs does not keep
//! a million sets of handles.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use cronq_shared::runlog::Outcome;
use metrics::{Counter, Histogram};

use crate::admission::Reject;

/// Label for messages whose job is not in the config (or unreadable).
pub(crate) const UNKNOWN_JOB: &str = cronq_shared::job_labels::UNKNOWN;

/// How many jobs' handles a consumer keeps (about 300 bytes each).
const CACHED_JOBS: usize = 4096;

/// One consumer's per-job metric handles, registered on first use.
#[derive(Debug)]
pub(crate) struct Metrics {
    jobs: RwLock<HashMap<Box<str>, Arc<JobMetrics>>>,
    /// At most this many jobs in `jobs`.
    capacity: usize,
}

/// The handles of one job.
#[derive(Debug, Default)]
struct JobMetrics {
    /// `cronq_attempts_total{job,outcome}`, by [`Outcome::index`].
    attempts: [OnceLock<Counter>; Outcome::ALL.len()],
    /// `cronq_attempt_duration_seconds{job}`.
    duration: OnceLock<Histogram>,
    /// `cronq_duplicates_acked_total{job}`.
    duplicates: OnceLock<Counter>,
    /// `cronq_dead_lettered_total{job}`.
    dead_lettered: OnceLock<Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::with_capacity(CACHED_JOBS)
    }
}

impl Metrics {
    /// Keeps the handles of the first `capacity` jobs.
    fn with_capacity(capacity: usize) -> Self {
        Self {
            jobs: RwLock::new(HashMap::new()),
            capacity,
        }
    }

    /// The handles of `job`, made (empty) on its first event; `None` past the capacity.
    fn job(&self, job: &str) -> Option<Arc<JobMetrics>> {
        {
            let jobs = self.jobs.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(found) = jobs.get(job) {
                return Some(Arc::clone(found));
            }
            if jobs.len() >= self.capacity {
                return None;
            }
        }
        let mut jobs = self.jobs.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = jobs.get(job) {
            return Some(Arc::clone(found));
        }
        if jobs.len() >= self.capacity {
            return None;
        }
        Some(Arc::clone(jobs.entry(job.into()).or_default()))
    }

    /// Hands `event` the handle `pick` of `job`, registered by `register` when not kept
    /// yet; registered for this event alone when `job` is past the capacity (or `pick` has
    /// no place for it).
    fn with<H>(
        &self,
        job: &str,
        pick: impl FnOnce(&JobMetrics) -> Option<&OnceLock<H>>,
        register: impl FnOnce() -> H,
        event: impl FnOnce(&H),
    ) {
        let kept = self.job(job);
        match kept.as_deref().and_then(pick) {
            Some(cell) => event(cell.get_or_init(register)),
            None => event(&register()),
        }
    }

    /// `cronq_attempts_total{job,outcome}`.
    pub(crate) fn attempt(&self, job: &str, outcome: Outcome) {
        self.with(
            job,
            |m| m.attempts.get(outcome.index()),
            || metrics::counter!("cronq_attempts_total", "job" => job.to_owned(), "outcome" => outcome.as_str()),
            |c| c.increment(1),
        );
    }

    /// `cronq_attempt_duration_seconds{job}`.
    pub(crate) fn duration(&self, job: &str, took: Duration) {
        self.with(
            job,
            |m| Some(&m.duration),
            || metrics::histogram!("cronq_attempt_duration_seconds", "job" => job.to_owned()),
            |h| h.record(took.as_secs_f64()),
        );
    }

    /// `cronq_duplicates_acked_total{job}`.
    pub(crate) fn duplicate(&self, job: &str) {
        self.with(
            job,
            |m| Some(&m.duplicates),
            || metrics::counter!("cronq_duplicates_acked_total", "job" => job.to_owned()),
            |c| c.increment(1),
        );
    }

    /// `cronq_dead_lettered_total{job}`.
    pub(crate) fn dead_lettered(&self, job: &str) {
        self.with(
            job,
            |m| Some(&m.dead_lettered),
            || metrics::counter!("cronq_dead_lettered_total", "job" => job.to_owned()),
            |c| c.increment(1),
        );
    }
}

/// `cronq_messages_refused_total{reason}`: a message dead-lettered without running, by why
/// (`unauthenticated`, `malformed`, `unknown_job`, `no_handler`): forged messages show here.
pub(crate) fn refused(reason: &'static str) {
    metrics::counter!("cronq_messages_refused_total", "reason" => reason).increment(1);
}

/// Exports the consumer's counters without a `job` label at 0, so that an alert on their
/// increase (deploy/prometheus/cronq-alerts.yml) sees the first event, and a dashboard
/// shows 0 rather than no data.
pub(crate) fn announce() {
    for reason in Reject::LABELS {
        metrics::counter!("cronq_messages_refused_total", "reason" => reason).increment(0);
    }
    metrics::counter!("cronq_redeliveries_total").increment(0);
}

/// `cronq_redeliveries_total`.
pub(crate) fn redelivery() {
    metrics::counter!("cronq_redeliveries_total").increment(1);
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use metrics::{Gauge, Key, KeyName, Metadata, Recorder, SharedString, Unit};

    use super::*;

    /// Keeps every counter it registers, with its value.
    #[derive(Default)]
    struct Registrations(Mutex<Vec<(Key, Arc<AtomicU64>)>>);

    impl Registrations {
        /// Each registered counter as `name{label=value,…} count`, in registration order.
        fn counters(&self) -> Vec<String> {
            let registered = self.0.lock().unwrap();
            registered
                .iter()
                .map(|(key, value)| {
                    let labels: Vec<String> = key
                        .labels()
                        .map(|l| format!("{}={}", l.key(), l.value()))
                        .collect();
                    format!(
                        "{}{{{}}} {}",
                        key.name(),
                        labels.join(","),
                        value.load(Ordering::Relaxed)
                    )
                })
                .collect()
        }
    }

    impl Recorder for Registrations {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let value = Arc::new(AtomicU64::new(0));
            self.0
                .lock()
                .unwrap()
                .push((key.clone(), Arc::clone(&value)));
            Counter::from_arc(value)
        }

        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }

        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn each_series_is_registered_on_its_first_event_and_counted_after() {
        let recorder = Registrations::default();
        let metrics = Metrics::default();
        metrics::with_local_recorder(&recorder, || {
            assert!(recorder.counters().is_empty(), "nothing before an event");
            for _ in 0..3 {
                metrics.attempt("a", Outcome::Succeeded);
            }
            metrics.attempt("a", Outcome::Failed);
            metrics.attempt("b", Outcome::Succeeded);
            metrics.duplicate("a");
            metrics.duplicate("a");
            metrics.dead_lettered("b");
        });
        assert_eq!(
            recorder.counters(),
            [
                "cronq_attempts_total{job=a,outcome=succeeded} 3",
                "cronq_attempts_total{job=a,outcome=failed} 1",
                "cronq_attempts_total{job=b,outcome=succeeded} 1",
                "cronq_duplicates_acked_total{job=a} 2",
                "cronq_dead_lettered_total{job=b} 1",
            ]
        );
    }

    #[test]
    fn jobs_past_the_capacity_are_registered_at_each_event() {
        let recorder = Registrations::default();
        let metrics = Metrics::with_capacity(1);
        metrics::with_local_recorder(&recorder, || {
            metrics.attempt("a", Outcome::Succeeded);
            metrics.attempt("b", Outcome::Succeeded);
            metrics.attempt("a", Outcome::Succeeded);
            metrics.attempt("b", Outcome::Succeeded);
        });
        assert_eq!(
            recorder.counters(),
            [
                "cronq_attempts_total{job=a,outcome=succeeded} 2",
                "cronq_attempts_total{job=b,outcome=succeeded} 1",
                "cronq_attempts_total{job=b,outcome=succeeded} 1",
            ]
        );
        assert_eq!(metrics.jobs.read().unwrap().len(), 1);
    }
}
