//! The idempotency and overlap port: one record per occurrence key, claimed for an attempt
//! under an execution lease, and the slots of gates: one gate per exclusive job (overlap
//! `skip`, `queue`, `replace`; `max_concurrent` slots, one unless set) and one per pool
//! (`[pools.NAME]`, its size). Three implementations: `cronq-redis` (`RedisLedger`, atomic Lua scripts),
//! `cronq-sqlite` (`SqliteLedger`, `cronq standalone`) and `cronq-memory` (`MemoryLedger`,
//! fast tests); the last two run the rules of `cronq-ledger-rules` (`backends/rules`) on their own storage. All pass the
//! same suite (`tests/it/ports/ledger.rs`).
//!
//! Owns: who may run an occurrence now, and what became of it: the record and, in the same
//! atomic step, the attempt's entry in the run history ([`End::run`], [`Settle::run`]), so
//! a consumer dying in between can never leave an outcome the history does not show (G2).
//! Leaves to the consumer: running handlers, the broker, deciding outcomes.
//!
//! The history has one writer, the ledger (the consumer never appends to it):
//! - Every [`Ledger::complete`] given a run appends exactly one entry for its attempt. When
//!   the end is recorded, that is [`End::run`] as given. When it is not — the claim was
//!   fenced (lost to another consumer, or already ended), or its owner gives it up
//!   ([`End::state`] `None`) — the record is left unchanged and the attempt is appended as
//!   [`Run::lost`] (outcome `lost`, "lost the claim after: ERROR"), so a run that was cut
//!   off still shows in the history.
//! - A [`Ledger::settle`] appends [`Settle::run`] only when it records: a refused settle is
//!   a duplicate of an occurrence whose history already shows it.
//! - A waiter that a newer occurrence supersedes (overlap `replace`) gets its `cancelled`
//!   entry from the [`Ledger::claim`] that supersedes it.
//!
//! Invariants (G1, G3):
//! - At most one live claim per key. A key in a terminal state (`succeeded`, `failed`,
//!   `skipped`, `cancelled`, `missed`) is never claimed again within its retention; a
//!   message older than the record's attempt is a stale duplicate. The one way back is
//!   [`Ledger::admit_replay`]: a `failed` (dead-lettered) key becomes `retrying`, so the
//!   replayed message (attempt 1) may claim it.
//! - A claim lives as long as its lease, renewed by [`Ledger::heartbeat`]. When it lapses
//!   (the owner died), [`Ledger::reap`] hands the stored message back exactly once per
//!   hold period, across all reapers, so it can be republished (at-least-once).
//! - Every change to a claimed record is fenced by the claim's token: an owner that lost its
//!   claim (its lease lapsed and the key was reaped) gets [`Heartbeat::Lost`] and its
//!   [`Ledger::complete`] is not recorded ([`Ended::recorded`] `false`) and changes no
//!   record (it only appends the attempt as lost, above).
//! - A claim or an end may be run again by its caller after it was recorded without the
//!   caller learning so (its answer lost with the connection, or the write short of the
//!   replicas `CRONQ_REDIS_MIN_REPLICAS` requires): the token is chosen by the caller, once
//!   per delivery ([`Claim::token`]), so a claim tried again with it is granted again (not
//!   taken for a duplicate that nobody runs until its lease lapses), and an ended record
//!   keeps the token that ended it, so the same end tried again is reported recorded,
//!   changing and appending nothing more.
//! - Slots (`cronq-ledger-rules` calls each set a gate): a job whose overlap is not `allow` has
//!   `max_concurrent` slots (1 unless set), a pool `size` slots; a claim runs only holding
//!   one slot of its job's gate (if exclusive) and one of its pool's (if pooled), taken in
//!   the same atomic step, renewed with its lease and freed by its end, or by its lease
//!   lapsing (a killed consumer). At most that many occurrences hold a gate's slots at a
//!   time, fleet-wide. "The job lock" below is the job's gate of one slot; with more
//!   slots, the rules below apply once all slots are taken.
//! - A pool is always a queue: an occurrence that finds its pool's slots taken, or earlier
//!   occurrences waiting for one, is [`State::Waiting`] in the pool's wait list, in
//!   scheduled order, exactly as a `queue` waiter in its job's.
//! - Overlap `skip` makes an occurrence [`ClaimOutcome::Busy`] (settled `skipped`) only when
//!   the holder of the job lock was scheduled no later than it. Behind a *later* holder (a
//!   retry, or an attempt republished after its owner stopped, of an occurrence the next
//!   one overtook) it waits for its turn as under `queue`: an occurrence is never skipped
//!   for one scheduled after it, so one that already ran attempts reaches a real outcome.
//! - An occurrence held back by overlap `queue` or `replace`, or by `skip` behind a later
//!   holder, is [`State::Waiting`]: its
//!   message is stored and due for the reaper like a claim's, so it never depends on a
//!   broker timer. Ending the running occurrence (or settling one) gives the earliest waiter
//!   its turn ([`Ended::woken`]). Under `replace` the newest occurrence runs: an older one,
//!   running or waiting, is cancelled (`replaced by KEY`).
//! - Every claim granted carries a fencing token ([`ExecutionLease::fence`]) issued in the same
//!   atomic step from a counter of the job's that only grows and outlives every record of
//!   the job: an attempt's fence is greater than that of every earlier attempt of the same
//!   job, fleet-wide. A claim granted again under its own token keeps its fence.
//! - An operator's [`Ledger::cancel`] ends a waiting, pending or retrying occurrence
//!   `cancelled` at once (its run appended as `cancelled by WHO`); a running one is asked to
//!   stop, as a replacing occurrence asks: its heartbeat returns
//!   [`Heartbeat::CancelRequested`] with `by` = `cancelled by WHO`, and its owner records the
//!   end. Should the owner go away first (its lease lapses, or it releases the claim), the
//!   record keeps the mark and the next claim is [`ClaimOutcome::Superseded`] by it: the
//!   occurrence ends cancelled, not run again. Every cancel request moves [`Ledger::cancels`] on, so that consumers renew their
//!   claims at once and stop within about a second, whatever their heartbeat period.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::config::Overlap;
use crate::key::OccurrenceKey;
use crate::names::{JobName, QueueName};
use crate::runlog::Run;
use crate::store::StoreError;

