//! How an attempt ends, and what that end is recorded as.
//!
//! The supervisor (`crate::attempt`) reports how the handler's run exited ([`Exit`]: it
//! returned, panicked, or was stopped for a [`Stop`]); [`classify`] judges that into a
//! [`Verdict`]: success, `Retry { after }` with exponential capped backoff, `Failed`
//! (dead-letter) once `max_attempts` is reached, or a stop (cancelled, interrupted, lost).
//! The occurrences settled without running (`Skipped`, `Missed`, a superseded `Cancelled`)
//! get a verdict of the same type.
//!
//! Owns: the one mapping from a verdict to what the ports are told: the ledger's record
//! state ([`Verdict::state`]), the run history's outcome and error ([`Verdict::outcome`],
//! [`Verdict::error`], [`Verdict::run`]), the message that follows it
//! ([`Verdict::follow_up`]), and the records that carry them ([`Verdict::record`],
//! [`Verdict::settlement`]). Invariant: everything here is pure (no I/O, no clock but the
//! instants passed in), so it is unit-tested as it is.

use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::broker::Outgoing;
use cronq_shared::config::Job;
use cronq_shared::ledger::{self, State};
use cronq_shared::message::Occurrence;
use cronq_shared::runlog::{Outcome, Run, lost_error};

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

/// How the handler's run ended: what the supervisor saw (`crate::attempt`), before it
/// is judged ([`classify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The handler returned.
    Returned(Result<(), String>),
    /// The handler panicked (message).
    Panicked(String),
    /// The attempt was stopped; the handler's own error, if it returned one.
    Stopped(Stop, Option<String>),
}

/// What an attempt comes to, or why an occurrence was not run: the one value from which
/// the ledger's record state, the run history's outcome and error, and the message that
/// follows are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
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

impl Verdict {
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

    /// The same verdict once the attempt's claim is lost (fenced, or given up): as the ledger
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

    /// The message that must follow this verdict on attempt `occ` of `job`, published `now`:
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

    /// The run history entry of attempt `occ`, run (or settled) by `consumer`: started at
    /// `started_at`, ended `took` later.
    pub fn run(
        &self,
        occ: &Occurrence,
        consumer: &str,
        started_at: DateTime<Utc>,
        took: Duration,
    ) -> Run {
        Run {
            key: occ.key.clone(),
            job: occ.job.clone(),
            attempt: occ.attempt,
            consumer: consumer.to_owned(),
            started_at,
            duration: took,
            outcome: self.outcome(),
            error: self.error(),
            published_at: Some(occ.published_at),
        }
    }

    /// The ledger's record of `occ`, an occurrence of `job` settled `now` by `consumer`
    /// without running (missed, skipped, cancelled), with its run history entry.
    ///
    /// # Panics
    /// On a verdict that records no state (`Lost`): only a claim can be lost.
    pub fn settlement(
        &self,
        occ: &Occurrence,
        job: &Job,
        consumer: &str,
        now: DateTime<Utc>,
    ) -> ledger::Settle {
        ledger::Settle {
            key: occ.key.clone(),
            job: occ.job.clone(),
            attempt: occ.attempt,
            state: self
                .state()
                .expect("an occurrence settled without running ends in a recorded state"),
            error: self.error(),
            retention: job.retention,
            run: Some(self.run(occ, consumer, now, Duration::ZERO)),
        }
    }

