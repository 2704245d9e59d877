//! The leader's confirmed publishing, and its one retry loop.
//!
//! Owns: [`LEADER_RETRY`], the schedule of everything the leader retries, and the publish
//! metrics. Who retries what (the table in `cronq_shared::retry`): the broker retries by
//! itself what may pass (a lost connection), until the call is dropped, so the leader adds
//! no loop for that: it bounds each call by its leadership. What the broker refuses (a
//! nack, an unroutable message) and what the control store fails (it never retries) the
//! leader retries along [`LEADER_RETRY`] while it leads: dropping a due batch would lose
//! occurrences (G2).
//!
//! Invariant: [`publish_confirmed`] returns `Ok` only after the broker confirmed the whole
//! batch; the caller advances cursors only then, so no occurrence is ever skipped by a
//! cursor (G2).

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, BrokerError, Outgoing, Ready};
use cronq_shared::message::Trigger;
use cronq_shared::retry::{Backoff, Retrying, retry};
use cronq_shared::traces;
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::leader::{Leadership, holds, lost};
use crate::traces::Publishing;

/// The leader's retries (a refused publish, a control store error): short first steps ride
/// over a refusal that passes by itself (a queue leader moving to another node), the cap
/// keeps a lasting one from flooding the broker and the log.
pub const LEADER_RETRY: Backoff =
    Backoff::exponential(Duration::from_millis(100), Duration::from_secs(5));

/// A publish still unconfirmed after this long is logged, and waited for further (a
/// broker that takes messages but does not confirm them, as under a memory alarm).
pub const CONFIRM_SLOW: Duration = Duration::from_secs(40);

/// Why a batch was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// The leadership of the epoch ended (lost, expired, or replaced).
    LostLeadership,
    /// Shutdown.
    Cancelled,
}

/// Publishes `batch` until the broker confirms all of it, for as long as `epoch` holds a
/// valid leadership (refusals retried along [`LEADER_RETRY`]). With traces on, each
/// message goes out with the `traceparent` of its publish span (`crate::traces`).
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
    let mut traced = Vec::new();
    let spans = traces::tracer().and_then(|_| {
        traced = batch.to_vec();
        Publishing::start(&mut traced, None)
    });
    let batch = if spans.is_some() { &traced[..] } else { batch };
    let published = confirmed_while_leading(batch, leadership, epoch, token, || {
        broker.publish_timed(batch)
    })
    .await
    .map(drop);
    if let Some(spans) = spans {
        spans.end(&published);
    }
    published
}

/// As [`publish_confirmed`] for a batch made ready ahead ([`Broker::ready`]), each
/// message published at `at`; its publish spans, if traced, were started when it was made
/// ready (`Scheduler::fire`), and `spans` ends them. Returns when its last confirm
/// arrived (`None` for an empty batch).
///
/// # Errors
/// As [`publish_confirmed`].
///
/// # Cancel safety
/// As [`publish_confirmed`].
pub async fn publish_ready_confirmed(
    broker: &Arc<dyn Broker>,
    ready: &Ready,
    at: DateTime<Utc>,
    leadership: &watch::Receiver<Option<Leadership>>,
    epoch: u64,
    token: &CancellationToken,
    spans: Option<Publishing>,
) -> Result<Option<DateTime<Utc>>, Abandoned> {
    let published = confirmed_while_leading(ready.messages(), leadership, epoch, token, || {
        broker.publish_ready(ready, at)
    })
    .await;
    if let Some(spans) = spans {
        spans.end(&published.map(drop));
    }
    published
}

