//! Processing one delivery, from decode to the recorded outcome.
//!
//! Order of a delivery's life (ack-early, see `docs/consumer.md`):
//! 1. [`executor::admit`]: malformed, unknown job, no handler → dead-letter, then ack.
//! 2. Past its start deadline → `missed`, then ack.
//! 3. [`Ledger::claim`] (idempotency + overlap, one atomic step): duplicate → ack without
//!    running; busy → `skipped` (skip); waiting (queue, replace) → recorded in the ledger
//!    with its message, then acked: it is published again when its turn comes (or by the
//!    reaper), never parked on a broker timer; superseded by a newer occurrence (replace) →
//!    `cancelled`; store unreachable → hold the delivery unacked and retry with backoff:
//!    nothing runs, nothing is acked.
//! 4. Claimed: the message body is stored in the claim, so the delivery is acked at once.
//!    The broker's `consumer_timeout` can then never close the channel under a long job, and
//!    the claim's lease (renewed by heartbeats) decides instead whether it must run again.
//! 5. The outcome is recorded (fenced by the claim) before anything that follows it: the
//!    retry message, the dead letter's ledger record, the release at shutdown. A follow-up
//!    message is stored in the record, so the reaper republishes it if this consumer dies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, Delivery, Outgoing};
use cronq_shared::config::{Config, Job, Overlap};
use cronq_shared::ledger::{
    Claim, ClaimOutcome, End, Ended, FollowUp, Lease, Ledger, Settle, State,
};
use cronq_shared::message::Occurrence;
use cronq_shared::retry::{Backoff, retry};
use cronq_shared::runlog::{Outcome, Run, RunLog};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use crate::attempt::{Supervision, supervise};
use crate::dead_letter::{self, publish};
use crate::executor::{self, Reject, Verdict};
use crate::handler::Runner;
use crate::reaper::republish;
use crate::registry::Handlers;
use crate::telemetry;

/// How often a running occurrence of a `replace` job renews its lease, and so learns that
/// a newer occurrence asked it to stop: a replace takes effect within about this long.
const REPLACE_BEAT: Duration = Duration::from_millis(250);

/// Claiming while the idempotency store is unreachable, until it is back or shutdown (the
/// delivery stays unacked meanwhile): a Redis failover takes seconds, and the cap bounds
/// how late a consumer notices the store is back.
const CLAIM_RETRY: Backoff =
    Backoff::exponential(Duration::from_millis(500), Duration::from_secs(5));

/// Recording an attempt's end while the store is unreachable: a few seconds of tries, well
/// inside the lease; after that the lease lapses and the reaper hands the occurrence out.
const COMPLETE_RETRY: Backoff =
    Backoff::exponential(Duration::from_millis(200), Duration::from_secs(2)).tries(5);

/// How long a delivery whose settlement failed (the store unreachable) is held back after
/// its requeue before this task ends, so a redelivery does not spin on a dead store.
const SETTLE_PAUSE: Duration = Duration::from_millis(500);

/// Everything a delivery's processing needs; shared by all tasks of a consumer.
pub(crate) struct Worker {
    pub(crate) config: Arc<Config>,
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) runlog: Arc<dyn RunLog>,
    pub(crate) handlers: Handlers,
    pub(crate) http: reqwest::Client,
    /// Execution lease.
    pub(crate) lease: Duration,
    /// How long a follow-up message may stay unclaimed before the reaper republishes it.
    pub(crate) hold: Duration,
    /// This consumer's name in the run history.
    pub(crate) consumer_id: String,
}

async fn ack(d: &Delivery, job: &str) {
    if let Err(err) = d.acker.ack().await {
        tracing::warn!(job, queue = %d.queue, error = %err, "ack failed; the broker will redeliver and the ledger deduplicates");
    }
}

async fn requeue(d: &Delivery) {
    if let Err(err) = d.acker.requeue().await {
        tracing::warn!(queue = %d.queue, error = %err, "requeue failed; the broker redelivers when the channel closes");
    }
}

