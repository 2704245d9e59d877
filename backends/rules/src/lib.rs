//! The ledger's rules, written once for every backend that does not run them as server-side
//! scripts: the memory ledger (one mutex) and the SQLite ledger (one transaction) implement
//! [`Records`] over their storage and call these functions inside their atomic step; the
//! Redis ledger runs the same rules as Lua scripts (`backends/redis/src/ledger/*.lua`).
//!
//! The rule this crate keeps: it is the in-process implementation of the ledger port
//! (`cronq_shared::ledger`), shared by the backends that run it in process; it depends on
//! the contract only, never on a backend, and what the contract states (states, gates,
//! [`pool_gate`], fencing) stays in the contract.
//!
//! Pure: no I/O, no clock (the step's instant is [`Records::now`]); a record whose
//! retention has passed counts as absent, a slot whose time has passed as free, and a
//! gate's wait list is its records in state `waiting` that still hold their message, by
//! scheduled instant then key.
//!
//! One mechanism limits concurrency: a *gate* has a number of *slots*. An exclusive job
//! (overlap other than `allow`) has its gate, named after the job, with `max_concurrent`
//! slots (1 unless set: the job lock); a pool has its gate, [`pool_gate`], with `size`
//! slots. A claim takes a slot of each gate it goes through, or waits in the wait list of
//! the first that is full. A freed slot gives the waiter whose turn it is a wake-up
//! ([`Republish::Turn`]); with `k` slots free the first `k` waiters have their turn, so a
//! newcomer never overtakes an earlier waiter.

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

use std::time::Duration;

use chrono::Utc;

use cronq_shared::config::Overlap;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::pool_gate;
use cronq_shared::ledger::{
    CANCELLED_BY, Cancel, Cancelled, Claim, ClaimOutcome, End, Ended, ExecutionLease, GATE_SHOWN,
    GateUse, Heartbeat, Orphan, Record, Republish, Settle, State, WAKE_RECHECK, cancelled_by,
};
use cronq_shared::runlog::{Outcome, Run};

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
    /// It holds (or waits for) a slot of its job's gate.
    pub exclusive: bool,
    /// How many slots its job's gate has (when exclusive).
    pub cap: u32,
    /// The pool whose slot it holds or waits for, if any.
    pub pool: Option<String>,
    /// How many slots the pool has.
    pub pool_cap: u32,
    /// The gate whose wait list it is on while `waiting`: its job's, or its pool's.
    pub gate: String,
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

/// One slot of a gate, as stored (for a job of one slot: its job lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLock {
    /// The holding occurrence's key: a gate holds at most one slot per key.
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
    /// The stored slots of `gate`, expired or not.
    fn slots(&mut self, gate: &str) -> Result<Vec<JobLock>, Self::Error>;
    /// Stores the slot `holder` holds in `gate` (`None` frees it).
    fn set_slot(
        &mut self,
        gate: &str,
        holder: &str,
        slot: Option<&JobLock>,
    ) -> Result<(), Self::Error>;
    /// The first `n` (`last = false`), or the last `n`, latest first, members of `gate`'s
    /// wait list, as (scheduled ms, key): live records in state `waiting` that hold their
    /// message.
    fn wait_ends(
        &mut self,
        gate: &str,
        n: usize,
        last: bool,
    ) -> Result<Vec<(i64, String)>, Self::Error>;
    /// Every record on `gate`'s wait list in state `waiting`, earliest first.
    fn waiting(&mut self, gate: &str) -> Result<Vec<String>, Self::Error>;
    /// Up to `limit` keys whose reaper time has come, earliest first.
    fn due(&mut self, limit: usize) -> Result<Vec<String>, Self::Error>;
    /// Appends `run` to the history, in the same step.
    fn append(&mut self, run: &Run) -> Result<(), Self::Error>;
    /// Moves `job`'s fence counter on by one and returns it (1 the first time). The counter
    /// outlives every record of the job: it is never reset.
    fn next_fence(&mut self, job: &str) -> Result<u64, Self::Error>;
    /// Moves the count of cancels of running attempts on by one (`Ledger::cancels`).
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