/// The state of an occurrence's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Claimed by a consumer, under a lease.
    Running,
    /// An attempt failed; the retry message (a higher attempt) may claim it.
    Retrying,
    /// Released (shutdown) or reaped (owner died): the stored message is being republished.
    Pending,
    /// Held back by the job's overlap policy (`queue`, `replace`; `skip` behind a later
    /// occurrence) until the occurrence holding the job lock ends.
    Waiting,
    /// Terminal: the handler succeeded.
    Succeeded,
    /// Terminal: the last attempt failed; the occurrence was dead-lettered.
    Failed,
    /// Terminal: not run, an earlier occurrence of the job was running (overlap `skip`).
    Skipped,
    /// Terminal: stopped by a newer occurrence (overlap `replace`).
    Cancelled,
    /// Terminal: could not start before its deadline.
    Missed,
}

impl State {
    /// The lowercase name stored in Redis and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Retrying => "retrying",
            Self::Pending => "pending",
            Self::Waiting => "waiting",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Cancelled => "cancelled",
            Self::Missed => "missed",
        }
    }

    /// Parses [`State::as_str`] output.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "running" => Self::Running,
            "retrying" => Self::Retrying,
            "pending" => Self::Pending,
            "waiting" => Self::Waiting,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            "skipped" => Self::Skipped,
            "cancelled" => Self::Cancelled,
            "missed" => Self::Missed,
            _ => return None,
        })
    }

    /// No attempt of the occurrence will ever run again.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            Self::Running | Self::Retrying | Self::Pending | Self::Waiting
        )
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request to run one attempt of one occurrence.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The occurrence.
    pub key: OccurrenceKey,
    /// Its job (the key's job).
    pub job: JobName,
    /// The logical queue a republished copy goes to.
    pub queue: QueueName,
    /// The attempt the message carries (1 for the first try).
    pub attempt: u32,
    /// The job's overlap policy; anything but `allow` takes one of the job's slots.
    pub overlap: Overlap,
    /// How many occurrences of the job may hold its slots at once when `overlap` is not
    /// `allow` (`max_concurrent`, 1 unless set); `overlap` says what the next one does.
    pub max_concurrent: u32,
    /// The pool it runs in, if any: at most its size of the pool's runs at once,
    /// fleet-wide; the others wait in scheduled order.
    pub pool: Option<PoolSlot>,
    /// How long the claim lives without a heartbeat.
    pub lease: Duration,
    /// How long the record is kept.
    pub retention: Duration,
    /// The message body, kept so that a reaper can republish it if the owner dies.
    pub body: Vec<u8>,
    /// The occurrence's scheduled instant: under `queue` waiters run in this order, under
    /// `replace` the latest one wins, under `skip` only an earlier holder skips it.
    pub scheduled_at: DateTime<Utc>,
    /// How long a waiting occurrence stays untouched before the reaper republishes it to
    /// look again (no later than its start deadline).
    pub recheck: Duration,
    /// The claiming consumer, named in the history entries of waiters it supersedes.
    pub consumer: String,
    /// The claim's token ([`claim_token`]): chosen once per delivery and kept across the
    /// tries of its claim, so that a try after one that was recorded unbeknown to the
    /// caller is granted again; never shared by two deliveries.
    pub token: String,
    /// The caller can hold its delivery unacked while the attempt runs, until
    /// [`Ledger::keep`] kept the message or the end was recorded: a store may then grant
    /// a new claim without keeping `body` or listing the lease for a reaper (the broker
    /// redelivers a message whose owner died), and says so ([`ExecutionLease::held`]).
    /// A store grants it to an `allow` claim outside any pool only.
    pub held: bool,
}

