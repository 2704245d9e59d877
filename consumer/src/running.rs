//! The attempts a consumer runs now of jobs with an `sla` on their start or duration,
//! reported with each registry beat (`cronq_shared::registry::Beat::running`) so that the
//! leader's alerts can tell a run that is late or too long while it still runs.
//!
//! Invariant: an attempt is listed from its start to its end exactly: the [`Entry`] that
//! lists it takes it off when dropped, however the attempt ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use cronq_shared::message::Occurrence;
use cronq_shared::registry::{InFlight, RUNNING_REPORTED};

/// The running attempts, shared by a consumer's tasks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Running {
    attempts: Arc<Mutex<HashMap<u64, InFlight>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

/// One listed attempt; dropping it takes it off the list.
#[must_use = "the attempt is listed while the entry lives"]
pub(crate) struct Entry {
    running: Running,
    id: u64,
}

impl Running {
    /// Lists `occ`'s attempt, started at `started_at`, until the entry is dropped.
    pub(crate) fn enter(&self, occ: &Occurrence, started_at: DateTime<Utc>) -> Entry {
        self.list(InFlight {
            key: occ.key.to_string(),
            job: occ.job.to_string(),
            attempt: occ.attempt,
            started_at,
        })
    }

    fn list(&self, attempt: InFlight) -> Entry {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().insert(id, attempt);
        Entry {
            running: self.clone(),
            id,
        }
    }

    /// The longest-running [`RUNNING_REPORTED`] attempts, the longest first.
    pub(crate) fn report(&self) -> Vec<InFlight> {
        let mut all: Vec<InFlight> = self.lock().values().cloned().collect();
        all.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.key.cmp(&b.key)));
        all.truncate(RUNNING_REPORTED);
        all
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, InFlight>> {
        self.attempts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.running.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(job: &str, started_at: &str) -> InFlight {
        InFlight {
            key: format!("{job}@{started_at}"),
            job: job.to_owned(),
            attempt: 1,
            started_at: started_at.parse().unwrap(),
        }
    }

    #[test]
    fn an_attempt_is_listed_while_its_entry_lives_the_longest_running_first() {
        let running = Running::default();
        let b = running.list(attempt("b", "2026-12-04T10:05:00Z"));
        let a = running.list(attempt("a", "2026-12-04T10:00:00Z"));
        let listed = running.report();
        assert_eq!(
            listed.iter().map(|r| r.job.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        drop(a);
        assert_eq!(running.report().len(), 1);
        drop(b);
        assert!(running.report().is_empty());
    }
}