impl Worker {
    /// Whether `job` can run here.
    pub(crate) fn has_handler(&self, job: &Job) -> bool {
        self.handlers.contains(&job.name) || job.handler.is_some()
    }

    /// Processes one delivery; `permit` bounds concurrency and is held to the end.
    pub(crate) async fn process(
        self: Arc<Self>,
        d: Delivery,
        permit: OwnedSemaphorePermit,
        abort: CancellationToken,
        shutdown: CancellationToken,
    ) {
        let _permit = permit;
        if d.redelivered {
            telemetry::redelivery();
        }
        let config = Arc::clone(&self.config);
        let admitted = executor::admit(&d.body, &config, |job| self.has_handler(job)).and_then(
            |(occ, job)| match Runner::resolve(job, &self.handlers, &self.http) {
                Some(runner) => Ok((occ, job, runner)),
                None => Err(Reject::NoHandler(job.name.clone())),
            },
        );
        let (occ, job, runner) = match admitted {
            Ok(x) => x,
            Err(reject) => return self.reject(&d, &reject).await,
        };
        if occ.attempt <= 1
            && let Some(deadline) = start_deadline(&occ, job)
            && Utc::now() > deadline
        {
            let why = format!(
                "could not start before its deadline {}",
                deadline.to_rfc3339()
            );
            return self
                .settle(&d, &occ, job, State::Missed, why, &shutdown)
                .await;
        }
        let overlap = executor::effective_overlap(job.overlap, occ.trigger);
        let claim = Claim {
            key: occ.key.clone(),
            job: occ.job.clone(),
            queue: job.queue.clone(),
            attempt: occ.attempt,
            overlap,
            lease: self.lease,
            retention: job.retention,
            body: d.body.clone(),
            scheduled_at: occ.scheduled_at,
            recheck: self.recheck(&occ, job),
            consumer: self.consumer_id.clone(),
        };
        let Some(claimed) = self.claim(&claim, &d, &shutdown).await else {
            return;
        };
        match claimed {
            ClaimOutcome::Duplicate { state, attempt } => {
                tracing::debug!(job = %occ.job, key = %occ.key, attempt = occ.attempt, state = %state, recorded_attempt = attempt, "duplicate delivery acked without running");
                telemetry::duplicate(occ.job.as_str());
                ack(&d, occ.job.as_str()).await;
            }
            ClaimOutcome::Busy { holder } => {
                let why = format!("{holder} was still running");
                self.settle(&d, &occ, job, State::Skipped, why, &shutdown)
                    .await;
            }
            ClaimOutcome::Waiting { holder, woken } => {
                tracing::debug!(job = %occ.job, key = %occ.key, holder = %holder, "waiting until the earlier occurrence ends");
                ack(&d, occ.job.as_str()).await;
                if let Some(woken) = woken {
                    republish(&*self.broker, &config, woken).await;
                }
            }
            ClaimOutcome::Superseded { by } => {
                let why = executor::replaced_by(&by);
                self.settle(&d, &occ, job, State::Cancelled, why, &shutdown)
                    .await;
            }
            ClaimOutcome::Claimed { lease, takeover } => {
                if takeover {
                    tracing::info!(job = %occ.job, key = %occ.key, attempt = occ.attempt, "running an occurrence whose previous owner stopped");
                }
                ack(&d, occ.job.as_str()).await;
                drop(d);
                self.execute(runner, occ, job, lease, &abort).await;
            }
        }
    }

    /// Claims, retrying while the store is unreachable. While it is, nothing runs and
    /// nothing is acked: the delivery is held unacked (requeueing would spend the queue's
    /// delivery limit). `None` when shutdown came first (the delivery was requeued).
    async fn claim(
        &self,
        claim: &Claim,
        d: &Delivery,
        shutdown: &CancellationToken,
    ) -> Option<ClaimOutcome> {
        let claimed = retry(
            CLAIM_RETRY,
            shutdown,
            || self.ledger.claim(claim),
            |r| tracing::warn!(job = %claim.job, key = %claim.key, error = %r.error, "cannot reach the idempotency store: holding the delivery unacked, nothing runs until it is back"),
        )
        .await;
        match claimed {
            Ok(outcome) => Some(outcome),
            Err(_) => {
                requeue(d).await;
                None
            }
        }
    }

