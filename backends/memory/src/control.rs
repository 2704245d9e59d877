//! In-memory implementation of the control store, fenced by a [`MemoryLease`]. Clones share
//! one store.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use cronq_shared::control::{Commit, ControlError, ControlStore, Pause, Request};
use cronq_shared::lease::Term;

use crate::lease::MemoryLease;
use cronq_shared::names::JobName;

/// The control store in process memory.
#[derive(Debug, Clone)]
pub struct MemoryControl {
    lease: MemoryLease,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    cursors: HashMap<JobName, DateTime<Utc>>,
    paused: BTreeMap<JobName, Pause>,
    requests: BTreeMap<String, Request>,
}

impl MemoryControl {
    /// An empty store whose commits are fenced by `lease`.
    pub fn new(lease: &MemoryLease) -> Self {
        Self {
            lease: lease.clone(),
            state: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update below leaves the maps consistent, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl ControlStore for MemoryControl {
    async fn cursors(&self) -> Result<HashMap<JobName, DateTime<Utc>>, ControlError> {
        Ok(self.lock().cursors.clone())
    }

    async fn commit(&self, term: &Term, commit: &Commit) -> Result<(), ControlError> {
        let mut state = self.lock();
        // Checked under the state lock, so a commit and its fence are one atomic step.
        if !self.lease.is_current(term) {
            return Err(ControlError::NotLeader { epoch: term.epoch });
        }
        for (job, at) in &commit.cursors {
            let cursor = state.cursors.entry(job.clone()).or_insert(*at);
            if *cursor < *at {
                *cursor = *at;
            }
        }
        for (id, request) in &commit.settle {
            match request {
                None => {
                    state.requests.remove(id);
                }
                Some(r) => {
                    if let Some(slot) = state.requests.get_mut(id) {
                        *slot = r.clone();
                    }
                }
            }
        }
        Ok(())
    }

    async fn set_pause(&self, job: &JobName, pause: Option<&Pause>) -> Result<bool, ControlError> {
        let mut state = self.lock();
        Ok(match pause {
            Some(p) => state.paused.insert(job.clone(), p.clone()).is_some(),
            None => state.paused.remove(job).is_some(),
        })
    }

    async fn paused(&self) -> Result<BTreeMap<JobName, Pause>, ControlError> {
        Ok(self.lock().paused.clone())
    }

    async fn submit(&self, request: &Request) -> Result<(), ControlError> {
        self.lock()
            .requests
            .insert(request.id.clone(), request.clone());
        Ok(())
    }

    async fn pending(&self) -> Result<Vec<Request>, ControlError> {
        Ok(self.lock().requests.values().cloned().collect())
    }
}
