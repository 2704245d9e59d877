//! The run history port ([`cronq_shared::runlog::RunLog`]) in memory, capped at a
//! number of runs (the oldest are dropped first); outputs beside them, under the same cap.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::names::JobName;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Run, RunLog, RunOutput, Tail, TailFrom};
use cronq_shared::store::StoreError;

/// The history in memory, capped at a number of runs.
#[derive(Debug)]
pub struct MemoryRunLog {
    runs: Mutex<Runs>,
    outputs: Mutex<Outputs>,
    max_runs: usize,
}

/// The runs, oldest first, each with its position and when it was appended.
#[derive(Debug, Default)]
struct Runs {
    entries: VecDeque<(u64, DateTime<Utc>, Run)>,
    next: u64,
}

/// The outputs kept, by key and attempt, and the order they were kept in (for the cap).
#[derive(Debug, Default)]
struct Outputs {
    by_key: HashMap<String, BTreeMap<u32, RunOutput>>,
    order: VecDeque<(String, u32)>,
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
            runs: Mutex::default(),
            outputs: Mutex::default(),
            max_runs: max_runs.max(1),
        }
    }

    /// Appends `run`, dropping the oldest beyond the cap.
    pub(crate) fn push(&self, run: Run) {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = runs.next;
        runs.next += 1;
        runs.entries.push_back((at, Utc::now(), run));
        while runs.entries.len() > self.max_runs {
            runs.entries.pop_front();
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
            .entries
            .iter()
            .rev()
            .map(|(_, _, r)| r)
            .filter(|r| job.is_none_or(|j| *j == r.job))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn tail(&self, from: &TailFrom, limit: usize) -> Result<Tail, StoreError> {
        let runs = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let after = match from {
            TailFrom::Since(since) => runs
                .entries
                .iter()
                .find(|(_, at, _)| at >= since)
                .map_or(runs.next, |(n, _, _)| *n),
            TailFrom::After(position) => position.parse::<u64>().map_or(0, |n| n + 1),
        };
        let read: Vec<&(u64, DateTime<Utc>, Run)> = runs
            .entries
            .iter()
            .filter(|(n, _, _)| *n >= after)
            .take(limit.max(1))
            .collect();
        let next = read
            .last()
            .map_or_else(|| from.clone(), |(n, _, _)| TailFrom::After(n.to_string()));
        Ok(Tail {
            runs: read.into_iter().map(|(_, _, r)| r.clone()).collect(),
            next,
        })
    }

    async fn keep_output(
        &self,
        key: &OccurrenceKey,
        attempt: u32,
        output: &RunOutput,
    ) -> Result<(), StoreError> {
        let mut outputs = self
            .outputs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let replaced = outputs
            .by_key
            .entry(key.to_string())
            .or_default()
            .insert(attempt, output.clone());
        if replaced.is_none() {
            outputs.order.push_back((key.to_string(), attempt));
        }
        while outputs.order.len() > self.max_runs {
            let Some((key, attempt)) = outputs.order.pop_front() else {
                break;
            };
            if let Some(attempts) = outputs.by_key.get_mut(&key) {
                attempts.remove(&attempt);
                if attempts.is_empty() {
                    outputs.by_key.remove(&key);
                }
            }
        }
        Ok(())
    }

    async fn outputs(&self, key: &OccurrenceKey) -> Result<BTreeMap<u32, RunOutput>, StoreError> {
        let outputs = self
            .outputs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(outputs
            .by_key
            .get(key.as_str())
            .cloned()
            .unwrap_or_default())
    }
}
