//! The ledger in process memory, for `cronq standalone` and fast tests. Same rules as the
//! Lua scripts of the Redis backend (`backends/redis/src/ledger/*.lua`), one mutex around
//! the whole state (never held across an await), times from a monotonic clock. Runs of
//! ended records go to a [`MemoryRunLog`], under the same lock; a fenced or given-up end
//! appends its run as lost.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use cronq_shared::config::Overlap;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{
    Claim, ClaimOutcome, End, Ended, Heartbeat, Lease, Ledger, Orphan, Record, Republish, Settle,
    State, WAKE_RECHECK,
};
use cronq_shared::runlog::{Outcome, Run};
use cronq_shared::store::StoreError;

use crate::runlog::MemoryRunLog;

/// The in-memory ledger. Its [`Default`] keeps runs in a history of its own.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    inner: Mutex<Inner>,
    history: Arc<MemoryRunLog>,
}

#[derive(Debug, Default)]
struct Inner {
    records: HashMap<String, Rec>,
    /// Job name → (holder key, token, expiry).
    locks: HashMap<String, (String, String, Instant)>,
    /// Key → due instant, for the reaper.
    leases: BTreeMap<String, Instant>,
    /// Job name → its waiting occurrences by (scheduled ms, key) (see `wait.lua`).
    waits: HashMap<String, BTreeSet<(i64, String)>>,
}

#[derive(Debug, Clone)]
struct Rec {
    state: State,
    attempt: u32,
    next: u32,
    token: String,
    queue: String,
    body: Option<Vec<u8>>,
    lease_until: Instant,
    /// The key of the occurrence that asked this one to stop (overlap `replace`).
    cancel: Option<String>,
    exclusive: bool,
    /// Scheduled instant, ms since the epoch.
    sched: i64,
    error: Option<String>,
    expires: Instant,
}

impl MemoryLedger {
    /// An empty ledger that appends the runs of ended records to `history`.
    pub fn new(history: Arc<MemoryRunLog>) -> Self {
        Self {
            inner: Mutex::default(),
            history,
        }
    }

