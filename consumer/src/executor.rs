//! The one place where outcomes are classified.
//!
//! - Before running: [`admit`] turns a delivery into a runnable occurrence, or a
//!   [`Reject`] (unauthenticated, malformed, unknown job, no handler): dead-lettered at
//!   once, never requeued.
//! - After running: [`classify`] turns how the handler ended ([`Ending`]) into an
//!   [`AttemptEnd`]: success, `Retry { after }` with exponential capped backoff, `Failed`
//!   (dead-letter) once `max_attempts` is reached, or a stop (cancelled, interrupted,
//!   lost). That one type then carries the attempt's end to the ledger's record state, the
//!   run history's outcome and error, and the message that follows ([`AttemptEnd::state`],
//!   [`AttemptEnd::outcome`], [`AttemptEnd::error`], [`AttemptEnd::follow_up`]); the
//!   occurrences settled without running (`Skipped`, `Missed`, a superseded `Cancelled`)
//!   are ends of the same type.
//!
//! Everything here is pure, so it is unit-tested without I/O.

use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::broker::Outgoing;
use cronq_shared::config::{Config, Job, Overlap};
use cronq_shared::ledger::State;
use cronq_shared::message::{DecodeError, Occurrence, Trigger};
use cronq_shared::names::JobName;
use cronq_shared::runlog::{Outcome, lost_error};
use cronq_shared::signing::{Keyring, Unauthenticated};

/// Why a message is dead-lettered without running.
#[derive(Debug, thiserror::Error)]
pub enum Reject {
    /// This consumer has a keyring and the message does not open with it: never run, so
    /// that a publisher without the key cannot make the fleet run anything.
    #[error("unauthenticated: {0}")]
    Unauthenticated(#[source] Unauthenticated),
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
    /// Every [`Reject::label`], in the order of the variants.
    pub const LABELS: [&'static str; 4] =
        ["unauthenticated", "malformed", "unknown_job", "no_handler"];

    /// The `reason` label of `cronq_messages_refused_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => Self::LABELS[0],
            Self::Malformed(_) => Self::LABELS[1],
            Self::UnknownJob(_) => Self::LABELS[2],
            Self::NoHandler(_) => Self::LABELS[3],
        }
    }

    /// The full reason for the dead-letter record (with the decode error's cause).
    pub fn reason(&self) -> String {
        match self {
            Self::Malformed(DecodeError::Malformed(e)) => format!("{self}: {e}"),
            Self::Unauthenticated(e) => format!("unauthenticated: {e}"),
            _ => self.to_string(),
        }
    }
}

