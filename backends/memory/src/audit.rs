//! The audit log in memory: the entries in recording order, behind one lock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{TimeDelta, Utc};

use cronq_shared::audit::{AuditLog, Entry, Filter, MAX_ENTRIES};
use cronq_shared::store::StoreError;

/// The audit log in this process's memory, shared by its clones.
#[derive(Debug, Clone)]
pub struct MemoryAudit {
    entries: Arc<Mutex<Vec<Entry>>>,
    retention: Duration,
}

impl MemoryAudit {
    /// An empty log keeping entries for `retention`.
    pub fn new(retention: Duration) -> Self {
        Self {
            entries: Arc::default(),
            retention,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl AuditLog for MemoryAudit {
    async fn record(&self, entry: &Entry) -> Result<(), StoreError> {
        let cutoff = Utc::now() - TimeDelta::from_std(self.retention).unwrap_or(TimeDelta::MAX);
        let mut entries = self.entries();
        entries.push(entry.clone());
        entries.retain(|e| e.at >= cutoff);
        let over = entries.len().saturating_sub(MAX_ENTRIES);
        entries.drain(..over);
        Ok(())
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<Entry>, StoreError> {
        let entries = self.entries();
        let mut found: Vec<(usize, &Entry)> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| filter.matches(e))
            .collect();
        found.sort_by(|(i, a), (j, b)| b.at.cmp(&a.at).then(j.cmp(i)));
        Ok(found
            .into_iter()
            .take(filter.limit)
            .map(|(_, e)| e.clone())
            .collect())
    }
}