/// The loop of [`publish_confirmed`] and [`publish_ready_confirmed`]: `publish` sends
/// `batch` and says when each confirm arrived. Returns when the last one did.
async fn confirmed_while_leading<'a>(
    batch: &[Outgoing],
    leadership: &watch::Receiver<Option<Leadership>>,
    epoch: u64,
    token: &CancellationToken,
    mut publish: impl FnMut() -> BoxFuture<'a, Result<Vec<DateTime<Utc>>, BrokerError>>,
) -> Result<Option<DateTime<Utc>>, Abandoned> {
    if batch.is_empty() {
        return Ok(None);
    }
    let refused = |r: &Retrying<'_, BrokerError>| {
        metrics::counter!("cronq_publish_failures_total").increment(1);
        warn!(
            attempt = r.failures,
            messages = batch.len(),
            error = %r.error,
            "publish not confirmed, retrying",
        );
    };
    let confirmed_at = leading(
        leadership,
        epoch,
        token,
        || confirmed(batch.len(), publish()),
        refused,
    )
    .await
    .inspect_err(|why| given_up(batch, *why))?;
    record(batch, &confirmed_at);
    Ok(confirmed_at.iter().max().copied())
}

/// Logs a batch given up before the broker confirmed all of it: some of its messages may
/// have arrived (and run) all the same, so an operator, or a test reading the log, knows
/// them from the published ones. The next leader publishes them again from the cursor.
fn given_up(batch: &[Outgoing], why: Abandoned) {
    // A catch-up batch may hold thousands: the first ones by key, the rest counted.
    const BY_KEY: usize = 20;
    if batch.len() > BY_KEY {
        warn!(
            messages = batch.len() - BY_KEY,
            reason = ?why,
            "publishes given up unconfirmed beyond the ones logged by key: they may have arrived",
        );
    }
    for out in batch.iter().take(BY_KEY) {
        let occ = &out.occurrence;
        warn!(
            job = %occ.job,
            key = %occ.key,
            epoch = occ.epoch,
            reason = ?why,
            "publish given up unconfirmed: it may have arrived",
        );
    }
}

/// Runs a store or broker operation until it succeeds, along [`LEADER_RETRY`], for as long
/// as `epoch` holds a valid leadership; `what` names it in the log.
///
/// # Errors
/// [`Abandoned`] when the leadership ended or `token` was cancelled first.
///
/// # Cancel safety
/// Cancel-safe when `op`'s futures are.
pub async fn while_leading<T, E, Fut>(
    what: &'static str,
    leadership: &watch::Receiver<Option<Leadership>>,
    epoch: u64,
    token: &CancellationToken,
    op: impl FnMut() -> Fut,
) -> Result<T, Abandoned>
where
    E: Display,
    Fut: Future<Output = Result<T, E>>,
{
    let failed = |r: &Retrying<'_, E>| {
        warn!(
            operation = what,
            attempt = r.failures,
            error = %r.error,
            "leader operation failed, retrying",
        );
    };
    leading(leadership, epoch, token, op, failed).await
}

