//! Redis implementation of the fleet registry. Keys under the namespace:
//! - `fleet:instance:ID`: the instance's last beat (JSON), expiring `ttl` after it: the
//!   record that decides whether an instance is alive;
//! - `fleet:instances`: a sorted set of instance ids scored by when their record lapses
//!   (unix ms), so listing them needs no `SCAN`; an id whose record is gone is skipped,
//!   and pruned once its score has passed;
//! - `fleet:digests:DIGEST`: a hash job -> digest per config, written whole under a
//!   temporary key and renamed, so a reader never sees half of one;
//! - `fleet:count:COUNTER:MINUTE`: a counter per minute, expiring after `COUNT_TTL`.
//!
//! None of these is a guarantee's write: they do not wait for replicas.

use std::ops::RangeInclusive;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use redis::AsyncCommands;

use cronq_shared::names::{JobName, Names};
use cronq_shared::registry::digest::{self as job_digests, JobDigest, JobDigests};
use cronq_shared::registry::{Beat, COUNT_TTL, Counter, Registry};
use cronq_shared::store::StoreError;

use crate::conn::RedisConn;
use crate::error::STORE;

/// Job digests are written this many per `HSET`, so 100,000 jobs never make one huge
/// command.
const WRITE_CHUNK: usize = 10_000;

/// The fleet registry in Redis.
#[derive(Clone)]
pub struct RedisRegistry {
    conn: RedisConn,
    names: Names,
    index_key: String,
}

impl RedisRegistry {
    /// The registry of the namespace `names`, over `conn`.
    pub fn new(conn: RedisConn, names: &Names) -> Self {
        Self {
            conn,
            index_key: names.redis_key(&["fleet", "instances"]),
            names: names.clone(),
        }
    }

    fn record_key(&self, instance: &str) -> String {
        self.names.redis_key(&["fleet", "instance", instance])
    }

    fn digests_key(&self, digest: &str) -> String {
        self.names.redis_key(&["fleet", "digests", digest])
    }

    fn count_key(&self, counter: Counter, minute: i64) -> String {
        self.names
            .redis_key(&["fleet", "count", counter.as_str(), &minute.to_string()])
    }
}

fn failed(source: redis::RedisError) -> StoreError {
    StoreError::Command {
        store: STORE,
        source: Box::new(source),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl Registry for RedisRegistry {
    async fn report(&self, beat: &Beat, ttl: Duration) -> Result<(), StoreError> {
        let json = serde_json::to_string(beat).expect("a beat always serialises: plain data");
        let until = Utc::now().timestamp_millis() + i64::try_from(ms(ttl)).unwrap_or(i64::MAX);
        let mut conn = self.conn.clone();
        redis::pipe()
            .set(self.record_key(&beat.instance), json)
            .arg("PX")
            .arg(ms(ttl))
            .ignore()
            .zadd(&self.index_key, &beat.instance, until)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(failed)
    }

    async fn leave(&self, instance: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        redis::pipe()
            .del(self.record_key(instance))
            .ignore()
            .zrem(&self.index_key, instance)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(failed)
    }

    async fn instances(&self) -> Result<Vec<Beat>, StoreError> {
        let mut conn = self.conn.clone();
        let now = Utc::now().timestamp_millis();
        let (ids,): (Vec<String>,) = redis::pipe()
            .zrembyscore(&self.index_key, "-inf", format!("({now}"))
            .ignore()
            .zrange(&self.index_key, 0, -1)
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.record_key(id)).collect();
        let raw: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        let mut beats = Vec::with_capacity(raw.len());
        for (key, json) in keys.into_iter().zip(raw) {
            let Some(json) = json else { continue };
            let beat: Beat = serde_json::from_str(&json)
                .map_err(|source| StoreError::Corrupt { key, source })?;
            beats.push(beat);
        }
        beats.sort_by(|a, b| a.instance.cmp(&b.instance));
        Ok(beats)
    }

    async fn put_digests(
        &self,
        digest: &str,
        jobs: &[(JobName, JobDigest)],
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let key = self.digests_key(digest);
        let mut conn = self.conn.clone();
        let kept: bool = conn.pexpire(&key, ms(ttl) as i64).await.map_err(failed)?;
        if kept || jobs.is_empty() {
            return Ok(());
        }
        let temporary = format!("{key}:writing-{:08x}", rand_suffix());
        for chunk in jobs.chunks(WRITE_CHUNK) {
            // Stored as hex text, as every version wrote them.
            let fields: Vec<(&str, String)> = chunk
                .iter()
                .map(|(j, d)| (j.as_str(), d.to_string()))
                .collect();
            redis::pipe()
                .hset_multiple(&temporary, &fields)
                .ignore()
                // A writer that dies half-way leaves nothing for long.
                .pexpire(&temporary, 60_000)
                .ignore()
                .query_async::<()>(&mut conn)
                .await
                .map_err(failed)?;
        }
        redis::pipe()
            .rename(&temporary, &key)
            .ignore()
            .pexpire(&key, ms(ttl) as i64)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(failed)
    }

    async fn digests(&self, digest: &str) -> Result<Option<JobDigests>, StoreError> {
        let mut conn = self.conn.clone();
        let raw: Vec<(String, String)> = conn
            .hgetall(self.digests_key(digest))
            .await
            .map_err(failed)?;
        if raw.is_empty() {
            return Ok(None);
        }
        Ok(Some(job_digests::sorted(raw.into_iter().filter_map(
            |(j, d)| Some((JobName::new(j).ok()?, JobDigest::parse(&d)?)),
        ))))
    }

    async fn count(&self, counter: Counter, minute: i64, n: u64) -> Result<(), StoreError> {
        let key = self.count_key(counter, minute);
        let mut conn = self.conn.clone();
        redis::pipe()
            .incr(&key, n)
            .ignore()
            .pexpire(&key, ms(COUNT_TTL) as i64)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(failed)
    }

    async fn counted(
        &self,
        counter: Counter,
        minutes: RangeInclusive<i64>,
    ) -> Result<u64, StoreError> {
        let keys: Vec<String> = minutes.map(|m| self.count_key(counter, m)).collect();
        if keys.is_empty() {
            return Ok(0);
        }
        let mut conn = self.conn.clone();
        let raw: Vec<Option<u64>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        Ok(raw.into_iter().flatten().sum())
    }
}

/// A random suffix for a temporary key, from the clock's nanoseconds and the process id
/// (two writers of the same digest write the same content: a clash only wastes work).
fn rand_suffix() -> u32 {
    let nanos = Utc::now().timestamp_subsec_nanos();
    nanos ^ std::process::id().rotate_left(16)
}
