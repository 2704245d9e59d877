//! The run history in the data file: one row per run (JSON), newest last, bounded by count
//! and by age; the ledger appends in its own transactions (`append`), so a record and
//! its run commit together. A field added to `Run` with a default needs no schema change:
//! rows written before it (e.g. without `published_at`) read back with the default.
//! Attempts' outputs are rows of their own (`outputs`), trimmed with the runs.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, params};

use cronq_shared::key::OccurrenceKey;
use cronq_shared::names::JobName;
use cronq_shared::runlog::{Run, RunLog, RunOutput, Tail, TailFrom};
use cronq_shared::store::StoreError;

use crate::db::{Db, Failure, ms, now_ms};

/// The run history of a data file.
#[derive(Debug, Clone)]
pub struct SqliteRunLog {
    db: Db,
    bounds: Bounds,
}

/// How much history is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    retention: Duration,
    max_runs: usize,
}

impl SqliteRunLog {
    /// The history in `db`, keeping at most `max_runs` runs, none older than `retention`
    /// (both enforced by [`crate::SqliteLedger`]'s sweeps and by each [`RunLog::record`]).
    pub fn new(db: Db, retention: Duration, max_runs: usize) -> Self {
        Self {
            db,
            bounds: Bounds {
                retention,
                max_runs: max_runs.max(1),
            },
        }
    }

    pub(crate) fn bounds(&self) -> Bounds {
        self.bounds
    }
}

/// Appends `run` in the caller's transaction.
pub(crate) fn append(conn: &Connection, run: &Run) -> Result<(), Failure> {
    let json = serde_json::to_string(run).map_err(Failure::corrupt(run.key.to_string()))?;
    conn.prepare_cached("INSERT INTO runs (job, at, run) VALUES (?1, ?2, ?3)")?
        .execute(params![run.job.as_str(), now_ms(), json])?;
    Ok(())
}

/// Drops the runs beyond the bounds; returns how many.
pub(crate) fn trim(conn: &Connection, bounds: Bounds) -> Result<usize, Failure> {
    let max = i64::try_from(bounds.max_runs).unwrap_or(i64::MAX);
    let by_count = conn
        .prepare_cached("DELETE FROM runs WHERE id <= (SELECT max(id) FROM runs) - ?1")?
        .execute([max])?;
    let cutoff = now_ms().saturating_sub(ms(bounds.retention));
    let by_age = conn
        .prepare_cached("DELETE FROM runs WHERE at < ?1")?
        .execute([cutoff])?;
    conn.prepare_cached("DELETE FROM outputs WHERE id <= (SELECT max(id) FROM outputs) - ?1")?
        .execute([max])?;
    conn.prepare_cached("DELETE FROM outputs WHERE at < ?1")?
        .execute([cutoff])?;
    Ok(by_count + by_age)
}

#[async_trait]
impl RunLog for SqliteRunLog {
    async fn record(&self, run: &Run) -> Result<(), StoreError> {
        let (run, bounds) = (run.clone(), self.bounds);
        self.db
            .run(move |tx| {
                append(tx, &run)?;
                trim(tx, bounds)?;
                Ok(())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn list(&self, job: Option<&JobName>, limit: usize) -> Result<Vec<Run>, StoreError> {
        let job = job.map(|j| j.as_str().to_owned());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db
            .run(move |conn| {
                let rows: Vec<(i64, String)> = match &job {
                    Some(job) => conn
                        .prepare_cached(
                            "SELECT id, run FROM runs WHERE job = ?1 ORDER BY id DESC LIMIT ?2",
                        )?
                        .query_map(params![job, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect::<Result<_, _>>()?,
                    None => conn
                        .prepare_cached("SELECT id, run FROM runs ORDER BY id DESC LIMIT ?1")?
                        .query_map([limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect::<Result<_, _>>()?,
                };
                rows.into_iter()
                    .map(|(id, json)| {
                        serde_json::from_str(&json).map_err(Failure::corrupt(format!("runs/{id}")))
                    })
                    .collect()
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn tail(&self, from: &TailFrom, limit: usize) -> Result<Tail, StoreError> {
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        let (sql, bound) = match from {
            TailFrom::Since(at) => (
                "SELECT id, run FROM runs WHERE at >= ?1 ORDER BY id LIMIT ?2",
                at.timestamp_millis(),
            ),
            TailFrom::After(id) => (
                "SELECT id, run FROM runs WHERE id > ?1 ORDER BY id LIMIT ?2",
                id.parse::<i64>().map_err(|_| StoreError::Corrupt {
                    key: format!("runs/{id}"),
                    source: serde::de::Error::custom("a run history position is a row id"),
                })?,
            ),
        };
        let rows: Vec<(i64, String)> = self
            .db
            .run(move |conn| {
                conn.prepare_cached(sql)?
                    .query_map(params![bound, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()
                    .map_err(Into::into)
            })
            .await
            .map_err(Failure::into_store)?;
        let next = rows
            .last()
            .map_or_else(|| from.clone(), |(id, _)| TailFrom::After(id.to_string()));
        let runs = rows
            .into_iter()
            .map(|(id, json)| {
                serde_json::from_str(&json).map_err(|source| StoreError::Corrupt {
                    key: format!("runs/{id}"),
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Tail { runs, next })
    }

    async fn keep_output(
        &self,
        key: &OccurrenceKey,
        attempt: u32,
        output: &RunOutput,
    ) -> Result<(), StoreError> {
        let (key, bounds) = (key.to_string(), self.bounds);
        let json = serde_json::to_string(output).map_err(|source| StoreError::Corrupt {
            key: format!("outputs/{key}/{attempt}"),
            source,
        })?;
        self.db
            .run(move |tx| {
                tx.prepare_cached(
                    "INSERT INTO outputs (key, attempt, at, output) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (key, attempt) DO UPDATE SET at = excluded.at, output = excluded.output",
                )?
                .execute(params![key, attempt, now_ms(), json])?;
                trim(tx, bounds)?;
                Ok(())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn outputs(&self, key: &OccurrenceKey) -> Result<BTreeMap<u32, RunOutput>, StoreError> {
        let key = key.to_string();
        self.db
            .run(move |conn| {
                let rows: Vec<(u32, String)> = conn
                    .prepare_cached("SELECT attempt, output FROM outputs WHERE key = ?1")?
                    .query_map([&key], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                rows.into_iter()
                    .map(|(attempt, json)| {
                        serde_json::from_str(&json)
                            .map(|o| (attempt, o))
                            .map_err(Failure::corrupt(format!("outputs/{key}/{attempt}")))
                    })
                    .collect()
            })
            .await
            .map_err(Failure::into_store)
    }
}
