//! The job store in memory: each job's revisions in a list, behind one lock, so a write
//! checks and appends in one step; the names of the last writes as the change log, and a
//! `watch` that wakes the readers of this process at each write.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;

use cronq_shared::jobs::{CHANGE_LOG, Changes, Expect, JobStore, Revision, Written, next_revision};
use cronq_shared::names::JobName;
use cronq_shared::recorded::{ConfigRecord, next_records};
use cronq_shared::store::StoreError;

#[derive(Debug, Default)]
struct State {
    version: u64,
    jobs: BTreeMap<String, Vec<Revision>>,
    /// The job of each of the last [`CHANGE_LOG`] writes: the last one's is that of
    /// `version`.
    log: VecDeque<String>,
    /// The recorded config loads, newest first.
    configs: Vec<ConfigRecord>,
}

/// Runtime jobs in this process's memory, shared by its clones.
#[derive(Debug, Clone)]
pub struct MemoryJobStore {
    state: Arc<Mutex<State>>,
    /// The version, sent after each write.
    written: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for MemoryJobStore {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            written: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
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

    async fn changes(&self, since: u64) -> Result<Option<Changes>, StoreError> {
        let state = self.state();
        let first = state.version - state.log.len() as u64;
        if since < first || since > state.version {
            return Ok(None);
        }
        let skip = usize::try_from(since - first).unwrap_or(usize::MAX);
        let names: BTreeSet<&String> = state.log.iter().skip(skip).collect();
        let jobs = names
            .into_iter()
            .map(|name| {
                let now = state.jobs.get(name).and_then(|h| h.last());
                (name.clone(), now.filter(|r| r.spec.is_some()).cloned())
            })
            .collect();
        Ok(Some(Changes {
            version: state.version,
            jobs,
        }))
    }

    fn notices(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.written.subscribe())
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
                state.log.push_back(job.as_str().to_owned());
                if state.log.len() as u64 > CHANGE_LOG {
                    state.log.pop_front();
                }
                self.written.send_replace(state.version);
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

    async fn config_digest(&self) -> Result<Option<String>, StoreError> {
        Ok(self.state().configs.first().map(|r| r.digest.clone()))
    }
}

#[cfg(test)]
mod tests {
    use cronq_shared::reload::testing::{following, write};

    use super::*;

    /// The reloader following this store: merging many runtime jobs into the config (about
    /// a second at a million) leaves the runtime's thread to its other tasks meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn a_merge_of_many_runtime_jobs_leaves_the_thread_to_its_other_tasks() {
        const JOBS: usize = 20_000;
        let store = Arc::new(MemoryJobStore::new());
        for i in 0..JOBS {
            write(&*store, &format!("rt-{i}"), true).await;
        }
        let (mut reloader, config) = following(store);
        // Another task of this one thread: it counts its turns.
        let counter = cronq_shared::blocking::TurnCounter::start();
        let before = counter.turns();
        assert!(reloader.poll().await, "the runtime jobs are new");
        let during = counter.turns() - before;
        drop(counter);
        assert_eq!(config.borrow().jobs.len(), JOBS, "every runtime job merged");
        // Were the merge done on this thread, the counter would not have run at all: the
        // store's reads never wait.
        assert!(
            during >= 10,
            "the other task ran {during} times while {JOBS} runtime jobs were merged"
        );
    }
}