    /// A key's record as it is now, for tests and inspection.
    pub fn record(&self, key: &OccurrenceKey) -> Option<Record> {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.live(&key.to_string(), now).map(|r| Record {
            state: r.state,
            attempt: r.attempt,
            error: r.error.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain data behind; keep serving it.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Inner {
    /// The live record of `key`, dropping it when its retention has passed.
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Rec> {
        if self.records.get(key).is_some_and(|r| r.expires <= now) {
            self.records.remove(key);
        }
        self.records.get_mut(key)
    }

    fn live_lock(&mut self, job: &str, now: Instant) -> Option<(String, String)> {
        if self.locks.get(job).is_some_and(|l| l.2 <= now) {
            self.locks.remove(job);
        }
        self.locks.get(job).map(|l| (l.0.clone(), l.1.clone()))
    }

    /// `None` when a message of `attempt` may act on the record; else the duplicate reply.
    fn blocked(&mut self, key: &str, attempt: u32, now: Instant) -> Option<(State, u32)> {
        let rec = self.live(key, now)?;
        let live_run = rec.state == State::Running && rec.lease_until > now;
        if rec.state.is_terminal() || live_run || attempt < rec.next {
            return Some((rec.state, rec.attempt));
        }
        None
    }

    /// The earliest (`last = false`) or latest waiter of `job` whose record still waits,
    /// dropping stale members on the way.
    fn wait_end(&mut self, job: &str, now: Instant, last: bool) -> Option<(i64, String)> {
        loop {
            let waits = self.waits.get(job)?;
            let found = if last { waits.last() } else { waits.first() }.cloned()?;
            if self
                .live(&found.1, now)
                .is_some_and(|r| r.state == State::Waiting && r.body.is_some())
            {
                return Some(found);
            }
            self.unwait(job, &found.1);
        }
    }

    fn unwait(&mut self, job: &str, key: &str) {
        if let Some(waits) = self.waits.get_mut(job) {
            waits.retain(|(_, k)| k != key);
            if waits.is_empty() {
                self.waits.remove(job);
            }
        }
    }

    /// Gives the earliest waiter of `job` its turn (see `wait.lua`).
    fn wake(&mut self, job: &str, now: Instant) -> Option<Orphan> {
        let (_, key) = self.wait_end(job, now, false)?;
        let rec = self.records.get(&key)?;
        let woken = Orphan {
            key: key.clone(),
            queue: rec.queue.clone(),
            body: rec.body.clone()?,
            why: Republish::Turn,
        };
        self.leases.insert(key, now + WAKE_RECHECK);
        Some(woken)
    }

    /// Records `claim` as waiting for its turn.
    fn wait_here(&mut self, claim: &Claim, key: &str, now: Instant) {
        let sched = claim.scheduled_at.timestamp_millis();
        self.records.insert(
            key.to_owned(),
            Rec {
                state: State::Waiting,
                attempt: claim.attempt,
                next: claim.attempt,
                token: String::new(),
                queue: claim.queue.to_string(),
                body: Some(claim.body.clone()),
                lease_until: now,
                cancel: None,
                exclusive: true,
                sched,
                error: None,
                expires: now + claim.retention,
            },
        );
        self.leases.insert(key.to_owned(), now + claim.recheck);
        let waits = self.waits.entry(claim.job.to_string()).or_default();
        waits.retain(|(_, k)| k != key);
        waits.insert((sched, key.to_owned()));
    }

    /// Applies the overlap rules of an exclusive job to `claim` (see `claim.lua`): `None`
    /// when it may take the job lock now.
    fn overlap(
        &mut self,
        claim: &Claim,
        key: &str,
        now: Instant,
        history: &MemoryRunLog,
    ) -> Option<ClaimOutcome> {
        let job = claim.job.as_str();
        let sched = claim.scheduled_at.timestamp_millis();
        let holder = self.live_lock(job, now).map(|h| h.0).filter(|h| h != key);
        match claim.overlap {
            Overlap::Allow => None,
            Overlap::Skip => holder.map(|holder| ClaimOutcome::Busy { holder }),
            Overlap::Queue => {
                if let Some(holder) = holder {
                    self.wait_here(claim, key, now);
                    return Some(ClaimOutcome::Waiting {
                        holder,
                        woken: None,
                    });
                }
                let (head_sched, head) = self.wait_end(job, now, false)?;
                if head == key || head_sched > sched {
                    return None;
                }
                let woken = self.wake(job, now).filter(|w| w.key != key)?;
                self.wait_here(claim, key, now);
                Some(ClaimOutcome::Waiting {
                    holder: woken.key.clone(),
                    woken: Some(woken),
                })
            }
            Overlap::Replace => {
                if let Some(h) = &holder
                    && self.live(h, now).is_some_and(|r| r.sched > sched)
                {
                    return Some(ClaimOutcome::Superseded { by: h.clone() });
                }
                if let Some((newest_sched, newest)) = self.wait_end(job, now, true)
                    && newest != key
                    && newest_sched > sched
                {
                    return Some(ClaimOutcome::Superseded { by: newest });
                }
                let older: Vec<String> = self
                    .waits
                    .get(job)
                    .map(|w| {
                        w.iter()
                            .map(|(_, k)| k.clone())
                            .filter(|k| k != key)
                            .collect()
                    })
                    .unwrap_or_default();
                for other in older {
                    self.supersede(claim, &other, key, now, history);
                }
                let holder = holder?;
                if let Some(rec) = self.live(&holder, now) {
                    rec.cancel = Some(key.to_owned());
                }
                self.wait_here(claim, key, now);
                Some(ClaimOutcome::Waiting {
                    holder,
                    woken: None,
                })
            }
        }
    }

    /// Records the waiter `other` as cancelled, replaced by `key`.
    fn supersede(
        &mut self,
        claim: &Claim,
        other: &str,
        key: &str,
        now: Instant,
        history: &MemoryRunLog,
    ) {
        self.unwait(claim.job.as_str(), other);
        let Some(rec) = self.live(other, now).filter(|r| r.state == State::Waiting) else {
            return;
        };
        let why = format!("replaced by {key}");
        rec.state = State::Cancelled;
        rec.body = None;
        rec.error = Some(why.clone());
        let attempt = rec.attempt;
        self.leases.remove(other);
        if let Ok(other_key) = other.parse() {
            history.push(Run {
                key: other_key,
                job: claim.job.clone(),
                attempt,
                consumer: claim.consumer.clone(),
                started_at: chrono::Utc::now(),
                duration: Duration::ZERO,
                outcome: Outcome::Cancelled,
                error: Some(why),
            });
        }
    }
}

#[async_trait]
impl Ledger for MemoryLedger {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        let now = Instant::now();
        let key = claim.key.to_string();
        let mut inner = self.lock();
        if let Some((state, attempt)) = inner.blocked(&key, claim.attempt, now) {
            return Ok(ClaimOutcome::Duplicate { state, attempt });
        }
        let takeover = inner
            .live(&key, now)
            .is_some_and(|r| matches!(r.state, State::Running | State::Pending));
        if let Some(outcome) = inner.overlap(claim, &key, now, &self.history) {
            return Ok(outcome);
        }
        let token = uuid::Uuid::new_v4().simple().to_string();
        let exclusive = claim.overlap != Overlap::Allow;
        if exclusive {
            inner.unwait(claim.job.as_str(), &key);
            inner.locks.insert(
                claim.job.to_string(),
                (key.clone(), token.clone(), now + claim.lease),
            );
        }
        inner.records.insert(
            key.clone(),
            Rec {
                state: State::Running,
                attempt: claim.attempt,
                next: claim.attempt,
                token: token.clone(),
                queue: claim.queue.to_string(),
                body: Some(claim.body.clone()),
                lease_until: now + claim.lease,
                cancel: None,
                exclusive,
                sched: claim.scheduled_at.timestamp_millis(),
                error: None,
                expires: now + claim.retention,
            },
        );
        inner.leases.insert(key, now + claim.lease);
        Ok(ClaimOutcome::Claimed {
            lease: Lease {
                key: claim.key.clone(),
                job: claim.job.clone(),
                token,
            },
            takeover,
        })
    }

    async fn heartbeat(&self, lease: &Lease, duration: Duration) -> Result<Heartbeat, StoreError> {
        let now = Instant::now();
        let key = lease.key.to_string();
        let mut inner = self.lock();
        let Some(rec) = inner.live(&key, now) else {
            return Ok(Heartbeat::Lost);
        };
        if rec.state != State::Running || rec.token != lease.token {
            return Ok(Heartbeat::Lost);
        }
        rec.lease_until = now + duration;
        let (exclusive, cancel) = (rec.exclusive, rec.cancel.clone());
        inner.leases.insert(key.clone(), now + duration);
        if exclusive {
            let mine = match inner.live_lock(lease.job.as_str(), now) {
                None => true,
                Some((k, t)) => k == key && t == lease.token,
            };
            if !mine {
                // Another occurrence took the lapsed job lock: stop (see heartbeat.lua).
                return Ok(Heartbeat::Lost);
            }
            inner.locks.insert(
                lease.job.to_string(),
                (key, lease.token.clone(), now + duration),
            );
        }
        Ok(match cancel {
            Some(by) => Heartbeat::CancelRequested { by },
            None => Heartbeat::Held,
        })
    }

    async fn complete(&self, lease: &Lease, end: &End) -> Result<Ended, StoreError> {
        let now = Instant::now();
        let key = lease.key.to_string();
        let mut inner = self.lock();
        let held = inner
            .live(&key, now)
            .filter(|rec| rec.state == State::Running && rec.token == lease.token)
            .map(|rec| rec.exclusive);
        let (Some(state), Some(exclusive)) = (end.state, held) else {
            // Fenced or given up: no record changes; the attempt shows as lost.
            if let Some(run) = &end.run {
                self.history.push(run.clone().lost());
            }
            return Ok(Ended {
                recorded: false,
                woken: None,
            });
        };
        let job = lease.job.as_str();
        if inner
            .live_lock(job, now)
            .is_some_and(|(k, t)| k == key && t == lease.token)
        {
            inner.locks.remove(job);
        }
        let woken = if exclusive && inner.live_lock(job, now).is_none() {
            inner.wake(job, now)
        } else {
            None
        };
        let rec = inner
            .records
            .get_mut(&key)
            .expect("checked live just above, under the same lock");
        rec.state = state;
        rec.token.clear();
        rec.error.clone_from(&end.error);
        rec.expires = now + end.retention;
        match &end.next {
            Some(f) => {
                rec.next = f.attempt;
                rec.body = Some(f.body.clone());
                inner.leases.insert(key, now + f.within);
            }
            None => {
                rec.body = None;
                inner.leases.remove(&key);
            }
        }
        if let Some(run) = &end.run {
            self.history.push(run.clone());
        }
        Ok(Ended {
            recorded: true,
            woken,
        })
    }

    async fn settle(&self, settle: &Settle) -> Result<Ended, StoreError> {
        let now = Instant::now();
        let key = settle.key.to_string();
        let mut inner = self.lock();
        if inner.blocked(&key, settle.attempt, now).is_some() {
            return Ok(Ended {
                recorded: false,
                woken: None,
            });
        }
        let queue = inner
            .live(&key, now)
            .map(|r| r.queue.clone())
            .unwrap_or_default();
        inner.records.insert(
            key.clone(),
            Rec {
                state: settle.state,
                attempt: settle.attempt,
                next: settle.attempt,
                token: String::new(),
                queue,
                body: None,
                lease_until: now,
                cancel: None,
                exclusive: false,
                sched: 0,
                error: settle.error.clone(),
                expires: now + settle.retention,
            },
        );
        inner.leases.remove(&key);
        let job = settle.job.as_str();
        inner.unwait(job, &key);
        if let Some(run) = &settle.run {
            self.history.push(run.clone());
        }
        let woken = if inner.live_lock(job, now).is_none() {
            inner.wake(job, now)
        } else {
            None
        };
        Ok(Ended {
            recorded: true,
            woken,
        })
    }

    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError> {
        let now = Instant::now();
        let mut inner = self.lock();
        let due: Vec<String> = inner
            .leases
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .take(limit.max(1))
            .collect();
        let mut out = Vec::new();
        for key in due {
            let Some(rec) = inner.live(&key, now) else {
                inner.leases.remove(&key);
                continue;
            };
            let Some(body) = rec.body.clone().filter(|_| !rec.state.is_terminal()) else {
                inner.leases.remove(&key);
                continue;
            };
            if rec.state == State::Running && rec.lease_until > now {
                let until = rec.lease_until;
                inner.leases.insert(key, until);
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
            let queue = rec.queue.clone();
            inner.leases.insert(key.clone(), now + hold);
            out.push(Orphan {
                key,
                queue,
                body,
                why,
            });
        }
        Ok(out)
    }

    async fn admit_replay(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        let now = Instant::now();
        let key = key.to_string();
        let mut inner = self.lock();
        let Some(rec) = inner.live(&key, now) else {
            return Ok(None);
        };
        let before = rec.state;
        if before == State::Failed {
            // As admit_replay.lua: runnable again, attempt 1 may claim it.
            rec.state = State::Retrying;
            rec.next = 1;
            rec.token.clear();
            rec.body = None;
            inner.leases.remove(&key);
        }
        Ok(Some(before))
    }
}
