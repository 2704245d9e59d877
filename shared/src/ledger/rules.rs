//! The ledger's rules, written once for every backend that does not run them as server-side
//! scripts: the memory ledger (one mutex) and the SQLite ledger (one transaction) implement
//! [`Records`] over their storage and call these functions inside their atomic step; the
//! Redis ledger runs the same rules as Lua scripts (`backends/redis/src/ledger/*.lua`).
//!
//! Pure: no I/O, no clock (the step's instant is [`Records::now`]); a record whose
//! retention has passed counts as absent, a job lock whose time has passed as free, and a
//! job's wait list is its records in state `waiting` that still hold their message, by
//! scheduled instant then key.

use std::time::Duration;

use chrono::Utc;

use super::{
    CANCELLED_BY, Cancel, Cancelled, Claim, ClaimOutcome, End, Ended, Heartbeat, Lease, Orphan,
    Record, Republish, Settle, State, WAKE_RECHECK, cancelled_by,
};
use crate::config::Overlap;
use crate::key::OccurrenceKey;
use crate::runlog::{Outcome, Run};

/// One record as stored. Instants are milliseconds on the backend's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    /// The job, for its wait list.
    pub job: String,
    /// Its state.
    pub state: State,
    /// The attempt it was last claimed or settled for.
    pub attempt: u32,
    /// The lowest attempt that may claim it.
    pub next: u32,
    /// The token of the claim that runs it, or that ended it; empty when released, reaped,
    /// waiting or settled.
    pub token: String,
    /// The logical queue a republished copy goes to.
    pub queue: String,
    /// The message a reaper republishes, while one may be needed.
    pub body: Option<Vec<u8>>,
    /// When the claim's lease ends.
    pub lease_until: i64,
    /// The key of the occurrence that asked this one to stop (overlap `replace`).
    pub cancel: Option<String>,
    /// It holds (or waits for) its job's lock.
    pub exclusive: bool,
    /// Its scheduled instant, ms since the Unix epoch.
    pub sched: i64,
    /// The last error.
    pub error: Option<String>,
    /// When its retention ends.
    pub expires: i64,
    /// When the reaper looks at it next, if ever.
    pub due: Option<i64>,
    /// The fencing token of the claim that runs it, or that ran it last; 0 before any.
    pub fence: u64,
}

/// A job lock as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLock {
    /// The holding occurrence's key.
    pub holder: String,
    /// Its claim's token.
    pub token: String,
    /// When it ends unless renewed.
    pub until: i64,
}

/// The storage the rules run on, inside one atomic step of the backend.
pub trait Records {
    /// The backend's error.
    type Error;

    /// The step's instant, in ms.
    fn now(&self) -> i64;
    /// The stored record of `key`, expired or not.
    fn get(&mut self, key: &str) -> Result<Option<Rec>, Self::Error>;
    /// Stores `rec` as the record of `key` (its wait list follows its state).
    fn put(&mut self, key: &str, rec: &Rec) -> Result<(), Self::Error>;
    /// Forgets the record of `key`.
    fn remove(&mut self, key: &str) -> Result<(), Self::Error>;
    /// The stored lock of `job`, expired or not.
    fn lock(&mut self, job: &str) -> Result<Option<JobLock>, Self::Error>;
    /// Stores the lock of `job` (`None` frees it).
    fn set_lock(&mut self, job: &str, lock: Option<&JobLock>) -> Result<(), Self::Error>;
    /// The earliest (`last = false`) or latest member of `job`'s wait list, as (scheduled
    /// ms, key): a live record in state `waiting` that holds its message.
    fn wait_end(&mut self, job: &str, last: bool) -> Result<Option<(i64, String)>, Self::Error>;
    /// Every record of `job` in state `waiting`, earliest first.
    fn waiting(&mut self, job: &str) -> Result<Vec<String>, Self::Error>;
    /// Up to `limit` keys whose reaper time has come, earliest first.
    fn due(&mut self, limit: usize) -> Result<Vec<String>, Self::Error>;
    /// Appends `run` to the history, in the same step.
    fn append(&mut self, run: &Run) -> Result<(), Self::Error>;
    /// Moves `job`'s fence counter on by one and returns it (1 the first time). The counter
    /// outlives every record of the job: it is never reset.
    fn next_fence(&mut self, job: &str) -> Result<u64, Self::Error>;
    /// Moves the count of cancel requests on by one (`Ledger::cancels`).
    fn count_cancel(&mut self) -> Result<(), Self::Error>;
}