/// A claim's pool (`pool = "NAME"`, `[pools.NAME] size = N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSlot {
    /// The pool's name.
    pub name: String,
    /// How many runs of its jobs may run at once (>= 1).
    pub size: u32,
}

/// A fresh claim token: 64 random bits as 16 hex digits. Unique enough among the claims of
/// one key (the only ones it is compared with), and short, since an ended record keeps it.
pub fn claim_token() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// What a pool's gate is called: [`POOL_GATE`] then the pool's name (a job name holds no
/// `:`, so it never names a job's gate).
pub fn pool_gate(pool: &str) -> String {
    format!("{POOL_GATE}{pool}")
}

/// What [`pool_gate`] begins with.
pub const POOL_GATE: &str = "pool:";

/// A held claim, the execution lease of one attempt (not the producer's leader lease,
/// [`crate::lease::Lease`]): what fences every later change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionLease {
    /// The occurrence.
    pub key: OccurrenceKey,
    /// Its job.
    pub job: JobName,
    /// Random, unique per claim ([`Claim::token`]).
    pub token: String,
    /// The attempt's fencing token: greater than that of every earlier attempt of the job,
    /// fleet-wide (`CRONQ_FENCE`, `X-Cronq-Fence`, see docs/consumer.md).
    pub fence: u64,
    /// The claim was granted held ([`Claim::held`]): the store keeps neither its message
    /// nor a lease for a reaper until [`Ledger::keep`], so its owner acks its delivery only
    /// once the message is kept or the end is recorded, and requeues it otherwise.
    pub held: bool,
}