/// Checks a body's signature (with a keyring), decodes it and finds its job; `has_handler`
/// says whether the job can run here.
///
/// # Errors
/// [`Reject`] with the reason the message cannot run.
pub fn admit<'c>(
    body: &[u8],
    keyring: Option<&Keyring>,
    config: &'c Config,
    has_handler: impl Fn(&Job) -> bool,
) -> Result<(Occurrence, &'c Job), Reject> {
    let body = match keyring {
        Some(keyring) => keyring.open(body).map_err(Reject::Unauthenticated)?,
        None => body,
    };
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
    /// A newer occurrence replaced it (overlap `replace`), or an operator cancelled it
    /// (`cronq cancel`).
    Replaced {
        /// The newer occurrence's key (empty when not known), or `cancelled by WHO`.
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

/// How an attempt ended, or why an occurrence was not run: what is recorded and what
/// follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptEnd {
    /// The handler succeeded.
    Succeeded,
    /// The attempt failed with attempts left: the next one follows after `after`.
    Retry {
        /// Broker-side delay of the retry.
        after: Duration,
        /// This attempt's error.
        error: String,
    },
    /// The last attempt failed: dead-lettered, then recorded `failed`.
    Failed {
        /// The last error.
        error: String,
    },
    /// Replaced by a newer occurrence (overlap `replace`), running or not, or cancelled by
    /// an operator.
    Cancelled {
        /// `replaced by KEY`, `cancelled by WHO`.
        why: String,
    },
    /// Stopped by a consumer shutdown: released, and republished at once.
    Interrupted,
    /// The claim is someone else's (or given up): nothing may be recorded for it.
    Lost {
        /// The attempt's own error before its claim was lost, if any.
        after: Option<String>,
    },
    /// Not run: an earlier occurrence of the job was running (overlap `skip`).
    Skipped {
        /// Who was running.
        why: String,
    },
    /// Not run: it could not start before its deadline.
    Missed {
        /// Which deadline.
        why: String,
    },
}

/// The error recorded for an attempt stopped by a consumer shutdown.
const INTERRUPTED: &str = "consumer shut down";

impl AttemptEnd {
    /// The state the ledger records; `None` for a lost claim, which records nothing.
    pub fn state(&self) -> Option<State> {
        Some(match self {
            Self::Succeeded => State::Succeeded,
            Self::Retry { .. } => State::Retrying,
            Self::Failed { .. } => State::Failed,
            Self::Cancelled { .. } => State::Cancelled,
            Self::Interrupted => State::Pending,
            Self::Lost { .. } => return None,
            Self::Skipped { .. } => State::Skipped,
            Self::Missed { .. } => State::Missed,
        })
    }

    /// The outcome the run history shows.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Succeeded => Outcome::Succeeded,
            Self::Retry { .. } => Outcome::Retrying,
            Self::Failed { .. } => Outcome::Failed,
            Self::Cancelled { .. } => Outcome::Cancelled,
            Self::Interrupted => Outcome::Interrupted,
            Self::Lost { .. } => Outcome::Lost,
            Self::Skipped { .. } => Outcome::Skipped,
            Self::Missed { .. } => Outcome::Missed,
        }
    }

    /// The error recorded with it and shown in the history.
    pub fn error(&self) -> Option<String> {
        match self {
            Self::Succeeded => None,
            Self::Retry { error, .. } | Self::Failed { error } => Some(error.clone()),
            Self::Cancelled { why } | Self::Skipped { why } | Self::Missed { why } => {
                Some(why.clone())
            }
            Self::Interrupted => Some(INTERRUPTED.to_owned()),
            Self::Lost { after } => Some(lost_error(after.as_deref())),
        }
    }

    /// The same attempt once its claim is lost (fenced, or given up): as the ledger
    /// appends it to the history then (`Run::lost`).
    #[must_use]
    pub fn lost(self) -> Self {
        match self {
            Self::Lost { .. } => self,
            other => Self::Lost {
                after: other.error(),
            },
        }
    }

    /// The message that must follow this end of attempt `occ` of `job`, published `now`:
    /// the next attempt after its delay (retry), or at shutdown the same one at once.
    pub fn follow_up(&self, occ: &Occurrence, job: &Job, now: DateTime<Utc>) -> Option<Outgoing> {
        let (occurrence, delay) = match self {
            Self::Retry { after, error } => (
                Occurrence {
                    attempt: occ.attempt + 1,
                    last_error: Some(error.clone()),
                    published_at: now,
                    ..occ.clone()
                },
                *after,
            ),
            Self::Interrupted => (occ.clone(), Duration::ZERO),
            _ => return None,
        };
        Some(Outgoing {
            queue: job.queue.clone(),
            occurrence,
            delay,
        })
    }
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
pub fn classify(job: &Job, attempt: u32, ending: Ending) -> AttemptEnd {
    let error = match ending {
        Ending::Returned(Ok(())) => return AttemptEnd::Succeeded,
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
            return AttemptEnd::Cancelled {
                why: replaced_by(&by),
            };
        }
        Ending::Stopped(Stop::Lost, _) => return AttemptEnd::Lost { after: None },
        Ending::Stopped(Stop::Shutdown, _) => return AttemptEnd::Interrupted,
    };
    if attempt >= job.max_attempts {
        AttemptEnd::Failed { error }
    } else {
        AttemptEnd::Retry {
            after: backoff(job.backoff, job.backoff_max, attempt),
            error,
        }
    }
}