    async fn reject(&self, d: &Delivery, reject: &Reject) {
        let occ = Occurrence::decode(&d.body).ok();
        let label = occ
            .as_ref()
            .filter(|o| self.config.job(o.job.as_str()).is_some())
            .map_or(telemetry::UNKNOWN_JOB.to_owned(), |o| o.job.to_string());
        let letter = dead_letter::letter(&d.body, occ.as_ref(), &d.queue, 0, reject.reason(), None);
        match dead_letter::send(&*self.broker, &letter).await {
            Ok(()) => {
                tracing::warn!(job = %label, key = letter.key.as_deref().unwrap_or(""), queue = %d.queue, reason = %letter.reason, "dead-lettered a message that cannot run");
                telemetry::dead_lettered(&label);
                ack(d, &label).await;
            }
            Err(err) => {
                tracing::error!(job = %label, queue = %d.queue, error = %err, "cannot dead-letter a message that cannot run: requeueing it");
                requeue(d).await;
            }
        }
    }

    /// How long a waiting occurrence is left alone before the reaper republishes it to look
    /// again: the hold period, or less so that it is found `missed` soon after its deadline.
    fn recheck(&self, occ: &Occurrence, job: &Job) -> Duration {
        let until_deadline = start_deadline(occ, job)
            .filter(|_| occ.attempt <= 1)
            .and_then(|d| (d - Utc::now()).to_std().ok());
        until_deadline.map_or(self.hold, |d| d.min(self.hold))
    }

