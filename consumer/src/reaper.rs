//! The reaper: runs in every consumer and periodically takes over claims whose owner
//! stopped renewing its lease (crashed, partitioned), whose follow-up message (retry,
//! release) was never claimed, or that wait for another occurrence of their job (overlap
//! `queue`, `replace`, `skip` behind a later one) and have not started in time, and republishes the stored
//! message: same key, same attempt (G3, at-least-once). Each log line says which of these
//! it was ([`Republish`]).
//!
//! Two reapers never republish the same claim in the same hold period: taking it over and
//! moving its due time forward is one atomic ledger operation ([`Ledger::reap`]). An owner
//! that was only slow finds its claim gone at its next heartbeat (it stops its handler) and
//! its `complete` is fenced, so it records nothing.

use std::sync::Arc;
use std::time::Duration;

use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::config::Config;
use cronq_shared::ledger::{Ledger, Orphan, Republish};
use cronq_shared::message::Occurrence;
use cronq_shared::names::QueueName;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::dead_letter::publish;

/// How many claims one sweep takes over at most.
const SWEEP_LIMIT: usize = 100;

/// The periodic reaper of one consumer.
pub(crate) struct Reaper {
    /// The config in force (reloads replace it).
    pub(crate) config: watch::Receiver<Arc<Config>>,
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) ledger: Arc<dyn Ledger>,
    /// Sweep period.
    pub(crate) every: Duration,
    /// How long a taken-over claim is left alone before it may be handed out again.
    pub(crate) hold: Duration,
}

impl Reaper {
    /// Sweeps every `every` until `token` is cancelled.
    pub(crate) async fn run(self, token: CancellationToken) {
        loop {
            if token
                .run_until_cancelled(tokio::time::sleep(self.every))
                .await
                .is_none()
            {
                return;
            }
            match self.ledger.reap(SWEEP_LIMIT, self.hold).await {
                Ok(orphans) => {
                    let config = self.config.borrow().clone();
                    for orphan in orphans {
                        republish(&*self.broker, &config, orphan).await;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "the reaper's call to the idempotency store failed, retrying");
                }
            }
        }
    }
}

/// Publishes a stored message handed back by the ledger (reaped, or woken for its turn).
pub(crate) async fn republish(broker: &dyn Broker, config: &Config, orphan: Orphan) {
    let occ = match Occurrence::decode(&orphan.body) {
        Ok(occ) => occ,
        Err(err) => {
            tracing::error!(key = %orphan.key, error = %err, "stored message is unreadable, dropping it");
            return;
        }
    };
    let queue = QueueName::new(&orphan.queue)
        .ok()
        .or_else(|| config.job(occ.job.as_str()).map(|j| j.queue.clone()));
    let Some(queue) = queue else {
        tracing::error!(job = %occ.job, key = %occ.key, "stored message has no queue, dropping it");
        return;
    };
    let (job, key, attempt) = (occ.job.clone(), occ.key.clone(), occ.attempt);
    let out = Outgoing {
        queue,
        occurrence: occ,
        delay: Duration::ZERO,
    };
    let why = orphan.why.describe();
    match publish(broker, out).await {
        Ok(()) if orphan.why == Republish::Turn => {
            tracing::debug!(job = %job, key = %key, attempt, "published a waiting occurrence: its turn came");
        }
        Ok(()) => {
            tracing::info!(job = %job, key = %key, attempt, reason = why, "republished a stored occurrence");
        }
        Err(err) => {
            tracing::warn!(job = %job, key = %key, reason = why, error = %err, "cannot republish a stored occurrence; the reaper tries again later");
        }
    }
}