/// What [`Ledger::claim`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Run it. `takeover` when the key had been claimed before by an owner that is gone.
    Claimed {
        /// The claim.
        lease: ExecutionLease,
        /// The key was running under a lapsed lease, or was released or reaped.
        takeover: bool,
    },
    /// Do not run it: the key is terminal, running under a live lease, or the message is an
    /// older attempt than the record's.
    Duplicate {
        /// The record's state.
        state: State,
        /// The record's attempt.
        attempt: u32,
    },
    /// Overlap `skip`: an occurrence of the job scheduled no later than this one holds the
    /// job lock; nothing was recorded.
    Busy {
        /// The holder's key, as text.
        holder: String,
    },
    /// Overlap `queue` or `replace`, or `skip` behind a later holder: recorded
    /// [`State::Waiting`] until `holder` ends (for
    /// `replace`, `holder` has been asked to stop: its heartbeat returns
    /// [`Heartbeat::CancelRequested`]). The delivery can be acked.
    Waiting {
        /// The key it waits for, as text.
        holder: String,
        /// An earlier waiter whose turn it is now, to publish.
        woken: Option<Orphan>,
    },
    /// Overlap `replace`: a newer occurrence runs or waits, so this one is not run; or an
    /// operator cancelled it while it ran and its owner went away before it stopped (the
    /// record keeps the mark). The caller settles it [`State::Cancelled`].
    Superseded {
        /// The newer occurrence's key, as text; `cancelled by WHO` ([`cancelled_by`]).
        by: String,
    },
}

/// What [`Ledger::heartbeat`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heartbeat {
    /// Still ours, lease renewed.
    Held,
    /// Still ours and renewed, but a replacing occurrence, or an operator, asked it to stop.
    CancelRequested {
        /// The replacing occurrence's key, as text (empty when not known); for an
        /// operator's [`Ledger::cancel`], `cancelled by WHO` ([`cancelled_by`]).
        by: String,
    },
    /// No longer ours: stop, and expect [`Ledger::complete`] to be fenced.
    Lost,
}

/// How a claimed attempt ended.
#[derive(Debug, Clone)]
pub struct End {
    /// What the record becomes: [`State::Retrying`], [`State::Pending`] (released at
    /// shutdown) or a terminal state. `None` gives the claim up unrecorded (its owner
    /// learnt that it lost it, or cannot follow the end up): the record stays as it is, its
    /// lease lapses and the reaper hands the occurrence out again.
    pub state: Option<State>,
    /// The attempt's error, if any.
    pub error: Option<String>,
    /// How long the record is kept.
    pub retention: Duration,
    /// For `Retrying` and `Pending`: the message that must follow.
    pub next: Option<FollowUp>,
    /// The attempt's run: appended to the run history with the record, or as
    /// [`Run::lost`] when the end is not recorded. `None`: no entry (tools, tests).
    pub run: Option<Run>,
}

/// The message that follows a non-terminal end; a reaper republishes it when no one has
/// claimed the key within `within`, so a consumer dying right after `complete` loses nothing.
#[derive(Debug, Clone)]
pub struct FollowUp {
    /// The lowest attempt that may claim the key next.
    pub attempt: u32,
    /// Its body.
    pub body: Vec<u8>,
    /// How long until the reaper republishes it (delay + slack).
    pub within: Duration,
}

/// A terminal state recorded without running (`missed`, `skipped`).
#[derive(Debug, Clone)]
pub struct Settle {
    /// The occurrence.
    pub key: OccurrenceKey,
    /// Its job.
    pub job: JobName,
    /// The message's attempt.
    pub attempt: u32,
    /// The terminal state.
    pub state: State,
    /// Why, if worth saying.
    pub error: Option<String>,
    /// How long the record is kept.
    pub retention: Duration,
    /// The run shown in the history, appended with the record; not when nothing was recorded.
    pub run: Option<Run>,
}

/// What [`Ledger::complete`] and [`Ledger::settle`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The end was recorded; `false` when fenced, given up, or already settled otherwise.
    pub recorded: bool,
    /// The waiter whose turn it is now, to publish.
    pub woken: Option<Orphan>,
}

/// How long a woken waiter has to claim its turn before the reaper republishes it.
pub const WAKE_RECHECK: Duration = Duration::from_secs(5);

