//! The ledger in process memory, for `cronq standalone` and fast tests. Same rules as the
//! Lua scripts of [`super::redis`], one mutex around the whole state (never held across an
//! await), times from a monotonic clock. Runs of ended records go to a [`MemoryRunLog`],
//! under the same lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{Claim, ClaimOutcome, End, Heartbeat, Lease, Ledger, Orphan, Record, Settle, State};
use crate::config::Overlap;
use crate::connect::StoreError;
use crate::key::OccurrenceKey;
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
    cancel: bool,
    exclusive: bool,
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
        // A failed occurrence may be claimed by a later attempt (a dead-letter replay).
        let final_state = match rec.state {
            State::Failed => attempt <= rec.attempt,
            s => s.is_terminal(),
        };
        if final_state || live_run || attempt < rec.next {
            return Some((rec.state, rec.attempt));
        }
        None
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
        let token = uuid::Uuid::new_v4().simple().to_string();
        let exclusive = claim.overlap != Overlap::Allow;
        if exclusive {
            if let Some((holder, _)) = inner.live_lock(claim.job.as_str(), now)
                && holder != key
            {
                if claim.overlap == Overlap::Replace
                    && let Some(rec) = inner.live(&holder, now)
                {
                    rec.cancel = true;
                }
                return Ok(ClaimOutcome::Busy { holder });
            }
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
                cancel: false,
                exclusive,
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
        let (exclusive, cancel) = (rec.exclusive, rec.cancel);
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
        Ok(if cancel {
            Heartbeat::CancelRequested
        } else {
            Heartbeat::Held
        })
    }

    async fn complete(&self, lease: &Lease, end: &End) -> Result<bool, StoreError> {
        let now = Instant::now();
        let key = lease.key.to_string();
        let mut inner = self.lock();
        match inner.live(&key, now) {
            Some(rec) if rec.state == State::Running && rec.token == lease.token => {}
            _ => return Ok(false),
        }
        if inner
            .live_lock(lease.job.as_str(), now)
            .is_some_and(|(k, t)| k == key && t == lease.token)
        {
            inner.locks.remove(lease.job.as_str());
        }
        let rec = inner
            .records
            .get_mut(&key)
            .expect("checked live just above, under the same lock");
        rec.state = end.state;
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
        Ok(true)
    }

    async fn settle(&self, settle: &Settle) -> Result<bool, StoreError> {
        let now = Instant::now();
        let key = settle.key.to_string();
        let mut inner = self.lock();
        if inner.blocked(&key, settle.attempt, now).is_some() {
            return Ok(false);
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
                cancel: false,
                exclusive: false,
                error: settle.error.clone(),
                expires: now + settle.retention,
            },
        );
        inner.leases.remove(&key);
        if let Some(run) = &settle.run {
            self.history.push(run.clone());
        }
        Ok(true)
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
            if rec.state == State::Running {
                rec.next = rec.attempt;
            }
            rec.state = State::Pending;
            rec.token.clear();
            let queue = rec.queue.clone();
            inner.leases.insert(key.clone(), now + hold);
            out.push(Orphan { key, queue, body });
        }
        Ok(out)
    }

    async fn get(&self, key: &OccurrenceKey) -> Result<Option<Record>, StoreError> {
        let now = Instant::now();
        let mut inner = self.lock();
        Ok(inner.live(&key.to_string(), now).map(|r| Record {
            state: r.state,
            attempt: r.attempt,
            error: r.error.clone(),
        }))
    }
}
