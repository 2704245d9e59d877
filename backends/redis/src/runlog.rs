//! The run history port ([`cronq_shared::runlog::RunLog`]) as a Redis stream `ns:runs`:
//! bounded by `XADD MAXLEN ~` (at most about [`DEFAULT_MAX_RUNS`] entries) and `XTRIM
//! MINID ~` (none much older than the retention). The ledger's scripts append to the same
//! stream with the record they end (`ledger/history.lua`).

use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use cronq_shared::names::{JobName, Names};
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Outcome, Run, RunLog};
use cronq_shared::store::StoreError;

use crate::conn::RedisConn;
use crate::error::command;

/// The history as a Redis stream `ns:runs`.
#[derive(Clone)]
pub struct RedisRunLog {
    conn: RedisConn,
    key: String,
    retention: Duration,
    max_runs: usize,
}

impl std::fmt::Debug for RedisRunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRunLog")
            .field("key", &self.key)
            .finish()
    }
}

impl RedisRunLog {
    /// A run log keeping runs for `retention` (the longest job retention) and at most
    /// [`DEFAULT_MAX_RUNS`].
    pub fn new(conn: RedisConn, names: &Names, retention: Duration) -> Self {
        Self {
            conn,
            key: names.redis_key(&["runs"]),
            retention,
            max_runs: DEFAULT_MAX_RUNS,
        }
    }
}

impl RedisRunLog {
    /// The stream's key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The `MAXLEN ~` bound and the `MINID ~` cut-off (ms) for an append made now.
    pub(crate) fn bounds(&self) -> (usize, i64) {
        let min_id = Utc::now().timestamp_millis()
            - i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX / 2);
        (self.max_runs, min_id.max(0))
    }
}

/// A run's stream entry: field names and values, as [`parse_run`] reads them back. An
/// entry without `published_at` (none known, or written before the field existed) reads
/// back as `None`. `error` is always there (empty for none): `complete.lua` writes the
/// same run as lost by replacing its `outcome` and `error`.
pub(crate) fn fields(run: &Run) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("key", run.key.to_string()),
        ("job", run.job.as_str().to_owned()),
        ("attempt", run.attempt.to_string()),
        ("consumer", run.consumer.clone()),
        ("started_at", run.started_at.to_rfc3339()),
        (
            "duration_ms",
            u64::try_from(run.duration.as_millis())
                .unwrap_or(u64::MAX)
                .to_string(),
        ),
        ("outcome", run.outcome.as_str().to_owned()),
        ("error", run.error.clone().unwrap_or_default()),
    ];
    if let Some(at) = run.published_at {
        fields.push(("published_at", at.to_rfc3339()));
    }
    fields
}

/// How many stream entries one `XREVRANGE` page reads while filtering by job.
const PAGE: usize = 500;

fn corrupt(key: &str, what: &str) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        source: serde::de::Error::custom(format!("run entry field {what} is missing or invalid")),
    }
}

fn field(entry: &redis::streams::StreamId, name: &str) -> Option<String> {
    entry.get::<String>(name)
}

fn parse_run(stream: &str, entry: &redis::streams::StreamId) -> Result<Run, StoreError> {
    let get = |name: &str| field(entry, name).ok_or_else(|| corrupt(stream, name));
    Ok(Run {
        key: get("key")?.parse().map_err(|_| corrupt(stream, "key"))?,
        job: JobName::new(get("job")?).map_err(|_| corrupt(stream, "job"))?,
        attempt: get("attempt")?
            .parse()
            .map_err(|_| corrupt(stream, "attempt"))?,
        consumer: get("consumer")?,
        started_at: get("started_at")?
            .parse()
            .map_err(|_| corrupt(stream, "started_at"))?,
        duration: Duration::from_millis(
            get("duration_ms")?
                .parse()
                .map_err(|_| corrupt(stream, "duration_ms"))?,
        ),
        outcome: Outcome::parse(&get("outcome")?).ok_or_else(|| corrupt(stream, "outcome"))?,
        error: field(entry, "error").filter(|e| !e.is_empty()),
        published_at: field(entry, "published_at")
            .filter(|at| !at.is_empty())
            .map(|at| at.parse().map_err(|_| corrupt(stream, "published_at")))
            .transpose()?,
    })
}

#[async_trait]
impl RunLog for RedisRunLog {
    async fn record(&self, run: &Run) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let (max_runs, min_id) = self.bounds();
        // MAXLEN ~ and MINID ~ let Redis trim whole macro nodes: cheap, approximately bounded.
        // https://redis.io/docs/latest/commands/xtrim/
        let mut pipe = redis::pipe();
        let xadd = pipe
            .cmd("XADD")
            .arg(&self.key)
            .arg("MAXLEN")
            .arg("~")
            .arg(max_runs)
            .arg("*");
        for (name, value) in fields(run) {
            xadd.arg(name).arg(value);
        }
        pipe.ignore()
            .cmd("XTRIM")
            .arg(&self.key)
            .arg("MINID")
            .arg("~")
            .arg(min_id)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(command)?;
        Ok(())
    }

    async fn list(&self, job: Option<&JobName>, limit: usize) -> Result<Vec<Run>, StoreError> {
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        let mut end = "+".to_owned();
        while out.len() < limit {
            let page: redis::streams::StreamRangeReply = redis::cmd("XREVRANGE")
                .arg(&self.key)
                .arg(&end)
                .arg("-")
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut conn)
                .await
                .map_err(command)?;
            for entry in &page.ids {
                let run = parse_run(&self.key, entry)?;
                if job.is_none_or(|j| *j == run.job) {
                    out.push(run);
                    if out.len() == limit {
                        break;
                    }
                }
            }
            match page.ids.last() {
                Some(last) if page.ids.len() == PAGE => end = format!("({}", last.id),
                _ => break,
            }
        }
        Ok(out)
    }
}
