//! The ledger in process memory, for fast tests and `cronq standalone --data :memory:`:
//! the shared rules (`cronq_ledger_rules`) on maps behind one mutex (never held
//! across an await), times from a monotonic clock. Runs of ended records go to a
//! [`MemoryRunLog`], under the same lock.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use cronq_ledger_rules::{self as rules, JobLock, Rec, Records};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{
    Cancel, Cancelled, Claim, ClaimOutcome, End, Ended, ExecutionLease, GateUse, Heartbeat, Ledger,
    Orphan, Record, Settle, State,
};
use cronq_shared::runlog::Run;
use cronq_shared::store::StoreError;

use crate::runlog::MemoryRunLog;

/// The in-memory ledger. Its [`Default`] keeps runs in a history of its own.
#[derive(Debug)]
pub struct MemoryLedger {
    inner: Mutex<Maps>,
    history: Arc<MemoryRunLog>,
    /// The clock's origin: instants are milliseconds since it.
    origin: Instant,
}

impl Default for MemoryLedger {
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

#[derive(Debug, Default)]
struct Maps {
    records: HashMap<String, Rec>,
    /// Gate → its slots (see `cronq_ledger_rules`).
    slots: HashMap<String, Vec<JobLock>>,
    /// (due, key) of every record with a reaper time.
    due: BTreeSet<(i64, String)>,
    /// Gate → (scheduled ms, key) of its records in state `waiting`.
    waits: HashMap<String, BTreeSet<(i64, String)>>,
    /// Job → the last fencing token issued to it; never dropped.
    fences: HashMap<String, u64>,
    /// How many cancels of running attempts were asked for.
    cancels: u64,
}

/// The maps at one instant, with the history to append to.
struct Step<'a> {
    maps: &'a mut Maps,
    history: &'a MemoryRunLog,
    now: i64,
}

impl Maps {
    /// Drops `key` from the indexes of its record `rec`.
    fn unindex(&mut self, key: &str, rec: &Rec) {
        if let Some(due) = rec.due {
            self.due.remove(&(due, key.to_owned()));
        }
        if rec.state == State::Waiting
            && let Some(waits) = self.waits.get_mut(&rec.gate)
        {
            waits.remove(&(rec.sched, key.to_owned()));
            if waits.is_empty() {
                self.waits.remove(&rec.gate);
            }
        }
    }
}