/// Milliseconds of `d`, saturating.
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

const NOT_RECORDED: Ended = Ended {
    recorded: false,
    woken: None,
};

/// The live record of `key`, forgetting it when its retention has passed.
fn live<S: Records>(s: &mut S, key: &str) -> Result<Option<Rec>, S::Error> {
    match s.get(key)? {
        Some(rec) if rec.expires <= s.now() => {
            s.remove(key)?;
            Ok(None)
        }
        other => Ok(other),
    }
}

/// The holder and token of `job`'s lock, if it is held.
fn live_lock<S: Records>(s: &mut S, job: &str) -> Result<Option<(String, String)>, S::Error> {
    let now = s.now();
    Ok(s.lock(job)?
        .filter(|l| l.until > now)
        .map(|l| (l.holder, l.token)))
}

/// `None` when a message of `attempt` may act on `rec` at `now`; else the duplicate reply.
fn blocked(rec: Option<&Rec>, attempt: u32, token: &str, now: i64) -> Option<(State, u32)> {
    let rec = rec?;
    let live_run = rec.state == State::Running && rec.lease_until > now && !is_mine(rec, token);
    (rec.state.is_terminal() || live_run || attempt < rec.next).then_some((rec.state, rec.attempt))
}

/// `rec` runs under the claim of `token`: an earlier try of this very claim was recorded.
fn is_mine(rec: &Rec, token: &str) -> bool {
    rec.state == State::Running && !token.is_empty() && rec.token == token
}

/// Gives the earliest waiter of `job` its turn (see `wait.lua`).
fn wake<S: Records>(s: &mut S, job: &str) -> Result<Option<Orphan>, S::Error> {
    let Some((_, key)) = s.wait_end(job, false)? else {
        return Ok(None);
    };
    let Some(mut rec) = live(s, &key)? else {
        return Ok(None);
    };
    let Some(body) = rec.body.clone() else {
        return Ok(None);
    };
    rec.due = Some(s.now() + ms(WAKE_RECHECK));
    s.put(&key, &rec)?;
    Ok(Some(Orphan {
        key,
        queue: rec.queue,
        body,
        why: Republish::Turn,
    }))
}

/// A fresh record of `claim` in `state`.
fn fresh(claim: &Claim, state: State, now: i64) -> Rec {
    Rec {
        job: claim.job.to_string(),
        state,
        attempt: claim.attempt,
        next: claim.attempt,
        token: String::new(),
        queue: claim.queue.to_string(),
        body: Some(claim.body.clone()),
        lease_until: now,
        cancel: None,
        exclusive: true,
        sched: claim.scheduled_at.timestamp_millis(),
        error: None,
        expires: now + ms(claim.retention),
        due: None,
        fence: 0,
    }
}

/// Records `claim` as waiting for its turn.
fn wait_here<S: Records>(s: &mut S, claim: &Claim, key: &str) -> Result<(), S::Error> {
    let now = s.now();
    let rec = Rec {
        due: Some(now + ms(claim.recheck)),
        ..fresh(claim, State::Waiting, now)
    };
    s.put(key, &rec)
}

/// The operator's cancel mark of a record whose owner went away before it stopped the
/// attempt (its lease lapsed, or it was reaped or released): claimed by anyone else, the
/// occurrence ends cancelled instead of running again (see claim.lua).
fn abandoned_cancel(rec: &Rec, token: &str) -> Option<String> {
    let by = rec
        .cancel
        .as_ref()
        .filter(|c| c.starts_with(CANCELLED_BY))?;
    let gone = matches!(rec.state, State::Running | State::Pending) && !is_mine(rec, token);
    gone.then(|| by.clone())
}