    /// Records `state` (missed, skipped, cancelled) without running, then acks.
    async fn settle(
        &self,
        d: &Delivery,
        occ: &Occurrence,
        job: &Job,
        state: State,
        why: String,
        shutdown: &CancellationToken,
    ) {
        let outcome = match state {
            State::Missed => Outcome::Missed,
            State::Cancelled => Outcome::Cancelled,
            _ => Outcome::Skipped,
        };
        let settle = Settle {
            key: occ.key.clone(),
            job: occ.job.clone(),
            attempt: occ.attempt,
            state,
            error: Some(why.clone()),
            retention: job.retention,
            run: Some(self.run(occ, Utc::now(), Duration::ZERO, outcome, Some(why.clone()))),
        };
        match self.ledger.settle(&settle).await {
            Ok(Ended {
                recorded: true,
                woken,
            }) => {
                tracing::info!(job = %occ.job, key = %occ.key, outcome = %outcome, reason = %why, "occurrence not run");
                telemetry::attempt(occ.job.as_str(), outcome.as_str());
                ack(d, occ.job.as_str()).await;
                if let Some(woken) = woken {
                    republish(&*self.broker, &self.config, woken).await;
                }
            }
            Ok(Ended {
                recorded: false, ..
            }) => {
                telemetry::duplicate(occ.job.as_str());
                ack(d, occ.job.as_str()).await;
            }
            Err(err) => {
                tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "cannot reach the idempotency store: requeueing");
                requeue(d).await;
                shutdown
                    .run_until_cancelled(tokio::time::sleep(SETTLE_PAUSE))
                    .await;
            }
        }
    }

    async fn execute(
        &self,
        runner: Runner,
        occ: Occurrence,
        job: &Job,
        lease: Lease,
        abort: &CancellationToken,
    ) {
        let started_at = Utc::now();
        let t0 = Instant::now();
        tracing::debug!(job = %occ.job, key = %occ.key, attempt = occ.attempt, "attempt started");
        let beat = if job.overlap == Overlap::Replace {
            REPLACE_BEAT.min(self.lease / 3)
        } else {
            self.lease / 3
        };
        let sup = Supervision {
            ledger: &*self.ledger,
            lease: &lease,
            lease_for: self.lease,
            beat,
            timeout: job.timeout,
            abort,
        };
        let ending = supervise(runner, occ.clone(), sup).await;
        let took = t0.elapsed();
        telemetry::duration(occ.job.as_str(), took);
        let verdict = executor::classify(job, occ.attempt, ending);
        // Keep the claim alive while the end is recorded and followed up (a dead letter may
        // wait for a broker reconnect), so the reaper does not hand it out meanwhile.
        let keepalive = async {
            let every = (self.lease / 3).max(Duration::from_millis(50));
            loop {
                tokio::time::sleep(every).await;
                let _ = self.ledger.heartbeat(&lease, self.lease).await;
            }
        };
        let attempt = Attempted { started_at, took };
        let (outcome, error, recorded) = tokio::select! {
            r = self.conclude(&occ, job, &lease, verdict, &attempt) => r,
            _ = keepalive => unreachable!("the keepalive loop never ends"),
        };
        match outcome {
            Outcome::Succeeded => {
                tracing::debug!(job = %occ.job, key = %occ.key, attempt = occ.attempt, elapsed_ms = took.as_millis() as u64, "attempt succeeded");
            }
            _ => {
                tracing::warn!(job = %occ.job, key = %occ.key, attempt = occ.attempt, elapsed_ms = took.as_millis() as u64, outcome = %outcome, error = error.as_deref().unwrap_or(""), "attempt did not succeed");
            }
        }
        telemetry::attempt(occ.job.as_str(), outcome.as_str());
        if !recorded {
            let run = self.run(&occ, started_at, took, outcome, error);
            if let Err(err) = self.runlog.record(&run).await {
                tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "cannot write the run history");
            }
        }
    }

    /// Acts on a verdict; returns what the run history shows, and whether the ledger has
    /// already appended it to the history (with the record, when the claim was held).
    async fn conclude(
        &self,
        occ: &Occurrence,
        job: &Job,
        lease: &Lease,
        verdict: Verdict,
        attempt: &Attempted,
    ) -> (Outcome, Option<String>, bool) {
        let end = |state, outcome, error: Option<String>, next| End {
            state,
            error: error.clone(),
            retention: job.retention,
            next,
            run: Some(self.run(occ, attempt.started_at, attempt.took, outcome, error)),
        };
        let (done, outcome, error) = match verdict {
            Verdict::Succeeded => {
                let done = self
                    .complete(
                        lease,
                        &end(State::Succeeded, Outcome::Succeeded, None, None),
                    )
                    .await;
                (done, Outcome::Succeeded, None)
            }
            Verdict::Retry { after, error } => {
                let next = Occurrence {
                    attempt: occ.attempt + 1,
                    last_error: Some(error.clone()),
                    published_at: Utc::now(),
                    ..occ.clone()
                };
                let follow = FollowUp {
                    attempt: next.attempt,
                    body: next.encode(),
                    within: after + self.hold,
                };
                let state = end(
                    State::Retrying,
                    Outcome::Retrying,
                    Some(error.clone()),
                    Some(follow),
                );
                let done = self.complete(lease, &state).await;
                if done == Some(true) {
                    let out = Outgoing {
                        queue: job.queue.clone(),
                        occurrence: next,
                        delay: after,
                    };
                    if let Err(err) = publish(&*self.broker, out).await {
                        tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "cannot publish the retry; the reaper republishes it later");
                    }
                }
                (done, Outcome::Retrying, Some(error))
            }
            Verdict::Fail { error } => {
                // Dead-letter first: a crash in between reruns the attempt (at-least-once)
                // instead of losing the letter.
                let letter = dead_letter::letter(
                    &occ.encode(),
                    Some(occ),
                    &job.queue,
                    occ.attempt,
                    "failed".to_owned(),
                    Some(error.clone()),
                );
                if let Err(err) = dead_letter::send(&*self.broker, &letter).await {
                    tracing::error!(job = %occ.job, key = %occ.key, error = %err, "cannot dead-letter a failed occurrence: leaving its claim to lapse so it runs again");
                    return (Outcome::Lost, Some(error), false);
                }
                telemetry::dead_lettered(occ.job.as_str());
                let done = self
                    .complete(
                        lease,
                        &end(State::Failed, Outcome::Failed, Some(error.clone()), None),
                    )
                    .await;
                (done, Outcome::Failed, Some(error))
            }
            Verdict::Cancelled { error: why } => {
                let done = self
                    .complete(
                        lease,
                        &end(
                            State::Cancelled,
                            Outcome::Cancelled,
                            Some(why.clone()),
                            None,
                        ),
                    )
                    .await;
                (done, Outcome::Cancelled, Some(why))
            }
            Verdict::Interrupted => {
                let follow = FollowUp {
                    attempt: occ.attempt,
                    body: occ.encode(),
                    within: self.hold,
                };
                let why = "consumer shut down".to_owned();
                let done = self
                    .complete(
                        lease,
                        &end(
                            State::Pending,
                            Outcome::Interrupted,
                            Some(why.clone()),
                            Some(follow),
                        ),
                    )
                    .await;
                if done == Some(true) {
                    let out = Outgoing {
                        queue: job.queue.clone(),
                        occurrence: occ.clone(),
                        delay: Duration::ZERO,
                    };
                    if let Err(err) = publish(&*self.broker, out).await {
                        tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "cannot republish an interrupted occurrence; the reaper does it later");
                    }
                }
                (done, Outcome::Interrupted, Some(why))
            }
            Verdict::Lost => (None, Outcome::Lost, None),
        };
        let recorded = done == Some(true);
        let (outcome, error) = match done {
            Some(true) => (outcome, error),
            Some(false) | None if outcome != Outcome::Lost => {
                tracing::warn!(job = %occ.job, key = %occ.key, attempt = occ.attempt, "this consumer lost its claim: another consumer runs the occurrence again; outcome not recorded");
                (Outcome::Lost, error)
            }
            _ => (Outcome::Lost, error),
        };
        let error = match (outcome, error) {
            (Outcome::Lost, e) => Some(e.map_or_else(
                || "lost the claim: the lease lapsed and another consumer took over".to_owned(),
                |e| format!("lost the claim after: {e}"),
            )),
            (_, e) => e,
        };
        (outcome, error, recorded)
    }

    /// Records an attempt's end, retrying while the store is unreachable, and publishes the
    /// waiter whose turn it is now. `Some(false)` when fenced, `None` when the store stayed
    /// unreachable (the lease then lapses and the reaper hands the occurrence to another
    /// consumer).
    async fn complete(&self, lease: &Lease, end: &End) -> Option<bool> {
        let ended = retry(
            COMPLETE_RETRY,
            &CancellationToken::new(),
            || self.ledger.complete(lease, end),
            |r| tracing::warn!(job = %lease.job, key = %lease.key, error = %r.error, "cannot record the attempt's end, retrying"),
        )
        .await;
        match ended {
            Ok(Ended { recorded, woken }) => {
                if let Some(woken) = woken {
                    republish(&*self.broker, &self.config, woken).await;
                }
                Some(recorded)
            }
            Err(gave_up) => {
                tracing::error!(job = %lease.job, key = %lease.key, error = %gave_up.into_last(), "cannot record the attempt's end: the occurrence runs again after its lease lapses");
                None
            }
        }
    }

    /// The run history entry of an attempt of `occ` run (or settled) by this consumer.
    fn run(
        &self,
        occ: &Occurrence,
        started_at: DateTime<Utc>,
        took: Duration,
        outcome: Outcome,
        error: Option<String>,
    ) -> Run {
        Run {
            key: occ.key.clone(),
            job: occ.job.clone(),
            attempt: occ.attempt,
            consumer: self.consumer_id.clone(),
            started_at,
            duration: took,
            outcome,
            error,
        }
    }
}

/// When an attempt started and how long it ran, for its run history entry.
struct Attempted {
    started_at: DateTime<Utc>,
    took: Duration,
}

/// The instant after which `occ` must not start: the message's, else the job's `deadline`
/// after the scheduled time.
fn start_deadline(occ: &Occurrence, job: &Job) -> Option<DateTime<Utc>> {
    occ.deadline.or_else(|| {
        job.deadline
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .map(|d| occ.scheduled_at + d)
    })
}
