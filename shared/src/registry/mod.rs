//! The fleet registry port: each producer, consumer and standalone reports itself (a
//! [`Beat`]) every [`REPORT_EVERY`]; a record the process stops renewing (it was killed)
//! lapses after [`EXPIRY`]. With it go the per-job digests of each config the fleet runs
//! (stored once per overall digest, not sent with every beat) and per-minute counts of the
//! occurrences published and executed. The dashboard's Fleet page and the leader's config
//! check read it (docs/dashboard.md, "Fleet").
//!
//! Owns: storing and expiring these; what a config's digest is ([`digest`]); who serves what
//! ([`serving`]). Leaves to the fleet runtime (`cronq-fleet`, `fleet/`): when to report and
//! what to count, and which instances differ.
//!
//! Invariants: [`Registry::instances`] lists only records renewed within their TTL; a
//! per-job digest map is stored under its overall digest, so it never changes once
//! written; counters only grow, and each minute's lapses after [`COUNT_TTL`].
//!
//! Implementations: `cronq-redis` (`RedisRegistry`), `cronq-memory` (`MemoryRegistry`),
//! `cronq-sqlite` (`SqliteRegistry`).

pub mod digest;
pub mod serving;

use std::ops::RangeInclusive;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::names::JobName;
use crate::store::StoreError;
use digest::{JobDigest, JobDigests};

/// How often a process reports itself.
pub const REPORT_EVERY: Duration = Duration::from_secs(2);

/// How long a record lives without a new report: five report intervals, so a slow store
/// round trip or two never drops a live process, and a killed one is gone within 10 s.
pub const EXPIRY: Duration = Duration::from_secs(10);

/// How long a config's per-job digest map is kept after it was last reported.
pub const DIGESTS_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long one minute's counter is kept: the last hour is read, with a margin.
pub const COUNT_TTL: Duration = Duration::from_secs(2 * 3600);

/// What kind of process reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `cronq producer`: the leader or a standby.
    Producer,
    /// `cronq consumer`.
    Consumer,
    /// `cronq standalone`: producer and consumer in one process.
    Standalone,
}

impl Role {
    /// Its name on pages and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Producer => "producer",
            Self::Consumer => "consumer",
            Self::Standalone => "standalone",
        }
    }
}

/// One process's report of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Beat {
    /// The id it uses for the leader lease (producers) or in the run history (consumers).
    pub instance: String,
    /// What it is.
    pub role: Role,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The cronq version it runs.
    pub version: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it reported last.
    pub last_seen: DateTime<Utc>,
    /// The overall digest of the config it runs ([`digest::ConfigDigest`]).
    pub digest: String,
    /// How many jobs that config has.
    pub jobs: usize,
    /// Since when it leads, while it holds the leader lease (a producer or standalone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leading_since: Option<DateTime<Utc>>,
    /// What it runs, for a consumer or a standalone (`None` from a producer, or from a
    /// version that did not report it: [`serving`] then counts it as serving every job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serves: Option<Serves>,
    /// The attempts it runs now of jobs with an `sla` on their start or duration (at most
    /// [`RUNNING_REPORTED`], the longest-running first): what the leader's alerts check
    /// while the attempts still run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<InFlight>,
}

/// How many running attempts one beat reports at most.
pub const RUNNING_REPORTED: usize = 100;

/// An attempt running now, as a consumer reports it ([`Beat::running`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    /// The occurrence key, as text.
    pub key: String,
    /// Its job.
    pub job: String,
    /// The attempt.
    pub attempt: u32,
    /// When it started.
    pub started_at: DateTime<Utc>,
}

/// What a consumer (or a standalone's consumer half) can run, reported with each beat so
/// that the leader can tell the jobs no live consumer runs ([`serving`]).
///
/// A job with an inline `command` or `http` in the config file is not listed: every
/// consumer serving its queue runs it (the fleet shares one config file; a consumer whose
/// file differs is the config check's finding, see `cronq_fleet::compare`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Serves {
    /// The logical queues it consumes; `None`: every queue of its config's jobs, those a
    /// reload or a runtime job adds included (a consumer without `--queues`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The handler names it offers: its config's `[handlers.NAME]` and those registered in
    /// Rust by name, sorted.
    #[serde(default)]
    pub handlers: Vec<String>,
    /// The jobs a Rust handler is registered for by job name, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
}

/// What the per-minute counters count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Occurrences the leader published, confirmed by the broker.
    Published,
    /// Occurrences a consumer ran to a terminal outcome (succeeded, or failed for good).
    Executed,
}

impl Counter {
    /// Its name in store keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Published => "published",
            Self::Executed => "executed",
        }
    }
}

/// The minute an instant falls in: whole minutes since the Unix epoch.
pub fn minute_of(at: DateTime<Utc>) -> i64 {
    at.timestamp().div_euclid(60)
}

/// The fleet registry port.
#[async_trait]
pub trait Registry: Send + Sync + 'static {
    /// Stores `beat` under its instance id, replacing the previous one; it lapses after
    /// `ttl` unless reported again.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be written.
    async fn report(&self, beat: &Beat, ttl: Duration) -> Result<(), StoreError>;

    /// Removes `instance`'s record at once (a process that stops cleanly).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be written.
    async fn leave(&self, instance: &str) -> Result<(), StoreError>;

    /// Every record not lapsed, in instance order.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be read.
    async fn instances(&self) -> Result<Vec<Beat>, StoreError>;

    /// Stores the per-job digests of the config whose overall digest is `digest`, unless
    /// they are stored already; either way they are kept `ttl` from now.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be written.
    async fn put_digests(
        &self,
        digest: &str,
        jobs: &[(JobName, JobDigest)],
        ttl: Duration,
    ) -> Result<(), StoreError>;

    /// The per-job digests stored under `digest`, if any, sorted by name; an entry that
    /// is not a job name and a digest is left out.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be read.
    async fn digests(&self, digest: &str) -> Result<Option<JobDigests>, StoreError>;

    /// Adds `n` to `counter` of `minute` ([`minute_of`]); each minute is kept [`COUNT_TTL`].
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be written.
    async fn count(&self, counter: Counter, minute: i64, n: u64) -> Result<(), StoreError>;

    /// The sum of `counter` over `minutes` (inclusive; minutes lapsed or never counted are 0).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be read.
    async fn counted(
        &self,
        counter: Counter,
        minutes: RangeInclusive<i64>,
    ) -> Result<u64, StoreError>;
}
