//! The one place where outcomes are classified.
//!
//! - Before running: [`admit`] turns a delivery into a runnable occurrence, or a
//!   [`Reject`] (malformed, unknown job, no handler): dead-lettered at once, never requeued.
//! - After running: [`classify`] turns how an attempt ended into a [`Verdict`]: success,
//!   `Retry { after }` with exponential capped backoff, `Fail` (dead-letter) once
//!   `max_attempts` is reached, or a stop (cancelled, interrupted, lost).
//!
//! Everything here is pure, so it is unit-tested without I/O.

use std::time::Duration;

use cronq_shared::config::{Config, Job, Overlap};
use cronq_shared::message::{DecodeError, Occurrence, Trigger};
use cronq_shared::names::JobName;

/// Why a message is dead-lettered without running.
#[derive(Debug, thiserror::Error)]
pub enum Reject {
    /// Not a cronq occurrence, too large, or inconsistent.
    #[error("malformed: {0}")]
    Malformed(#[source] DecodeError),
    /// The job is not in this consumer's config.
    #[error("unknown job {0}: it is not in this consumer's config")]
    UnknownJob(JobName),
    /// The job has no handler in the config and none was registered.
    #[error("no handler registered for job {0}")]
    NoHandler(JobName),
}

impl Reject {
    /// The full reason for the dead-letter record (with the decode error's cause).
    pub fn reason(&self) -> String {
        match self {
            Self::Malformed(DecodeError::Malformed(e)) => format!("{self}: {e}"),
            _ => self.to_string(),
        }
    }
}

/// Decodes a body and finds its job; `has_handler` says whether the job can run here.
///
/// # Errors
/// [`Reject`] with the reason the message cannot run.
pub fn admit<'c>(
    body: &[u8],
    config: &'c Config,
    has_handler: impl Fn(&Job) -> bool,
) -> Result<(Occurrence, &'c Job), Reject> {
    let occ = Occurrence::decode(body).map_err(Reject::Malformed)?;
    let job = config
        .job(occ.job.as_str())
        .ok_or_else(|| Reject::UnknownJob(occ.job.clone()))?;
    if !has_handler(job) {
        return Err(Reject::NoHandler(occ.job.clone()));
    }
    Ok((occ, job))
}

/// Why an attempt was stopped before its handler returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// It ran past the job's `timeout`.
    Timeout(Duration),
    /// A newer occurrence replaced it (overlap `replace`).
    Replaced {
        /// The newer occurrence's key (empty when not known).
        by: String,
    },
    /// This consumer lost its claim (lease lapsed, key reaped).
    Lost,
    /// The consumer is shutting down and the grace period is over.
    Shutdown,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The handler returned.
    Returned(Result<(), String>),
    /// The handler panicked (message).
    Panicked(String),
    /// The attempt was stopped; the handler's own error, if it returned one.
    Stopped(Stop, Option<String>),
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Record `succeeded`.
    Succeeded,
    /// Record `retrying` and publish the next attempt after `after`.
    Retry {
        /// Broker-side delay of the retry.
        after: Duration,
        /// This attempt's error.
        error: String,
    },
    /// Dead-letter, then record `failed`.
    Fail {
        /// The last error.
        error: String,
    },
    /// Record `cancelled` (replaced by a newer occurrence).
    Cancelled {
        /// Why, for the record: `replaced by KEY`.
        error: String,
    },
    /// Release the claim and republish at once (shutdown).
    Interrupted,
    /// Record nothing: the claim is someone else's now.
    Lost,
}

/// The retry delay after failed attempt `attempt` (1-based): `backoff * 2^(attempt-1)`,
/// capped at `backoff_max`.
pub fn backoff(backoff: Duration, backoff_max: Duration, attempt: u32) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    backoff.saturating_mul(factor).min(backoff_max)
}

/// Classifies how attempt `attempt` of a `job` occurrence ended.
pub fn classify(job: &Job, attempt: u32, ending: Ending) -> Verdict {
    let error = match ending {
        Ending::Returned(Ok(())) => return Verdict::Succeeded,
        Ending::Returned(Err(e)) => e,
        Ending::Panicked(msg) => format!("handler panicked: {msg}"),
        Ending::Stopped(Stop::Timeout(limit), own) => {
            let base = format!("timed out after {}", humantime::format_duration(limit));
            match own {
                Some(e) if !e.is_empty() => format!("{base}: {e}"),
                _ => base,
            }
        }
        Ending::Stopped(Stop::Replaced { by }, _) => {
            return Verdict::Cancelled {
                error: replaced_by(&by),
            };
        }
        Ending::Stopped(Stop::Lost, _) => return Verdict::Lost,
        Ending::Stopped(Stop::Shutdown, _) => return Verdict::Interrupted,
    };
    if attempt >= job.max_attempts {
        Verdict::Fail { error }
    } else {
        Verdict::Retry {
            after: backoff(job.backoff, job.backoff_max, attempt),
            error,
        }
    }
}

/// The error recorded for an occurrence of a `replace` job that a newer one, `by`, replaced.
pub fn replaced_by(by: &str) -> String {
    if by.is_empty() {
        "replaced by a newer occurrence".to_owned()
    } else {
        format!("replaced by {by}")
    }
}

