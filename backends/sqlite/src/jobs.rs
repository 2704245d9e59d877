//! The job store in the data file: every revision a row of `job_revisions`; a write reads
//! the job's last revision and appends the next in one transaction, so two writers never
//! both pass the same compare.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use cronq_shared::jobs::{Changes, Expect, JobStore, Revision, Written, next_revision};
use cronq_shared::names::JobName;
use cronq_shared::recorded::ConfigRecord;
use cronq_shared::store::StoreError;

use crate::db::{Db, Failure};

/// The runtime jobs of a data file.
#[derive(Debug, Clone)]
pub struct SqliteJobStore {
    db: Db,
}

impl SqliteJobStore {
    /// The job store in `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

type Row = (String, i64, Option<String>, String, i64);

fn revision((name, revision, spec, by, at): Row) -> Revision {
    Revision {
        name,
        revision: u64::try_from(revision).unwrap_or(0),
        spec,
        by,
        at: DateTime::from_timestamp_millis(at).unwrap_or_default(),
    }
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn history_of(conn: &Connection, job: &str) -> Result<Vec<Revision>, Failure> {
    let rows: Vec<Row> = conn
        .prepare_cached(
            "SELECT job, revision, spec, by_whom, at FROM job_revisions WHERE job = ?1 ORDER BY revision",
        )?
        .query_map([job], read_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows.into_iter().map(revision).collect())
}

#[async_trait]
impl JobStore for SqliteJobStore {
    async fn version(&self) -> Result<u64, StoreError> {
        self.db
            .run(|conn| {
                let v: Option<i64> = conn
                    .prepare_cached("SELECT max(seq) FROM job_revisions")?
                    .query_row([], |r| r.get(0))
                    .optional()?
                    .flatten();
                Ok(u64::try_from(v.unwrap_or(0)).unwrap_or(0))
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn list(&self) -> Result<Vec<Revision>, StoreError> {
        self.db
            .run(|conn| {
                let rows: Vec<Row> = conn
                    .prepare_cached(
                        "SELECT job, revision, spec, by_whom, at FROM job_revisions AS r
                         WHERE revision = (SELECT max(revision) FROM job_revisions WHERE job = r.job)
                           AND spec IS NOT NULL
                         ORDER BY job",
                    )?
                    .query_map([], read_row)?
                    .collect::<Result<_, _>>()?;
                Ok(rows.into_iter().map(revision).collect())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn changes(&self, since: u64) -> Result<Option<Changes>, StoreError> {
        let since = i64::try_from(since).unwrap_or(i64::MAX);
        self.db
            .run(move |conn| {
                let version: i64 = conn
                    .prepare_cached("SELECT coalesce(max(seq), 0) FROM job_revisions")?
                    .query_row([], |r| r.get(0))?;
                if since > version {
                    return Ok(None);
                }
                // Every revision is kept: the log reaches back to any version.
                let rows: Vec<Row> = conn
                    .prepare_cached(
                        "SELECT job, revision, spec, by_whom, at FROM job_revisions AS r
                         WHERE job IN (SELECT job FROM job_revisions WHERE seq > ?1 AND seq <= ?2)
                           AND revision = (SELECT max(revision) FROM job_revisions WHERE job = r.job)
                         ORDER BY job",
                    )?
                    .query_map([since, version], read_row)?
                    .collect::<Result<_, _>>()?;
                let jobs = rows
                    .into_iter()
                    .map(revision)
                    .map(|r| (r.name.clone(), Some(r).filter(|r| r.spec.is_some())))
                    .collect();
                Ok(Some(Changes {
                    version: u64::try_from(version).unwrap_or(0),
                    jobs,
                }))
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn history(&self, job: &JobName) -> Result<Vec<Revision>, StoreError> {
        let job = job.as_str().to_owned();
        self.db
            .run(move |conn| history_of(conn, &job))
            .await
            .map_err(Failure::into_store)
    }

    async fn write(
        &self,
        job: &JobName,
        spec: Option<&str>,
        by: &str,
        expect: Expect,
    ) -> Result<Written, StoreError> {
        let (job, spec, by) = (job.clone(), spec.map(str::to_owned), by.to_owned());
        self.db
            .run(move |conn| {
                let history = history_of(conn, job.as_str())?;
                let rev =
                    match next_revision(&history, &job, spec.as_deref(), &by, expect, Utc::now()) {
                        Ok(rev) => rev,
                        Err(stale) => return Ok(stale),
                    };
                conn.prepare_cached(
                    "INSERT INTO job_revisions (job, revision, spec, by_whom, at) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    rev.name,
                    i64::try_from(rev.revision).unwrap_or(i64::MAX),
                    rev.spec,
                    rev.by,
                    rev.at.timestamp_millis()
                ])?;
                Ok(Written::Done(rev.revision))
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn record_config(&self, record: &ConfigRecord) -> Result<(), StoreError> {
        let mut record = record.clone();
        let keep = record.keep();
        self.db
            .run(move |conn| {
                let newest: Option<(i64, String, String)> = conn
                    .prepare_cached(
                        "SELECT seq, digest, since FROM config_loads ORDER BY seq DESC LIMIT 1",
                    )?
                    .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?;
                // The rule of `next_records`: a load of the newest's text keeps its since.
                let replace = match newest {
                    Some((seq, digest, since)) if digest == record.digest => {
                        if let Ok(since) = since.parse() {
                            record.since = since;
                        }
                        Some(seq)
                    }
                    _ => None,
                };
                let json =
                    serde_json::to_string(&record).map_err(Failure::corrupt(CONFIG_LOADS))?;
                let since = record
                    .since
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                if let Some(seq) = replace {
                    conn.prepare_cached(
                        "UPDATE config_loads SET record = ?1, since = ?2 WHERE seq = ?3",
                    )?
                    .execute(params![json, since, seq])?;
                    return Ok(());
                }
                conn.prepare_cached(
                    "INSERT INTO config_loads (digest, since, record) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![record.digest, since, json])?;
                conn.prepare_cached(
                    "DELETE FROM config_loads WHERE seq <= (SELECT max(seq) FROM config_loads) - ?1",
                )?
                .execute([i64::try_from(keep).unwrap_or(i64::MAX)])?;
                Ok(())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn config_records(&self, limit: usize) -> Result<Vec<ConfigRecord>, StoreError> {
        self.db
            .run(move |conn| {
                let rows: Vec<String> = conn
                    .prepare_cached("SELECT record FROM config_loads ORDER BY seq DESC LIMIT ?1")?
                    .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                rows.iter()
                    .map(|json| serde_json::from_str(json).map_err(Failure::corrupt(CONFIG_LOADS)))
                    .collect()
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn config_digest(&self) -> Result<Option<String>, StoreError> {
        self.db
            .run(|conn| {
                Ok(conn
                    .prepare_cached("SELECT digest FROM config_loads ORDER BY seq DESC LIMIT 1")?
                    .query_row([], |r| r.get(0))
                    .optional()?)
            })
            .await
            .map_err(Failure::into_store)
    }
}

/// The table of recorded config loads, as errors name it.
const CONFIG_LOADS: &str = "config_loads";
