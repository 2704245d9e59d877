//! Supervising one running attempt: the handler runs in its own task (so a panic is caught
//! as a `JoinError`), while this loop renews the claim's lease, enforces the job's timeout,
//! and stops the handler when the claim is lost, a replacing occurrence or an operator's
//! cancel asks (a cancel is read at once: `crate::cancels`), or the shutdown grace is over.
//!
//! The lease runs from when the claim was sent. A claim answered a heartbeat period or more
//! after that (a stalled link to the store, a process frozen between its claim and its
//! start) is renewed before its handler starts: its lease may have lapsed meanwhile and the
//! reaper handed the occurrence to another consumer, which then runs it alone.
//!
//! The handler runs only while the lease holds by this process's clock. A renewal that
//! fails is tried again a twelfth of the lease later, not a period later, so that a short
//! outage of the store costs no attempt; a renewal still unanswered when the lease runs
//! out (a link that stalled: its packets dropped, not refused) stops the handler then, not
//! when the store's client gives up on the call, seconds later, while the reaper may
//! already have handed the occurrence to another consumer.

use std::sync::Arc;
use std::time::Duration;

use cronq_shared::ledger::{ExecutionLease, Heartbeat, Ledger};
use cronq_shared::message::Occurrence;
use cronq_shared::store::StoreError;
use tokio::sync::watch;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::handler::{Capture, KILL_GRACE, Runner};
use crate::outcome::{Exit, Stop};

/// How long after asking a handler to stop it is aborted: the command handler's own
/// SIGTERM → SIGKILL grace, plus slack.
const ABORT_AFTER: Duration = Duration::from_secs(KILL_GRACE.as_secs() + 1);

fn panic_message(err: tokio::task::JoinError) -> String {
    match err.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text panic payload".to_owned()),
        Err(err) => err.to_string(),
    }
}

/// What the supervisor needs besides the handler.
pub(crate) struct Supervision<'a> {
    pub(crate) ledger: &'a dyn Ledger,
    pub(crate) lease: &'a ExecutionLease,
    /// When the lease was last renewed: when the claim that granted it was sent.
    pub(crate) renewed: Instant,
    /// Execution lease length.
    pub(crate) lease_for: Duration,
    /// Heartbeat period: a third of the lease, shorter for a job that a newer occurrence
    /// may replace (the heartbeat is where a replace request is read).
    pub(crate) beat: Duration,
    /// The job's per-attempt timeout.
    pub(crate) timeout: Duration,
    /// Cancelled when the shutdown grace is over.
    pub(crate) abort: &'a CancellationToken,
    /// The ledger's cancel count: when it moves, the claim is renewed at once (an
    /// operator's cancel is read there).
    pub(crate) cancels: watch::Receiver<u64>,
}

/// What a renewal of the lease found.
enum Renewal {
    /// The lease is held, now counted from when the renewal was sent; with why the attempt
    /// must stop when a newer occurrence or an operator's cancel asks it to.
    Held(Option<Stop>),
    /// The claim, or a slot it held, belongs to someone else now.
    Lost,
    /// The store did not answer: the lease still counts from the last renewal that was
    /// answered.
    Unanswered(StoreError),
}

/// Renews the lease of the attempt `sup` supervises.
async fn renew(sup: &Supervision<'_>) -> Renewal {
    match sup.ledger.heartbeat(sup.lease, sup.lease_for).await {
        Ok(Heartbeat::Held) => Renewal::Held(None),
        Ok(Heartbeat::CancelRequested { by }) => Renewal::Held(Some(Stop::Replaced { by })),
        Ok(Heartbeat::Lost) => Renewal::Lost,
        Err(err) => Renewal::Unanswered(err),
    }
}

/// Logs a renewal the store did not answer: at warn, but at debug when a warning was logged
/// less than `every` ago (`warned`), so that the quicker retries of an outage log no more
/// warnings than the heartbeats did.
fn unanswered(
    sup: &Supervision<'_>,
    err: &StoreError,
    warned: &mut Option<Instant>,
    every: Duration,
) {
    let (job, key) = (&sup.lease.job, &sup.lease.key);
    if warned.is_some_and(|at| at.elapsed() < every) {
        tracing::debug!(job = %job, key = %key, error = %err, "cannot renew the execution lease");
    } else {
        tracing::warn!(job = %job, key = %key, error = %err, "cannot renew the execution lease");
        *warned = Some(Instant::now());
    }
}

