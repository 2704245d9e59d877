//! The audit log in the data file: one row per entry (JSON) in `audit`; each record drops
//! the rows past the retention and beyond the cap in the same transaction.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::params;

use cronq_shared::audit::{AuditLog, Entry, Filter, MAX_ENTRIES};
use cronq_shared::store::StoreError;

use crate::db::{Db, Failure, ms, now_ms};

/// The audit log of a data file.
#[derive(Debug, Clone)]
pub struct SqliteAudit {
    db: Db,
    retention: Duration,
}

impl SqliteAudit {
    /// The audit log in `db`, keeping entries for `retention`.
    pub fn new(db: Db, retention: Duration) -> Self {
        Self { db, retention }
    }
}

#[async_trait]
impl AuditLog for SqliteAudit {
    async fn record(&self, entry: &Entry) -> Result<(), StoreError> {
        let json = serde_json::to_string(entry).map_err(|source| StoreError::Corrupt {
            key: "audit".into(),
            source,
        })?;
        let (at, job, retention) = (
            entry.at.timestamp_millis(),
            entry.job.clone(),
            self.retention,
        );
        self.db
            .run(move |conn| {
                conn.prepare_cached("INSERT INTO audit (at, job, entry) VALUES (?1, ?2, ?3)")?
                    .execute(params![at, job, json])?;
                conn.prepare_cached("DELETE FROM audit WHERE at < ?1")?
                    .execute([now_ms().saturating_sub(ms(retention))])?;
                let max = i64::try_from(MAX_ENTRIES).unwrap_or(i64::MAX);
                conn.prepare_cached(
                    "DELETE FROM audit WHERE id <= (SELECT max(id) FROM audit) - ?1",
                )?
                .execute([max])?;
                Ok(())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<Entry>, StoreError> {
        let job = filter.job.clone();
        let since = filter.since.map_or(i64::MIN, |s| s.timestamp_millis());
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let rows: Vec<String> = self
            .db
            .run(move |conn| {
                let rows = conn
                    .prepare_cached(
                        "SELECT entry FROM audit WHERE (?1 IS NULL OR job = ?1) AND at >= ?2
                         ORDER BY at DESC, id DESC LIMIT ?3",
                    )?
                    .query_map(params![job, since, limit], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                Ok(rows)
            })
            .await
            .map_err(Failure::into_store)?;
        rows.iter()
            .map(|json| {
                serde_json::from_str(json).map_err(|source| StoreError::Corrupt {
                    key: "audit".into(),
                    source,
                })
            })
            .collect()
    }
}