impl Records for Step<'_> {
    type Error = StoreError;

    fn now(&self) -> i64 {
        self.now
    }

    fn get(&mut self, key: &str) -> Result<Option<Rec>, StoreError> {
        Ok(self.maps.records.get(key).cloned())
    }

    fn put(&mut self, key: &str, rec: &Rec) -> Result<(), StoreError> {
        self.remove(key)?;
        if let Some(due) = rec.due {
            self.maps.due.insert((due, key.to_owned()));
        }
        if rec.state == State::Waiting {
            self.maps
                .waits
                .entry(rec.gate.clone())
                .or_default()
                .insert((rec.sched, key.to_owned()));
        }
        self.maps.records.insert(key.to_owned(), rec.clone());
        Ok(())
    }

    fn remove(&mut self, key: &str) -> Result<(), StoreError> {
        if let Some(old) = self.maps.records.remove(key) {
            self.maps.unindex(key, &old);
        }
        Ok(())
    }

    fn slots(&mut self, gate: &str) -> Result<Vec<JobLock>, StoreError> {
        Ok(self.maps.slots.get(gate).cloned().unwrap_or_default())
    }

    fn set_slot(
        &mut self,
        gate: &str,
        holder: &str,
        slot: Option<&JobLock>,
    ) -> Result<(), StoreError> {
        let now = self.now;
        let slots = self.maps.slots.entry(gate.to_owned()).or_default();
        // Lapsed slots go as the gate is written, so a gate holds at most its live slots
        // and the ones lapsed since its last write.
        slots.retain(|l| l.holder != holder && l.until > now);
        if let Some(slot) = slot {
            slots.push(slot.clone());
        }
        if slots.is_empty() {
            self.maps.slots.remove(gate);
        }
        Ok(())
    }

    fn wait_ends(
        &mut self,
        gate: &str,
        n: usize,
        last: bool,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let now = self.now;
        let Some(waits) = self.maps.waits.get(gate) else {
            return Ok(Vec::new());
        };
        let holds = |(_, key): &&(i64, String)| {
            self.maps
                .records
                .get(key)
                .is_some_and(|r| r.body.is_some() && r.expires > now)
        };
        let found: Vec<(i64, String)> = if last {
            waits.iter().rev().filter(holds).take(n).cloned().collect()
        } else {
            waits.iter().filter(holds).take(n).cloned().collect()
        };
        Ok(found)
    }

    fn waiting(&mut self, job: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .maps
            .waits
            .get(job)
            .map(|w| w.iter().map(|(_, k)| k.clone()).collect())
            .unwrap_or_default())
    }

    fn due(&mut self, limit: usize) -> Result<Vec<String>, StoreError> {
        let now = self.now;
        Ok(self
            .maps
            .due
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(limit)
            .map(|(_, k)| k.clone())
            .collect())
    }

    fn append(&mut self, run: &Run) -> Result<(), StoreError> {
        self.history.push(run.clone());
        Ok(())
    }

    fn next_fence(&mut self, job: &str) -> Result<u64, StoreError> {
        let fence = self.maps.fences.entry(job.to_owned()).or_default();
        *fence += 1;
        Ok(*fence)
    }

    fn count_cancel(&mut self) -> Result<(), StoreError> {
        self.maps.cancels += 1;
        Ok(())
    }
}

impl MemoryLedger {
    /// An empty ledger that appends the runs of ended records to `history`.
    pub fn new(history: Arc<MemoryRunLog>) -> Self {
        Self {
            inner: Mutex::default(),
            history,
            origin: Instant::now(),
        }
    }

    /// A key's record as it is now, for tests and inspection.
    pub fn record(&self, key: &OccurrenceKey) -> Option<Record> {
        self.step(|s| rules::record(s, key)).ok().flatten()
    }

    /// Runs `f` on the maps at this instant, under the lock: one atomic step.
    fn step<T>(
        &self,
        f: impl FnOnce(&mut Step<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let now = i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX);
        // A panic while holding this lock leaves plain data behind; keep serving it.
        let mut maps: MutexGuard<'_, Maps> =
            self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut Step {
            maps: &mut maps,
            history: &self.history,
            now,
        })
    }
}

#[async_trait]
impl Ledger for MemoryLedger {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        self.step(|s| rules::claim(s, claim))
    }

    async fn heartbeat(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
    ) -> Result<Heartbeat, StoreError> {
        self.step(|s| rules::heartbeat(s, lease, duration))
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
        self.step(|s| rules::complete(s, lease, end))
    }

    async fn settle(&self, settle: &Settle) -> Result<Ended, StoreError> {
        self.step(|s| rules::settle(s, settle))
    }

    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError> {
        self.step(|s| rules::reap(s, limit, hold))
    }

    async fn admit_replay(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        self.step(|s| rules::admit_replay(s, key))
    }

    async fn cancel(&self, cancel: &Cancel) -> Result<Cancelled, StoreError> {
        self.step(|s| rules::cancel(s, cancel))
    }

    async fn cancels(&self) -> Result<u64, StoreError> {
        self.step(|s| Ok(s.maps.cancels))
    }

    async fn gates(&self, gates: &[String]) -> Result<Vec<GateUse>, StoreError> {
        self.step(|s| gates.iter().map(|g| rules::gate_use(s, g)).collect())
    }

    async fn record(&self, key: &OccurrenceKey) -> Result<Option<Record>, StoreError> {
        self.step(|s| rules::record(s, key))
    }
}
