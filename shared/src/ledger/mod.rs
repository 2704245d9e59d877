//! The idempotency and overlap port: one record per occurrence key, claimed for an attempt
//! under an execution lease, and one lock per exclusive job (overlap `skip`, `queue`,
//! `replace`). Two implementations: [`redis::RedisLedger`] (atomic Lua scripts) and
//! [`memory::MemoryLedger`] (`cronq standalone`, fast tests); both pass the same suite.
//!
//! Owns: who may run an occurrence now, and what became of it: the record and, in the same
//! atomic step, the attempt's entry in the run history ([`End::run`], [`Settle::run`]), so
//! a consumer dying in between can never leave an outcome the history does not show (G2).
//! Leaves to the consumer: running handlers, the broker, deciding outcomes.
//!
//! Invariants (G1, G3):
//! - At most one live claim per key. A key in a terminal state (`succeeded`, `skipped`,
//!   `cancelled`, `missed`) is never claimed again within its retention; a message older
//!   than the record's attempt is a stale duplicate. A `failed` key (dead-lettered) may be
//!   claimed by a higher attempt only: a dead-letter replay publishes the occurrence with
//!   `attempt` = the letter's attempts + 1.
//! - A claim lives as long as its lease, renewed by [`Ledger::heartbeat`]. When it lapses
//!   (the owner died), [`Ledger::reap`] hands the stored message back exactly once per
//!   hold period, across all reapers, so it can be republished (at-least-once).
//! - Every change to a claimed record is fenced by the claim's token: an owner that lost its
//!   claim (its lease lapsed and the key was reaped) gets [`Heartbeat::Lost`] and its
//!   [`Ledger::complete`] returns `false` without changing anything.
//! - At most one occurrence of an exclusive job holds the job lock at a time, fleet-wide.

pub mod memory;
pub mod redis;

use std::time::Duration;

use async_trait::async_trait;

use crate::config::Overlap;
use crate::connect::StoreError;
use crate::key::OccurrenceKey;
use crate::names::{JobName, QueueName};
use crate::runlog::Run;

/// The state of an occurrence's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Claimed by a consumer, under a lease.
    Running,
    /// An attempt failed; the retry message (a higher attempt) may claim it.
    Retrying,
    /// Released (shutdown) or reaped (owner died): the stored message is being republished.
    Pending,
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
        !matches!(self, Self::Running | Self::Retrying | Self::Pending)
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
    /// The job's overlap policy; anything but `allow` takes the job lock.
    pub overlap: Overlap,
    /// How long the claim lives without a heartbeat.
    pub lease: Duration,
    /// How long the record is kept.
    pub retention: Duration,
    /// The message body, kept so that a reaper can republish it if the owner dies.
    pub body: Vec<u8>,
}

/// A held claim: what fences every later change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The occurrence.
    pub key: OccurrenceKey,
    /// Its job.
    pub job: JobName,
    /// Random, unique per claim.
    pub token: String,
}

/// What [`Ledger::claim`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Run it. `takeover` when the key had been claimed before by an owner that is gone.
    Claimed {
        /// The claim.
        lease: Lease,
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
    /// Another occurrence of the exclusive job holds the job lock. For `replace` the holder
    /// has been asked to stop (its heartbeat returns [`Heartbeat::CancelRequested`]).
    Busy {
        /// The holder's key, as text.
        holder: String,
    },
}

/// What [`Ledger::heartbeat`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// Still ours, lease renewed.
    Held,
    /// Still ours and renewed, but a replacing occurrence asked it to stop.
    CancelRequested,
    /// No longer ours: stop, and expect [`Ledger::complete`] to be fenced.
    Lost,
}

/// How a claimed attempt ended.
#[derive(Debug, Clone)]
pub struct End {
    /// [`State::Retrying`], [`State::Pending`] (released at shutdown) or a terminal state.
    pub state: State,
    /// The attempt's error, if any.
    pub error: Option<String>,
    /// How long the record is kept.
    pub retention: Duration,
    /// For `Retrying` and `Pending`: the message that must follow.
    pub next: Option<FollowUp>,
    /// The attempt's run, appended to the run history with the record; not when fenced.
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

/// A message handed back by [`Ledger::reap`], to republish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The occurrence key, as stored.
    pub key: String,
    /// The logical queue it goes to, as stored.
    pub queue: String,
    /// The stored message body.
    pub body: Vec<u8>,
}

/// A record as read back, for tests and inspection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its state.
    pub state: State,
    /// The attempt it was last claimed or settled for.
    pub attempt: u32,
    /// The last error, if any.
    pub error: Option<String>,
}

/// The idempotency and overlap port.
#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// Claims `claim.key` for `claim.attempt`, atomically with the job lock of an exclusive
    /// job.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; nothing was claimed.
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError>;

    /// Renews the claim's lease (and the job lock) for `lease` from now.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; the lease keeps running down.
    async fn heartbeat(&self, lease: &Lease, duration: Duration) -> Result<Heartbeat, StoreError>;

    /// Ends the claim: records `end` (and appends `end.run` to the history), releases the
    /// job lock. Returns `false`, changing nothing, when the claim was lost (fenced).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; the claim is unchanged.
    async fn complete(&self, lease: &Lease, end: &End) -> Result<bool, StoreError>;

    /// Records a terminal state for an occurrence that is not run (and appends `settle.run`
    /// to the history). Returns `false`, changing nothing, when the record already is
    /// terminal, runs under a live lease, or is past this attempt.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached; nothing was recorded.
    async fn settle(&self, settle: &Settle) -> Result<bool, StoreError>;

    /// Takes over up to `limit` claims whose lease lapsed, or whose follow-up message was not
    /// claimed in time, and returns their messages to republish. Each is handed out once
    /// per `hold`, whoever calls.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached.
    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError>;

    /// Reads a key's record, if any.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached or the record is unreadable.
    async fn get(&self, key: &OccurrenceKey) -> Result<Option<Record>, StoreError>;
}

/// Milliseconds of a duration, at least 1, for Redis `PX`-style arguments.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
