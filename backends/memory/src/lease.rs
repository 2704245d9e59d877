//! In-memory implementation of the lease port, for `cronq standalone` and fast tests.
//! Clones share one lease, so several in-process producers can compete for it.
//!
//! Expiry follows the real clock (`std::time::Instant`), like Redis TTLs do.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use cronq_shared::lease::{Holder, Lease, LeaseError, Term, TermRecord};

/// The lease in process memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryLease {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    epoch: u64,
    held: Option<(Term, Instant)>,
    /// The recorded terms, oldest first.
    terms: Vec<TermRecord>,
}

impl State {
    fn current(&mut self) -> Option<&Term> {
        if self
            .held
            .as_ref()
            .is_some_and(|(_, until)| *until <= Instant::now())
        {
            self.held = None;
        }
        self.held.as_ref().map(|(term, _)| term)
    }

    /// Moves the record of `term`, if begun, to alive `at`.
    fn alive(&mut self, term: &Term, at: DateTime<Utc>) {
        if let Some(r) = self.terms.iter_mut().find(|r| r.epoch == term.epoch) {
            r.alive = r.alive.max(at);
        }
    }
}

impl MemoryLease {
    /// A lease nobody holds, with epoch counter 0.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves consistent data (every update is one
        // assignment), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `term` holds the lease right now (the control store's fence).
    pub(crate) fn is_current(&self, term: &Term) -> bool {
        self.lock().current() == Some(term)
    }
}

#[async_trait]
impl Lease for MemoryLease {
    async fn acquire(&self, instance: &str, ttl: Duration) -> Result<Option<Term>, LeaseError> {
        let mut state = self.lock();
        if state.current().is_some() {
            return Ok(None);
        }
        state.epoch += 1;
        let term = Term::new(state.epoch, instance);
        state.held = Some((term.clone(), Instant::now() + ttl));
        Ok(Some(term))
    }

    async fn renew(&self, term: &Term, ttl: Duration) -> Result<bool, LeaseError> {
        let mut state = self.lock();
        if state.current() != Some(term) {
            return Ok(false);
        }
        state.held = Some((term.clone(), Instant::now() + ttl));
        state.alive(term, Utc::now());
        Ok(true)
    }

    async fn release(&self, term: &Term) -> Result<bool, LeaseError> {
        let mut state = self.lock();
        if state.current() != Some(term) {
            return Ok(false);
        }
        state.held = None;
        Ok(true)
    }

    async fn holder(&self) -> Result<Option<Holder>, LeaseError> {
        let mut state = self.lock();
        state.current();
        Ok(state.held.as_ref().map(|(term, until)| Holder {
            epoch: term.epoch,
            instance: term.instance.clone(),
            remaining: until.saturating_duration_since(Instant::now()),
        }))
    }

    async fn begin(
        &self,
        term: &Term,
        start: DateTime<Utc>,
        keep: Duration,
    ) -> Result<(), LeaseError> {
        let mut state = self.lock();
        let cutoff = chrono::TimeDelta::from_std(keep)
            .ok()
            .and_then(|keep| start.checked_sub_signed(keep))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        state
            .terms
            .retain(|r| r.alive >= cutoff && r.epoch != term.epoch);
        state.terms.push(TermRecord {
            epoch: term.epoch,
            instance: term.instance.clone(),
            start,
            alive: start,
        });
        state.terms.sort_by_key(|r| r.epoch);
        Ok(())
    }

    async fn terms(&self) -> Result<Vec<TermRecord>, LeaseError> {
        Ok(self.lock().terms.clone())
    }
}
