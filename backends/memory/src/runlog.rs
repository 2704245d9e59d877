//! The run history port ([`cronq_shared::runlog::RunLog`]) in memory, capped at a
//! number of runs (the oldest are dropped first).

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use cronq_shared::names::JobName;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Run, RunLog};
use cronq_shared::store::StoreError;

/// The history in memory, capped at a number of runs.
#[derive(Debug)]
pub struct MemoryRunLog {
    runs: Mutex<VecDeque<Run>>,
    max_runs: usize,
}

impl Default for MemoryRunLog {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_RUNS)
    }
}

impl MemoryRunLog {
    /// An empty history keeping at most `max_runs`.
    pub fn new(max_runs: usize) -> Self {
        Self {
            runs: Mutex::new(VecDeque::new()),
            max_runs: max_runs.max(1),
        }
    }

    /// Appends `run`, dropping the oldest beyond the cap.
    pub(crate) fn push(&self, run: Run) {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        runs.push_back(run);
        while runs.len() > self.max_runs {
            runs.pop_front();
        }
    }
}

#[async_trait]
impl RunLog for MemoryRunLog {
    async fn record(&self, run: &Run) -> Result<(), StoreError> {
        self.push(run.clone());
        Ok(())
    }

    async fn list(&self, job: Option<&JobName>, limit: usize) -> Result<Vec<Run>, StoreError> {
        let runs = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(runs
            .iter()
            .rev()
            .filter(|r| job.is_none_or(|j| *j == r.job))
            .take(limit)
            .cloned()
            .collect())
    }
}