/// The live slots of `gate` held by others than `key`, by holder.
fn others<S: Records>(s: &mut S, gate: &str, key: &str) -> Result<Vec<JobLock>, S::Error> {
    let now = s.now();
    let mut slots: Vec<JobLock> = s
        .slots(gate)?
        .into_iter()
        .filter(|l| l.until > now && l.holder != key)
        .collect();
    slots.sort_by(|a, b| a.holder.cmp(&b.holder));
    Ok(slots)
}

/// The gates `rec` holds (or waits for) a slot of, each with its number of slots.
fn gates_of(rec: &Rec) -> Vec<(String, usize)> {
    let mut gates = Vec::new();
    if rec.exclusive {
        gates.push((rec.job.clone(), slots(rec.cap)));
    }
    if let Some(pool) = &rec.pool {
        gates.push((pool_gate(pool), slots(rec.pool_cap)));
    }
    gates
}

/// A number of slots as stored (0 from a record written before gates had more than one).
fn slots(cap: u32) -> usize {
    usize::try_from(cap.max(1)).unwrap_or(usize::MAX)
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

/// Gives the waiter of `gate` whose turn it is a wake-up (see `wait.lua`), `free` slots
/// being free: the `free`-th in scheduled order (those before it had theirs from the
/// slots freed before), or the last when fewer wait.
fn wake<S: Records>(s: &mut S, gate: &str, free: usize) -> Result<Option<Orphan>, S::Error> {
    if free == 0 {
        return Ok(None);
    }
    let Some((_, key)) = s.wait_ends(gate, free, false)?.pop() else {
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

/// How many of `gate`'s `cap` slots are free.
fn free_of<S: Records>(s: &mut S, gate: &str, cap: usize) -> Result<usize, S::Error> {
    Ok(cap.saturating_sub(others(s, gate, "")?.len()))
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
        exclusive: claim.overlap != Overlap::Allow,
        cap: claim.max_concurrent.max(1),
        pool: claim.pool.as_ref().map(|p| p.name.clone()),
        pool_cap: claim.pool.as_ref().map_or(0, |p| p.size.max(1)),
        gate: claim.job.to_string(),
        sched: claim.scheduled_at.timestamp_millis(),
        error: None,
        expires: now + ms(claim.retention),
        due: None,
        fence: 0,
    }
}

/// Records `claim` as waiting for a slot of `gate`: a waiter holds no slot anywhere.
fn wait_here<S: Records>(s: &mut S, claim: &Claim, key: &str, gate: &str) -> Result<(), S::Error> {
    let now = s.now();
    let rec = Rec {
        due: Some(now + ms(claim.recheck)),
        gate: gate.to_owned(),
        ..fresh(claim, State::Waiting, now)
    };
    for (held, _) in gates_of(&rec) {
        s.set_slot(&held, key, None)?;
    }
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

/// Takes a slot of `gate` (of `cap`) for `claim` in scheduled order (`queue`, and every
/// pool): `None` when it may take one now; else it waits on the gate's wait list. With
/// `k` slots free, the first `k` waiters scheduled no later than it go first.
fn queue_at<S: Records>(
    s: &mut S,
    claim: &Claim,
    key: &str,
    gate: &str,
    cap: usize,
) -> Result<Option<ClaimOutcome>, S::Error> {
    let holders = others(s, gate, key)?;
    let free = cap.saturating_sub(holders.len());
    if free == 0 {
        let holder = holders
            .first()
            .map(|h| h.holder.clone())
            .unwrap_or_default();
        wait_here(s, claim, key, gate)?;
        return Ok(Some(ClaimOutcome::Waiting {
            holder,
            woken: None,
        }));
    }
    let sched = claim.scheduled_at.timestamp_millis();
    let ahead = s
        .wait_ends(gate, free, false)?
        .into_iter()
        .take_while(|(at, k)| k != key && *at <= sched)
        .count();
    if ahead < free {
        return Ok(None);
    }
    let Some(woken) = wake(s, gate, free)?.filter(|w| w.key != key) else {
        return Ok(None);
    };
    wait_here(s, claim, key, gate)?;
    Ok(Some(ClaimOutcome::Waiting {
        holder: woken.key.clone(),
        woken: Some(woken),
    }))
}

/// Applies the overlap rules of an exclusive job to `claim` (see `claim.lua`): `None` when
/// it may take a slot of its job's gate now.
fn overlap<S: Records>(
    s: &mut S,
    claim: &Claim,
    key: &str,
) -> Result<Option<ClaimOutcome>, S::Error> {
    let gate = claim.job.as_str();
    let cap = slots(claim.max_concurrent);
    let sched = claim.scheduled_at.timestamp_millis();
    match claim.overlap {
        Overlap::Allow => Ok(None),
        Overlap::Skip => {
            // All slots taken: an earlier (or same-instant) holder makes this one
            // `skipped`; behind later ones only (retries or republished attempts of
            // occurrences the next ones overtook) it waits for its turn as under `queue`,
            // never skipped for occurrences after it.
            let holders = others(s, gate, key)?;
            if holders.len() >= cap {
                for h in holders {
                    if holder_not_later(s, Some(&h.holder), sched)? {
                        return Ok(Some(ClaimOutcome::Busy { holder: h.holder }));
                    }
                }
            }
            queue_at(s, claim, key, gate, cap)
        }
        Overlap::Queue => queue_at(s, claim, key, gate, cap),
        Overlap::Replace => replace(s, claim, key, gate, cap),
    }
}

/// `replace`: the newest occurrences run. All slots taken, a newer one asks the running
/// one to stop (with one slot the holder; with more the oldest not yet asked) and waits for
/// its slot; an older one, or one with as many newer waiters as there are slots, is
/// superseded. With one slot a newer one also supersedes every
/// waiter; with more, once every holder is asked to stop, it takes the oldest waiter's place.
fn replace<S: Records>(
    s: &mut S,
    claim: &Claim,
    key: &str,
    gate: &str,
    cap: usize,
) -> Result<Option<ClaimOutcome>, S::Error> {
    let sched = claim.scheduled_at.timestamp_millis();
    let holders = others(s, gate, key)?;
    let full = holders.len() >= cap;
    // (scheduled, key, asked to stop) of each holder, oldest first; a holder whose record is
    // gone counts as the oldest.
    let mut running = Vec::new();
    for h in holders {
        let (at, asked) = live(s, &h.holder)?.map_or((i64::MIN, false), |r| {
            (r.sched, r.cancel.as_ref().is_some_and(|c| !c.is_empty()))
        });
        running.push((at, h.holder, asked));
    }
    running.sort();
    let target = if !full {
        None
    } else if cap == 1 {
        running.first()
    } else {
        running.iter().find(|r| !r.2)
    }
    .map(|(at, k, _)| (*at, k.clone()));
    if let Some((at, holder)) = &target
        && *at > sched
    {
        return Ok(Some(ClaimOutcome::Superseded { by: holder.clone() }));
    }
    // As many waiters newer than it as there are slots: they run, not it.
    let newer: Vec<String> = s
        .wait_ends(gate, cap, true)?
        .into_iter()
        .filter(|(at, k)| k != key && *at > sched)
        .map(|(_, k)| k)
        .collect();
    if newer.len() >= cap
        && let Some(newest) = newer.into_iter().next()
    {
        return Ok(Some(ClaimOutcome::Superseded { by: newest }));
    }
    if cap == 1 {
        for other in s.waiting(gate)? {
            if other != key {
                supersede(s, claim, &other, key)?;
            }
        }
    } else if full
        && target.is_none()
        && let Some((_, first)) = s.wait_ends(gate, 1, false)?.pop()
        && first != key
    {
        supersede(s, claim, &first, key)?;
    }
    if !full {
        return Ok(None);
    }
    let holder = match target {
        Some((_, holder)) => {
            if let Some(mut rec) = live(s, &holder)? {
                rec.cancel = Some(key.to_owned());
                s.put(&holder, &rec)?;
            }
            holder
        }
        None => running.first().map(|r| r.1.clone()).unwrap_or_default(),
    };
    wait_here(s, claim, key, gate)?;
    Ok(Some(ClaimOutcome::Waiting {
        holder,
        woken: None,
    }))
}

/// A pooled claim's turn in its pool: `None` when it may take a slot now.
fn pooled<S: Records>(
    s: &mut S,
    claim: &Claim,
    key: &str,
) -> Result<Option<ClaimOutcome>, S::Error> {
    match &claim.pool {
        Some(pool) => queue_at(s, claim, key, &pool_gate(&pool.name), slots(pool.size)),
        None => Ok(None),
    }
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

/// [`cronq_shared::ledger::Ledger::claim`], under `claim.token`.
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
    if let Some(outcome) = pooled(s, claim, &key)? {
        return Ok(outcome);
    }
    let now = s.now();
    let until = now + ms(claim.lease);
    let (fence, mark) = match mine {
        Some(kept) => kept,
        None => (s.next_fence(claim.job.as_str())?, None),
    };
    let rec = Rec {
        token: token.clone(),
        lease_until: until,
        due: Some(until),
        fence,
        cancel: mark,
        ..fresh(claim, State::Running, now)
    };
    for (gate, _) in gates_of(&rec) {
        let slot = JobLock {
            holder: key.clone(),
            token: token.clone(),
            until,
        };
        s.set_slot(&gate, &key, Some(&slot))?;
    }
    s.put(&key, &rec)?;
    Ok(ClaimOutcome::Claimed {
        lease: ExecutionLease {
            key: claim.key.clone(),
            job: claim.job.clone(),
            token,
            fence,
            // These stores keep every claim's message: none is held.
            held: false,
        },
        takeover,
    })
}

/// [`cronq_shared::ledger::Ledger::heartbeat`].
///
/// # Errors
/// The storage's.
pub fn heartbeat<S: Records>(
    s: &mut S,
    lease: &ExecutionLease,
    duration: Duration,
) -> Result<Heartbeat, S::Error> {
    let key = lease.key.to_string();
    let Some(mut rec) = live(s, &key)? else {
        return Ok(Heartbeat::Lost);
    };
    if rec.state != State::Running || rec.token != lease.token {
        return Ok(Heartbeat::Lost);
    }
    let now = s.now();
    let until = now + ms(duration);
    rec.lease_until = until;
    rec.due = Some(until);
    s.put(&key, &rec)?;
    for (gate, cap) in gates_of(&rec) {
        let mine = s
            .slots(&gate)?
            .into_iter()
            .find(|l| l.holder == key && l.until > now);
        let held = match mine {
            Some(slot) => slot.token == lease.token,
            // Lapsed: taken again while a slot is free; if others took every slot, stop
            // (see heartbeat.lua).
            None => others(s, &gate, &key)?.len() < cap,
        };
        if !held {
            return Ok(Heartbeat::Lost);
        }
        let slot = JobLock {
            holder: key.clone(),
            token: lease.token.clone(),
            until,
        };
        s.set_slot(&gate, &key, Some(&slot))?;
    }
    Ok(match rec.cancel {
        Some(by) => Heartbeat::CancelRequested { by },
        None => Heartbeat::Held,
    })
}

/// [`cronq_shared::ledger::Ledger::complete`].
///
/// # Errors
/// The storage's.
pub fn complete<S: Records>(
    s: &mut S,
    lease: &ExecutionLease,
    end: &End,
) -> Result<Ended, S::Error> {
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
    // Its slots are freed; the first gate with a free slot gives a waiter its turn (a
    // second one's waiter gets it from its own claim, or from the reaper).
    let mut woken = None;
    for (gate, cap) in gates_of(&rec) {
        let ours = s
            .slots(&gate)?
            .iter()
            .any(|l| l.holder == key && l.token == lease.token);
        if ours {
            s.set_slot(&gate, &key, None)?;
        }
        if woken.is_none() {
            let free = free_of(s, &gate, cap)?;
            woken = wake(s, &gate, free)?;
        }
    }
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

/// [`cronq_shared::ledger::Ledger::settle`].
///
/// # Errors
/// The storage's.
pub fn settle<S: Records>(s: &mut S, settle: &Settle) -> Result<Ended, S::Error> {
    let key = settle.key.to_string();
    let current = live(s, &key)?;
    if blocked(current.as_ref(), settle.attempt, "", s.now()).is_some() {
        return Ok(NOT_RECORDED);
    }
    let job = settle.job.as_str();
    // The gate whose turn may pass on: a waiter's own, else its job's.
    let (gate, cap) = match &current {
        Some(r) if r.state == State::Waiting => {
            let cap = if r.gate == r.job { r.cap } else { r.pool_cap };
            (r.gate.clone(), slots(cap))
        }
        Some(r) if r.exclusive => (job.to_owned(), slots(r.cap)),
        _ => (job.to_owned(), 1),
    };
    let queue = current.map(|r| r.queue).unwrap_or_default();
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
        cap: 0,
        pool: None,
        pool_cap: 0,
        gate: job.to_owned(),
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
    let free = free_of(s, &gate, cap)?;
    let woken = wake(s, &gate, free)?;
    Ok(Ended {
        recorded: true,
        woken,
    })
}

/// [`cronq_shared::ledger::Ledger::reap`].
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

/// [`cronq_shared::ledger::Ledger::admit_replay`].
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
            .is_some_and(|e| e.starts_with(cronq_shared::ledger::PARENT_ENDED));
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

/// [`cronq_shared::ledger::Ledger::cancel`].
///
/// # Errors
/// The storage's.
pub fn cancel<S: Records>(s: &mut S, cancel: &Cancel) -> Result<Cancelled, S::Error> {
    let key = cancel.key.to_string();
    let Some(mut rec) = live(s, &key)? else {
        return Ok(Cancelled::Unknown);
    };
    if rec.state.is_terminal() {
        return Ok(Cancelled::Finished(rec.state));
    }
    if rec.state == State::Running {
        // Its owner learns at once: asked to stop, or, under a lapsed lease (cut off, not
        // dead), that it lost the claim.
        s.count_cancel()?;
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
    // Its slots go (a lapsed claim's), and the next waiter has its turn: no one here
    // publishes it, the reaper does once its due time (WAKE_RECHECK from now) passes.
    let gates = match was {
        State::Waiting => gates_of(&rec)
            .into_iter()
            .filter(|(g, _)| *g == rec.gate)
            .collect(),
        _ => gates_of(&rec),
    };
    for (gate, cap) in gates {
        s.set_slot(&gate, &key, None)?;
        let free = free_of(s, &gate, cap)?;
        if wake(s, &gate, free)?.is_some() {
            break;
        }
    }
    Ok(Cancelled::Ended(was))
}

/// [`cronq_shared::ledger::Ledger::gates`], for one gate.
///
/// # Errors
/// The storage's.
pub fn gate_use<S: Records>(s: &mut S, gate: &str) -> Result<GateUse, S::Error> {
    let running = others(s, gate, "")?
        .into_iter()
        .filter(|l| !l.token.is_empty())
        .map(|l| l.holder)
        .collect();
    let waiting = s.waiting(gate)?;
    Ok(GateUse {
        gate: gate.to_owned(),
        running,
        waiting: waiting.len(),
        next: waiting.into_iter().take(GATE_SHOWN).collect(),
    })
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
