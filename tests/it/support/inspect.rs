//! Reading a ledger's records directly, for assertions: the ledger port has no read (the
//! consumer never needs one), so each backend offers an inspection method of its own and
//! this trait puts them behind one name for the generic suites.

use async_trait::async_trait;
use cronq_memory::MemoryLedger;
use cronq_redis::RedisLedger;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::Record;
use cronq_sqlite::SqliteLedger;

/// A ledger whose records a test can read.
#[async_trait]
pub trait Inspect: Send + Sync {
    /// The record of `key` as it is now.
    async fn inspect(&self, key: &OccurrenceKey) -> Option<Record>;
}

#[async_trait]
impl Inspect for MemoryLedger {
    async fn inspect(&self, key: &OccurrenceKey) -> Option<Record> {
        self.record(key)
    }
}

#[async_trait]
impl Inspect for RedisLedger {
    async fn inspect(&self, key: &OccurrenceKey) -> Option<Record> {
        self.record(key).await.expect("read a record from Redis")
    }
}

#[async_trait]
impl Inspect for SqliteLedger {
    async fn inspect(&self, key: &OccurrenceKey) -> Option<Record> {
        self.record(key)
            .await
            .expect("read a record from the data file")
    }
}
