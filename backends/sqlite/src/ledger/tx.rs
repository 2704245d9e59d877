//! The ledger's rules on one transaction: reading and writing records, job locks and wait
//! lists. The same rules as `backends/redis/src/ledger/*.lua` and the memory ledger
//! (`backends/memory/src/ledger.rs`), on rows: a record whose retention has passed counts
//! as absent, a lock whose time has passed as free; a job's wait list is its records in
//! state `waiting`, by scheduled instant.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};

use cronq_shared::config::Overlap;
use cronq_shared::ledger::{Claim, ClaimOutcome, Orphan, Republish, State, WAKE_RECHECK};
use cronq_shared::runlog::{Outcome, Run};

use crate::db::{Failure, ms};
use crate::runlog;

/// One record, as stored.
#[derive(Debug, Clone)]
pub(super) struct Rec {
    pub(super) job: String,
    pub(super) state: State,
    pub(super) attempt: u32,
    pub(super) next: u32,
    pub(super) token: String,
    pub(super) queue: String,
    pub(super) body: Option<Vec<u8>>,
    pub(super) lease_until: i64,
    /// The key of the occurrence that asked this one to stop (overlap `replace`).
    pub(super) cancel: Option<String>,
    pub(super) exclusive: bool,
    /// Scheduled instant, ms since the epoch.
    pub(super) sched: i64,
    pub(super) error: Option<String>,
    pub(super) expires: i64,
    /// When the reaper looks at it next.
    pub(super) due: Option<i64>,
}

/// The ledger's view of one transaction at one instant.
pub(super) struct Tx<'c> {
    pub(super) conn: &'c Connection,
    pub(super) now: i64,
}

const COLUMNS: &str = "job, state, attempt, next, token, queue, body, lease_until, cancel, \
                       exclusive, sched, error, expires, due";

fn from_row(key: &str, r: &Row<'_>) -> rusqlite::Result<Result<Rec, Failure>> {
    let state: String = r.get(1)?;
    let Some(state) = State::parse(&state) else {
        return Ok(Err(Failure::Corrupt {
            key: key.to_owned(),
            source: serde::de::Error::custom(format!("unknown state {state:?}")),
        }));
    };
    Ok(Ok(Rec {
        job: r.get(0)?,
        state,
        attempt: r.get(2)?,
        next: r.get(3)?,
        token: r.get(4)?,
        queue: r.get(5)?,
        body: r.get(6)?,
        lease_until: r.get(7)?,
        cancel: r.get(8)?,
        exclusive: r.get(9)?,
        sched: r.get(10)?,
        error: r.get(11)?,
        expires: r.get(12)?,
        due: r.get(13)?,
    }))
}

