//! Leader election: acquire the lease, renew it every `retry`, step down in time, release
//! it on shutdown.
//!
//! Owns: the lease loop and the [`Leadership`] it publishes on a `watch` channel. Leaves
//! to the scheduler: what a leader does. Invariant: a [`Leadership`] is valid only until
//! `valid_until` = (send time of the last *confirmed* renewal) + `renew_deadline`, which is
//! shorter than the lease, so a leader cut off from Redis stops publishing before its lease
//! can expire and a standby can take over.

use std::sync::Arc;
use std::time::Duration;

use cronq_shared::config::Config;
use cronq_shared::lease::{Lease, Term};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Proof of leadership, valid until `valid_until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The held term (epoch = fencing token).
    pub term: Term,
    /// Past this instant, the holder must not publish (renew deadline).
    pub valid_until: Instant,
    /// When the term was acquired (wall clock: the Fleet page's "leading since").
    pub since: chrono::DateTime<chrono::Utc>,
}

impl Leadership {
    /// Whether this leadership may still publish at `now`.
    pub fn is_valid_at(&self, now: Instant) -> bool {
        now < self.valid_until
    }
}

/// Since when the leadership `rx` holds was acquired, read anew at each call (`None` while
/// this producer does not lead): what its fleet registry reports say.
pub fn leading_since(
    rx: watch::Receiver<Option<Leadership>>,
) -> impl Fn() -> Option<chrono::DateTime<chrono::Utc>> + Send + Sync + 'static {
    move || rx.borrow().as_ref().map(|l| l.since)
}

/// Whether `rx` currently holds a valid leadership of `epoch`.
pub fn holds(rx: &watch::Receiver<Option<Leadership>>, epoch: u64) -> bool {
    rx.borrow()
        .as_ref()
        .is_some_and(|l| l.term.epoch == epoch && l.is_valid_at(Instant::now()))
}

/// Resolves when `epoch` no longer holds a valid leadership in `rx` (replaced, stepped
/// down, or past its renew deadline).
///
/// # Cancel safety
/// Cancel-safe: it only reads the channel.
pub async fn lost(rx: &mut watch::Receiver<Option<Leadership>>, epoch: u64) {
    loop {
        let until = match &*rx.borrow_and_update() {
            Some(l) if l.term.epoch == epoch => l.valid_until,
            _ => return,
        };
        tokio::select! {
            () = sleep_until(until) => {
                if !holds(rx, epoch) {
                    return;
                }
            }
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// Runs the lease loop for one producer instance.
pub struct Elector {
    lease: Arc<dyn Lease>,
    instance: String,
    config: watch::Receiver<Arc<Config>>,
    tx: watch::Sender<Option<Leadership>>,
}

impl Elector {
    /// An elector for `instance`; the receiver tells who leads (`None` = not this one).
    pub fn new(
        lease: Arc<dyn Lease>,
        instance: impl Into<String>,
        config: watch::Receiver<Arc<Config>>,
    ) -> (Self, watch::Receiver<Option<Leadership>>) {
        let (tx, rx) = watch::channel(None);
        (
            Self {
                lease,
                instance: instance.into(),
                config,
                tx,
            },
            rx,
        )
    }

    /// Competes for the lease until `token` is cancelled, then releases it at once
    /// (compare-and-delete) so a standby takes over within one `retry`.
    pub async fn run(self, token: CancellationToken) {
        let mut held: Option<Leadership> = None;
        metrics::gauge!("cronq_leader").set(0.0);
        // Exported at 0 from the start, so an alert on its increase sees the first failure.
        metrics::counter!("cronq_publish_failures_total").increment(0);
        loop {
            let leader = self.config.borrow().leader;
            let sent = Instant::now();
            held = match held.take() {
                None => {
                    self.try_acquire(leader.lease, leader.renew_deadline, sent)
                        .await
                }
                Some(current) => {
                    self.try_renew(current, leader.lease, leader.renew_deadline, sent)
                        .await
                }
            };
            let mut wake = sent + leader.retry;
            if let Some(l) = &held {
                wake = wake.min(l.valid_until);
            }
            tokio::select! {
                biased;
                () = token.cancelled() => break,
                () = sleep_until(wake) => {}
            }
            if let Some(l) = &held
                && !l.is_valid_at(Instant::now())
            {
                self.step_down(l, "no renewal confirmed within renew_deadline");
                held = None;
            }
        }
        if let Some(l) = held {
            // Stop publishing first, then give the lease back.
            self.tx.send_replace(None);
            metrics::gauge!("cronq_leader").set(0.0);
            let retry = self.config.borrow().leader.retry;
            match timeout(retry, self.lease.release(&l.term)).await {
                Ok(Ok(true)) => info!(
                    epoch = l.term.epoch,
                    instance_id = %self.instance,
                    "released leadership"
                ),
                Ok(Ok(false)) => info!(
                    epoch = l.term.epoch,
                    instance_id = %self.instance,
                    "leadership already lost at shutdown"
                ),
                Ok(Err(err)) => warn!(
                    epoch = l.term.epoch,
                    error = %err,
                    "could not release leadership: it expires on its own"
                ),
                Err(_) => warn!(
                    epoch = l.term.epoch,
                    "releasing leadership timed out: it expires on its own"
                ),
            }
        }
    }

    async fn try_acquire(
        &self,
        ttl: Duration,
        renew_deadline: Duration,
        sent: Instant,
    ) -> Option<Leadership> {
        match timeout(renew_deadline, self.lease.acquire(&self.instance, ttl)).await {
            Ok(Ok(Some(term))) => {
                info!(epoch = term.epoch, instance_id = %self.instance, "became leader");
                metrics::gauge!("cronq_leader").set(1.0);
                metrics::gauge!("cronq_leader_epoch").set(term.epoch as f64);
                let l = Leadership {
                    term,
                    valid_until: sent + renew_deadline,
                    since: chrono::Utc::now(),
                };
                self.tx.send_replace(Some(l.clone()));
                Some(l)
            }
            Ok(Ok(None)) => None,
            Ok(Err(err)) => {
                warn!(
                    instance_id = %self.instance,
                    error = %err,
                    "cannot try for leadership, retrying",
                );
                None
            }
            Err(_) => {
                warn!(instance_id = %self.instance, "trying for leadership timed out, retrying");
                None
            }
        }
    }

    async fn try_renew(
        &self,
        current: Leadership,
        ttl: Duration,
        renew_deadline: Duration,
        sent: Instant,
    ) -> Option<Leadership> {
        // Never wait past the deadline: a renewal confirmed later is worthless.
        let left = current.valid_until.saturating_duration_since(sent);
        match timeout(left, self.lease.renew(&current.term, ttl)).await {
            Ok(Ok(true)) => {
                let l = Leadership {
                    term: current.term,
                    valid_until: sent + renew_deadline,
                    since: current.since,
                };
                self.tx.send_replace(Some(l.clone()));
                Some(l)
            }
            Ok(Ok(false)) => {
                self.step_down(&current, "lease expired or taken by another producer");
                None
            }
            Ok(Err(err)) => {
                warn!(
                    epoch = current.term.epoch,
                    error = %err,
                    "lease renewal failed, retrying until renew_deadline",
                );
                Some(current)
            }
            Err(_) => Some(current), // the deadline check after the sleep steps down
        }
    }

    fn step_down(&self, l: &Leadership, reason: &'static str) {
        self.tx.send_replace(None);
        metrics::gauge!("cronq_leader").set(0.0);
        info!(epoch = l.term.epoch, instance_id = %self.instance, reason, "lost leadership");
    }
}
