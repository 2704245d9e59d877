//! Publishing with confirms, retried until confirmed while the leadership lasts.
//!
//! Owns: the retry schedule and the publish metrics. Invariant: [`publish_confirmed`]
//! returns `Ok` only after the broker confirmed the whole batch; the caller advances
//! cursors only then, so no occurrence is ever skipped by a cursor (G2).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::message::Trigger;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::leader::{Leadership, holds, lost};

/// Delay before each retry of an unconfirmed publish; the last one repeats. Short first
/// steps ride over a broker reconnect (lapin recovers in seconds); a cap keeps a long
/// outage from being hammered. Each delay gets up to 20% random jitter.
pub const PUBLISH_BACKOFF: &[Duration] = &[
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
];

/// One publish attempt may take this long before it counts as failed (a broker that
/// accepts the TCP connection but never confirms).
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(40);

/// Why a batch was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// The leadership of the epoch ended (lost, expired, or replaced).
    LostLeadership,
    /// Shutdown.
    Cancelled,
}

/// Publishes `batch` until the broker confirms all of it, retrying per
/// [`PUBLISH_BACKOFF`], for as long as `epoch` holds a valid leadership.
///
/// # Errors
/// [`Abandoned`] when the leadership ended or `token` was cancelled first; nothing is
/// known then about which messages arrived (the next leader re-publishes from the cursor).
///
/// # Cancel safety
/// Cancel-safe: dropping it abandons the batch like an error does.
pub async fn publish_confirmed(
    broker: &Arc<dyn Broker>,
    batch: &[Outgoing],
    leadership: &watch::Receiver<Option<Leadership>>,
    epoch: u64,
    token: &CancellationToken,
) -> Result<(), Abandoned> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut leadership = leadership.clone();
    for attempt in 0usize.. {
        if token.is_cancelled() {
            return Err(Abandoned::Cancelled);
        }
        // Never publish without a leadership that is valid right now.
        if !holds(&leadership, epoch) {
            return Err(Abandoned::LostLeadership);
        }
        let outcome = tokio::select! {
            biased;
            () = token.cancelled() => return Err(Abandoned::Cancelled),
            () = lost(&mut leadership, epoch) => return Err(Abandoned::LostLeadership),
            r = tokio::time::timeout(PUBLISH_TIMEOUT, broker.publish(batch)) => r,
        };
        match outcome {
            Ok(Ok(())) => {
                record(batch);
                return Ok(());
            }
            Ok(Err(err)) => {
                metrics::counter!("cronq_publish_failures_total").increment(1);
                warn!(
                    attempt = attempt + 1,
                    messages = batch.len(),
                    error = %err,
                    "publish not confirmed, retrying",
                );
            }
            Err(_) => {
                metrics::counter!("cronq_publish_failures_total").increment(1);
                warn!(
                    attempt = attempt + 1,
                    messages = batch.len(),
                    "publish confirm timed out, retrying"
                );
            }
        }
        let base = PUBLISH_BACKOFF[attempt.min(PUBLISH_BACKOFF.len() - 1)];
        let delay = base.mul_f64(1.0 + rand::random::<f64>() * 0.2);
        tokio::select! {
            biased;
            () = token.cancelled() => return Err(Abandoned::Cancelled),
            () = lost(&mut leadership, epoch) => return Err(Abandoned::LostLeadership),
            () = tokio::time::sleep(delay) => {}
        }
    }
    Err(Abandoned::LostLeadership)
}

fn record(batch: &[Outgoing]) {
    let now = Utc::now();
    for out in batch {
        let occ = &out.occurrence;
        metrics::counter!("cronq_occurrences_published_total", "job" => occ.job.to_string())
            .increment(1);
        if matches!(occ.trigger, Trigger::Schedule | Trigger::Catchup) {
            let late = (now - occ.scheduled_at).to_std().unwrap_or_default();
            metrics::histogram!("cronq_publish_lateness_seconds").record(late.as_secs_f64());
        }
        debug!(
            job = %occ.job,
            key = %occ.key,
            trigger = ?occ.trigger,
            epoch = occ.epoch,
            "published occurrence",
        );
    }
}