/// Applies the overlap rules of an exclusive job to `claim` (see `claim.lua`): `None` when
/// it may take the job lock now.
fn overlap<S: Records>(
    s: &mut S,
    claim: &Claim,
    key: &str,
) -> Result<Option<ClaimOutcome>, S::Error> {
    let job = claim.job.as_str();
    let sched = claim.scheduled_at.timestamp_millis();
    let holder = live_lock(s, job)?.map(|h| h.0).filter(|h| h != key);
    Ok(match claim.overlap {
        Overlap::Allow => None,
        // Skip: an earlier (or same-instant) holder makes this one `skipped`; behind a later
        // one (a retry or a republished attempt of an occurrence the next one overtook) it
        // waits for its turn as under `queue`, never skipped for an occurrence after it.
        Overlap::Skip if holder_not_later(s, holder.as_deref(), sched)? => {
            holder.map(|holder| ClaimOutcome::Busy { holder })
        }
        Overlap::Skip | Overlap::Queue => {
            if let Some(holder) = holder {
                wait_here(s, claim, key)?;
                return Ok(Some(ClaimOutcome::Waiting {
                    holder,
                    woken: None,
                }));
            }
            let Some((head_sched, head)) = s.wait_end(job, false)? else {
                return Ok(None);
            };
            if head == key || head_sched > sched {
                return Ok(None);
            }
            let Some(woken) = wake(s, job)?.filter(|w| w.key != key) else {
                return Ok(None);
            };
            wait_here(s, claim, key)?;
            Some(ClaimOutcome::Waiting {
                holder: woken.key.clone(),
                woken: Some(woken),
            })
        }
        Overlap::Replace => {
            if let Some(h) = &holder
                && live(s, h)?.is_some_and(|r| r.sched > sched)
            {
                return Ok(Some(ClaimOutcome::Superseded { by: h.clone() }));
            }
            if let Some((newest_sched, newest)) = s.wait_end(job, true)?
                && newest != key
                && newest_sched > sched
            {
                return Ok(Some(ClaimOutcome::Superseded { by: newest }));
            }
            for other in s.waiting(job)? {
                if other != key {
                    supersede(s, claim, &other, key)?;
                }
            }
            let Some(holder) = holder else {
                return Ok(None);
            };
            if let Some(mut rec) = live(s, &holder)? {
                rec.cancel = Some(key.to_owned());
                s.put(&holder, &rec)?;
            }
            wait_here(s, claim, key)?;
            Some(ClaimOutcome::Waiting {
                holder,
                woken: None,
            })
        }
    })
}

/// `holder` holds the job lock and was scheduled no later than `sched` (a holder whose
/// record is gone counts as earlier).
fn holder_not_later<S: Records>(
    s: &mut S,
    holder: Option<&str>,
    sched: i64,
) -> Result<bool, S::Error> {
    let Some(holder) = holder else {
        return Ok(false);
    };
    Ok(live(s, holder)?.is_none_or(|r| r.sched <= sched))
}

/// Records the waiter `other` as cancelled, replaced by `key`, with its history entry.
fn supersede<S: Records>(s: &mut S, claim: &Claim, other: &str, key: &str) -> Result<(), S::Error> {
    let Some(mut rec) = live(s, other)?.filter(|r| r.state == State::Waiting) else {
        return Ok(());
    };
    let why = format!("replaced by {key}");
    rec.state = State::Cancelled;
    rec.body = None;
    rec.error = Some(why.clone());
    rec.due = None;
    s.put(other, &rec)?;
    if let Ok(other_key) = other.parse() {
        s.append(&Run {
            key: other_key,
            job: claim.job.clone(),
            attempt: rec.attempt,
            consumer: claim.consumer.clone(),
            started_at: Utc::now(),
            duration: Duration::ZERO,
            outcome: Outcome::Cancelled,
            error: Some(why),
            published_at: None,
        })?;
    }
    Ok(())
}

/// [`super::Ledger::claim`], under `claim.token`.
///
/// # Errors
/// The storage's.
pub fn claim<S: Records>(s: &mut S, claim: &Claim) -> Result<ClaimOutcome, S::Error> {
    let key = claim.key.to_string();
    let token = claim.token.clone();
    let current = live(s, &key)?;
    if let Some((state, attempt)) = blocked(current.as_ref(), claim.attempt, &token, s.now()) {
        return Ok(ClaimOutcome::Duplicate { state, attempt });
    }
    if let Some(by) = current.as_ref().and_then(|r| abandoned_cancel(r, &token)) {
        return Ok(ClaimOutcome::Superseded { by });
    }
    // A claim granted again under its own token keeps the fence it was granted with, and
    // a cancel or replace mark set on it meanwhile (the owner must still learn of it).
    let mine = current
        .as_ref()
        .filter(|r| is_mine(r, &token))
        .map(|r| (r.fence, r.cancel.clone()));
    let takeover = current.is_some_and(|r| {
        matches!(r.state, State::Running | State::Pending) && !is_mine(&r, &token)
    });
    if let Some(outcome) = overlap(s, claim, &key)? {
        return Ok(outcome);
    }
    let now = s.now();
    let exclusive = claim.overlap != Overlap::Allow;
    let until = now + ms(claim.lease);
    if exclusive {
        let lock = JobLock {
            holder: key.clone(),
            token: token.clone(),
            until,
        };
        s.set_lock(claim.job.as_str(), Some(&lock))?;
    }
    let (fence, mark) = match mine {
        Some(kept) => kept,
        None => (s.next_fence(claim.job.as_str())?, None),
    };
    let rec = Rec {
        token: token.clone(),
        lease_until: until,
        exclusive,
        due: Some(until),
        fence,
        cancel: mark,
        ..fresh(claim, State::Running, now)
    };
    s.put(&key, &rec)?;
    Ok(ClaimOutcome::Claimed {
        lease: Lease {
            key: claim.key.clone(),
            job: claim.job.clone(),
            token,
            fence,
        },
        takeover,
    })
}

