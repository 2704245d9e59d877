//! The fleet registry in the data file: one row per instance with its lapse time, the
//! per-job digests of each config under its overall digest (written in one transaction,
//! so a reader never sees half of one), and per-minute counters. Lapsed rows are skipped
//! when read and deleted when written.

use std::ops::RangeInclusive;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use cronq_shared::names::JobName;
use cronq_shared::registry::digest::{self as job_digests, JobDigest, JobDigests};
use cronq_shared::registry::{Beat, COUNT_TTL, Counter, Registry};
use cronq_shared::store::StoreError;

use crate::db::{Db, Failure, ms, now_ms};

/// The fleet registry of a data file.
#[derive(Debug, Clone)]
pub struct SqliteRegistry {
    db: Db,
}

impl SqliteRegistry {
    /// The registry in `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn until(ttl: Duration) -> i64 {
    now_ms().saturating_add(ms(ttl))
}

#[async_trait]
impl Registry for SqliteRegistry {
    async fn report(&self, beat: &Beat, ttl: Duration) -> Result<(), StoreError> {
        let json = serde_json::to_string(beat).expect("a beat always serialises: plain data");
        let (instance, until) = (beat.instance.clone(), until(ttl));
        self.db
            .run(move |conn| {
                conn.prepare_cached("DELETE FROM instances WHERE until <= ?1")?
                    .execute([now_ms()])?;
                conn.prepare_cached(
                    "INSERT INTO instances (instance, beat, until) VALUES (?1, ?2, ?3)
                     ON CONFLICT (instance) DO UPDATE SET beat = excluded.beat, until = excluded.until",
                )?
                .execute(params![instance, json, until])?;
                Ok(())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn leave(&self, instance: &str) -> Result<(), StoreError> {
        let instance = instance.to_owned();
        self.db
            .run(move |conn| {
                conn.prepare_cached("DELETE FROM instances WHERE instance = ?1")?
                    .execute([instance])?;
                Ok(())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn instances(&self) -> Result<Vec<Beat>, StoreError> {
        self.db
            .run(|conn| {
                let rows: Vec<(String, String)> = conn
                    .prepare_cached(
                        "SELECT instance, beat FROM instances WHERE until > ?1 ORDER BY instance",
                    )?
                    .query_map([now_ms()], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                rows.into_iter()
                    .map(|(id, json)| {
                        serde_json::from_str(&json)
                            .map_err(Failure::corrupt(format!("instances/{id}")))
                    })
                    .collect()
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn put_digests(
        &self,
        digest: &str,
        jobs: &[(JobName, JobDigest)],
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let (digest, until) = (digest.to_owned(), until(ttl));
        let jobs: Vec<(String, String)> = jobs
            .iter()
            .map(|(j, d)| (j.to_string(), d.to_string()))
            .collect();
        self.db
            .run(move |conn| {
                let lapsed: Vec<String> = conn
                    .prepare_cached("SELECT digest FROM digest_sets WHERE until <= ?1")?
                    .query_map([now_ms()], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                for old in lapsed {
                    conn.prepare_cached("DELETE FROM job_digests WHERE digest = ?1")?
                        .execute([&old])?;
                    conn.prepare_cached("DELETE FROM digest_sets WHERE digest = ?1")?
                        .execute([&old])?;
                }
                let kept = conn
                    .prepare_cached("UPDATE digest_sets SET until = ?2 WHERE digest = ?1")?
                    .execute(params![digest, until])?;
                if kept > 0 {
                    return Ok(());
                }
                conn.prepare_cached("INSERT INTO digest_sets (digest, until) VALUES (?1, ?2)")?
                    .execute(params![digest, until])?;
                let mut insert = conn.prepare_cached(
                    "INSERT OR REPLACE INTO job_digests (digest, job, job_digest) VALUES (?1, ?2, ?3)",
                )?;
                for (job, d) in &jobs {
                    insert.execute(params![digest, job, d])?;
                }
                Ok(())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn digests(&self, digest: &str) -> Result<Option<JobDigests>, StoreError> {
        let digest = digest.to_owned();
        self.db
            .run(move |conn| {
                let known: Option<i64> = conn
                    .prepare_cached(
                        "SELECT until FROM digest_sets WHERE digest = ?1 AND until > ?2",
                    )?
                    .query_row(params![digest, now_ms()], |r| r.get(0))
                    .optional()?;
                if known.is_none() {
                    return Ok(None);
                }
                let rows: Vec<(String, String)> = conn
                    .prepare_cached("SELECT job, job_digest FROM job_digests WHERE digest = ?1")?
                    .query_map([&digest], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                Ok(Some(job_digests::sorted(rows.into_iter().filter_map(
                    |(j, d)| Some((JobName::new(j).ok()?, JobDigest::parse(&d)?)),
                ))))
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn count(&self, counter: Counter, minute: i64, n: u64) -> Result<(), StoreError> {
        let (name, until, n) = (
            counter.as_str(),
            until(COUNT_TTL),
            i64::try_from(n).unwrap_or(i64::MAX),
        );
        self.db
            .run(move |conn| {
                conn.prepare_cached("DELETE FROM counts WHERE until <= ?1")?
                    .execute([now_ms()])?;
                conn.prepare_cached(
                    "INSERT INTO counts (counter, minute, n, until) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (counter, minute) DO UPDATE SET n = n + excluded.n, until = excluded.until",
                )?
                .execute(params![name, minute, n, until])?;
                Ok(())
            })
            .await
            .map_err(Failure::into_store)
    }

    async fn counted(
        &self,
        counter: Counter,
        minutes: RangeInclusive<i64>,
    ) -> Result<u64, StoreError> {
        let (name, from, to) = (counter.as_str(), *minutes.start(), *minutes.end());
        self.db
            .run(move |conn| {
                let n: i64 = conn
                    .prepare_cached(
                        "SELECT coalesce(sum(n), 0) FROM counts
                         WHERE counter = ?1 AND minute BETWEEN ?2 AND ?3 AND until > ?4",
                    )?
                    .query_row(params![name, from, to, now_ms()], |r| r.get(0))?;
                Ok(u64::try_from(n).unwrap_or(0))
            })
            .await
            .map_err(Failure::into_store)
    }
}
