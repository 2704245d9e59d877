//! The run history port: one entry per attempt (and per occurrence settled without running),
//! newest first for `cronq runs`. Two implementations: [`RedisRunLog`] (a Redis stream,
//! capped by length and trimmed by age) and [`MemoryRunLog`].
//!
//! Owns: storing and listing runs. Leaves to the consumer: deciding outcomes. Invariant:
//! the history is bounded: at most about [`DEFAULT_MAX_RUNS`] entries (`XADD MAXLEN ~`), none
//! much older than the retention (`XTRIM MINID ~`).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};

use crate::connect::StoreError;
use crate::key::OccurrenceKey;
use crate::names::{JobName, Names};

/// How many runs are kept at most, by default.
pub const DEFAULT_MAX_RUNS: usize = 100_000;

/// How an attempt ended, as the history shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The handler succeeded.
    Succeeded,
    /// The attempt failed and a retry is scheduled.
    Retrying,
    /// The last attempt failed; the occurrence is in the dead-letter queue.
    Failed,
    /// Not run: an earlier occurrence of the job was running (overlap `skip`).
    Skipped,
    /// Stopped by a newer occurrence (overlap `replace`).
    Cancelled,
    /// Not run: it could not start before its deadline.
    Missed,
    /// Stopped by a consumer shutdown; republished to run again elsewhere.
    Interrupted,
    /// The consumer lost its claim (its lease lapsed); another consumer runs it again.
    Lost,
}

impl Outcome {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Cancelled => "cancelled",
            Self::Missed => "missed",
            Self::Interrupted => "interrupted",
            Self::Lost => "lost",
        }
    }

    /// Parses [`Outcome::as_str`] output.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "succeeded" => Self::Succeeded,
            "retrying" => Self::Retrying,
            "failed" => Self::Failed,
            "skipped" => Self::Skipped,
            "cancelled" => Self::Cancelled,
            "missed" => Self::Missed,
            "interrupted" => Self::Interrupted,
            "lost" => Self::Lost,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt in the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The occurrence.
    pub key: OccurrenceKey,
    /// Its job.
    pub job: JobName,
    /// 1 for the first try.
    pub attempt: u32,
    /// Which consumer ran (or settled) it.
    pub consumer: String,
    /// When the attempt started (or was settled).
    pub started_at: DateTime<Utc>,
    /// How long it ran; zero when it did not run.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// The error, if any.
    pub error: Option<String>,
}

/// The run history port.
#[async_trait]
pub trait RunLog: Send + Sync + 'static {
    /// Appends one run.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached.
    async fn record(&self, run: &Run) -> Result<(), StoreError>;

    /// Up to `limit` runs, newest first, of one job or of all.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached or an entry is unreadable.
    async fn list(&self, job: Option<&JobName>, limit: usize) -> Result<Vec<Run>, StoreError>;
}

/// The history as a Redis stream `ns:runs`.
#[derive(Clone)]
pub struct RedisRunLog {
    conn: ConnectionManager,
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
    pub fn new(conn: ConnectionManager, names: &Names, retention: Duration) -> Self {
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

/// A run's stream entry: field names and values, as [`parse_run`] reads them back.
pub(crate) fn fields(run: &Run) -> [(&'static str, String); 8] {
    [
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
    ]
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
            .await?;
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
                .await?;
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

/// The history in memory, capped at a number of runs.
#[derive(Debug)]
pub struct MemoryRunLog {
    runs: Mutex<VecDeque<Run>>,
    max_runs: usize,
}

impl Default for MemoryRunLog {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_RUNS)
    }
}

impl MemoryRunLog {
    /// An empty history keeping at most `max_runs`.
    pub fn new(max_runs: usize) -> Self {
        Self {
            runs: Mutex::new(VecDeque::new()),
            max_runs: max_runs.max(1),
        }
    }

    /// Appends `run`, dropping the oldest beyond the cap.
    pub(crate) fn push(&self, run: Run) {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        runs.push_back(run);
        while runs.len() > self.max_runs {
            runs.pop_front();
        }
    }
}

#[async_trait]
impl RunLog for MemoryRunLog {
    async fn record(&self, run: &Run) -> Result<(), StoreError> {
        self.push(run.clone());
        Ok(())
    }

    async fn list(&self, job: Option<&JobName>, limit: usize) -> Result<Vec<Run>, StoreError> {
        let runs = self
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(runs
            .iter()
            .rev()
            .filter(|r| job.is_none_or(|j| *j == r.job))
            .take(limit)
            .cloned()
            .collect())
    }
}
