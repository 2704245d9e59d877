//! The control store in the data file: cursors (instants), pauses and requests (JSON); a
//! commit is fenced by the leader lease in the same transaction.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::params;

use cronq_shared::control::{Commit, ControlError, ControlStore, Pause, Request};
use cronq_shared::lease::Term;
use cronq_shared::names::JobName;

use crate::db::{Db, Failure, STORE};
use crate::lease;

/// The control store of a data file.
#[derive(Debug, Clone)]
pub struct SqliteControl {
    db: Db,
}

impl SqliteControl {
    /// The control store in `db`, fenced by the lease in the same file.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn control_error(op: &'static str) -> impl FnOnce(Failure) -> ControlError {
    move |e| match e {
        Failure::Corrupt { key, source } => {
            let (table, field) = key.split_once('/').unwrap_or((key.as_str(), ""));
            ControlError::Corrupt {
                key: table.to_owned(),
                field: field.to_owned(),
                source,
            }
        }
        other => ControlError::Store {
            store: STORE,
            op,
            source: Box::new(other),
        },
    }
}

/// Every `(name, json)` row of a two-column table, parsed; `table` names it in errors.
fn rows<T: serde::de::DeserializeOwned>(
    conn: &rusqlite::Connection,
    sql: &str,
    table: &str,
) -> Result<Vec<(String, T)>, Failure> {
    let raw: Vec<(String, String)> = conn
        .prepare_cached(sql)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    raw.into_iter()
        .map(|(name, json)| {
            let value =
                serde_json::from_str(&json).map_err(Failure::corrupt(format!("{table}/{name}")))?;
            Ok((name, value))
        })
        .collect()
}

/// A job name read back from the file.
fn job_name(table: &str, name: String) -> Result<JobName, Failure> {
    JobName::new(&name).map_err(|e| Failure::Corrupt {
        key: format!("{table}/{name}"),
        source: serde::de::Error::custom(e),
    })
}

fn json(value: &impl serde::Serialize, key: &str) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(Failure::corrupt(key))
}

#[async_trait]
impl ControlStore for SqliteControl {
    async fn cursors(&self) -> Result<HashMap<JobName, DateTime<Utc>>, ControlError> {
        self.db
            .run(|conn| {
                let rows: Vec<(String, i64)> = conn
                    .prepare_cached("SELECT job, at_us FROM cursors")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                rows.into_iter()
                    .map(|(job, us)| {
                        let at = DateTime::<Utc>::from_timestamp_micros(us).ok_or_else(|| {
                            Failure::Corrupt {
                                key: format!("cursors/{job}"),
                                source: serde::de::Error::custom(format!(
                                    "{us} µs is out of range"
                                )),
                            }
                        })?;
                        Ok((job_name("cursors", job)?, at))
                    })
                    .collect()
            })
            .await
            .map_err(control_error("read cursors"))
    }

    async fn commit(&self, term: &Term, commit: &Commit) -> Result<(), ControlError> {
        let (term, commit) = (term.clone(), commit.clone());
        let epoch = term.epoch;
        let written = self
            .db
            .run(move |tx| {
                if !lease::is_current(tx, &term)? {
                    return Ok(false);
                }
                for (job, at) in &commit.cursors {
                    tx.prepare_cached(
                        "INSERT INTO cursors (job, at_us) VALUES (?1, ?2)
                         ON CONFLICT (job) DO UPDATE SET at_us = max(at_us, excluded.at_us)",
                    )?
                    .execute(params![job.as_str(), at.timestamp_micros()])?;
                }
                for (id, request) in &commit.settle {
                    match request {
                        None => tx
                            .prepare_cached("DELETE FROM requests WHERE id = ?1")?
                            .execute([id])?,
                        Some(r) => tx
                            .prepare_cached("UPDATE requests SET request = ?2 WHERE id = ?1")?
                            .execute(params![id, json(r, id)?])?,
                    };
                }
                Ok(true)
            })
            .await
            .map_err(control_error("commit"))?;
        if written {
            Ok(())
        } else {
            Err(ControlError::NotLeader { epoch })
        }
    }

    async fn set_pause(&self, job: &JobName, pause: Option<&Pause>) -> Result<bool, ControlError> {
        let job = job.as_str().to_owned();
        let pause = pause.map(|p| json(p, &job)).transpose();
        self.db
            .run(move |tx| {
                let was = tx
                    .prepare_cached("DELETE FROM pauses WHERE job = ?1")?
                    .execute([&job])?
                    > 0;
                if let Some(pause) = pause? {
                    tx.prepare_cached("INSERT INTO pauses (job, pause) VALUES (?1, ?2)")?
                        .execute(params![job, pause])?;
                }
                Ok(was)
            })
            .await
            .map_err(control_error("set pause"))
    }

    async fn paused(&self) -> Result<BTreeMap<JobName, Pause>, ControlError> {
        self.db
            .run(|conn| {
                rows::<Pause>(conn, "SELECT job, pause FROM pauses", "pauses")?
                    .into_iter()
                    .map(|(job, pause)| Ok((job_name("pauses", job)?, pause)))
                    .collect()
            })
            .await
            .map_err(control_error("read pauses"))
    }

    async fn submit(&self, request: &Request) -> Result<(), ControlError> {
        let id = request.id.clone();
        let value = json(request, &id);
        self.db
            .run(move |tx| {
                tx.prepare_cached(
                    "INSERT INTO requests (id, request) VALUES (?1, ?2)
                     ON CONFLICT (id) DO UPDATE SET request = excluded.request",
                )?
                .execute(params![id, value?])?;
                Ok(())
            })
            .await
            .map_err(control_error("submit request"))
    }

    async fn pending(&self) -> Result<Vec<Request>, ControlError> {
        self.db
            .run(|conn| {
                Ok(rows::<Request>(
                    conn,
                    "SELECT id, request FROM requests ORDER BY id",
                    "requests",
                )?
                .into_iter()
                .map(|(_, r)| r)
                .collect())
            })
            .await
            .map_err(control_error("read requests"))
    }
}
