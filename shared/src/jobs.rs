//! The job store port: jobs created, changed and deleted at runtime (`cronq job apply`),
//! each change a numbered revision, written by compare-and-set.
//!
//! A runtime job is stored as its `[[job]]` table in TOML text, the config's schema; it
//! names its handler (`handler = "NAME"`) and never carries a command line or a URL
//! ([`crate::config::Config::runtime_job`] checks that). Producers and consumers poll
//! [`JobStore::version`] (every [`crate::reload::FOLLOW`], a cheap read) and, when it
//! moved, read only the jobs written since ([`JobStore::changes`], the store's change
//! log), or all of them ([`JobStore::list`]) when the log does not reach back that far
//! (`crate::reload`); a store that can say at once that it was written
//! ([`JobStore::notices`]) wakes them without waiting for the poll.
//!
//! Rules every backend keeps (the port suite checks them on each):
//! - A job's revisions are numbered 1, 2, 3, … in the order they were written, across
//!   deletes and re-creations: a deleted job's next creation continues its numbering.
//! - A write takes effect only when [`Expect`] matches the job's current revision (0 when
//!   it does not exist or was deleted), atomically; otherwise nothing changes and
//!   [`Written::Stale`] says what the current revision is.
//! - Every write, a delete included, moves [`JobStore::version`] forward.
//! - [`JobStore::changes`] since a version names every job written after it, with its
//!   current revision then (`None`: deleted), and the version it read up to; or says it
//!   cannot tell (`None`), never leaves a written job out.
//! - The config file's jobs are recorded beside the runtime ones
//!   ([`JobStore::record_config`], `crate::recorded`): the list of records follows
//!   [`crate::recorded::next_records`], newest first.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::names::JobName;
use crate::recorded::ConfigRecord;
use crate::store::StoreError;

/// One revision of a runtime job: what it was set to, by whom, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// The job.
    pub name: String,
    /// Its number: 1 for the job's first write.
    pub revision: u64,
    /// The job's `[[job]]` table as TOML text; `None` for a delete.
    pub spec: Option<String>,
    /// Who wrote it (a token's name, or `user@host` for the CLI).
    pub by: String,
    /// When it was written.
    pub at: DateTime<Utc>,
}

/// What a write expects of the job's current revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Whatever it is (last write wins).
    Any,
    /// This revision; 0 = the job does not exist (create only).
    Revision(u64),
}

impl Expect {
    /// Whether a job at `current` (0 = absent) meets it.
    pub fn is_met_by(self, current: u64) -> bool {
        match self {
            Self::Any => true,
            Self::Revision(n) => n == current,
        }
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Written as this revision.
    Done(u64),
    /// Not written: the job's current revision (0 = absent) is not the one expected.
    Stale {
        /// The job's current revision, 0 when it does not exist.
        current: u64,
    },
}

/// The jobs written after a version ([`JobStore::changes`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Changes {
    /// The version these changes bring a reader to: every write up to it is in `jobs`.
    pub version: u64,
    /// Each job written after the version asked about, once, by name: its current
    /// revision, `None` when it is deleted now.
    pub jobs: Vec<(String, Option<Revision>)>,
}

/// How many writes back a store's change log reaches at least ([`JobStore::changes`]): a
/// reader further behind reads the whole list.
pub const CHANGE_LOG: u64 = 10_000;

/// Runtime job definitions with their revisions.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// A number that moves forward on every write: poll it, and read [`JobStore::list`]
    /// when it moved.
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn version(&self) -> Result<u64, StoreError>;

    /// The current revision of every job that exists (not deleted), by name.
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn list(&self) -> Result<Vec<Revision>, StoreError>;

    /// The jobs written after `since` (a [`JobStore::version`] read before), each with its
    /// current revision; `None` when the store cannot tell (its change log does not reach
    /// back to `since`, at least [`CHANGE_LOG`] writes): then read [`JobStore::list`].
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn changes(&self, since: u64) -> Result<Option<Changes>, StoreError> {
        let _ = since;
        Ok(None)
    }

    /// A signal that moves after each write made through this store's process, for a
    /// reader to wake at once; `None` (the default) when the store has none: its readers
    /// poll [`JobStore::version`].
    fn notices(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// Every revision of `job`, oldest first; empty when it was never written.
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn history(&self, job: &JobName) -> Result<Vec<Revision>, StoreError>;

    /// Sets `job` to `spec` (`None` deletes it) when `expect` is met, as one atomic step.
    /// Deleting a job that does not exist is [`Written::Stale`] with `current: 0`.
    ///
    /// # Errors
    /// When the store cannot be written (then the write may or may not have happened).
    async fn write(
        &self,
        job: &JobName,
        spec: Option<&str>,
        by: &str,
        expect: Expect,
    ) -> Result<Written, StoreError>;

    /// Records a load of the config file (the leader's, or a standalone's), by the rule of
    /// [`crate::recorded::next_records`].
    ///
    /// # Errors
    /// When the store cannot be written.
    async fn record_config(&self, record: &ConfigRecord) -> Result<(), StoreError>;

    /// The recorded loads of the config file, newest first, at most `limit`; empty when
    /// none was recorded.
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn config_records(&self, limit: usize) -> Result<Vec<ConfigRecord>, StoreError>;

    /// The digest of the newest recorded load ([`ConfigRecord::digest`]), without reading
    /// the record (one may be megabytes): poll it, and read [`JobStore::config_records`]
    /// when it moved. `None` when none was recorded.
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn config_digest(&self) -> Result<Option<String>, StoreError>;
}

/// The current revision of `job`, if it exists.
///
/// # Errors
/// When the store cannot be read.
pub async fn current(store: &dyn JobStore, job: &JobName) -> Result<Option<Revision>, StoreError> {
    Ok(store.history(job).await?.pop().filter(|r| r.spec.is_some()))
}

/// The in-memory rules of a write, shared by the backends that keep a job's history as a
/// list: the new revision to append, or why not.
pub fn next_revision(
    history: &[Revision],
    job: &JobName,
    spec: Option<&str>,
    by: &str,
    expect: Expect,
    at: DateTime<Utc>,
) -> Result<Revision, Written> {
    let last = history.last();
    let current = last.filter(|r| r.spec.is_some()).map_or(0, |r| r.revision);
    if !expect.is_met_by(current) || (spec.is_none() && current == 0) {
        return Err(Written::Stale { current });
    }
    Ok(Revision {
        name: job.as_str().to_owned(),
        revision: last.map_or(0, |r| r.revision) + 1,
        spec: spec.map(str::to_owned),
        by: by.to_owned(),
        at,
    })
}