/// The loop of [`publish_confirmed`] and [`while_leading`]: each try starts only under a
/// leadership valid right now, and a try or a wait in flight ends as soon as the
/// leadership does.
async fn leading<T, E, Fut>(
    leadership: &watch::Receiver<Option<Leadership>>,
    epoch: u64,
    token: &CancellationToken,
    mut op: impl FnMut() -> Fut,
    notify: impl FnMut(&Retrying<'_, E>),
) -> Result<T, Abandoned>
where
    Fut: Future<Output = Result<T, E>>,
{
    let tries = retry(
        LEADER_RETRY,
        token,
        || {
            // Never act without a leadership that is valid right now.
            let valid = holds(leadership, epoch);
            let attempt = op();
            async move {
                if !valid {
                    return Ok(Err(Abandoned::LostLeadership));
                }
                attempt.await.map(Ok)
            }
        },
        notify,
    );
    let mut watch = leadership.clone();
    tokio::select! {
        biased;
        () = token.cancelled() => Err(Abandoned::Cancelled),
        () = lost(&mut watch, epoch) => Err(Abandoned::LostLeadership),
        // LEADER_RETRY never runs out: only the token ends the retrying.
        done = tries => done.unwrap_or(Err(Abandoned::Cancelled)),
    }
}

/// One publish of `messages`, waited for until confirmed; logged while the confirm is
/// slow. Returns when each message's confirm arrived.
async fn confirmed(
    messages: usize,
    publish: impl Future<Output = Result<Vec<DateTime<Utc>>, BrokerError>>,
) -> Result<Vec<DateTime<Utc>>, BrokerError> {
    let started = Instant::now();
    tokio::pin!(publish);
    loop {
        tokio::select! {
            done = &mut publish => return done,
            () = tokio::time::sleep(CONFIRM_SLOW) => warn!(
                messages,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "publish not confirmed yet, still waiting",
            ),
        }
    }
}

/// Counts each message published and records its lateness: its scheduled instant to its
/// own confirm (`confirmed_at`, in `batch`'s order), as the precision bench's bare lapin
/// baselines take theirs.
fn record(batch: &[Outgoing], confirmed_at: &[DateTime<Utc>]) {
    let now = Utc::now();
    for (i, out) in batch.iter().enumerate() {
        let occ = &out.occurrence;
        let at = confirmed_at.get(i).copied().unwrap_or(now);
        metrics::counter!("cronq_occurrences_published_total", "job" => occ.job.to_string())
            .increment(1);
        if matches!(occ.trigger, Trigger::Schedule | Trigger::Catchup) {
            let late = (at - occ.scheduled_at).to_std().unwrap_or_default();
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use cronq_memory::MemoryBroker;
    use cronq_shared::config::Config;
    use cronq_shared::lease::Term;

    use super::*;

    const CONFIG: &str = r#"
[[job]]
name = "tick"
schedule = "@every 1s"
command = ["true"]
"#;

    fn leading(epoch: u64, valid_for: Duration) -> Option<Leadership> {
        Some(Leadership {
            term: Term::new(epoch, "test"),
            valid_until: Instant::now() + valid_for,
            since: Utc::now(),
        })
    }

    /// A tick's batch is made ready ahead of its instant (`Scheduler::fire`); a leadership
    /// lost, or past its renew deadline, between then and the instant publishes nothing of
    /// it: the check is made at the publish, not when the batch was built.
    #[tokio::test]
    async fn a_batch_made_ready_is_published_only_by_a_leadership_valid_at_the_instant() {
        let config = Config::from_toml(CONFIG, Path::new("cronq.toml")).unwrap();
        let job = &config.jobs[0];
        let memory = MemoryBroker::new();
        let broker: Arc<dyn Broker> = Arc::new(memory.clone());
        broker.declare(&config.queues()).await.unwrap();
        let batch = |at: DateTime<Utc>| {
            broker.ready(vec![Outgoing {
                queue: job.queue.clone(),
                occurrence: crate::planner::occurrence(job, at, Trigger::Schedule, 7, at),
                delay: Duration::ZERO,
            }])
        };
        let token = CancellationToken::new();
        let at: DateTime<Utc> = "2026-12-03T07:00:00Z".parse().unwrap();

        for (why, after_ready) in [
            ("stepped down", None),
            (
                "replaced by a newer term",
                leading(8, Duration::from_secs(60)),
            ),
            ("past its renew deadline", leading(7, Duration::ZERO)),
        ] {
            let (tx, rx) = watch::channel(leading(7, Duration::from_secs(60)));
            let ready = batch(at);
            tx.send_replace(after_ready);
            let published =
                publish_ready_confirmed(&broker, &ready, at, &rx, 7, &token, None).await;
            assert!(
                matches!(published, Err(Abandoned::LostLeadership)),
                "{why}: {published:?}"
            );
            assert_eq!(memory.ready(&job.queue), Some(0), "{why}: published anyway");
        }

        let (_tx, rx) = watch::channel(leading(7, Duration::from_secs(60)));
        publish_ready_confirmed(&broker, &batch(at), at, &rx, 7, &token, None)
            .await
            .unwrap();
        assert_eq!(
            memory.ready(&job.queue),
            Some(1),
            "a valid leadership publishes"
        );
    }
}
