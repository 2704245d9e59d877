//! Processing one delivery, from decode to the recorded outcome.
//!
//! Order of a delivery's life (ack-early, see `docs/consumer.md`):
//! 1. [`executor::admit`]: malformed, unknown job, no handler → dead-letter, then ack.
//! 2. Past its start deadline → `missed`, then ack.
//! 3. [`Ledger::claim`] (idempotency + overlap, one atomic step): duplicate → ack without
//!    running; busy → `skipped` (skip, an earlier occurrence runs); waiting (queue,
//!    replace, skip behind a later occurrence) → recorded in the ledger with its message,
//!    then acked: it is published again when its turn comes (or by the
//!    reaper), never parked on a broker timer; superseded by a newer occurrence (replace),
//!    or by an operator's cancel its previous owner never carried out → `cancelled`; store
//!    unreachable → hold the delivery unacked and retry with backoff:
//!    nothing runs, nothing is acked.
//! 4. Claimed: the message body is stored in the claim, so the delivery is acked at once.
//!    The broker's `consumer_timeout` can then never close the channel under a long job, and
//!    the claim's lease (renewed by heartbeats) decides instead whether it must run again.
//! 5. The outcome is recorded (fenced by the claim) before anything that follows it: the
//!    retry message, the dead letter's ledger record, the release at shutdown. A follow-up
//!    message is stored in the record, so the reaper republishes it if this consumer dies.
//!    One [`AttemptEnd`] carries the end throughout: its state, outcome, error and
//!    follow-up are read off it; the ledger appends the run history entry (as `lost` when
//!    the claim was fenced or given up), the consumer never writes the history itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, Delivery};
use cronq_shared::config::{Config, Job, Overlap};
use cronq_shared::jobs::JobStore;
use cronq_shared::ledger::{
    Claim, ClaimOutcome, End, Ended, ExecutionLease, FollowUp, Ledger, PoolSlot, Settle,
};
use cronq_shared::message::Occurrence;
use cronq_shared::names::JobName;
use cronq_shared::retry::{Backoff, retry};
use cronq_shared::runlog::Run;
use cronq_shared::signing::{self, Keyring};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio_util::sync::CancellationToken;

use crate::attempt::{Supervision, supervise};
use crate::dead_letter::{self, publish};
use crate::executor::{self, AttemptEnd, Reject};
use crate::handler::{Capture, Runner};
use crate::reaper::republish;
use crate::registry::Handlers;
use crate::telemetry;
use crate::traces::Step;

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

/// The reason recorded for a queued occurrence of a runtime job deleted since
/// (`cronq job delete`): it ends `cancelled`, never runs, and is not dead-lettered.
const JOB_DELETED: &str = "job deleted";

/// How long a delivery whose settlement failed (the store unreachable) is held back after
/// its requeue before this task ends, so a redelivery does not spin on a dead store.
const SETTLE_PAUSE: Duration = Duration::from_millis(500);