/// Why a stored message is handed back to be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Republish {
    /// Its owner stopped renewing the execution lease (crashed, partitioned, stalled).
    Lapsed,
    /// Its retry message was not claimed in time (lost by the broker, or delayed).
    Retry,
    /// It was released or reaped before, and that message was not claimed in time.
    Released,
    /// It is held back by its job's overlap policy and has not started in time.
    Waiting,
    /// The occurrence it waited for ended: it is its turn.
    Turn,
}

impl Republish {
    /// The stored name (reap.lua) of a reason, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "lapsed" => Self::Lapsed,
            "retry" => Self::Retry,
            "released" => Self::Released,
            "waiting" => Self::Waiting,
            "turn" => Self::Turn,
            _ => return None,
        })
    }

    /// A lowercase phrase for logs.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Lapsed => "its owner stopped renewing its execution lease",
            Self::Retry => "its retry message was not claimed in time",
            Self::Released => "its released message was not claimed in time",
            Self::Waiting => "it waits for another occurrence of its job to end: look again",
            Self::Turn => "the occurrence it waited for ended",
        }
    }
}

/// A stored message handed back by [`Ledger::reap`] or given its turn, to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The occurrence key, as stored.
    pub key: String,
    /// The logical queue it goes to, as stored.
    pub queue: String,
    /// The stored message body.
    pub body: Vec<u8>,
    /// Why it is published again.
    pub why: Republish,
}

/// A record as read back by a backend's inspection method (tests, `docs/consumer.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its state.
    pub state: State,
    /// The attempt it was last claimed or settled for.
    pub attempt: u32,
    /// The last error, if any.
    pub error: Option<String>,
}

/// The reason an operator's cancel records, and the mark it leaves on a running record
/// for its heartbeat to return: `cancelled by WHO`. An occurrence key never holds a space,
/// so the mark never reads as a replacing occurrence's key.
pub fn cancelled_by(who: &str) -> String {
    format!("{CANCELLED_BY}{who}")
}

/// What [`cancelled_by`] begins with.
pub const CANCELLED_BY: &str = "cancelled by ";

/// What the reason of an occurrence of a job with parents (`after`) begins with when it
/// was recorded `skipped` because a parent's occurrence did not succeed: `parent KEY
/// ended STATE`. Such a record, unlike any other `skipped` one, is admitted again by
/// [`Ledger::admit_replay`] once a replay of that parent succeeds.
pub const PARENT_ENDED: &str = "parent ";

/// The reason [`PARENT_ENDED`] describes: the parent occurrence `parent` ended `state`.
pub fn parent_ended(parent: &OccurrenceKey, state: State) -> String {
    format!("{PARENT_ENDED}{parent} ended {state}")
}

/// An operator's request to cancel one occurrence (`cronq cancel KEY`).
#[derive(Debug, Clone)]
pub struct Cancel {
    /// The occurrence.
    pub key: OccurrenceKey,
    /// Who asked, as the audit log names them.
    pub who: String,
}

/// What [`Ledger::cancel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// No record of the key: never claimed, or past its retention.
    Unknown,
    /// Nothing to cancel: the occurrence ended already, in this state.
    Finished(State),
    /// It runs: its owner is asked to stop it, and records it `cancelled`.
    Stopping,
    /// It was waiting, pending or retrying (this state): recorded `cancelled` now; it never
    /// starts.
    Ended(State),
}

/// How one gate is used now ([`Ledger::gates`]): for `cronq jobs`, the dashboard and
/// `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GateUse {
    /// The gate: a job's name, or [`pool_gate`] of a pool.
    pub gate: String,
    /// The keys of the occurrences running in its slots, by key.
    pub running: Vec<String>,
    /// How many occurrences wait for a slot.
    pub waiting: usize,
    /// The first waiting ones, in the order they will run (at most [`GATE_SHOWN`]).
    pub next: Vec<String>,
}

/// How many waiting keys [`GateUse::next`] holds at most.
pub const GATE_SHOWN: usize = 10;

