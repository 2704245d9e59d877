//! Processing one delivery, from decode to the recorded outcome.
//!
//! Order of a delivery's life (ack-early, see `docs/consumer.md`):
//! 1. [`admission::admit`]: unauthenticated, malformed, unknown job, no handler →
//!    dead-letter, then ack (an occurrence of a deleted runtime job ends `cancelled`).
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
//!    The lease runs from when the claim was sent: one answered late is renewed before its
//!    handler starts, and not started when another consumer took it over meanwhile
//!    (`crate::attempt`).
//!    A claim the ledger granted held ([`ExecutionLease::held`]: an `allow` job outside any
//!    pool, on Redis) stored no body: its delivery stays unacked while the attempt runs
//!    (the broker redelivers it if this consumer dies, and the ledger keeps it then), and
//!    is acked once the end is recorded, or once [`Ledger::keep`] kept the message for a
//!    longer run: after [`KEEP_BUSY`] while other deliveries are in flight here (their
//!    acks wait behind it), else after [`KEEP_AFTER`] (a tenth of the lease at most);
//!    requeued when neither happened ([`Held`]).
//! 5. The outcome is recorded (fenced by the claim) before anything that follows it: the
//!    retry message, the dead letter's ledger record, the release at shutdown. A follow-up
//!    message is stored in the record, so the reaper republishes it if this consumer dies.
//!    One [`Verdict`] carries the end throughout: the records that carry its state,
//!    outcome, error and follow-up are built from it ([`crate::outcome`]); the ledger
//!    appends the run history entry (as `lost` when the claim was fenced or given up), the
//!    consumer never writes the history itself.
//!
//! Owns: the order of one delivery's I/O (ack, claim, run, record, follow-up, dead letter)
//! and what it logs and counts. What a body is, is admission's; what a claim asks,
//! `crate::claim`'s; what an end is recorded as, `crate::outcome`'s. The ledger's own
//! record types are named by path here (`ledger::End`, `ledger::Ended`, `ledger::Settle`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, Delivery};
use cronq_shared::config::{Config, Job, Overlap};
use cronq_shared::jobs::JobStore;
use cronq_shared::ledger::{self, Claim, ClaimOutcome, ExecutionLease, Ledger};
use cronq_shared::message::Occurrence;
use cronq_shared::retry::{Backoff, retry};
use cronq_shared::signing::{self, Keyring};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio_util::sync::CancellationToken;

use crate::admission::{self, Admitted, Reject, Rejected};
use crate::attempt::{Supervision, supervise};
use crate::claim;
use crate::dead_letter::{self, publish};
use crate::handler::{Capture, Handlers, Runner};
use crate::outcome::{self, Verdict};
use crate::reaper::republish;
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

/// How long a held claim's attempt runs before its message is kept in the ledger and its
/// delivery acked (a tenth of the lease when that is shorter), while no other delivery is
/// in flight on this consumer: most runs end before, and cost the ledger no body; a long
/// one never meets the broker's `consumer_timeout`.
const KEEP_AFTER: Duration = Duration::from_secs(1);

/// The same while other deliveries are in flight on this consumer: below the broker's
/// wait for a delivery that holds up the acks of the ones after it (the RabbitMQ settler
/// acks a channel's deliveries in order, with `multiple`, and sends an ack held up for
/// 100 ms on its own: `backends/rabbitmq/src/broker/settle.rs`), so that a run of a few
/// hundred ms does not turn the acks of every delivery behind it into a frame each. A
/// run longer than this costs one `keep`, as every claim did before held claims.
const KEEP_BUSY: Duration = Duration::from_millis(50);

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
    /// Deliveries being processed now ([`Worker::process`]): a held claim is kept sooner
    /// while it is not alone ([`KEEP_BUSY`]).
    pub(crate) in_flight: AtomicUsize,
}

