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
//! outage of the store costs no attempt, and never later than the lease's end, where the
//! handler is stopped. A renewal still unanswered when the lease runs out (a link that
//! stalled: its packets dropped, not refused) stops the handler then, not when the store's
//! client gives up on the call, seconds later, while the reaper may already have handed
//! the occurrence to another consumer.

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
            Renewal::Unanswered(err) => {
                unanswered(&sup, &err, &mut warned, every);
                None
            }
        };
        // Started only while the lease holds by this process's clock: not when the store
        // did not answer and the claim's lease ran out meanwhile, nor when the renewal was
        // answered after the lease it renewed ran out (counted from when it was sent).
        let stop = stop.or_else(|| (renewed.elapsed() >= sup.lease_for).then_some(Stop::Lost));
        if let Some(why) = stop {
            tracing::info!(job = %job, key = %key, late_ms = late.as_millis() as u64, reason = ?why, "not starting an attempt whose claim was answered late");
            return Exit::Stopped(why, None);
        }
    }
    // A failed renewal is tried again a twelfth of the lease later (a quarter of the usual
    // period; at most a period), so that a store back within the lease renews it in time;
    // at the lease's end at the latest.
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
                        // Never past the lease's end: the tick there sends nothing and
                        // stops the handler, not a retry later.
                        beat.reset_at((Instant::now() + retry).min(lapses));
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use cronq_shared::key::OccurrenceKey;
    use cronq_shared::ledger::{
        Cancel, Cancelled, Claim, ClaimOutcome, End, Ended, GateUse, Orphan, Record, Settle, State,
    };
    use tracing_subscriber::layer::{Context, SubscriberExt};

    use super::*;

    /// How the ledger answers one renewal: after `after`, held or refused.
    #[derive(Clone)]
    struct Answer {
        after: Duration,
        held: Option<Heartbeat>,
    }

    const HELD: Answer = Answer {
        after: Duration::ZERO,
        held: Some(Heartbeat::Held),
    };
    const LOST: Answer = Answer {
        after: Duration::ZERO,
        held: Some(Heartbeat::Lost),
    };

    /// Refused after `after`: the store unreachable.
    fn refused(after: Duration) -> Answer {
        Answer { after, held: None }
    }

    /// A ledger whose renewals answer as scripted (the last answer over and over), and
    /// which notes when each was sent. Nothing but renewals reaches it from `supervise`.
    struct Scripted {
        answers: Mutex<VecDeque<Answer>>,
        sent: Mutex<Vec<Instant>>,
    }

    impl Scripted {
        fn new(answers: &[Answer]) -> Self {
            Self {
                answers: Mutex::new(answers.iter().cloned().collect()),
                sent: Mutex::default(),
            }
        }

        fn sent(&self) -> Vec<Instant> {
            self.sent.lock().unwrap().clone()
        }
    }

    fn unused<T>() -> Result<T, StoreError> {
        unreachable!("supervise only renews")
    }

    #[async_trait::async_trait]
    impl Ledger for Scripted {
        async fn claim(&self, _: &Claim) -> Result<ClaimOutcome, StoreError> {
            unused()
        }
        async fn heartbeat(
            &self,
            _: &ExecutionLease,
            _: Duration,
        ) -> Result<Heartbeat, StoreError> {
            self.sent.lock().unwrap().push(Instant::now());
            let answer = {
                let mut answers = self.answers.lock().unwrap();
                if answers.len() > 1 {
                    answers.pop_front()
                } else {
                    answers.front().cloned()
                }
            }
            .expect("an answer scripted");
            tokio::time::sleep(answer.after).await;
            answer.held.ok_or_else(|| StoreError::Unreachable {
                store: "Redis",
                url: "redis://test".into(),
                hint: "a test refuses it",
                source: None,
            })
        }
        async fn keep(
            &self,
            _: &ExecutionLease,
            _: Duration,
            _: &[u8],
            _: Duration,
        ) -> Result<Heartbeat, StoreError> {
            unused()
        }
        async fn complete(&self, _: &ExecutionLease, _: &End) -> Result<Ended, StoreError> {
            unused()
        }
        async fn settle(&self, _: &Settle) -> Result<Ended, StoreError> {
            unused()
        }
        async fn reap(&self, _: usize, _: Duration) -> Result<Vec<Orphan>, StoreError> {
            unused()
        }
        async fn admit_replay(&self, _: &OccurrenceKey) -> Result<Option<State>, StoreError> {
            unused()
        }
        async fn cancel(&self, _: &Cancel) -> Result<Cancelled, StoreError> {
            unused()
        }
        async fn cancels(&self) -> Result<u64, StoreError> {
            unused()
        }
        async fn gates(&self, _: &[String]) -> Result<Vec<GateUse>, StoreError> {
            unused()
        }
        async fn record(&self, _: &OccurrenceKey) -> Result<Option<Record>, StoreError> {
            unused()
        }
    }

    /// What [`supervised`] saw, as offsets from when it began: the renewals sent, and when
    /// the handler was asked to stop.
    struct Supervised {
        exit: Exit,
        /// The handler started.
        started: bool,
        sent: Vec<Duration>,
        stopped: Option<Duration>,
        /// When the attempt ended.
        ended: Duration,
    }

    /// Supervises a Rust handler that runs until asked to stop, then takes `linger` more
    /// (a handler slow to stop), under a lease of `lease` claimed now, against `ledger`.
    async fn supervised(ledger: &Scripted, lease: Duration, linger: Duration) -> Supervised {
        supervised_late(ledger, lease, linger, Duration::ZERO).await
    }

    /// [`supervised`], of a claim sent `late` ago.
    async fn supervised_late(
        ledger: &Scripted,
        lease: Duration,
        linger: Duration,
        late: Duration,
    ) -> Supervised {
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::new(Mutex::new(None));
        let (ran, seen) = (Arc::clone(&started), Arc::clone(&stopped));
        let run = move |_occ: Occurrence, token: CancellationToken| {
            let (ran, seen) = (Arc::clone(&ran), Arc::clone(&seen));
            async move {
                ran.store(true, Ordering::SeqCst);
                token.cancelled().await;
                *seen.lock().unwrap() = Some(Instant::now());
                tokio::time::sleep(linger).await;
                Ok::<(), String>(())
            }
        };
        let occ = crate::sample::occurrence("report");
        let claimed = ExecutionLease {
            key: occ.key.clone(),
            job: occ.job.clone(),
            token: "t".to_owned(),
            fence: 1,
            held: false,
        };
        let abort = CancellationToken::new();
        let (_cancelled, cancels) = watch::channel(0);
        let start = Instant::now();
        let sup = Supervision {
            ledger,
            lease: &claimed,
            renewed: start - late,
            lease_for: lease,
            beat: lease / 3,
            timeout: Duration::from_secs(3600),
            abort: &abort,
            cancels,
        };
        let capture = Arc::new(Capture::new(0));
        let exit = supervise(Runner::Rust(Arc::new(run)), occ, sup, capture).await;
        let stopped = *stopped.lock().unwrap();
        Supervised {
            exit,
            started: started.load(Ordering::SeqCst),
            sent: ledger.sent().iter().map(|t| *t - start).collect(),
            stopped: stopped.map(|t| t - start),
            ended: Instant::now() - start,
        }
    }

    fn secs(s: &[u64]) -> Vec<Duration> {
        s.iter().copied().map(Duration::from_secs).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_refused_just_before_the_lease_ends_stops_the_handler_at_its_end() {
        // Lease 12 s: renewals every 4 s, tried again 1 s after a refusal. The first
        // renews it until 16 s; the second, sent at 8 s, is refused 7.6 s later, 0.4 s
        // before that end: tried again a second later, it would stop the handler 0.6 s
        // past the lease, while the reaper may hand the occurrence out.
        let ledger = Scripted::new(&[HELD, refused(Duration::from_millis(7600))]);
        let s = supervised(&ledger, Duration::from_secs(12), Duration::ZERO).await;
        assert!(
            matches!(s.exit, Exit::Stopped(Stop::Lost, None)),
            "{:?}",
            s.exit
        );
        let at = s.stopped.expect("the handler was asked to stop");
        assert!(
            at >= Duration::from_secs(16) && at < Duration::from_millis(16_050),
            "stopped {at:?} after the claim, not at the lease's end (16 s)"
        );
        assert_eq!(s.sent, secs(&[4, 8]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_claim_is_not_renewed_while_its_handler_stops() {
        // Lease 3 s: renewals every second. The first finds the claim lost; the handler
        // takes 2.5 s to stop, over two more periods.
        let ledger = Scripted::new(&[LOST]);
        let s = supervised(&ledger, Duration::from_secs(3), Duration::from_millis(2500)).await;
        assert!(
            matches!(s.exit, Exit::Stopped(Stop::Lost, None)),
            "{:?}",
            s.exit
        );
        assert_eq!(s.stopped, Some(Duration::from_secs(1)));
        assert_eq!(s.sent, secs(&[1]), "renewals sent after the claim was lost");
        assert_eq!(s.ended, Duration::from_millis(3500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_claim_whose_renewal_is_answered_past_the_lease_does_not_start() {
        // Lease 2 s, the claim answered a second after it was sent: renewed before the
        // handler starts. That renewal is answered 2.5 s after it was sent, past the lease
        // it renewed: the handler would be stopped at its first tick, so it never starts.
        let late = Answer {
            after: Duration::from_millis(2500),
            held: Some(Heartbeat::Held),
        };
        // Answered within the lease, it starts (and stops at its first tick, lost).
        for (answers, starts) in [(vec![late], false), (vec![HELD, LOST], true)] {
            let ledger = Scripted::new(&answers);
            let s = supervised_late(
                &ledger,
                Duration::from_secs(2),
                Duration::ZERO,
                Duration::from_secs(1),
            )
            .await;
            assert!(
                matches!(s.exit, Exit::Stopped(Stop::Lost, None)),
                "{:?}",
                s.exit
            );
            assert_eq!(s.started, starts, "started, answered within the lease");
            assert_eq!(s.sent[0], Duration::ZERO);
        }
    }

    /// Counts the warnings and the debug events with `message`.
    struct Count {
        message: &'static str,
        warn: Arc<AtomicUsize>,
        debug: Arc<AtomicUsize>,
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            struct Message(Option<String>);
            impl tracing::field::Visit for Message {
                fn record_debug(&mut self, field: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    if field.name() == "message" {
                        self.0 = Some(format!("{v:?}"));
                    }
                }
            }
            let mut message = Message(None);
            event.record(&mut message);
            if message.0.as_deref() != Some(self.message) {
                return;
            }
            let level = *event.metadata().level();
            if level == tracing::Level::WARN {
                self.warn.fetch_add(1, Ordering::SeqCst);
            } else if level == tracing::Level::DEBUG {
                self.debug.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_warns_once_a_period_and_tries_between_at_debug() {
        // Lease 12 s, renewals every 4 s, every one refused at once: tried at 4, 5, … 11 s,
        // and the handler stopped at 12 s. Warned at 4 and 8 s only.
        let (warn, debug) = (Arc::default(), Arc::default());
        let count = Count {
            message: "cannot renew the execution lease",
            warn: Arc::clone(&warn),
            debug: Arc::clone(&debug),
        };
        let _logging = tracing::subscriber::set_default(tracing_subscriber::registry().with(count));
        let ledger = Scripted::new(&[refused(Duration::ZERO)]);
        let s = supervised(&ledger, Duration::from_secs(12), Duration::ZERO).await;
        assert!(
            matches!(s.exit, Exit::Stopped(Stop::Lost, None)),
            "{:?}",
            s.exit
        );
        assert_eq!(s.sent, secs(&[4, 5, 6, 7, 8, 9, 10, 11]));
        assert_eq!(s.stopped, Some(Duration::from_secs(12)));
        assert_eq!(
            (warn.load(Ordering::SeqCst), debug.load(Ordering::SeqCst)),
            (2, 6)
        );
    }
}
