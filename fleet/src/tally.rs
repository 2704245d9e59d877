//! Counting in process what the registry's per-minute counters add up: the occurrences a
//! producer published ([`CountingBroker`], around the broker its scheduler publishes
//! with) and those a consumer ran to a terminal outcome ([`CountingLedger`], around its
//! ledger). The reporter ([`crate::reporter`]) adds the counts to the store with each beat,
//! so counting costs no store round trip per occurrence.
//!
//! Invariant: a count is taken only after the broker confirmed the publish, or the ledger
//! recorded the end; a count lost (the process killed before its next beat) makes the
//! figures lower, never higher.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use cronq_shared::broker::{
    Broker, BrokerError, DeadLetter, Delivery, Depths, Outgoing, Pick, Ready,
};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{
    Cancel, Cancelled, Claim, ClaimOutcome, End, Ended, ExecutionLease, GateUse, Heartbeat, Ledger,
    Orphan, Settle, State,
};
use cronq_shared::names::QueueName;
use cronq_shared::registry::Counter;
use cronq_shared::store::StoreError;

/// Counts not yet added to the store, shared by the counting wrappers and the reporter.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    counts: Arc<[AtomicU64; 2]>,
}

impl Tally {
    fn slot(counter: Counter) -> usize {
        match counter {
            Counter::Published => 0,
            Counter::Executed => 1,
        }
    }

    /// Counts `n` more.
    pub fn add(&self, counter: Counter, n: u64) {
        self.counts[Self::slot(counter)].fetch_add(n, Ordering::Relaxed);
    }

    /// Takes what was counted since the last take.
    pub fn take(&self, counter: Counter) -> u64 {
        self.counts[Self::slot(counter)].swap(0, Ordering::Relaxed)
    }
}

/// A broker that counts the occurrences it published, confirmed.
pub struct CountingBroker {
    inner: Arc<dyn Broker>,
    tally: Tally,
}

impl CountingBroker {
    /// Counts what `inner` publishes into `tally`.
    pub fn new(inner: Arc<dyn Broker>, tally: Tally) -> Self {
        Self { inner, tally }
    }
}

#[async_trait]
impl Broker for CountingBroker {
    async fn declare(&self, queues: &BTreeSet<QueueName>) -> Result<(), BrokerError> {
        self.inner.declare(queues).await
    }

    async fn publish(&self, batch: &[Outgoing]) -> Result<(), BrokerError> {
        self.inner.publish(batch).await?;
        self.tally.add(Counter::Published, batch.len() as u64);
        Ok(())
    }

    async fn publish_timed(
        &self,
        batch: &[Outgoing],
    ) -> Result<Vec<chrono::DateTime<chrono::Utc>>, BrokerError> {
        let confirmed = self.inner.publish_timed(batch).await?;
        self.tally.add(Counter::Published, batch.len() as u64);
        Ok(confirmed)
    }

    fn ready(&self, messages: Vec<Outgoing>) -> Ready {
        self.inner.ready(messages)
    }

    async fn publish_ready(
        &self,
        ready: &Ready,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<chrono::DateTime<chrono::Utc>>, BrokerError> {
        let confirmed = self.inner.publish_ready(ready, at).await?;
        self.tally
            .add(Counter::Published, ready.messages().len() as u64);
        Ok(confirmed)
    }

    fn apart(&self) -> Option<Arc<dyn Broker>> {
        let apart = self.inner.apart()?;
        Some(Arc::new(Self::new(apart, self.tally.clone())))
    }

    async fn consume(
        &self,
        queues: &[QueueName],
        prefetch: u16,
        token: CancellationToken,
    ) -> Result<mpsc::Receiver<Delivery>, BrokerError> {
        self.inner.consume(queues, prefetch, token).await
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), BrokerError> {
        self.inner.dead_letter(letter).await
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, BrokerError> {
        self.inner.dead_letters().await
    }

    async fn replay(
        &self,
        select: &(dyn for<'l> Fn(&'l DeadLetter) -> Pick + Send + Sync),
    ) -> Result<usize, BrokerError> {
        self.inner.replay(select).await
    }

    async fn depths(&self, queues: &[QueueName]) -> Result<Depths, BrokerError> {
        self.inner.depths(queues).await
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}

/// A ledger that counts the attempts it recorded as a terminal outcome of a run
/// (succeeded, or failed for good).
pub struct CountingLedger {
    inner: Arc<dyn Ledger>,
    tally: Tally,
}

impl CountingLedger {
    /// Counts what `inner` records into `tally`.
    pub fn new(inner: Arc<dyn Ledger>, tally: Tally) -> Self {
        Self { inner, tally }
    }
}

#[async_trait]
impl Ledger for CountingLedger {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        self.inner.claim(claim).await
    }

    async fn heartbeat(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
    ) -> Result<Heartbeat, StoreError> {
        self.inner.heartbeat(lease, duration).await
    }

    async fn keep(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
        body: &[u8],
        retention: Duration,
    ) -> Result<Heartbeat, StoreError> {
        self.inner.keep(lease, duration, body, retention).await
    }

    async fn complete(&self, lease: &ExecutionLease, end: &End) -> Result<Ended, StoreError> {
        let ended = self.inner.complete(lease, end).await?;
        if ended.recorded && matches!(end.state, Some(State::Succeeded | State::Failed)) {
            self.tally.add(Counter::Executed, 1);
        }
        Ok(ended)
    }

    async fn settle(&self, settle: &Settle) -> Result<Ended, StoreError> {
        self.inner.settle(settle).await
    }

    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError> {
        self.inner.reap(limit, hold).await
    }

    async fn admit_replay(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        self.inner.admit_replay(key).await
    }

    async fn cancel(&self, cancel: &Cancel) -> Result<Cancelled, StoreError> {
        self.inner.cancel(cancel).await
    }

    async fn cancels(&self) -> Result<u64, StoreError> {
        self.inner.cancels().await
    }

    async fn gates(&self, gates: &[String]) -> Result<Vec<GateUse>, StoreError> {
        self.inner.gates(gates).await
    }

    async fn record(
        &self,
        key: &OccurrenceKey,
    ) -> Result<Option<cronq_shared::ledger::Record>, StoreError> {
        self.inner.record(key).await
    }
}
