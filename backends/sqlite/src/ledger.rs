//! The ledger in the data file: each port operation one transaction running the shared
//! rules (`cronq_ledger_rules`) on `store::Store`, so a record, its job lock, its
//! wait list and its run in the history change together or not at all, whichever process on
//! the file runs it. Times are the wall clock (see `crate::db::now_ms`).

mod store;

use std::time::Duration;

use async_trait::async_trait;

use cronq_ledger_rules as rules;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{
    Cancel, Cancelled, Claim, ClaimOutcome, End, Ended, ExecutionLease, GateUse, Heartbeat, Ledger,
    Orphan, Record, Settle, State,
};
use cronq_shared::store::StoreError;

use crate::db::{Db, Failure, now_ms};
use crate::runlog::{self, SqliteRunLog};

use self::store::Store;

/// How many records past their retention a reap sweeps away at most.
const EXPIRE_BATCH: usize = 500;

/// The ledger of a data file; ended runs go to its run history, in the same transaction.
#[derive(Debug, Clone)]
pub struct SqliteLedger {
    db: Db,
    history: SqliteRunLog,
}

impl SqliteLedger {
    /// The ledger in `db`, appending to `history` (in the same file).
    pub fn new(db: Db, history: SqliteRunLog) -> Self {
        Self { db, history }
    }

    /// A key's record as it is now, for tests and inspection.
    ///
    /// # Errors
    /// [`StoreError`] when the file cannot be read.
    pub async fn record(&self, key: &OccurrenceKey) -> Result<Option<Record>, StoreError> {
        let key = key.clone();
        self.with(move |s| rules::record(s, &key)).await
    }

    /// Runs `f` on the storage at this instant, in one write transaction.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store<'_>) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.db
            .run(move |conn| {
                f(&mut Store {
                    conn,
                    now: now_ms(),
                })
            })
            .await
            .map_err(Failure::into_store)
    }
}

#[async_trait]
impl Ledger for SqliteLedger {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        let claim = claim.clone();
        self.with(move |s| rules::claim(s, &claim)).await
    }

    async fn heartbeat(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
    ) -> Result<Heartbeat, StoreError> {
        let lease = lease.clone();
        self.with(move |s| rules::heartbeat(s, &lease, duration))
            .await
    }

    async fn keep(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
        _body: &[u8],
        _retention: Duration,
    ) -> Result<Heartbeat, StoreError> {
        // Every claim's message is kept here: none is held.
        self.heartbeat(lease, duration).await
    }

    async fn complete(&self, lease: &ExecutionLease, end: &End) -> Result<Ended, StoreError> {
        let (lease, end) = (lease.clone(), end.clone());
        self.with(move |s| rules::complete(s, &lease, &end)).await
    }

    async fn settle(&self, settle: &Settle) -> Result<Ended, StoreError> {
        let settle = settle.clone();
        self.with(move |s| rules::settle(s, &settle)).await
    }

    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError> {
        let bounds = self.history.bounds();
        self.with(move |s| {
            let out = rules::reap(s, limit, hold)?;
            // The sweeps that keep the file bounded ride on the reaper's period.
            s.expire(EXPIRE_BATCH)?;
            runlog::trim(s.conn, bounds)?;
            Ok(out)
        })
        .await
    }

    async fn admit_replay(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        let key = key.clone();
        self.with(move |s| rules::admit_replay(s, &key)).await
    }

    async fn cancel(&self, cancel: &Cancel) -> Result<Cancelled, StoreError> {
        let cancel = cancel.clone();
        self.with(move |s| rules::cancel(s, &cancel)).await
    }

    async fn cancels(&self) -> Result<u64, StoreError> {
        self.with(|s| s.cancels()).await
    }

    async fn gates(&self, gates: &[String]) -> Result<Vec<GateUse>, StoreError> {
        let gates = gates.to_vec();
        self.with(move |s| gates.iter().map(|g| rules::gate_use(s, g)).collect())
            .await
    }

    async fn record(&self, key: &OccurrenceKey) -> Result<Option<Record>, StoreError> {
        SqliteLedger::record(self, key).await
    }
}