/// Runs `runner` for `occ` to its end.
pub(crate) async fn supervise(
    runner: Runner,
    occ: Occurrence,
    sup: Supervision<'_>,
    capture: Arc<Capture>,
) -> Exit {
    let (job, key) = (occ.job.clone(), occ.key.clone());
    let every = sup.beat.max(Duration::from_millis(50));
    let mut renewed = sup.renewed;
    // When a renewal the store did not answer was last logged at warn.
    let mut warned = None;
    if renewed.elapsed() >= every {
        let late = renewed.elapsed();
        let sent = Instant::now();
        // The handler has not started: waiting for the answer runs nothing past the lease.
        let stop = match renew(&sup).await {
            Renewal::Held(why) => {
                renewed = sent;
                why
            }
            Renewal::Lost => Some(Stop::Lost),
            // Started only while the lease holds by this process's clock.
            Renewal::Unanswered(err) => {
                unanswered(&sup, &err, &mut warned, every);
                (renewed.elapsed() >= sup.lease_for).then_some(Stop::Lost)
            }
        };
        if let Some(why) = stop {
            tracing::info!(job = %job, key = %key, late_ms = late.as_millis() as u64, reason = ?why, "not starting an attempt whose claim was answered late");
            return Exit::Stopped(why, None);
        }
    }
    // A failed renewal is tried again a twelfth of the lease later (a quarter of the usual
    // period; at most a period), so that a store back within the lease renews it in time.
    let retry = (sup.lease_for / 12).clamp(Duration::from_millis(50), every);
    let token = CancellationToken::new();
    // Aborted when the attempt is dropped (e.g. the consumer is torn down).
    let mut task = AbortOnDropHandle::new(tokio::spawn(runner.run(
        occ,
        sup.lease.fence,
        sup.timeout,
        token.clone(),
        capture,
    )));
    let mut beat = tokio::time::interval_at(renewed + every, every);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = tokio::time::sleep(sup.timeout);
    tokio::pin!(deadline);
    // Re-armed when a stop is requested; disabled until then.
    let kill = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(kill);
    let mut stop: Option<Stop> = None;
    let mut cancels = sup.cancels.clone();
    // Only a cancel asked for from now on concerns this attempt's renewals.
    cancels.borrow_and_update();
    let mut watching = true;
    let request =
        |stop: &mut Option<Stop>, why: Stop, kill: std::pin::Pin<&mut tokio::time::Sleep>| {
            // `Lost` overrides any earlier reason: nothing may be recorded for this attempt.
            let lost = why == Stop::Lost;
            if stop.is_none() || (lost && *stop != Some(Stop::Lost)) {
                if stop.is_none() {
                    kill.reset(Instant::now() + ABORT_AFTER);
                }
                tracing::info!(job = %job, key = %key, reason = ?why, "stopping attempt");
                *stop = Some(why);
                token.cancel();
            }
        };
    let joined = loop {
        tokio::select! {
            biased;
            res = &mut task => break res,
            () = &mut kill, if stop.is_some() => {
                task.abort();
                break (&mut task).await;
            }
            () = &mut deadline, if stop.is_none() => {
                request(&mut stop, Stop::Timeout(sup.timeout), kill.as_mut());
            }
            () = sup.abort.cancelled(), if stop.is_none() => {
                request(&mut stop, Stop::Shutdown, kill.as_mut());
            }
            moved = cancels.changed(), if watching && stop.is_none() => match moved {
                // An operator cancelled something: renew now, and learn whether it was this.
                Ok(()) => beat.reset_immediately(),
                Err(_) => watching = false,
            },
            // A lost claim is not renewed: nothing may be recorded for its attempt.
            sent = beat.tick(), if stop != Some(Stop::Lost) => {
                // Past the lease's end the reaper may hand the occurrence to another
                // consumer: a renewal not answered by then stops the handler, and one due
                // after it is not sent.
                let lapses = renewed + sup.lease_for;
                let renewal = if sent < lapses {
                    tokio::time::timeout_at(lapses, renew(&sup)).await.ok()
                } else {
                    None
                };
                match renewal {
                    Some(Renewal::Held(why)) => {
                        renewed = sent;
                        if let Some(why) = why {
                            request(&mut stop, why, kill.as_mut());
                        }
                    }
                    Some(Renewal::Lost) => request(&mut stop, Stop::Lost, kill.as_mut()),
                    Some(Renewal::Unanswered(err)) => {
                        unanswered(&sup, &err, &mut warned, every);
                        beat.reset_after(retry);
                    }
                    None => {
                        tracing::warn!(job = %job, key = %key, lease_ms = sup.lease_for.as_millis() as u64, "the execution lease ran out before a renewal was answered");
                        request(&mut stop, Stop::Lost, kill.as_mut());
                    }
                }
            }
        }
    };
    match (joined, stop) {
        (Ok(Ok(())), None | Some(Stop::Shutdown)) => Exit::Returned(Ok(())),
        (Ok(res), None) => Exit::Returned(res),
        (Ok(res), Some(why)) => Exit::Stopped(why, res.err()),
        (Err(err), Some(why)) if !err.is_panic() => Exit::Stopped(why, None),
        (Err(err), Some(why @ (Stop::Lost | Stop::Replaced { .. } | Stop::Shutdown))) => {
            Exit::Stopped(why, Some(panic_message(err)))
        }
        (Err(err), _) => Exit::Panicked(panic_message(err)),
    }
}