/// [`super::Ledger::heartbeat`].
///
/// # Errors
/// The storage's.
pub fn heartbeat<S: Records>(
    s: &mut S,
    lease: &Lease,
    duration: Duration,
) -> Result<Heartbeat, S::Error> {
    let key = lease.key.to_string();
    let Some(mut rec) = live(s, &key)? else {
        return Ok(Heartbeat::Lost);
    };
    if rec.state != State::Running || rec.token != lease.token {
        return Ok(Heartbeat::Lost);
    }
    let until = s.now() + ms(duration);
    rec.lease_until = until;
    rec.due = Some(until);
    s.put(&key, &rec)?;
    if rec.exclusive {
        let job = lease.job.as_str();
        let mine = live_lock(s, job)?.is_none_or(|(k, t)| k == key && t == lease.token);
        if !mine {
            // Another occurrence took the lapsed job lock: stop (see heartbeat.lua).
            return Ok(Heartbeat::Lost);
        }
        let lock = JobLock {
            holder: key,
            token: lease.token.clone(),
            until,
        };
        s.set_lock(job, Some(&lock))?;
    }
    Ok(match rec.cancel {
        Some(by) => Heartbeat::CancelRequested { by },
        None => Heartbeat::Held,
    })
}

/// [`super::Ledger::complete`].
///
/// # Errors
/// The storage's.
pub fn complete<S: Records>(s: &mut S, lease: &Lease, end: &End) -> Result<Ended, S::Error> {
    let key = lease.key.to_string();
    let current = live(s, &key)?;
    if current
        .as_ref()
        .is_some_and(|rec| Some(rec.state) == end.state && rec.token == lease.token)
    {
        // This very end, recorded by an earlier try (a running record is not an end).
        return Ok(Ended {
            recorded: true,
            woken: None,
        });
    }
    let held = current.filter(|rec| rec.state == State::Running && rec.token == lease.token);
    let (Some(state), Some(mut rec)) = (end.state, held) else {
        // Fenced or given up: no record changes; the attempt shows as lost.
        if let Some(run) = &end.run {
            s.append(&run.clone().lost())?;
        }
        return Ok(NOT_RECORDED);
    };
    let job = lease.job.as_str();
    // Only an exclusive claim takes its job's lock.
    let woken = if rec.exclusive {
        match live_lock(s, job)? {
            Some((k, t)) if k == key && t == lease.token => {
                s.set_lock(job, None)?;
                wake(s, job)?
            }
            Some(_) => None, // another occurrence took the lapsed lock: its end wakes
            None => wake(s, job)?,
        }
    } else {
        None
    };
    let now = s.now();
    rec.state = state;
    // The token stays: it tells an end tried again by this claim from a fenced one.
    rec.error.clone_from(&end.error);
    rec.expires = now + ms(end.retention);
    match &end.next {
        Some(f) => {
            rec.next = f.attempt;
            rec.body = Some(f.body.clone());
            rec.due = Some(now + ms(f.within));
        }
        None => {
            rec.body = None;
            rec.due = None;
        }
    }
    s.put(&key, &rec)?;
    if let Some(run) = &end.run {
        s.append(run)?;
    }
    Ok(Ended {
        recorded: true,
        woken,
    })
}