/// The error recorded for an occurrence of a `replace` job that a newer one, `by`, replaced;
/// an operator's cancel mark (`cancelled by WHO`) as it is.
pub fn replaced_by(by: &str) -> String {
    if by.starts_with(cronq_shared::ledger::CANCELLED_BY) {
        by.to_owned()
    } else if by.is_empty() {
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
            AttemptEnd::Retry {
                after: Duration::from_millis(200),
                error: "boom".into()
            }
        );
        assert_eq!(
            classify(job, 2, Ending::Panicked("oops".into())),
            AttemptEnd::Retry {
                after: Duration::from_millis(400),
                error: "handler panicked: oops".into()
            }
        );
        assert_eq!(
            classify(job, 3, err()),
            AttemptEnd::Failed {
                error: "boom".into()
            }
        );
        assert_eq!(
            classify(
                job,
                3,
                Ending::Stopped(Stop::Timeout(Duration::from_secs(1)), None)
            ),
            AttemptEnd::Failed {
                error: "timed out after 1s".into()
            }
        );
        assert_eq!(
            classify(job, 1, Ending::Returned(Ok(()))),
            AttemptEnd::Succeeded
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
            AttemptEnd::Cancelled {
                why: "replaced by a@2026-11-29T19:30:01Z".into()
            }
        );
        assert_eq!(
            classify(job, 1, Ending::Stopped(Stop::Shutdown, None)),
            AttemptEnd::Interrupted
        );
        assert_eq!(
            classify(job, 1, Ending::Stopped(Stop::Lost, None)),
            AttemptEnd::Lost { after: None }
        );
    }

    fn sample(job: &str) -> Occurrence {
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
            traceparent: None,
        }
    }

    #[test]
    fn an_end_maps_to_its_state_outcome_error_and_follow_up() {
        let cfg = config();
        let job = cfg.job("a").unwrap();
        let occ = sample("a");
        let now = "2026-11-29T19:31:00Z".parse().unwrap();
        let boom = || "boom".to_owned();
        let ends = [
            (
                AttemptEnd::Succeeded,
                Some(State::Succeeded),
                Outcome::Succeeded,
                None,
            ),
            (
                AttemptEnd::Retry {
                    after: Duration::from_secs(1),
                    error: boom(),
                },
                Some(State::Retrying),
                Outcome::Retrying,
                Some("boom"),
            ),
            (
                AttemptEnd::Failed { error: boom() },
                Some(State::Failed),
                Outcome::Failed,
                Some("boom"),
            ),
            (
                AttemptEnd::Cancelled {
                    why: "replaced by k".into(),
                },
                Some(State::Cancelled),
                Outcome::Cancelled,
                Some("replaced by k"),
            ),
            (
                AttemptEnd::Interrupted,
                Some(State::Pending),
                Outcome::Interrupted,
                Some("consumer shut down"),
            ),
            (
                AttemptEnd::Lost { after: None },
                None,
                Outcome::Lost,
                Some("lost the claim: the lease lapsed and another consumer took over"),
            ),
            (
                AttemptEnd::Skipped {
                    why: "k was still running".into(),
                },
                Some(State::Skipped),
                Outcome::Skipped,
                Some("k was still running"),
            ),
            (
                AttemptEnd::Missed { why: "late".into() },
                Some(State::Missed),
                Outcome::Missed,
                Some("late"),
            ),
        ];
        for (end, state, outcome, error) in ends {
            assert_eq!(end.state(), state, "{end:?}");
            assert_eq!(end.outcome(), outcome, "{end:?}");
            assert_eq!(end.error().as_deref(), error, "{end:?}");
            let lost = end.clone().lost();
            assert_eq!((lost.state(), lost.outcome()), (None, Outcome::Lost));
            let own = (end.outcome() != Outcome::Lost)
                .then(|| end.error())
                .flatten();
            let run_lost = cronq_shared::runlog::lost_error(own.as_deref());
            assert_eq!(
                lost.error(),
                Some(run_lost),
                "as Run::lost shows it: {end:?}"
            );
        }

        let retry = AttemptEnd::Retry {
            after: Duration::from_secs(1),
            error: boom(),
        };
        let next = retry.follow_up(&occ, job, now).unwrap();
        assert_eq!(next.delay, Duration::from_secs(1));
        assert_eq!(next.queue, job.queue);
        assert_eq!(next.occurrence.attempt, 2);
        assert_eq!(next.occurrence.key, occ.key);
        assert_eq!(next.occurrence.last_error.as_deref(), Some("boom"));
        assert_eq!(next.occurrence.published_at, now);
        let again = AttemptEnd::Interrupted.follow_up(&occ, job, now).unwrap();
        assert_eq!(
            (again.delay, again.occurrence),
            (Duration::ZERO, occ.clone())
        );
        assert!(AttemptEnd::Succeeded.follow_up(&occ, job, now).is_none());
        assert!(
            AttemptEnd::Failed { error: boom() }
                .follow_up(&occ, job, now)
                .is_none()
        );
    }

    #[test]
    fn admit_rejects_with_reasons() {
        let cfg = config();
        let reason = admit(b"{", None, &cfg, |_| true).unwrap_err().reason();
        assert!(
            reason.starts_with("malformed: message is not a cronq occurrence: "),
            "{reason}"
        );
        let occ = |job: &str| sample(job).encode();
        assert_eq!(
            admit(&occ("zzz"), None, &cfg, |_| true)
                .unwrap_err()
                .reason(),
            "unknown job zzz: it is not in this consumer's config"
        );
        assert_eq!(
            admit(&occ("b"), None, &cfg, |j| j.handler.is_some())
                .unwrap_err()
                .reason(),
            "no handler registered for job b"
        );
        assert!(admit(&occ("a"), None, &cfg, |j| j.handler.is_some()).is_ok());
    }

    #[test]
    fn with_a_keyring_only_what_opens_with_it_is_admitted() {
        use cronq_shared::signing::KeySource;
        let cfg = config();
        let ring = |t: &str| Keyring::parse(t, KeySource::Variable).unwrap();
        let ours = ring("k1:0123456789abcdef0123");
        let body = sample("a").encode();
        let any = |_: &Job| true;
        assert!(admit(&ours.seal(&body), Some(&ours), &cfg, any).is_ok());
        // Without a keyring, a sealed message runs too (signing turned on producers first).
        assert!(admit(&ours.seal(&body), None, &cfg, any).is_ok());
        let reason = |b: &[u8]| admit(b, Some(&ours), &cfg, any).unwrap_err().reason();
        assert_eq!(reason(&body), "unauthenticated: the message is not signed");
        let theirs = ring("k1:not-our-secret-at-all");
        assert!(
            reason(&theirs.seal(&body))
                .starts_with("unauthenticated: the signature of key \"k1\" does not match")
        );
        let other = ring("k7:0123456789abcdef0123");
        assert!(reason(&other.seal(&body)).starts_with("unauthenticated: signed with key \"k7\""));
        // Unauthenticated before anything else: a forged body is not even parsed.
        assert!(reason(b"{").starts_with("unauthenticated: "));
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
