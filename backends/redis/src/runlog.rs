//! The run history port ([`cronq_shared::runlog::RunLog`]) as a Redis stream `ns:runs`:
//! bounded by `XADD MAXLEN ~` (at most about [`DEFAULT_MAX_RUNS`] entries) and `XTRIM
//! MINID ~` (none much older than the retention). The ledger's scripts append to the same
//! stream with the record they end (`ledger/history.lua`).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::names::{JobName, Names};
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Outcome, Run, RunLog, RunOutput, Tail, TailFrom};
use cronq_shared::store::StoreError;

use crate::conn::RedisConn;
use crate::error::command;

/// The history as a Redis stream `ns:runs`.
#[derive(Clone)]
pub struct RedisRunLog {
    conn: RedisConn,
    key: String,
    /// `ns:output`: an occurrence's outputs are the hash `ns:output:KEY`, one field per
    /// attempt (the output as JSON), expiring with the retention.
    outputs: String,
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
            outputs: names.redis_key(&["output"]),
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

/// The names of a run entry's fields, in the order [`values`] gives their values. The
/// ledger's scripts get the values alone and name them in this order
/// (`ledger/history.lua`); an entry without `published_at` (none known, or written
/// before the field existed) reads back as `None`.
pub(crate) const FIELDS: [&str; 9] = [
    "key",
    "job",
    "attempt",
    "consumer",
    "started_at",
    "duration_ms",
    "outcome",
    "error",
    "published_at",
];

/// A run's field values in [`FIELDS`] order, as [`parse_run`] reads them back: 8, or 9
/// with `published_at`. `error` is always there (empty for none): `complete.lua` writes
/// the same run as lost by replacing its `outcome` and `error`.
pub(crate) fn values(run: &Run) -> Vec<String> {
    let mut values = vec![run.key.as_str().to_owned(), run.job.as_str().to_owned()];
    values.extend(values_after_job(run));
    values
}

/// [`values`] after the key and the job, which `complete.lua` is given anyway.
pub(crate) fn values_after_job(run: &Run) -> Vec<String> {
    let mut values = Vec::with_capacity(FIELDS.len() - 2);
    values.extend([
        run.attempt.to_string(),
        run.consumer.clone(),
        run.started_at.to_rfc3339(),
        u64::try_from(run.duration.as_millis())
            .unwrap_or(u64::MAX)
            .to_string(),
        run.outcome.as_str().to_owned(),
        run.error.clone().unwrap_or_default(),
    ]);
    if let Some(at) = run.published_at {
        values.push(at.to_rfc3339());
    }
    values
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
        for (name, value) in FIELDS.iter().zip(values(run)) {
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

    async fn tail(&self, from: &TailFrom, limit: usize) -> Result<Tail, StoreError> {
        let start = match from {
            TailFrom::Since(at) => format!("{}-0", at.timestamp_millis().max(0)),
            TailFrom::After(id) => format!("({id}"),
        };
        let mut conn = self.conn.clone();
        let page: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(&self.key)
            .arg(&start)
            .arg("+")
            .arg("COUNT")
            .arg(limit.max(1))
            .query_async(&mut conn)
            .await
            .map_err(command)?;
        let next = page
            .ids
            .last()
            .map_or_else(|| from.clone(), |last| TailFrom::After(last.id.clone()));
        let runs = page
            .ids
            .iter()
            .map(|entry| parse_run(&self.key, entry))
            .collect::<Result<_, _>>()?;
        Ok(Tail { runs, next })
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

    async fn keep_output(
        &self,
        key: &OccurrenceKey,
        attempt: u32,
        output: &RunOutput,
    ) -> Result<(), StoreError> {
        let hash = format!("{}:{key}", self.outputs);
        let json = serde_json::to_string(output).map_err(|source| StoreError::Corrupt {
            key: hash.clone(),
            source,
        })?;
        let retention = u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX);
        let mut conn = self.conn.clone();
        redis::pipe()
            .cmd("HSET")
            .arg(&hash)
            .arg(attempt)
            .arg(json)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&hash)
            .arg(retention.max(1))
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(command)
    }

    async fn outputs(&self, key: &OccurrenceKey) -> Result<BTreeMap<u32, RunOutput>, StoreError> {
        let hash = format!("{}:{key}", self.outputs);
        let mut conn = self.conn.clone();
        let fields: Vec<(u32, String)> = redis::cmd("HGETALL")
            .arg(&hash)
            .query_async(&mut conn)
            .await
            .map_err(command)?;
        fields
            .into_iter()
            .map(|(attempt, json)| {
                serde_json::from_str(&json)
                    .map(|o| (attempt, o))
                    .map_err(|source| StoreError::Corrupt {
                        key: format!("{hash} {attempt}"),
                        source,
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::FIELDS;

    /// The quoted words of `text`, in order.
    fn quoted(text: &str) -> Vec<&str> {
        text.split('\'').skip(1).step_by(2).collect()
    }

    /// The ledger's scripts get a run's values alone and name them themselves: each XADD
    /// of `append_run` names them in the order of `FIELDS` (with and without
    /// `published_at`), so an entry they append reads back as `parse_run` expects.
    #[test]
    fn the_history_script_names_the_values_in_field_order() {
        let script = include_str!("ledger/history.lua");
        let run = &script[script
            .find("local function append_run")
            .expect("history.lua defines append_run")..];
        let named: Vec<Vec<&str>> = run
            .split("redis.call('XADD'")
            .skip(1)
            .map(|call| {
                let call = &call[..call.find(")\n").expect("an XADD call ends a line")];
                quoted(call)
                    .into_iter()
                    .filter(|w| !["MAXLEN", "~", "*"].contains(w))
                    .collect()
            })
            .collect();
        assert_eq!(named, [&FIELDS[..], &FIELDS[..8]]);
    }
}