    /// The ledger's end record of an attempt of `job` that ran, with its history entry
    /// `run` and the message that follows it, `follow_up`: stored, so that the reaper
    /// publishes it when it is still unclaimed `hold` after its delay.
    pub fn record(
        &self,
        job: &Job,
        follow_up: Option<&Outgoing>,
        hold: Duration,
        run: Run,
    ) -> ledger::End {
        ledger::End {
            state: self.state(),
            error: self.error(),
            retention: job.retention,
            next: follow_up.map(|out| ledger::FollowUp {
                attempt: out.occurrence.attempt,
                body: out.occurrence.encode(),
                within: out.delay + hold,
            }),
            run: Some(run),
        }
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

/// Judges how attempt `attempt` of a `job` occurrence exited.
pub fn classify(job: &Job, attempt: u32, exit: Exit) -> Verdict {
    let error = match exit {
        Exit::Returned(Ok(())) => return Verdict::Succeeded,
        Exit::Returned(Err(e)) => e,
        Exit::Panicked(msg) => format!("handler panicked: {msg}"),
        Exit::Stopped(Stop::Timeout(limit), own) => {
            let base = format!("timed out after {}", humantime::format_duration(limit));
            match own {
                Some(e) if !e.is_empty() => format!("{base}: {e}"),
                _ => base,
            }
        }
        Exit::Stopped(Stop::Replaced { by }, _) => {
            return Verdict::Cancelled {
                why: replaced_by(&by),
            };
        }
        Exit::Stopped(Stop::Lost, _) => return Verdict::Lost { after: None },
        Exit::Stopped(Stop::Shutdown, _) => return Verdict::Interrupted,
    };
    if attempt >= job.max_attempts {
        Verdict::Failed { error }
    } else {
        Verdict::Retry {
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

#[cfg(test)]
mod tests {
    use super::*;
    use cronq_shared::config::Config;
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
        let err = || Exit::Returned(Err("boom".into()));
        assert_eq!(
            classify(job, 1, err()),
            Verdict::Retry {
                after: Duration::from_millis(200),
                error: "boom".into()
            }
        );
        assert_eq!(
            classify(job, 2, Exit::Panicked("oops".into())),
            Verdict::Retry {
                after: Duration::from_millis(400),
                error: "handler panicked: oops".into()
            }
        );
        assert_eq!(
            classify(job, 3, err()),
            Verdict::Failed {
                error: "boom".into()
            }
        );
        assert_eq!(
            classify(
                job,
                3,
                Exit::Stopped(Stop::Timeout(Duration::from_secs(1)), None)
            ),
            Verdict::Failed {
                error: "timed out after 1s".into()
            }
        );
        assert_eq!(classify(job, 1, Exit::Returned(Ok(()))), Verdict::Succeeded);
        assert_eq!(
            classify(
                job,
                1,
                Exit::Stopped(
                    Stop::Replaced {
                        by: "a@2026-11-29T19:30:01Z".into()
                    },
                    None
                )
            ),
            Verdict::Cancelled {
                why: "replaced by a@2026-11-29T19:30:01Z".into()
            }
        );
        assert_eq!(
            classify(job, 1, Exit::Stopped(Stop::Shutdown, None)),
            Verdict::Interrupted
        );
        assert_eq!(
            classify(job, 1, Exit::Stopped(Stop::Lost, None)),
            Verdict::Lost { after: None }
        );
    }

    use crate::sample::occurrence as sample;

    #[test]
    fn a_verdict_maps_to_its_state_outcome_error_and_follow_up() {
        let cfg = config();
        let job = cfg.job("a").unwrap();
        let occ = sample("a");
        let now = "2026-11-29T19:31:00Z".parse().unwrap();
        let boom = || "boom".to_owned();
        let ends = [
            (
                Verdict::Succeeded,
                Some(State::Succeeded),
                Outcome::Succeeded,
                None,
            ),
            (
                Verdict::Retry {
                    after: Duration::from_secs(1),
                    error: boom(),
                },
                Some(State::Retrying),
                Outcome::Retrying,
                Some("boom"),
            ),
            (
                Verdict::Failed { error: boom() },
                Some(State::Failed),
                Outcome::Failed,
                Some("boom"),
            ),
            (
                Verdict::Cancelled {
                    why: "replaced by k".into(),
                },
                Some(State::Cancelled),
                Outcome::Cancelled,
                Some("replaced by k"),
            ),
            (
                Verdict::Interrupted,
                Some(State::Pending),
                Outcome::Interrupted,
                Some("consumer shut down"),
            ),
            (
                Verdict::Lost { after: None },
                None,
                Outcome::Lost,
                Some("lost the claim: the lease lapsed and another consumer took over"),
            ),
            (
                Verdict::Skipped {
                    why: "k was still running".into(),
                },
                Some(State::Skipped),
                Outcome::Skipped,
                Some("k was still running"),
            ),
            (
                Verdict::Missed { why: "late".into() },
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

        let retry = Verdict::Retry {
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
        let again = Verdict::Interrupted.follow_up(&occ, job, now).unwrap();
        assert_eq!(
            (again.delay, again.occurrence),
            (Duration::ZERO, occ.clone())
        );
        assert!(Verdict::Succeeded.follow_up(&occ, job, now).is_none());
        assert!(
            Verdict::Failed { error: boom() }
                .follow_up(&occ, job, now)
                .is_none()
        );
    }

    #[test]
    fn the_records_carry_what_the_verdict_maps_to() {
        let cfg = config();
        let job = cfg.job("a").unwrap();
        let occ = sample("a");
        let now = "2026-11-29T19:31:00Z".parse().unwrap();
        let skipped = Verdict::Skipped {
            why: "k was still running".into(),
        };
        let settle = skipped.settlement(&occ, job, "c1", now);
        assert_eq!(
            (settle.state, settle.error.as_deref(), settle.attempt),
            (State::Skipped, Some("k was still running"), 1)
        );
        let run = settle.run.unwrap();
        assert_eq!(
            (
                run.outcome,
                run.consumer.as_str(),
                run.started_at,
                run.duration
            ),
            (Outcome::Skipped, "c1", now, Duration::ZERO)
        );
        let retry = Verdict::Retry {
            after: Duration::from_secs(1),
            error: "boom".into(),
        };
        let next = retry.follow_up(&occ, job, now);
        let run = retry.run(&occ, "c1", now, Duration::from_secs(3));
        let end = retry.record(job, next.as_ref(), Duration::from_secs(60), run);
        assert_eq!(end.state, Some(State::Retrying));
        assert_eq!(end.error.as_deref(), Some("boom"));
        let follow = end.next.unwrap();
        assert_eq!(follow.attempt, 2);
        assert_eq!(follow.within, Duration::from_secs(61));
        assert_eq!(follow.body, next.unwrap().occurrence.encode());
        let run = end.run.unwrap();
        assert_eq!(
            (run.outcome, run.duration),
            (Outcome::Retrying, Duration::from_secs(3))
        );
    }
}
