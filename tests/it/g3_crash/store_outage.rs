//! With the store unreachable nothing runs and nothing is acked; once it is back the
//! occurrence runs once. On every backend, with in-process consumers.

use std::sync::Arc;
use std::time::Duration;

use cronq_consumer::Options;
use cronq_shared::broker::Outgoing;
use cronq_shared::ledger::Ledger;
use cronq_shared::names::QueueName;
use cronq_shared::runlog::Outcome;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::fleet::{Fleet, LEASE, WAIT, WORK, recording};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, eventually};

/// A ledger that can be made unreachable.
struct Flaky {
    inner: Arc<dyn Ledger>,
    down: std::sync::atomic::AtomicBool,
    refused: std::sync::atomic::AtomicUsize,
}

impl Flaky {
    fn new(inner: Arc<dyn Ledger>) -> Self {
        Self {
            inner,
            down: std::sync::atomic::AtomicBool::new(false),
            refused: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn check(&self) -> Result<(), cronq_shared::store::StoreError> {
        use std::sync::atomic::Ordering;
        if self.down.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(cronq_shared::store::StoreError::Unreachable {
                store: "Redis",
                url: "redis://test".into(),
                hint: "a test made it unreachable",
                source: None,
            });
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Ledger for Flaky {
    async fn claim(
        &self,
        c: &cronq_shared::ledger::Claim,
    ) -> Result<cronq_shared::ledger::ClaimOutcome, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.claim(c).await
    }
    async fn heartbeat(
        &self,
        l: &cronq_shared::ledger::ExecutionLease,
        d: Duration,
    ) -> Result<cronq_shared::ledger::Heartbeat, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.heartbeat(l, d).await
    }
    async fn keep(
        &self,
        l: &cronq_shared::ledger::ExecutionLease,
        d: Duration,
        body: &[u8],
        retention: Duration,
    ) -> Result<cronq_shared::ledger::Heartbeat, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.keep(l, d, body, retention).await
    }
    async fn complete(
        &self,
        l: &cronq_shared::ledger::ExecutionLease,
        e: &cronq_shared::ledger::End,
    ) -> Result<cronq_shared::ledger::Ended, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.complete(l, e).await
    }
    async fn settle(
        &self,
        s: &cronq_shared::ledger::Settle,
    ) -> Result<cronq_shared::ledger::Ended, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.settle(s).await
    }
    async fn reap(
        &self,
        limit: usize,
        hold: Duration,
    ) -> Result<Vec<cronq_shared::ledger::Orphan>, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.reap(limit, hold).await
    }
    async fn admit_replay(
        &self,
        key: &cronq_shared::key::OccurrenceKey,
    ) -> Result<Option<cronq_shared::ledger::State>, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.admit_replay(key).await
    }
    async fn cancel(
        &self,
        c: &cronq_shared::ledger::Cancel,
    ) -> Result<cronq_shared::ledger::Cancelled, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.cancel(c).await
    }
    async fn cancels(&self) -> Result<u64, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.cancels().await
    }
    async fn gates(
        &self,
        gates: &[String],
    ) -> Result<Vec<cronq_shared::ledger::GateUse>, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.gates(gates).await
    }

    async fn record(
        &self,
        key: &cronq_shared::key::OccurrenceKey,
    ) -> Result<Option<cronq_shared::ledger::Record>, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.record(key).await
    }
}

/// The store down at first: nothing runs and nothing is acked until it is back; then the
/// occurrence runs once.
async fn store_outage_runs_nothing_until_it_is_back(backend: Backend, env: TestEnv) {
    use std::sync::atomic::Ordering;

    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "skip")).await;
    let ledger = Arc::new(Flaky::new(fleet.ledger.clone()));
    ledger.down.store(true, Ordering::SeqCst);
    let (handlers, seen) = recording(Duration::from_millis(10));
    let options = Options {
        lease: LEASE,
        consumer_id: "mem".into(),
        ..Options::default()
    };
    fleet
        .start_with(options, handlers, Some(ledger.clone()))
        .await;
    let queue = QueueName::new("default").unwrap();
    let out = Outgoing {
        queue: queue.clone(),
        occurrence: occurrence("work", 1),
        delay: Duration::ZERO,
    };
    fleet.broker.publish(&[out.clone(), out]).await.unwrap();
    eventually(
        WAIT,
        "claims to be refused while the store is down",
        || async { (ledger.refused.load(Ordering::SeqCst) >= 3).then_some(()) },
    )
    .await;
    assert!(seen.lock().unwrap().is_empty(), "nothing ran");
    assert!(fleet.runlog.list(None, 10).await.unwrap().is_empty());
    ledger.down.store(false, Ordering::SeqCst);
    let runs = eventually(
        WAIT,
        "the occurrence to run once the store is back",
        || async {
            let runs = fleet.runlog.list(None, 10).await.unwrap();
            (!runs.is_empty()).then_some(runs)
        },
    )
    .await;
    assert_eq!(runs[0].outcome, Outcome::Succeeded);
    eventually(WAIT, "both deliveries settled", || async {
        (fleet.queued("default").await == 0).then_some(())
    })
    .await;
    fleet.halt().await;
    assert_eq!(seen.lock().unwrap().len(), 1, "the duplicate did not run");
    assert_eq!(fleet.runlog.list(None, 10).await.unwrap().len(), 1);
    fleet.stop().await;
}

on_every_backend!(
    store_outage_runs_nothing_until_it_is_back,
    "consumer_outage"
);