/// The idempotency and overlap port.
#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// Claims `claim.key` for `claim.attempt`, atomically with the job lock of an exclusive
    /// job. A key running under `claim.token` is this claim, recorded by an earlier try:
    /// it is granted again, with a fresh lease.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; nothing was claimed.
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError>;

    /// Renews the claim's lease (and the job lock) for `lease` from now.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; the lease keeps running down.
    async fn heartbeat(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
    ) -> Result<Heartbeat, StoreError>;

    /// Keeps the message `body` of a held claim ([`ExecutionLease::held`]) with its record
    /// for `retention`, and renews its lease for `duration` from now, listed for a reaper:
    /// once kept, the owner may ack its delivery. Answers as [`Ledger::heartbeat`] does; a
    /// store that keeps every claim's message only renews the lease.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; nothing was kept.
    async fn keep(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
        body: &[u8],
        retention: Duration,
    ) -> Result<Heartbeat, StoreError>;

    /// Ends the claim: records `end` (and appends `end.run` to the history), releases the
    /// job lock and gives the earliest waiter its turn. Not recorded when the claim was
    /// lost (fenced) or `end.state` is `None`: then no record changes, and `end.run` is
    /// appended as [`Run::lost`]. The same end tried again by the claim that recorded it is
    /// reported recorded and changes and appends nothing (no waiter is woken: the reaper
    /// gives the one the first try woke its turn).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; the claim is unchanged.
    async fn complete(&self, lease: &ExecutionLease, end: &End) -> Result<Ended, StoreError>;

    /// Records a terminal state for an occurrence that is not run (and appends `settle.run`
    /// to the history); a waiting one leaves its job's wait list, and when the job lock is
    /// free the earliest waiter gets its turn. Not recorded, changing nothing, when the
    /// record already is terminal, runs under a live lease, or is past this attempt.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; nothing was recorded.
    async fn settle(&self, settle: &Settle) -> Result<Ended, StoreError>;

    /// Takes over up to `limit` claims whose lease lapsed, or whose follow-up message or
    /// turn was not claimed in time, and returns their messages to republish, each with
    /// why. Each is handed out once per `hold`, whoever calls.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached.
    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError>;

    /// Admits a dead-letter replay of `key` (`cronq dlq replay`): a `failed` record becomes
    /// runnable again, `retrying` with attempt 1 allowed to claim, exactly as after a
    /// failed attempt that is retried; the replay then publishes attempt 1. So does a
    /// `skipped` record whose reason begins with [`PARENT_ENDED`] (a job with parents,
    /// admitted again by the leader once its parents all succeeded). Every other state,
    /// `succeeded` above all, is left alone (G1). Returns the state before (`None`: no
    /// record).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached or the record is unreadable.
    async fn admit_replay(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError>;

    /// Cancels an occurrence for an operator: a waiting, pending or retrying record becomes
    /// `cancelled` at once (appending its run as [`cancelled_by`] `cancel.who`), and so does
    /// a running one whose lease lapsed; a running one is asked to stop (its heartbeat
    /// returns [`Heartbeat::CancelRequested`]). A terminal record is left alone. A request
    /// that concerns a running attempt (asked to stop, or ended under a lapsed lease while
    /// its owner may still run it) moves [`Ledger::cancels`] on; any other leaves it.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; nothing changed.
    async fn cancel(&self, cancel: &Cancel) -> Result<Cancelled, StoreError>;

    /// How many cancels of running attempts were asked for so far (a counter that only
    /// grows): a consumer that sees it move renews its claims at once, and so learns of a
    /// cancel within its poll. A cancel of anything else (unknown, finished, waiting) makes
    /// no attempt renew.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached.
    async fn cancels(&self) -> Result<u64, StoreError>;

    /// How each of `gates` is used now: the runs holding its slots, and those waiting.
    /// Read only; one entry per gate, in order.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached.
    async fn gates(&self, gates: &[String]) -> Result<Vec<GateUse>, StoreError>;

    /// The record of `key` as it stands (`None`: never claimed or settled, or past its
    /// retention): what the leader reads of a job's parents (`after`).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached or the record is unreadable.
    async fn record(&self, key: &OccurrenceKey) -> Result<Option<Record>, StoreError>;
}
