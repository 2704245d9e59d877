//! The ledger in the data file: each port operation one transaction ([`tx::Tx`] holds the
//! rules), so a record, its job lock, its wait list and its run in the history change
//! together or not at all, whichever process on the file runs it. Times are the wall clock
//! of the process (see [`crate::db::now_ms`]).

mod tx;

use std::time::Duration;

use async_trait::async_trait;

use cronq_shared::config::Overlap;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{
    Claim, ClaimOutcome, End, Ended, Heartbeat, Lease, Ledger, Orphan, Record, Republish, Settle,
    State,
};
use cronq_shared::store::StoreError;

use crate::db::{Db, Failure, ms, now_ms};
use crate::runlog::{self, SqliteRunLog};

use self::tx::{Rec, Tx};

/// How many records past their retention a reap sweeps away at most.
const EXPIRE_BATCH: usize = 500;

/// The ledger of a data file; ended runs go to its run history, in the same transaction.
#[derive(Debug, Clone)]
pub struct SqliteLedger {
    db: Db,
    history: SqliteRunLog,
}

impl SqliteLedger {
    /// The ledger in `db`, appending to `history` (in the same file).
    pub fn new(db: Db, history: SqliteRunLog) -> Self {
        Self { db, history }
    }

    /// A key's record as it is now, for tests and inspection.
    pub async fn record(&self, key: &OccurrenceKey) -> Option<Record> {
        let key = key.to_string();
        self.db
            .write(move |conn| {
                let tx = Tx {
                    conn,
                    now: now_ms(),
                };
                Ok(tx.live(&key)?.map(|r| Record {
                    state: r.state,
                    attempt: r.attempt,
                    error: r.error,
                }))
            })
            .await
            .ok()
            .flatten()
    }

    /// Runs `f` on a [`Tx`] at this instant, in one write transaction.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.db
            .write(move |conn| {
                f(&Tx {
                    conn,
                    now: now_ms(),
                })
            })
            .await
            .map_err(Failure::into_store)
    }
}

const NOT_RECORDED: Ended = Ended {
    recorded: false,
    woken: None,
};