/// The overlap policy that applies to one occurrence.
///
/// The configured policy governs scheduled ticks. Occurrences an operator asked for
/// explicitly (`cronq trigger`, `backfill`, `dlq replay`) are never dropped by `skip`:
/// they wait their turn (`queue`); and backfilled or replayed ones, which are for past
/// times, never cancel a running occurrence (`replace` also becomes `queue`). Otherwise a
/// backfill of a `skip` job would record all but one of its occurrences as skipped.
pub fn effective_overlap(configured: Overlap, trigger: Trigger) -> Overlap {
    match (configured, trigger) {
        (Overlap::Skip, Trigger::Manual | Trigger::Backfill | Trigger::Replay) => Overlap::Queue,
        (Overlap::Replace, Trigger::Backfill | Trigger::Replay) => Overlap::Queue,
        (policy, _) => policy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config() -> Config {
        Config::from_toml(
            r#"
[[job]]
name = "a"
schedule = "@every 1s"
command = ["true"]
max_attempts = 3
backoff = "200ms"
backoff_max = "500ms"

[[job]]
name = "b"
schedule = "@every 1s"
"#,
            Path::new("t.toml"),
        )
        .unwrap()
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let (b, m) = (Duration::from_millis(200), Duration::from_secs(1));
        assert_eq!(backoff(b, m, 1), Duration::from_millis(200));
        assert_eq!(backoff(b, m, 2), Duration::from_millis(400));
        assert_eq!(backoff(b, m, 3), Duration::from_millis(800));
        assert_eq!(backoff(b, m, 4), m);
        assert_eq!(backoff(b, m, 200), m);
    }

    #[test]
    fn failures_retry_then_fail() {
        let cfg = config();
        let job = cfg.job("a").unwrap();
        let err = || Ending::Returned(Err("boom".into()));
        assert_eq!(
            classify(job, 1, err()),
            Verdict::Retry {
                after: Duration::from_millis(200),
                error: "boom".into()
            }
        );
        assert_eq!(
            classify(job, 2, Ending::Panicked("oops".into())),
            Verdict::Retry {
                after: Duration::from_millis(400),
                error: "handler panicked: oops".into()
            }
        );
        assert_eq!(
            classify(job, 3, err()),
            Verdict::Fail {
                error: "boom".into()
            }
        );
        assert_eq!(
            classify(
                job,
                3,
                Ending::Stopped(Stop::Timeout(Duration::from_secs(1)), None)
            ),
            Verdict::Fail {
                error: "timed out after 1s".into()
            }
        );
        assert_eq!(
            classify(job, 1, Ending::Returned(Ok(()))),
            Verdict::Succeeded
        );
        assert_eq!(
            classify(
                job,
                1,
                Ending::Stopped(
                    Stop::Replaced {
                        by: "a@2026-11-29T19:30:01Z".into()
                    },
                    None
                )
            ),
            Verdict::Cancelled {
                error: "replaced by a@2026-11-29T19:30:01Z".into()
            }
        );
        assert_eq!(
            classify(job, 1, Ending::Stopped(Stop::Shutdown, None)),
            Verdict::Interrupted
        );
        assert_eq!(
            classify(job, 1, Ending::Stopped(Stop::Lost, None)),
            Verdict::Lost
        );
    }

    #[test]
    fn admit_rejects_with_reasons() {
        let cfg = config();
        let reason = admit(b"{", &cfg, |_| true).unwrap_err().reason();
        assert!(
            reason.starts_with("malformed: message is not a cronq occurrence: "),
            "{reason}"
        );
        let occ = |job: &str| {
            let at = "2026-11-29T19:30:00Z".parse().unwrap();
            let job = JobName::new(job).unwrap();
            Occurrence {
                key: cronq_shared::key::OccurrenceKey::scheduled(job.clone(), at),
                job,
                scheduled_at: at,
                scheduled_local: "2026-11-29T19:30:00+00:00".parse().unwrap(),
                timezone: "UTC".into(),
                trigger: cronq_shared::message::Trigger::Schedule,
                attempt: 1,
                payload: serde_json::Value::Null,
                epoch: 0,
                published_at: at,
                deadline: None,
                last_error: None,
            }
            .encode()
        };
        assert_eq!(
            admit(&occ("zzz"), &cfg, |_| true).unwrap_err().reason(),
            "unknown job zzz: it is not in this consumer's config"
        );
        assert_eq!(
            admit(&occ("b"), &cfg, |j| j.handler.is_some())
                .unwrap_err()
                .reason(),
            "no handler registered for job b"
        );
        assert!(admit(&occ("a"), &cfg, |j| j.handler.is_some()).is_ok());
    }

    #[test]
    fn operator_requested_occurrences_wait_instead_of_being_skipped() {
        use cronq_shared::config::Overlap::{Allow, Queue, Replace, Skip};
        use cronq_shared::message::Trigger::{Backfill, Catchup, Manual, Replay, Schedule};
        for trigger in [Schedule, Catchup] {
            for policy in [Allow, Skip, Queue, Replace] {
                assert_eq!(super::effective_overlap(policy, trigger), policy);
            }
        }
        for trigger in [Manual, Backfill, Replay] {
            assert_eq!(super::effective_overlap(Skip, trigger), Queue);
            assert_eq!(super::effective_overlap(Allow, trigger), Allow);
            assert_eq!(super::effective_overlap(Queue, trigger), Queue);
        }
        assert_eq!(super::effective_overlap(Replace, Manual), Replace);
        assert_eq!(super::effective_overlap(Replace, Backfill), Queue);
        assert_eq!(super::effective_overlap(Replace, Replay), Queue);
    }
}