/// One delivery counted in [`Worker::in_flight`] until dropped.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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
        let _counted = InFlight::enter(&self.in_flight);
        if d.redelivered {
            telemetry::redelivery();
        }
        let config = self.config();
        let resolve = |job: &Job| Runner::resolve(job, &self.handlers, &self.http);
        let mut admitted =
            match admission::admit(&d.body, self.keyring.as_deref(), &config, resolve) {
                Ok(admitted) => admitted,
                Err(rejected) if matches!(rejected.reject, Reject::UnknownJob(_)) => {
                    return self.unknown(&d, rejected, &config, &shutdown).await;
                }
                Err(rejected) => return self.reject(&d, &rejected).await,
            };
        let (occ, job) = (&admitted.occ, admitted.job);
        if let Some(missed) = claim::missed(occ, job) {
            return self.settle(&d, occ, job, missed, &shutdown).await;
        }
        let claim = claim::of(occ, job, &d.body, self.lease, self.hold, &self.consumer_id);
        let span = Step::claim(occ, &job.queue, &self.consumer_id);
        let Some((claimed, sent)) = self.claim(&claim, &d, &shutdown).await else {
            return;
        };
        span.claimed(&claimed, &mut admitted.occ);
        self.on_claim(claimed, sent, d, admitted, &abort, &shutdown)
            .await;
    }

    /// An occurrence of a job this consumer does not know: of a runtime job deleted (while
    /// this consumer ran: its view keeps no deleted job, `crate::view`; before it started;
    /// or within one poll of the job's creation), as the job store's history says, it ends
    /// `cancelled` ("job deleted"); anything else is dead-lettered as unknown.
    /// While the store cannot be read, the delivery is requeued.
    async fn unknown(
        &self,
        d: &Delivery,
        rejected: Box<Rejected>,
        config: &Config,
        shutdown: &CancellationToken,
    ) {
        let (Some(store), Some(occ)) = (&self.jobs, &rejected.occ) else {
            return self.reject(d, &rejected).await;
        };
        let name = &occ.job;
        let history = match store.history(name).await {
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
        match (deleted, job) {
            (true, Some(job)) => {
                let verdict = Verdict::Cancelled {
                    why: JOB_DELETED.to_owned(),
                };
                self.settle(d, occ, &job, verdict, shutdown).await;
            }
            _ => self.reject(d, &rejected).await,
        }
    }

    /// Acts on what the claim decided: run it, or settle, or leave it waiting. `sent` is
    /// when the claim that was answered was sent: a granted lease runs from then.
    async fn on_claim(
        &self,
        claimed: ClaimOutcome,
        sent: tokio::time::Instant,
        d: Delivery,
        admitted: Admitted<'_, Runner>,
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
                let skipped = Verdict::Skipped {
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
                let cancelled = Verdict::Cancelled {
                    why: outcome::replaced_by(&by),
                };
                self.settle(&d, &occ, job, cancelled, shutdown).await;
            }
            ClaimOutcome::Claimed { lease, takeover } => {
                if takeover {
                    tracing::info!(job = %occ.job, key = %occ.key, attempt = occ.attempt, "running an occurrence whose previous owner stopped");
                }
                let held = if lease.held {
                    Some(Held { d, kept: false })
                } else {
                    ack(&d, occ.job.as_str()).await;
                    drop(d);
                    None
                };
                let granted = Granted { lease, sent };
                self.execute(runner, occ, job, granted, held, abort).await;
            }
        }
    }

    /// Claims, retrying while the store is unreachable. While it is, nothing runs and
    /// nothing is acked: the delivery is held unacked (requeueing would spend the queue's
    /// delivery limit). With the outcome, when the try that was answered was sent; `None`
    /// when shutdown came first (the delivery was requeued).
    async fn claim(
        &self,
        claim: &Claim,
        d: &Delivery,
        shutdown: &CancellationToken,
    ) -> Option<(ClaimOutcome, tokio::time::Instant)> {
        let mut sent = tokio::time::Instant::now();
        let claimed = retry(
            CLAIM_RETRY,
            shutdown,
            || {
                sent = tokio::time::Instant::now();
                self.ledger.claim(claim)
            },
            |r| tracing::warn!(job = %claim.job, key = %claim.key, error = %r.error, "the idempotency store did not take the claim (unreachable, or refused: see the error): holding the delivery unacked and trying again; nothing runs until it does"),
        )
        .await;
        match claimed {
            Ok(outcome) => Some((outcome, sent)),
            Err(_) => {
                requeue(d).await;
                None
            }
        }
    }

    /// Dead-letters a delivery that cannot run (named by what of it decoded), then acks it;
    /// requeues it when the dead letter does not get through.
    async fn reject(&self, d: &Delivery, rejected: &Rejected) {
        let (occ, reject) = (rejected.occ.as_ref(), &rejected.reject);
        let config = self.config();
        let label = occ
            .filter(|o| config.job(o.job.as_str()).is_some())
            .map_or(telemetry::UNKNOWN_JOB.to_owned(), |o| o.job.to_string());
        let letter = dead_letter::letter(&d.body, occ, &d.queue, 0, reject.reason(), None);
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

    /// Records `verdict` (missed, skipped, cancelled) without running, then acks.
    async fn settle(
        &self,
        d: &Delivery,
        occ: &Occurrence,
        job: &Job,
        verdict: Verdict,
        shutdown: &CancellationToken,
    ) {
        let span = Step::end(occ, &job.queue, &self.consumer_id);
        let settle = verdict.settlement(occ, job, &self.consumer_id, Utc::now());
        match self.ledger.settle(&settle).await {
            Ok(ledger::Ended {
                recorded: true,
                woken,
            }) => {
                let outcome = verdict.outcome();
                span.ended(outcome);
                tracing::info!(job = %occ.job, key = %occ.key, outcome = %outcome, reason = settle.error.as_deref().unwrap_or(""), "occurrence not run");
                self.metrics.attempt(occ.job.as_str(), outcome);
                ack(d, occ.job.as_str()).await;
                if let Some(woken) = woken {
                    republish(&*self.broker, &self.config(), woken).await;
                }
            }
            Ok(ledger::Ended {
                recorded: false, ..
            }) => {
                self.metrics.duplicate(occ.job.as_str());
                ack(d, occ.job.as_str()).await;
            }
            Err(err) => {
                tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "the idempotency store did not take the settlement (unreachable, or refused: see the error): requeueing");
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
        granted: Granted,
        mut held: Option<Held>,
        abort: &CancellationToken,
    ) {
        let Granted { lease, sent } = granted;
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
            renewed: sent,
            lease_for: self.lease,
            beat,
            timeout: job.timeout,
            abort,
            cancels: self.cancels.clone(),
        };
        let capture = Arc::new(Capture::new(self.outputs.as_ref().map_or(0, |o| o.limit)));
        let span = Step::execute(&occ, &job.queue, &self.consumer_id);
        let run = supervise(runner, span.for_handler(&occ), sup, Arc::clone(&capture));
        let exit = match held.as_mut() {
            None => run.await,
            Some(held) => {
                let keep = Keep {
                    ledger: &*self.ledger,
                    lease: &lease,
                    lease_for: self.lease,
                    retention: job.retention,
                    in_flight: &self.in_flight,
                };
                held.keep_while(run, &keep).await
            }
        };
        span.executed(&exit);
        let took = t0.elapsed();
        self.keep_output(&occ, &capture).await;
        self.metrics.duration(occ.job.as_str(), took);
        let verdict = outcome::classify(job, occ.attempt, exit);
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
        let verdict = tokio::select! {
            verdict = self.conclude(&occ, job, &lease, verdict, &attempt) => verdict,
            _ = keepalive => unreachable!("the keepalive loop never ends"),
        };
        if let Some(held) = held {
            // A verdict that states nothing is one the ledger did not record (lost).
            held.settle(verdict.state().is_some(), occ.job.as_str())
                .await;
        }
        let outcome = verdict.outcome();
        span.ended(outcome);
        if verdict == Verdict::Succeeded {
            tracing::info!(job = %occ.job, key = %occ.key, attempt = occ.attempt, elapsed_ms = took.as_millis() as u64, "attempt succeeded");
        } else {
            tracing::warn!(job = %occ.job, key = %occ.key, attempt = occ.attempt, elapsed_ms = took.as_millis() as u64, outcome = %outcome, error = verdict.error().as_deref().unwrap_or(""), "attempt did not succeed");
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

    /// Records `verdict` (a failure once its dead letter is confirmed) with its run, then
    /// sends the message that follows it. Returns the verdict as it stands: lost when it was
    /// not recorded (fenced, given up, or the store stayed unreachable).
    async fn conclude(
        &self,
        occ: &Occurrence,
        job: &Job,
        lease: &ExecutionLease,
        verdict: Verdict,
        attempt: &Attempted,
    ) -> Verdict {
        let verdict = match verdict {
            Verdict::Failed { error } => self.dead_letter(occ, job, error).await,
            verdict => verdict,
        };
        let follow = verdict.follow_up(occ, job, Utc::now());
        let run = verdict.run(occ, &self.consumer_id, attempt.started_at, attempt.took);
        let record = verdict.record(job, follow.as_ref(), self.hold, run);
        if !self.complete(lease, &record).await {
            if record.state.is_some() {
                tracing::warn!(job = %occ.job, key = %occ.key, attempt = occ.attempt, "this consumer lost its claim: another consumer runs the occurrence again; outcome not recorded");
            }
            return verdict.lost();
        }
        if let Some(out) = follow
            && let Err(err) = publish(&*self.broker, out).await
        {
            if matches!(verdict, Verdict::Retry { .. }) {
                tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "cannot publish the retry; the reaper republishes it later");
            } else {
                tracing::warn!(job = %occ.job, key = %occ.key, error = %err, "cannot republish an interrupted occurrence; the reaper does it later");
            }
        }
        verdict
    }

    /// Dead-letters a failed occurrence before its end is recorded: a crash in between
    /// reruns the attempt (at-least-once) instead of losing the letter. When the letter does
    /// not get through, the claim is given up (lost) so that the occurrence runs again.
    async fn dead_letter(&self, occ: &Occurrence, job: &Job, error: String) -> Verdict {
        let body = signing::seal_with(self.keyring.as_deref(), occ.encode());
        let letter = dead_letter::letter(
            &body,
            Some(occ),
            &job.queue,
            occ.attempt,
            "failed".to_owned(),
            Some(error.clone()),
        );
        let failed = Verdict::Failed { error };
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
    async fn complete(&self, lease: &ExecutionLease, end: &ledger::End) -> bool {
        let ended = retry(
            COMPLETE_RETRY,
            &CancellationToken::new(),
            || self.ledger.complete(lease, end),
            |r| tracing::warn!(job = %lease.job, key = %lease.key, error = %r.error, "cannot record the attempt's end, retrying"),
        )
        .await;
        match ended {
            Ok(ledger::Ended { recorded, woken }) => {
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
}

/// When an attempt started and how long it ran, for its run history entry.
struct Attempted {
    started_at: DateTime<Utc>,
    took: Duration,
}

/// A claim granted: its lease, and when the claim was sent (the lease runs from then).
struct Granted {
    lease: ExecutionLease,
    sent: tokio::time::Instant,
}

/// What keeping a held claim's message needs ([`Held::keep_while`]).
struct Keep<'a> {
    ledger: &'a dyn Ledger,
    lease: &'a ExecutionLease,
    lease_for: Duration,
    retention: Duration,
    /// [`Worker::in_flight`]: this delivery is one of them.
    in_flight: &'a AtomicUsize,
}

impl Keep<'_> {
    /// [`KEEP_AFTER`], a tenth of the lease at most: when a lone run is kept, and how long
    /// a keep the store did not answer waits before it is tried again.
    fn after(&self) -> Duration {
        KEEP_AFTER.min(self.lease_for / 10)
    }

    /// Waits until the message should be kept: [`KEEP_BUSY`] into the run while other
    /// deliveries are in flight here (looked at every [`KEEP_BUSY`]), else
    /// [`Keep::after`].
    async fn due(&self) {
        let after = self.after();
        let started = tokio::time::Instant::now();
        loop {
            let busy = self.in_flight.load(Ordering::Relaxed) > 1;
            let left = after.saturating_sub(started.elapsed());
            if (busy && started.elapsed() >= KEEP_BUSY.min(after)) || left.is_zero() {
                return;
            }
            tokio::time::sleep(KEEP_BUSY.min(left)).await;
        }
    }
}

/// The delivery of a claim granted held ([`ExecutionLease::held`]), unacked while nothing
/// in the ledger would bring its occurrence back if this consumer stopped.
struct Held {
    d: Delivery,
    /// The ledger keeps the message ([`Ledger::keep`]), and the delivery was acked.
    kept: bool,
}

impl Held {
    /// Runs `run` to its end; once it has run long enough ([`Keep::due`]), keeps the
    /// message in the ledger and acks the delivery, tried again every tenth of the lease
    /// (a second at most) while the store does not answer. A claim found lost is not kept:
    /// its end is not recorded, and the delivery is requeued ([`Held::settle`]).
    async fn keep_while<F: std::future::Future>(&mut self, run: F, keep: &Keep<'_>) -> F::Output {
        tokio::pin!(run);
        let pause = keep.after();
        let d = &self.d;
        let keeping = async {
            keep.due().await;
            loop {
                match keep
                    .ledger
                    .keep(keep.lease, keep.lease_for, &d.body, keep.retention)
                    .await
                {
                    Ok(ledger::Heartbeat::Lost) => return false,
                    Ok(_) => return true,
                    Err(err) => {
                        tracing::warn!(job = %keep.lease.job, key = %keep.lease.key, error = %err, "cannot keep a running attempt's message in the idempotency store: its delivery stays unacked");
                        tokio::time::sleep(pause).await;
                    }
                }
            }
        };
        let kept = tokio::select! {
            out = &mut run => return out,
            kept = keeping => kept,
        };
        if kept {
            ack(&self.d, keep.lease.job.as_str()).await;
            self.kept = true;
        }
        run.await
    }

    /// After the end: acked once it is `recorded` (unless the message was kept and the
    /// delivery acked then); else requeued, so that the broker delivers it again and the
    /// ledger decides (a takeover once the lease lapsed, or the message kept for the
    /// reaper).
    async fn settle(self, recorded: bool, job: &str) {
        if self.kept {
            return;
        }
        if recorded {
            ack(&self.d, job).await;
        } else {
            requeue(&self.d).await;
        }
    }
}