#[async_trait]
impl Ledger for SqliteLedger {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        let claim = claim.clone();
        self.with(move |tx| {
            let key = claim.key.to_string();
            if let Some((state, attempt)) = tx.blocked(&key, claim.attempt)? {
                return Ok(ClaimOutcome::Duplicate { state, attempt });
            }
            let takeover = tx
                .live(&key)?
                .is_some_and(|r| matches!(r.state, State::Running | State::Pending));
            if let Some(outcome) = tx.overlap(&claim, &key)? {
                return Ok(outcome);
            }
            let token = uuid::Uuid::new_v4().simple().to_string();
            let exclusive = claim.overlap != Overlap::Allow;
            let until = tx.now + ms(claim.lease);
            if exclusive {
                tx.set_lock(claim.job.as_str(), &key, &token, until)?;
            }
            tx.put(
                &key,
                &Rec {
                    job: claim.job.to_string(),
                    state: State::Running,
                    attempt: claim.attempt,
                    next: claim.attempt,
                    token: token.clone(),
                    queue: claim.queue.to_string(),
                    body: Some(claim.body.clone()),
                    lease_until: until,
                    cancel: None,
                    exclusive,
                    sched: claim.scheduled_at.timestamp_millis(),
                    error: None,
                    expires: tx.now + ms(claim.retention),
                    due: Some(until),
                },
            )?;
            Ok(ClaimOutcome::Claimed {
                lease: Lease {
                    key: claim.key.clone(),
                    job: claim.job.clone(),
                    token,
                },
                takeover,
            })
        })
        .await
    }

    async fn heartbeat(&self, lease: &Lease, duration: Duration) -> Result<Heartbeat, StoreError> {
        let lease = lease.clone();
        self.with(move |tx| {
            let key = lease.key.to_string();
            let Some(mut rec) = tx.live(&key)? else {
                return Ok(Heartbeat::Lost);
            };
            if rec.state != State::Running || rec.token != lease.token {
                return Ok(Heartbeat::Lost);
            }
            let until = tx.now + ms(duration);
            rec.lease_until = until;
            rec.due = Some(until);
            tx.put(&key, &rec)?;
            if rec.exclusive {
                let job = lease.job.as_str();
                let mine = tx
                    .live_lock(job)?
                    .is_none_or(|(k, t)| k == key && t == lease.token);
                if !mine {
                    // Another occurrence took the lapsed job lock: stop (see heartbeat.lua).
                    return Ok(Heartbeat::Lost);
                }
                tx.set_lock(job, &key, &lease.token, until)?;
            }
            Ok(match rec.cancel {
                Some(by) => Heartbeat::CancelRequested { by },
                None => Heartbeat::Held,
            })
        })
        .await
    }

    async fn complete(&self, lease: &Lease, end: &End) -> Result<Ended, StoreError> {
        let (lease, end) = (lease.clone(), end.clone());
        self.with(move |tx| {
            let key = lease.key.to_string();
            let held = tx
                .live(&key)?
                .filter(|rec| rec.state == State::Running && rec.token == lease.token);
            let (Some(state), Some(mut rec)) = (end.state, held) else {
                // Fenced or given up: no record changes; the attempt shows as lost.
                if let Some(run) = &end.run {
                    runlog::append(tx.conn, &run.clone().lost())?;
                }
                return Ok(NOT_RECORDED);
            };
            let job = lease.job.as_str();
            if tx
                .live_lock(job)?
                .is_some_and(|(k, t)| k == key && t == lease.token)
            {
                tx.drop_lock(job)?;
            }
            let woken = if rec.exclusive && tx.live_lock(job)?.is_none() {
                tx.wake(job)?
            } else {
                None
            };
            rec.state = state;
            rec.token.clear();
            rec.error.clone_from(&end.error);
            rec.expires = tx.now + ms(end.retention);
            match &end.next {
                Some(f) => {
                    rec.next = f.attempt;
                    rec.body = Some(f.body.clone());
                    rec.due = Some(tx.now + ms(f.within));
                }
                None => {
                    rec.body = None;
                    rec.due = None;
                }
            }
            tx.put(&key, &rec)?;
            if let Some(run) = &end.run {
                runlog::append(tx.conn, run)?;
            }
            Ok(Ended {
                recorded: true,
                woken,
            })
        })
        .await
    }

    async fn settle(&self, settle: &Settle) -> Result<Ended, StoreError> {
        let settle = settle.clone();
        self.with(move |tx| {
            let key = settle.key.to_string();
            if tx.blocked(&key, settle.attempt)?.is_some() {
                return Ok(NOT_RECORDED);
            }
            let queue = tx.live(&key)?.map(|r| r.queue).unwrap_or_default();
            let job = settle.job.as_str();
            tx.put(
                &key,
                &Rec {
                    job: job.to_owned(),
                    state: settle.state,
                    attempt: settle.attempt,
                    next: settle.attempt,
                    token: String::new(),
                    queue,
                    body: None,
                    lease_until: tx.now,
                    cancel: None,
                    exclusive: false,
                    sched: 0,
                    error: settle.error.clone(),
                    expires: tx.now + ms(settle.retention),
                    due: None,
                },
            )?;
            if let Some(run) = &settle.run {
                runlog::append(tx.conn, run)?;
            }
            let woken = if tx.live_lock(job)?.is_none() {
                tx.wake(job)?
            } else {
                None
            };
            Ok(Ended {
                recorded: true,
                woken,
            })
        })
        .await
    }

    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError> {
        let bounds = self.history.bounds();
        self.with(move |tx| {
            let mut out = Vec::new();
            for key in tx.due(limit.max(1))? {
                let Some(mut rec) = tx.live(&key)? else {
                    continue;
                };
                let Some(body) = rec.body.clone().filter(|_| !rec.state.is_terminal()) else {
                    tx.set_due(&key, None)?;
                    continue;
                };
                if rec.state == State::Running && rec.lease_until > tx.now {
                    tx.set_due(&key, Some(rec.lease_until))?;
                    continue;
                }
                let why = match rec.state {
                    State::Running => {
                        rec.next = rec.attempt;
                        rec.state = State::Pending;
                        rec.token.clear();
                        Republish::Lapsed
                    }
                    State::Retrying => Republish::Retry,
                    State::Waiting => Republish::Waiting,
                    _ => Republish::Released,
                };
                rec.due = Some(tx.now + ms(hold));
                tx.put(&key, &rec)?;
                out.push(Orphan {
                    key,
                    queue: rec.queue,
                    body,
                    why,
                });
            }
            // The sweeps that keep the file bounded ride on the reaper's period.
            tx.expire(EXPIRE_BATCH)?;
            runlog::trim(tx.conn, bounds)?;
            Ok(out)
        })
        .await
    }

    async fn admit_replay(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        let key = key.to_string();
        self.with(move |tx| {
            let Some(mut rec) = tx.live(&key)? else {
                return Ok(None);
            };
            let before = rec.state;
            if before == State::Failed {
                // As admit_replay.lua: runnable again, attempt 1 may claim it.
                rec.state = State::Retrying;
                rec.next = 1;
                rec.token.clear();
                rec.body = None;
                rec.due = None;
                tx.put(&key, &rec)?;
            }
            Ok(Some(before))
        })
        .await
    }
}