/// Everything a delivery's processing needs; shared by all tasks of a consumer.
pub(crate) struct Worker {
    /// The config in force: a reload (SIGHUP, runtime jobs) replaces it; each delivery
    /// takes a snapshot.
    pub(crate) config: watch::Receiver<Arc<Config>>,
    pub(crate) broker: Arc<dyn Broker>,
    /// Also the one writer of the run history (`cronq_shared::ledger`).
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) handlers: Handlers,
    pub(crate) http: reqwest::Client,
    /// Execution lease.
    pub(crate) lease: Duration,
    /// How long a follow-up message may stay unclaimed before the reaper republishes it.
    pub(crate) hold: Duration,
    /// This consumer's name in the run history.
    pub(crate) consumer_id: String,
    /// With a keyring, only messages sealed by one of its keys run, and the dead letters
    /// of failed runs are sealed by it (so `dlq replay` can tell them from forged ones).
    pub(crate) keyring: Option<Arc<Keyring>>,
    /// This consumer's per-job metric handles.
    pub(crate) metrics: telemetry::Metrics,
    /// Where attempts' outputs are kept, if anywhere.
    pub(crate) outputs: Option<crate::service::Outputs>,
    /// The runtime jobs, to tell an occurrence of a deleted job from an unknown one.
    pub(crate) jobs: Option<Arc<dyn JobStore>>,
    /// The attempts running now of jobs with an `sla` on their start or duration.
    pub(crate) running: crate::running::Running,
    /// The ledger's cancel count (`crate::cancels`): when it moves, running attempts renew
    /// their claims at once, and so learn of a cancel.
    pub(crate) cancels: watch::Receiver<u64>,
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
        self.handlers.serves(job) || job.handler.is_some()
    }

    /// The config in force now.
    pub(crate) fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
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
        let config = self.config();
        let mut admitted = match self.admit(&d, &config) {
            Ok(admitted) => admitted,
            Err(Reject::UnknownJob(name)) => {
                return self.unknown(&d, name, &config, &shutdown).await;
            }
            Err(reject) => return self.reject(&d, &reject).await,
        };
        let (occ, job) = (&admitted.occ, admitted.job);
        if let Some(missed) = missed(occ, job) {
            return self.settle(&d, occ, job, missed, &shutdown).await;
        }
        if config.deleted.contains(&job.name) {
            let end = AttemptEnd::Cancelled {
                why: JOB_DELETED.to_owned(),
            };
            return self.settle(&d, occ, job, end, &shutdown).await;
        }
        let claim = self.claim_of(occ, job, &d);
        let span = Step::claim(occ, &job.queue, &self.consumer_id);
        let Some(claimed) = self.claim(&claim, &d, &shutdown).await else {
            return;
        };
        span.claimed(&claimed, &mut admitted.occ);
        self.on_claim(claimed, d, admitted, &abort, &shutdown).await;
    }

    /// An occurrence of a job this consumer does not know: of a runtime job deleted before
    /// this consumer saw the delete (it started after it, or its poll went past the job's
    /// whole life), as the job store's history says, it ends `cancelled` ("job deleted")
    /// like one of a job deleted while it ran; anything else is dead-lettered as unknown.
    /// While the store cannot be read, the delivery is requeued.
    async fn unknown(
        &self,
        d: &Delivery,
        name: JobName,
        config: &Config,
        shutdown: &CancellationToken,
    ) {
        let Some(store) = &self.jobs else {
            return self.reject(d, &Reject::UnknownJob(name)).await;
        };
        let history = match store.history(&name).await {
            Ok(history) => history,
            Err(err) => {
                tracing::warn!(job = %name, queue = %d.queue, error = %err, "cannot read the job store to tell whether an unknown job was deleted: requeueing");
                requeue(d).await;
                shutdown
                    .run_until_cancelled(tokio::time::sleep(SETTLE_PAUSE))
                    .await;
                return;
            }
        };
        let deleted = history.last().is_some_and(|r| r.spec.is_none());
        // Its last definition, resolved here, for the retention of its records.
        let job = history
            .iter()
            .rev()
            .find_map(|r| r.spec.as_deref())
            .and_then(|spec| config.runtime_job(spec).ok());
        let opened = match self.keyring.as_deref() {
            Some(keyring) => keyring.open(&d.body).ok(),
            None => Some(&d.body[..]),
        };
        let occ = opened.and_then(|body| Occurrence::decode(body).ok());
        match (deleted, job, occ) {
            (true, Some(job), Some(occ)) => {
                let end = AttemptEnd::Cancelled {
                    why: JOB_DELETED.to_owned(),
                };
                self.settle(d, &occ, &job, end, shutdown).await;
            }
            _ => self.reject(d, &Reject::UnknownJob(name)).await,
        }
    }

    /// Decodes a delivery into a runnable occurrence of a configured job.
    fn admit<'c>(&self, d: &Delivery, config: &'c Config) -> Result<Admitted<'c>, Reject> {
        let (occ, job) = executor::admit(&d.body, self.keyring.as_deref(), config, |job| {
            self.has_handler(job)
        })?;
        let runner = Runner::resolve(job, &self.handlers, &self.http)
            .ok_or_else(|| Reject::NoHandler(job.name.clone()))?;
        Ok(Admitted { occ, job, runner })
    }

    /// The claim of one attempt of `occ`, carrying the delivery's body for the reaper, under a
    /// token of its own that every try of this claim reuses.
    fn claim_of(&self, occ: &Occurrence, job: &Job, d: &Delivery) -> Claim {
        Claim {
            key: occ.key.clone(),
            job: occ.job.clone(),
            queue: job.queue.clone(),
            attempt: occ.attempt,
            overlap: executor::effective_overlap(job.overlap, occ.trigger),
            max_concurrent: job.max_concurrent.unwrap_or(1),
            pool: Self::pool_of(job),
            lease: self.lease,
            retention: job.retention,
            body: d.body.clone(),
            scheduled_at: occ.scheduled_at,
            recheck: self.recheck(occ, job),
            consumer: self.consumer_id.clone(),
            token: cronq_shared::ledger::claim_token(),
        }
    }

    /// The pool `job` runs in, with its size as the job was resolved with.
    fn pool_of(job: &Job) -> Option<PoolSlot> {
        let pool = job.pool.as_ref()?;
        Some(PoolSlot {
            name: pool.name.to_string(),
            size: pool.size,
        })
    }

    /// Acts on what the claim decided: run it, or settle, or leave it waiting.
    async fn on_claim(
        &self,
        claimed: ClaimOutcome,
        d: Delivery,
        admitted: Admitted<'_>,
        abort: &CancellationToken,
        shutdown: &CancellationToken,
    ) {
        let Admitted { occ, job, runner } = admitted;
        match claimed {
            ClaimOutcome::Duplicate { state, attempt } => {
                tracing::debug!(job = %occ.job, key = %occ.key, attempt = occ.attempt, state = %state, recorded_attempt = attempt, "duplicate delivery acked without running");
                self.metrics.duplicate(occ.job.as_str());
                ack(&d, occ.job.as_str()).await;
            }
            ClaimOutcome::Busy { holder } => {
                let skipped = AttemptEnd::Skipped {
                    why: format!("{holder} was still running"),
                };
                self.settle(&d, &occ, job, skipped, shutdown).await;
            }
            ClaimOutcome::Waiting { holder, woken } => {
                tracing::debug!(job = %occ.job, key = %occ.key, holder = %holder, "waiting for a slot of its job or its pool (holder: a run holding one, or the earlier waiter whose turn it is)");
                ack(&d, occ.job.as_str()).await;
                if let Some(woken) = woken {
                    republish(&*self.broker, &self.config(), woken).await;
                }
            }
            ClaimOutcome::Superseded { by } => {
                let cancelled = AttemptEnd::Cancelled {
                    why: executor::replaced_by(&by),
                };
                self.settle(&d, &occ, job, cancelled, shutdown).await;
            }
            ClaimOutcome::Claimed { lease, takeover } => {
                if takeover {
                    tracing::info!(job = %occ.job, key = %occ.key, attempt = occ.attempt, "running an occurrence whose previous owner stopped");
                }
                ack(&d, occ.job.as_str()).await;
                drop(d);
                self.execute(runner, occ, job, lease, abort).await;
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
        let config = self.config();
        let label = occ
            .as_ref()
            .filter(|o| config.job(o.job.as_str()).is_some())
            .map_or(telemetry::UNKNOWN_JOB.to_owned(), |o| o.job.to_string());
        let letter = dead_letter::letter(&d.body, occ.as_ref(), &d.queue, 0, reject.reason(), None);
        match dead_letter::send(&*self.broker, &letter).await {
            Ok(()) => {
                tracing::warn!(job = %label, key = letter.key.as_deref().unwrap_or(""), queue = %d.queue, reason = %letter.reason, "dead-lettered a message that cannot run");
                self.metrics.dead_lettered(&label);
                telemetry::refused(reject.label());
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

    /// Records `end` (missed, skipped, cancelled) without running, then acks.
    async fn settle(
        &self,
        d: &Delivery,
        occ: &Occurrence,
        job: &Job,
        end: AttemptEnd,
        shutdown: &CancellationToken,
    ) {
        let span = Step::end(occ, &job.queue, &self.consumer_id);
        let settle = Settle {
            key: occ.key.clone(),
            job: occ.job.clone(),
            attempt: occ.attempt,
            state: end
                .state()
                .expect("an occurrence settled without running ends in a recorded state"),
            error: end.error(),
            retention: job.retention,
            run: Some(self.run(occ, Utc::now(), Duration::ZERO, &end)),
        };
        match self.ledger.settle(&settle).await {
            Ok(Ended {
                recorded: true,
                woken,
            }) => {
                let outcome = end.outcome();
                span.ended(outcome);
                tracing::info!(job = %occ.job, key = %occ.key, outcome = %outcome, reason = settle.error.as_deref().unwrap_or(""), "occurrence not run");
                self.metrics.attempt(occ.job.as_str(), outcome);
                ack(d, occ.job.as_str()).await;
                if let Some(woken) = woken {
                    republish(&*self.broker, &self.config(), woken).await;
                }
            }
            Ok(Ended {
                recorded: false, ..
            }) => {
                self.metrics.duplicate(occ.job.as_str());
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
        lease: ExecutionLease,
        abort: &CancellationToken,
    ) {
        let started_at = Utc::now();
        let t0 = Instant::now();
        let _listed = job
            .sla
            .watches_runs()
            .then(|| self.running.enter(&occ, started_at));
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
            cancels: self.cancels.clone(),
        };
        let capture = Arc::new(Capture::new(self.outputs.as_ref().map_or(0, |o| o.limit)));
        let span = Step::execute(&occ, &job.queue, &self.consumer_id);
        let ending = supervise(runner, span.for_handler(&occ), sup, Arc::clone(&capture)).await;
        span.executed(&ending);
        let took = t0.elapsed();
        self.keep_output(&occ, &capture).await;
        self.metrics.duration(occ.job.as_str(), took);
        let end = executor::classify(job, occ.attempt, ending);
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
        let span = Step::end(&occ, &job.queue, &self.consumer_id);
        let end = tokio::select! {
            end = self.conclude(&occ, job, &lease, end, &attempt) => end,
            _ = keepalive => unreachable!("the keepalive loop never ends"),
        };
        let outcome = end.outcome();
        span.ended(outcome);
        if end == AttemptEnd::Succeeded {
            tracing::info!(job = %occ.job, key = %occ.key, attempt = occ.attempt, elapsed_ms = took.as_millis() as u64, "attempt succeeded");
        } else {
            tracing::warn!(job = %occ.job, key = %occ.key, attempt = occ.attempt, elapsed_ms = took.as_millis() as u64, outcome = %outcome, error = end.error().as_deref().unwrap_or(""), "attempt did not succeed");
        }
        self.metrics.attempt(occ.job.as_str(), outcome);
    }

    /// Keeps what the attempt printed or was answered, before its end is recorded (so the
    /// run, once listed, has it). A store that fails loses the output, not the run.
    async fn keep_output(&self, occ: &Occurrence, capture: &Capture) {
        let (Some(outputs), Some(output)) = (&self.outputs, capture.take()) else {
            return;
        };
        if let Err(err) = outputs
            .runlog
            .keep_output(&occ.key, occ.attempt, &output)
            .await
        {
            tracing::warn!(job = %occ.job, key = %occ.key, attempt = occ.attempt, error = %err, "cannot keep the attempt's output");
        }
    }

    /// Records `end` (a failure once its dead letter is confirmed) with its run, then sends
    /// the message that follows it. Returns the end as it stands: lost when it was not
    /// recorded (fenced, given up, or the store stayed unreachable).
    async fn conclude(
        &self,
        occ: &Occurrence,
        job: &Job,
        lease: &ExecutionLease,
        end: AttemptEnd,
        attempt: &Attempted,
    ) -> AttemptEnd {
        let end = match end {
            AttemptEnd::Failed { error } => self.dead_letter(occ, job, error).await,
            end => end,
        };
        let follow = end.follow_up(occ, job, Utc::now());
        let record = End {
            state: end.state(),
            error: end.error(),
            retention: job.retention,
            next: follow.as_ref().map(|out| FollowUp {
                attempt: out.occurrence.attempt,
                body: out.occurrence.encode(),
                within: out.delay + self.hold,
            }),
            run: Some(self.run(occ, attempt.started_at, attempt.took, &end)),
        };
        if !self.complete(lease, &record).await {
            if record.state.is_some() {
                tracing::warn!(job = %occ.job, key = %occ.key, attempt = occ.attempt, "this consumer lost its claim: another consumer runs the occurrence again; outcome not recorded");
            }
            return end.lost();
        }
        if let Some(out) = follow
            && let Err(err) = publish(&*self.broker, out).await
        {
            if matches!(end, AttemptEnd::Retry { .. }) {
                tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "cannot publish the retry; the reaper republishes it later");
            } else {
                tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "cannot republish an interrupted occurrence; the reaper does it later");
            }
        }
        end
    }

    /// Dead-letters a failed occurrence before its end is recorded: a crash in between
    /// reruns the attempt (at-least-once) instead of losing the letter. When the letter does
    /// not get through, the claim is given up (lost) so that the occurrence runs again.
    async fn dead_letter(&self, occ: &Occurrence, job: &Job, error: String) -> AttemptEnd {
        let body = signing::seal_with(self.keyring.as_deref(), occ.encode());
        let letter = dead_letter::letter(
            &body,
            Some(occ),
            &job.queue,
            occ.attempt,
            "failed".to_owned(),
            Some(error.clone()),
        );
        let failed = AttemptEnd::Failed { error };
        match dead_letter::send(&*self.broker, &letter).await {
            Ok(()) => {
                self.metrics.dead_lettered(occ.job.as_str());
                failed
            }
            Err(err) => {
                tracing::error!(job = %occ.job, key = %occ.key, error = %err, "cannot dead-letter a failed occurrence: leaving its claim to lapse so it runs again");
                failed.lost()
            }
        }
    }

    /// Records an attempt's end, retrying while the store is unreachable, and publishes the
    /// waiter whose turn it is now. Whether the end was recorded: not when fenced or given
    /// up, nor when the store stayed unreachable (logged; the lease then lapses and the
    /// reaper hands the occurrence to another consumer).
    async fn complete(&self, lease: &ExecutionLease, end: &End) -> bool {
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
                    republish(&*self.broker, &self.config(), woken).await;
                }
                recorded
            }
            Err(gave_up) => {
                tracing::error!(job = %lease.job, key = %lease.key, error = %gave_up.into_last(), "cannot record the attempt's end: the occurrence runs again after its lease lapses");
                false
            }
        }
    }

    /// The run history entry of an attempt of `occ` run (or settled) by this consumer.
    fn run(
        &self,
        occ: &Occurrence,
        started_at: DateTime<Utc>,
        took: Duration,
        end: &AttemptEnd,
    ) -> Run {
        Run {
            key: occ.key.clone(),
            job: occ.job.clone(),
            attempt: occ.attempt,
            consumer: self.consumer_id.clone(),
            started_at,
            duration: took,
            outcome: end.outcome(),
            error: end.error(),
            published_at: Some(occ.published_at),
        }
    }
}

/// A delivery that decoded into an occurrence of a configured job that can run here.
struct Admitted<'c> {
    occ: Occurrence,
    job: &'c Job,
    runner: Runner,
}

/// When an attempt started and how long it ran, for its run history entry.
struct Attempted {
    started_at: DateTime<Utc>,
    took: Duration,
}

/// `Missed` when `occ` is a first attempt that is past its start deadline.
fn missed(occ: &Occurrence, job: &Job) -> Option<AttemptEnd> {
    let deadline = start_deadline(occ, job).filter(|_| occ.attempt <= 1)?;
    (Utc::now() > deadline).then(|| AttemptEnd::Missed {
        why: format!(
            "could not start before its deadline {}",
            deadline.to_rfc3339()
        ),
    })
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
