//! The job store in memory: each job's revisions in a list, behind one lock, so a write
//! checks and appends in one step.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;

use cronq_shared::jobs::{Expect, JobStore, Revision, Written, next_revision};
use cronq_shared::names::JobName;
use cronq_shared::recorded::{ConfigRecord, next_records};
use cronq_shared::store::StoreError;

#[derive(Debug, Default)]
struct State {
    version: u64,
    jobs: BTreeMap<String, Vec<Revision>>,
    /// The recorded config loads, newest first.
    configs: Vec<ConfigRecord>,
}

/// Runtime jobs in this process's memory, shared by its clones.
#[derive(Debug, Clone, Default)]
pub struct MemoryJobStore {
    state: Arc<Mutex<State>>,
}

impl MemoryJobStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl JobStore for MemoryJobStore {
    async fn version(&self) -> Result<u64, StoreError> {
        Ok(self.state().version)
    }

    async fn list(&self) -> Result<Vec<Revision>, StoreError> {
        Ok(self
            .state()
            .jobs
            .values()
            .filter_map(|h| h.last().filter(|r| r.spec.is_some()).cloned())
            .collect())
    }

    async fn history(&self, job: &JobName) -> Result<Vec<Revision>, StoreError> {
        Ok(self
            .state()
            .jobs
            .get(job.as_str())
            .cloned()
            .unwrap_or_default())
    }

    async fn write(
        &self,
        job: &JobName,
        spec: Option<&str>,
        by: &str,
        expect: Expect,
    ) -> Result<Written, StoreError> {
        let mut state = self.state();
        let history = state.jobs.entry(job.as_str().to_owned()).or_default();
        match next_revision(history, job, spec, by, expect, Utc::now()) {
            Ok(rev) => {
                let n = rev.revision;
                history.push(rev);
                state.version += 1;
                Ok(Written::Done(n))
            }
            Err(stale) => Ok(stale),
        }
    }

    async fn record_config(&self, record: &ConfigRecord) -> Result<(), StoreError> {
        let mut state = self.state();
        state.configs = next_records(&state.configs, record.clone());
        Ok(())
    }

    async fn config_records(&self, limit: usize) -> Result<Vec<ConfigRecord>, StoreError> {
        Ok(self.state().configs.iter().take(limit).cloned().collect())
    }
}
