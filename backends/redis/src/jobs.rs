//! The job store in Redis: each job's revisions in a list, the current ones in a hash, a
//! version counter, and the change log (the job of each of the last writes); a write is one
//! Lua script (`jobs/write.lua`), so its compare, its append and its log entry are atomic,
//! and the changes since a version are read in one script (`jobs/changes.lua`).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use redis::{AsyncCommands, Script};

use cronq_shared::jobs::{CHANGE_LOG, Changes, Expect, JobStore, Revision, Written};
use cronq_shared::names::{JobName, Names};
use cronq_shared::recorded::ConfigRecord;
use cronq_shared::store::StoreError;

use crate::conn::RedisConn;
use crate::error::{command, written};
use crate::script::Call;

/// The runtime jobs of a namespace.
#[derive(Clone)]
pub struct RedisJobStore {
    conn: RedisConn,
    names: Names,
    current_key: String,
    version_key: String,
    log_key: String,
    write: Arc<Script>,
    changes: Arc<Script>,
    configs_key: String,
    newest_key: String,
    record_config: Arc<Script>,
}

impl std::fmt::Debug for RedisJobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisJobStore")
            .field("current", &self.current_key)
            .finish_non_exhaustive()
    }
}

impl RedisJobStore {
    /// The job store of the namespace `names`, over `conn`.
    pub fn new(conn: RedisConn, names: &Names) -> Self {
        Self {
            conn,
            current_key: names.redis_key(&["jobs", "current"]),
            version_key: names.redis_key(&["jobs", "version"]),
            log_key: names.redis_key(&["jobs", "log"]),
            names: names.clone(),
            write: Arc::new(Script::new(include_str!("jobs/write.lua"))),
            changes: Arc::new(Script::new(include_str!("jobs/changes.lua"))),
            configs_key: names.redis_key(&["config", "loads"]),
            newest_key: names.redis_key(&["config", "newest"]),
            record_config: Arc::new(Script::new(include_str!("jobs/record_config.lua"))),
        }
    }

    fn history_key(&self, job: &JobName) -> String {
        self.names.redis_key(&["jobs", "history", job.as_str()])
    }
}

fn parse<T: serde::de::DeserializeOwned>(key: &str, json: &str) -> Result<T, StoreError> {
    serde_json::from_str(json).map_err(|source| StoreError::Corrupt {
        key: key.to_owned(),
        source,
    })
}

#[async_trait]
impl JobStore for RedisJobStore {
    async fn version(&self) -> Result<u64, StoreError> {
        let mut conn = self.conn.clone();
        let v: Option<u64> = conn.get(&self.version_key).await.map_err(command)?;
        Ok(v.unwrap_or(0))
    }

    async fn list(&self) -> Result<Vec<Revision>, StoreError> {
        let mut conn = self.conn.clone();
        let raw: std::collections::BTreeMap<String, String> =
            conn.hgetall(&self.current_key).await.map_err(command)?;
        raw.values()
            .map(|json| parse(&self.current_key, json))
            .collect()
    }

    async fn changes(&self, since: u64) -> Result<Option<Changes>, StoreError> {
        let mut call = Call::new(&self.changes, 3);
        call.key(&self.version_key)
            .key(&self.log_key)
            .key(&self.current_key)
            .arg(since);
        let raw: Vec<String> = call.query(&mut self.conn.clone()).await.map_err(command)?;
        let corrupt = || StoreError::Corrupt {
            key: self.log_key.clone(),
            source: serde::de::Error::custom("not the answer of jobs/changes.lua"),
        };
        let (Some(version), Some(complete)) = (raw.first(), raw.get(1)) else {
            return Err(corrupt());
        };
        let version: u64 = version.parse().map_err(|_| corrupt())?;
        if complete != "1" {
            return Ok(None);
        }
        let jobs = raw[2..]
            .chunks(2)
            .map(|pair| match pair {
                [name, json] if json.is_empty() => Ok((name.clone(), None)),
                [name, json] => Ok((name.clone(), Some(parse(&self.current_key, json)?))),
                _ => Err(corrupt()),
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(Changes { version, jobs }))
    }

    async fn history(&self, job: &JobName) -> Result<Vec<Revision>, StoreError> {
        let key = self.history_key(job);
        let mut conn = self.conn.clone();
        let raw: Vec<String> = conn.lrange(&key, 0, -1).await.map_err(command)?;
        raw.iter().map(|json| parse(&key, json)).collect()
    }

    async fn write(
        &self,
        job: &JobName,
        spec: Option<&str>,
        by: &str,
        expect: Expect,
    ) -> Result<Written, StoreError> {
        let expected: i64 = match expect {
            Expect::Any => -1,
            Expect::Revision(n) => i64::try_from(n).unwrap_or(i64::MAX),
        };
        let mut call = Call::new(&self.write, 4);
        call.key(self.history_key(job))
            .key(&self.current_key)
            .key(&self.version_key)
            .key(&self.log_key)
            .arg(job.as_str())
            .arg(expected)
            .arg(if spec.is_some() { "1" } else { "0" })
            .arg(spec.unwrap_or(""))
            .arg(by)
            .arg(Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .arg(CHANGE_LOG);
        let (done, n): (i64, u64) = self.conn.write_script(&call).await.map_err(written)?;
        Ok(if done == 1 {
            Written::Done(n)
        } else {
            Written::Stale { current: n }
        })
    }

    async fn record_config(&self, record: &ConfigRecord) -> Result<(), StoreError> {
        let mut record = record.clone();
        let mut conn = self.conn.clone();
        let (digest, since): (Option<String>, Option<String>) = conn
            .hmget(&self.newest_key, &["digest", "since"])
            .await
            .map_err(command)?;
        // The rule of `next_records`: a load of the newest's text keeps its since.
        if digest.as_deref() == Some(record.digest.as_str())
            && let Some(since) = since.and_then(|s| s.parse().ok())
        {
            record.since = since;
        }
        let json = serde_json::to_string(&record).map_err(|source| StoreError::Corrupt {
            key: self.configs_key.clone(),
            source,
        })?;
        let mut call = Call::new(&self.record_config, 2);
        call.key(&self.configs_key)
            .key(&self.newest_key)
            .arg(&record.digest)
            .arg(json)
            .arg(record.keep())
            .arg(
                record
                    .since
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            );
        let _added: i64 = self.conn.write_script(&call).await.map_err(written)?;
        Ok(())
    }

    async fn config_records(&self, limit: usize) -> Result<Vec<ConfigRecord>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let last = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        let raw: Vec<String> = conn
            .lrange(&self.configs_key, 0, last)
            .await
            .map_err(command)?;
        raw.iter()
            .map(|json| parse(&self.configs_key, json))
            .collect()
    }

    async fn config_digest(&self) -> Result<Option<String>, StoreError> {
        // Kept beside the list by record_config.lua, in the same step as the list.
        let mut conn = self.conn.clone();
        conn.hget(&self.newest_key, "digest").await.map_err(command)
    }
}
