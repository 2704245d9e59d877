//! Redis implementation of the control store: three hashes under the namespace (cursors as
//! unix milliseconds, pause records and requests as JSON) and one fenced Lua commit. Every
//! write (commit, pause, resume, submit) is guarded: with `CRONQ_REDIS_MIN_REPLICAS` it
//! counts only once that many replicas have it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use redis::{AsyncCommands, Script};

use crate::conn::RedisConn;
use crate::error::WriteError;
use crate::script::Call;

use cronq_shared::control::{Commit, ControlError, ControlStore, Pause, Request};
use cronq_shared::lease::Term;
use cronq_shared::names::{JobName, Names};

/// At most this many cursors or requests go into one commit script call, so one call never
/// blocks Redis for long even when a million jobs fire together.
const COMMIT_CHUNK: usize = 5_000;

/// Cursors are read this many fields per `HSCAN` call: a million jobs take 100 round
/// trips of bounded size, instead of one reply that blocks Redis while it is built and
/// may outlast the response timeout.
const READ_CHUNK: usize = 10_000;

/// The control store in Redis.
#[derive(Clone)]
pub struct RedisControl {
    conn: RedisConn,
    lease_key: String,
    cursors_key: String,
    paused_key: String,
    requests_key: String,
    commit: Arc<Script>,
}

impl RedisControl {
    /// The control store of the namespace `names`, over `conn`.
    pub fn new(conn: RedisConn, names: &Names) -> Self {
        Self {
            conn,
            lease_key: crate::lease::lease_key(names),
            cursors_key: names.redis_key(&["cursor"]),
            paused_key: names.redis_key(&["paused"]),
            requests_key: names.redis_key(&["requests"]),
            commit: Arc::new(Script::new(include_str!("control/commit.lua"))),
        }
    }

    async fn commit_chunk(
        &self,
        term: &Term,
        cursors: &[(JobName, DateTime<Utc>)],
        settle: &[(String, Option<Request>)],
    ) -> Result<(), ControlError> {
        let mut invocation = Call::new(&self.commit, 3);
        invocation
            .key(&self.lease_key)
            .key(&self.cursors_key)
            .key(&self.requests_key)
            .arg(term.value())
            .arg(cursors.len());
        for (job, at) in cursors {
            invocation.arg(job.as_str()).arg(at.timestamp_millis());
        }
        for (id, request) in settle {
            let value = match request {
                Some(r) => serde_json::to_string(r)
                    .expect("a request always serialises: every field is plain data"),
                None => String::new(),
            };
            invocation.arg(id).arg(value);
        }
        let moved: i64 = self
            .conn
            .write_script(&invocation)
            .await
            .map_err(unconfirmed("commit"))?;
        if moved < 0 {
            return Err(ControlError::NotLeader { epoch: term.epoch });
        }
        Ok(())
    }
}

fn redis_err(op: &'static str) -> impl FnOnce(redis::RedisError) -> ControlError {
    move |source| ControlError::Store {
        store: crate::error::STORE,
        op,
        source: Box::new(source),
    }
}

/// A guarded write's failure: the command's, or too few replicas.
fn unconfirmed(op: &'static str) -> impl FnOnce(WriteError) -> ControlError {
    move |err| match err {
        WriteError::Redis(source) => redis_err(op)(source),
        WriteError::Unreplicated(barrier) => ControlError::Unreplicated { op, barrier },
    }
}

#[async_trait]
impl ControlStore for RedisControl {
    async fn cursors(&self) -> Result<HashMap<JobName, DateTime<Utc>>, ControlError> {
        let mut conn = self.conn.clone();
        let mut cursors = HashMap::new();
        let mut scan: u64 = 0;
        loop {
            // Only the leader writes cursors, and it is this producer now: the pages
            // form one consistent view (a field seen twice has the same value).
            let (next, page): (u64, HashMap<String, i64>) = redis::cmd("HSCAN")
                .arg(&self.cursors_key)
                .arg(scan)
                .arg("COUNT")
                .arg(READ_CHUNK)
                .query_async(&mut conn)
                .await
                .map_err(redis_err("read cursors"))?;
            // A field that is not a job name (or not a time) cannot come from cronq: skip
            // it rather than refuse to lead.
            cursors.extend(page.into_iter().filter_map(|(job, ms)| {
                Some((
                    JobName::new(job).ok()?,
                    DateTime::from_timestamp_millis(ms)?,
                ))
            }));
            if next == 0 {
                return Ok(cursors);
            }
            scan = next;
        }
    }

    async fn commit(&self, term: &Term, commit: &Commit) -> Result<(), ControlError> {
        if commit.is_empty() {
            return Ok(());
        }
        let mut cursors = commit.cursors.chunks(COMMIT_CHUNK);
        let mut settle = commit.settle.chunks(COMMIT_CHUNK);
        loop {
            let (c, s) = (cursors.next(), settle.next());
            if c.is_none() && s.is_none() {
                return Ok(());
            }
            self.commit_chunk(term, c.unwrap_or_default(), s.unwrap_or_default())
                .await?;
        }
    }

    async fn set_pause(&self, job: &JobName, pause: Option<&Pause>) -> Result<bool, ControlError> {
        let mut pipe = redis::pipe();
        match pause {
            Some(p) => {
                let json = serde_json::to_string(p)
                    .expect("a pause record always serialises: every field is plain data");
                // HSET answers how many fields it added: 0 when the job was paused already.
                let (added,): (i64,) = self
                    .conn
                    .write(pipe.hset(&self.paused_key, job.as_str(), json))
                    .await
                    .map_err(unconfirmed("pause"))?;
                Ok(added == 0)
            }
            None => {
                let (removed,): (i64,) = self
                    .conn
                    .write(pipe.hdel(&self.paused_key, job.as_str()))
                    .await
                    .map_err(unconfirmed("resume"))?;
                Ok(removed > 0)
            }
        }
    }

    async fn paused(&self) -> Result<BTreeMap<JobName, Pause>, ControlError> {
        let mut conn = self.conn.clone();
        let raw: HashMap<String, String> = conn
            .hgetall(&self.paused_key)
            .await
            .map_err(redis_err("read pauses"))?;
        let mut out = BTreeMap::new();
        for (field, json) in raw {
            let Ok(job) = JobName::new(&field) else {
                continue;
            };
            let pause = serde_json::from_str(&json).map_err(|source| ControlError::Corrupt {
                key: self.paused_key.clone(),
                field,
                source,
            })?;
            out.insert(job, pause);
        }
        Ok(out)
    }

    async fn submit(&self, request: &Request) -> Result<(), ControlError> {
        let json = serde_json::to_string(request)
            .expect("a request always serialises: every field is plain data");
        let (_added,): (i64,) = self
            .conn
            .write(redis::pipe().hset(&self.requests_key, &request.id, json))
            .await
            .map_err(unconfirmed("submit request"))?;
        Ok(())
    }

    async fn pending(&self) -> Result<Vec<Request>, ControlError> {
        let mut conn = self.conn.clone();
        let raw: BTreeMap<String, String> = conn
            .hgetall(&self.requests_key)
            .await
            .map_err(redis_err("read requests"))?;
        raw.into_iter()
            .map(|(field, json)| {
                serde_json::from_str(&json).map_err(|source| ControlError::Corrupt {
                    key: self.requests_key.clone(),
                    field,
                    source,
                })
            })
            .collect()
    }
}
