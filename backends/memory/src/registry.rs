//! In-memory implementation of the fleet registry: records with their deadline, digest
//! maps with theirs, and per-minute counters, in one map each. Clones share one registry
//! (one standalone process).

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use cronq_shared::names::JobName;
use cronq_shared::registry::digest::{self as job_digests, JobDigest, JobDigests};
use cronq_shared::registry::{Beat, COUNT_TTL, Counter, Registry};
use cronq_shared::store::StoreError;

/// The fleet registry in process memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryRegistry {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    beats: BTreeMap<String, (Beat, Instant)>,
    digests: HashMap<String, (JobDigests, Instant)>,
    counts: HashMap<(Counter, i64), (u64, Instant)>,
}

impl MemoryRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update below leaves the maps consistent, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Registry for MemoryRegistry {
    async fn report(&self, beat: &Beat, ttl: Duration) -> Result<(), StoreError> {
        let until = Instant::now() + ttl;
        self.lock()
            .beats
            .insert(beat.instance.clone(), (beat.clone(), until));
        Ok(())
    }

    async fn leave(&self, instance: &str) -> Result<(), StoreError> {
        self.lock().beats.remove(instance);
        Ok(())
    }

    async fn instances(&self) -> Result<Vec<Beat>, StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        state.beats.retain(|_, (_, until)| *until > now);
        Ok(state.beats.values().map(|(b, _)| b.clone()).collect())
    }

    async fn put_digests(
        &self,
        digest: &str,
        jobs: &[(JobName, JobDigest)],
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        state.digests.retain(|_, (_, until)| *until > now);
        let entry = state
            .digests
            .entry(digest.to_owned())
            .or_insert_with(|| (job_digests::sorted(jobs.iter().cloned()), now));
        entry.1 = now + ttl;
        Ok(())
    }

    async fn digests(&self, digest: &str) -> Result<Option<JobDigests>, StoreError> {
        let now = Instant::now();
        Ok(self
            .lock()
            .digests
            .get(digest)
            .filter(|(_, until)| *until > now)
            .map(|(m, _)| m.clone()))
    }

    async fn count(&self, counter: Counter, minute: i64, n: u64) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        state.counts.retain(|_, (_, until)| *until > now);
        let entry = state.counts.entry((counter, minute)).or_insert((0, now));
        entry.0 += n;
        entry.1 = now + COUNT_TTL;
        Ok(())
    }

    async fn counted(
        &self,
        counter: Counter,
        minutes: RangeInclusive<i64>,
    ) -> Result<u64, StoreError> {
        let now = Instant::now();
        Ok(self
            .lock()
            .counts
            .iter()
            .filter(|((c, m), (_, until))| *c == counter && minutes.contains(m) && *until > now)
            .map(|(_, (n, _))| n)
            .sum())
    }
}