impl Tx<'_> {
    /// The live record of `key`, dropping it when its retention has passed.
    pub(super) fn live(&self, key: &str) -> Result<Option<Rec>, Failure> {
        let found = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM records WHERE key = ?1"))?
            .query_row([key], |r| from_row(key, r))
            .optional()?
            .transpose()?;
        match found {
            Some(rec) if rec.expires <= self.now => {
                self.conn
                    .prepare_cached("DELETE FROM records WHERE key = ?1")?
                    .execute([key])?;
                Ok(None)
            }
            other => Ok(other),
        }
    }

    /// Writes `rec` as the record of `key`.
    pub(super) fn put(&self, key: &str, rec: &Rec) -> Result<(), Failure> {
        self.conn
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO records (key, {COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
            ))?
            .execute(params![
                key,
                rec.job,
                rec.state.as_str(),
                rec.attempt,
                rec.next,
                rec.token,
                rec.queue,
                rec.body,
                rec.lease_until,
                rec.cancel,
                rec.exclusive,
                rec.sched,
                rec.error,
                rec.expires,
                rec.due,
            ])?;
        Ok(())
    }

    /// Sets when the reaper looks at `key` next (`None`: never).
    pub(super) fn set_due(&self, key: &str, due: Option<i64>) -> Result<(), Failure> {
        self.conn
            .prepare_cached("UPDATE records SET due = ?2 WHERE key = ?1")?
            .execute(params![key, due])?;
        Ok(())
    }

    /// The holder key and token of `job`'s lock, if it is held.
    pub(super) fn live_lock(&self, job: &str) -> Result<Option<(String, String)>, Failure> {
        let found: Option<(String, String, i64)> = self
            .conn
            .prepare_cached("SELECT holder, token, until FROM job_locks WHERE job = ?1")?
            .query_row([job], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        Ok(found
            .filter(|(_, _, until)| *until > self.now)
            .map(|(holder, token, _)| (holder, token)))
    }

    pub(super) fn set_lock(
        &self,
        job: &str,
        holder: &str,
        token: &str,
        until: i64,
    ) -> Result<(), Failure> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO job_locks (job, holder, token, until) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![job, holder, token, until])?;
        Ok(())
    }

    pub(super) fn drop_lock(&self, job: &str) -> Result<(), Failure> {
        self.conn
            .prepare_cached("DELETE FROM job_locks WHERE job = ?1")?
            .execute([job])?;
        Ok(())
    }

    /// `None` when a message of `attempt` may act on the record; else the duplicate reply.
    pub(super) fn blocked(&self, key: &str, attempt: u32) -> Result<Option<(State, u32)>, Failure> {
        let Some(rec) = self.live(key)? else {
            return Ok(None);
        };
        let live_run = rec.state == State::Running && rec.lease_until > self.now;
        Ok((rec.state.is_terminal() || live_run || attempt < rec.next)
            .then_some((rec.state, rec.attempt)))
    }

    /// The earliest (`last = false`) or latest waiter of `job` that still waits.
    fn wait_end(&self, job: &str, last: bool) -> Result<Option<(i64, String)>, Failure> {
        let order = if last { "DESC" } else { "ASC" };
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT sched, key FROM records
                 WHERE job = ?1 AND state = 'waiting' AND body IS NOT NULL AND expires > ?2
                 ORDER BY sched {order}, key {order} LIMIT 1"
            ))?
            .query_row(params![job, self.now], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// Every waiter of `job`, but `except`.
    fn waiters(&self, job: &str, except: &str) -> Result<Vec<String>, Failure> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT key FROM records WHERE job = ?1 AND state = 'waiting' AND key <> ?2
                 ORDER BY sched, key",
            )?
            .query_map(params![job, except], |r| r.get(0))?
            .collect::<Result<_, _>>()?)
    }

    /// Gives the earliest waiter of `job` its turn (see `wait.lua`).
    pub(super) fn wake(&self, job: &str) -> Result<Option<Orphan>, Failure> {
        let Some((_, key)) = self.wait_end(job, false)? else {
            return Ok(None);
        };
        let Some(rec) = self.live(&key)? else {
            return Ok(None);
        };
        let Some(body) = rec.body else {
            return Ok(None);
        };
        self.set_due(&key, Some(self.now + ms(WAKE_RECHECK)))?;
        Ok(Some(Orphan {
            key,
            queue: rec.queue,
            body,
            why: Republish::Turn,
        }))
    }

    /// Records `claim` as waiting for its turn.
    fn wait_here(&self, claim: &Claim, key: &str) -> Result<(), Failure> {
        self.put(
            key,
            &Rec {
                job: claim.job.to_string(),
                state: State::Waiting,
                attempt: claim.attempt,
                next: claim.attempt,
                token: String::new(),
                queue: claim.queue.to_string(),
                body: Some(claim.body.clone()),
                lease_until: self.now,
                cancel: None,
                exclusive: true,
                sched: claim.scheduled_at.timestamp_millis(),
                error: None,
                expires: self.now + ms(claim.retention),
                due: Some(self.now + ms(claim.recheck)),
            },
        )
    }

    /// Applies the overlap rules of an exclusive job to `claim` (see `claim.lua`): `None`
    /// when it may take the job lock now.
    pub(super) fn overlap(
        &self,
        claim: &Claim,
        key: &str,
    ) -> Result<Option<ClaimOutcome>, Failure> {
        let job = claim.job.as_str();
        let sched = claim.scheduled_at.timestamp_millis();
        let holder = self.live_lock(job)?.map(|h| h.0).filter(|h| h != key);
        Ok(match claim.overlap {
            Overlap::Allow => None,
            Overlap::Skip => holder.map(|holder| ClaimOutcome::Busy { holder }),
            Overlap::Queue => {
                if let Some(holder) = holder {
                    self.wait_here(claim, key)?;
                    return Ok(Some(ClaimOutcome::Waiting {
                        holder,
                        woken: None,
                    }));
                }
                let Some((head_sched, head)) = self.wait_end(job, false)? else {
                    return Ok(None);
                };
                if head == key || head_sched > sched {
                    return Ok(None);
                }
                let Some(woken) = self.wake(job)?.filter(|w| w.key != key) else {
                    return Ok(None);
                };
                self.wait_here(claim, key)?;
                Some(ClaimOutcome::Waiting {
                    holder: woken.key.clone(),
                    woken: Some(woken),
                })
            }
            Overlap::Replace => {
                if let Some(h) = &holder
                    && self.live(h)?.is_some_and(|r| r.sched > sched)
                {
                    return Ok(Some(ClaimOutcome::Superseded { by: h.clone() }));
                }
                if let Some((newest_sched, newest)) = self.wait_end(job, true)?
                    && newest != key
                    && newest_sched > sched
                {
                    return Ok(Some(ClaimOutcome::Superseded { by: newest }));
                }
                for other in self.waiters(job, key)? {
                    self.supersede(claim, &other, key)?;
                }
                let Some(holder) = holder else {
                    return Ok(None);
                };
                if let Some(mut rec) = self.live(&holder)? {
                    rec.cancel = Some(key.to_owned());
                    self.put(&holder, &rec)?;
                }
                self.wait_here(claim, key)?;
                Some(ClaimOutcome::Waiting {
                    holder,
                    woken: None,
                })
            }
        })
    }

    /// Records the waiter `other` as cancelled, replaced by `key`, with its history entry.
    fn supersede(&self, claim: &Claim, other: &str, key: &str) -> Result<(), Failure> {
        let Some(mut rec) = self.live(other)?.filter(|r| r.state == State::Waiting) else {
            return Ok(());
        };
        let why = format!("replaced by {key}");
        rec.state = State::Cancelled;
        rec.body = None;
        rec.error = Some(why.clone());
        rec.due = None;
        self.put(other, &rec)?;
        if let Ok(other_key) = other.parse() {
            runlog::append(
                self.conn,
                &Run {
                    key: other_key,
                    job: claim.job.clone(),
                    attempt: rec.attempt,
                    consumer: claim.consumer.clone(),
                    started_at: chrono::Utc::now(),
                    duration: Duration::ZERO,
                    outcome: Outcome::Cancelled,
                    error: Some(why),
                },
            )?;
        }
        Ok(())
    }

    /// Keys whose reaper time has come, earliest first.
    pub(super) fn due(&self, limit: usize) -> Result<Vec<String>, Failure> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT key FROM records WHERE due IS NOT NULL AND due <= ?1 ORDER BY due LIMIT ?2",
            )?
            .query_map(
                params![self.now, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| r.get(0),
            )?
            .collect::<Result<_, _>>()?)
    }

    /// Drops up to `limit` records past their retention and the locks past their time.
    pub(super) fn expire(&self, limit: usize) -> Result<(), Failure> {
        self.conn
            .prepare_cached(
                "DELETE FROM records WHERE key IN
                   (SELECT key FROM records WHERE expires <= ?1 LIMIT ?2)",
            )?
            .execute(params![self.now, i64::try_from(limit).unwrap_or(i64::MAX)])?;
        self.conn
            .prepare_cached("DELETE FROM job_locks WHERE until <= ?1")?
            .execute([self.now])?;
        Ok(())
    }
}