/// [`super::Ledger::settle`].
///
/// # Errors
/// The storage's.
pub fn settle<S: Records>(s: &mut S, settle: &Settle) -> Result<Ended, S::Error> {
    let key = settle.key.to_string();
    let current = live(s, &key)?;
    if blocked(current.as_ref(), settle.attempt, "", s.now()).is_some() {
        return Ok(NOT_RECORDED);
    }
    let queue = current.map(|r| r.queue).unwrap_or_default();
    let job = settle.job.as_str();
    let now = s.now();
    let rec = Rec {
        job: job.to_owned(),
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
        expires: now + ms(settle.retention),
        due: None,
        fence: 0,
    };
    s.put(&key, &rec)?;
    if let Some(run) = &settle.run {
        s.append(run)?;
    }
    let woken = if live_lock(s, job)?.is_none() {
        wake(s, job)?
    } else {
        None
    };
    Ok(Ended {
        recorded: true,
        woken,
    })
}

/// [`super::Ledger::reap`].
///
/// # Errors
/// The storage's.
pub fn reap<S: Records>(s: &mut S, limit: usize, hold: Duration) -> Result<Vec<Orphan>, S::Error> {
    let now = s.now();
    let mut out = Vec::new();
    for key in s.due(limit.max(1))? {
        let Some(mut rec) = live(s, &key)? else {
            continue;
        };
        let Some(body) = rec.body.clone().filter(|_| !rec.state.is_terminal()) else {
            rec.due = None;
            s.put(&key, &rec)?;
            continue;
        };
        if rec.state == State::Running && rec.lease_until > now {
            rec.due = Some(rec.lease_until);
            s.put(&key, &rec)?;
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
        rec.due = Some(now + ms(hold));
        s.put(&key, &rec)?;
        out.push(Orphan {
            key,
            queue: rec.queue,
            body,
            why,
        });
    }
    Ok(out)
}

/// [`super::Ledger::admit_replay`].
///
/// # Errors
/// The storage's.
pub fn admit_replay<S: Records>(s: &mut S, key: &OccurrenceKey) -> Result<Option<State>, S::Error> {
    let key = key.to_string();
    let Some(mut rec) = live(s, &key)? else {
        return Ok(None);
    };
    let before = rec.state;
    let parent_skipped = before == State::Skipped
        && rec
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with(super::PARENT_ENDED));
    if before == State::Failed || parent_skipped {
        // As admit_replay.lua: runnable again, attempt 1 may claim it.
        rec.state = State::Retrying;
        rec.next = 1;
        rec.token.clear();
        rec.body = None;
        rec.due = None;
        s.put(&key, &rec)?;
    }
    Ok(Some(before))
}

/// [`super::Ledger::cancel`].
///
/// # Errors
/// The storage's.
pub fn cancel<S: Records>(s: &mut S, cancel: &Cancel) -> Result<Cancelled, S::Error> {
    s.count_cancel()?;
    let key = cancel.key.to_string();
    let Some(mut rec) = live(s, &key)? else {
        return Ok(Cancelled::Unknown);
    };
    if rec.state.is_terminal() {
        return Ok(Cancelled::Finished(rec.state));
    }
    let why = cancelled_by(&cancel.who);
    let now = s.now();
    if rec.state == State::Running && rec.lease_until > now {
        // Its owner reads the mark with its next heartbeat and records the end itself.
        rec.cancel = Some(why);
        s.put(&key, &rec)?;
        return Ok(Cancelled::Stopping);
    }
    // Waiting, pending, retrying, or running under a lapsed lease (its owner is gone: a
    // late end of it is fenced, the token being cleared): it never starts again.
    let was = rec.state;
    rec.state = State::Cancelled;
    rec.token.clear();
    rec.body = None;
    rec.due = None;
    rec.error = Some(why.clone());
    s.put(&key, &rec)?;
    s.append(&Run {
        key: cancel.key.clone(),
        job: cancel.key.job().clone(),
        attempt: rec.attempt,
        consumer: cancel.who.clone(),
        started_at: Utc::now(),
        duration: Duration::ZERO,
        outcome: Outcome::Cancelled,
        error: Some(why),
        published_at: None,
    })?;
    if rec.exclusive && live_lock(s, &rec.job)?.is_none() {
        // The next waiter's turn: no one here publishes it, the reaper does once its due
        // time (WAKE_RECHECK from now) passes.
        wake(s, &rec.job)?;
    }
    Ok(Cancelled::Ended(was))
}

/// A key's record as it is now, for inspection.
///
/// # Errors
/// The storage's.
pub fn record<S: Records>(s: &mut S, key: &OccurrenceKey) -> Result<Option<Record>, S::Error> {
    Ok(live(s, &key.to_string())?.map(|r| Record {
        state: r.state,
        attempt: r.attempt,
        error: r.error,
    }))
}
