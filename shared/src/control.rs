//! The producer's persistent state port: per-job cursors, pause flags, and manual trigger
//! and backfill requests, shared by every producer of a namespace so they survive failover.
//!
//! Owns: storing these and the fenced write. Leaves to the producer: deciding what to
//! publish; to the CLI (`cronq pause/resume/trigger/backfill`): calling [`Control`].
//!
//! Invariants: a job's cursor is the scheduled instant of its last occurrence that was
//! confirmed published (or deliberately skipped); it is written only through
//! [`ControlStore::commit`], which checks atomically that the caller's [`Term`] still holds
//! the lease, and it never moves backwards. Requests are removed only by a fenced commit
//! after what they asked for was published, so a leader crash re-publishes (under the same
//! key, deduplicated by consumers) rather than loses them.
//!
//! Implementations: `cronq-redis` (`RedisControl`) and `cronq-memory` (`MemoryControl`).

use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::key::{OccurrenceKey, Slot};
use crate::lease::Term;
use crate::names::JobName;
use crate::store::Source;

/// Why a job is paused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// When it was paused.
    pub since: DateTime<Utc>,
    /// The operator's note (`cronq pause --note`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What [`Control::pause`] did: the pause in force after it, and the one the job already
/// had (`None` when it was running).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    /// The job's pause now.
    pub pause: Pause,
    /// Its pause before the call.
    pub before: Option<Pause>,
}

/// An operator's request, waiting for the leader to carry it out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Unique, roughly time-ordered (UUIDv7).
    pub id: String,
    /// The job it is about.
    pub job: JobName,
    /// When it was made.
    pub requested_at: DateTime<Utc>,
    /// What is asked.
    #[serde(flatten)]
    pub kind: RequestKind,
}

/// What a [`Request`] asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum RequestKind {
    /// Publish one occurrence under `key` (`JOB@manual-ID`): now, or at `at`.
    Trigger {
        /// The occurrence's key, fixed when requested so a re-publish deduplicates.
        key: OccurrenceKey,
        /// Replaces the configured payload when given.
        #[serde(default)]
        payload: Option<serde_json::Value>,
        /// `cronq trigger --at`: not published before this instant (the occurrence's
        /// scheduled time); the request waits in the store until then, so it survives a
        /// failover, and a leader that first sees it after `at` publishes it at once.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<DateTime<Utc>>,
    },
    /// Publish every occurrence with `from <= t <= to` under its normal key.
    Backfill {
        /// First instant (inclusive).
        from: DateTime<Utc>,
        /// Last instant (inclusive).
        to: DateTime<Utc>,
        /// Occurrences up to and including this one were published already (progress of a
        /// long backfill, carried over a failover).
        #[serde(default)]
        done_through: Option<DateTime<Utc>>,
    },
}

impl Request {
    /// The instant before which the leader leaves this request waiting (a trigger with
    /// `--at`); `None` when it is to be carried out as soon as seen.
    pub fn not_before(&self) -> Option<DateTime<Utc>> {
        match &self.kind {
            RequestKind::Trigger { at, .. } => *at,
            RequestKind::Backfill { .. } => None,
        }
    }
}

/// One fenced write: cursors to advance and requests to settle.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Commit {
    /// Move each job's cursor to this instant (ignored where the cursor is already later).
    pub cursors: Vec<(JobName, DateTime<Utc>)>,
    /// Per request id: `None` removes it (done), `Some` replaces it (progress).
    pub settle: Vec<(String, Option<Request>)>,
}

impl Commit {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.cursors.is_empty() && self.settle.is_empty()
    }
}

/// The control store failed or refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A store command failed (connection lost, timeout, …).
    #[error("control store {op} failed in {store}: check that {store} is reachable")]
    Store {
        /// Which store (`Redis`).
        store: &'static str,
        /// Which operation.
        op: &'static str,
        /// Why.
        #[source]
        source: Source,
    },
    /// A write the store applied but that too few replicas acknowledged: it counts as
    /// failed (it may or may not survive a failover).
    #[error("control store {op} not confirmed: {barrier}")]
    Unreplicated {
        /// Which operation.
        op: &'static str,
        /// How many replicas acknowledged it, of how many.
        barrier: crate::store::Unreplicated,
    },
    /// A stored record could not be read back.
    #[error("control record {field:?} under {key} is unreadable: delete it")]
    Corrupt {
        /// The Redis key.
        key: String,
        /// The hash field.
        field: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A fenced write by a term that no longer holds the lease: nothing was written.
    #[error("leader epoch {epoch} no longer holds the lease: write refused")]
    NotLeader {
        /// The caller's epoch.
        epoch: u64,
    },
    /// `backfill` with `from` after `to`.
    #[error("backfill range is empty: --from {from} is after --to {to}")]
    EmptyRange {
        /// The requested start.
        from: DateTime<Utc>,
        /// The requested end.
        to: DateTime<Utc>,
    },
}

/// The control store port.
#[async_trait]
pub trait ControlStore: Send + Sync + 'static {
    /// Every job's cursor.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be read.
    async fn cursors(&self) -> Result<HashMap<JobName, DateTime<Utc>>, ControlError>;

    /// Advances cursors (never backwards) and settles requests, atomically, only if `term`
    /// holds the lease.
    ///
    /// # Errors
    /// [`ControlError::NotLeader`] when `term` was replaced or its lease expired (nothing
    /// written); [`ControlError::Store`] when the store cannot be reached (unknown).
    async fn commit(&self, term: &Term, commit: &Commit) -> Result<(), ControlError>;

    /// Pauses `job` (`Some`) or resumes it (`None`). Returns whether it was paused before.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be written.
    async fn set_pause(&self, job: &JobName, pause: Option<&Pause>) -> Result<bool, ControlError>;

    /// Every paused job.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be read.
    async fn paused(&self) -> Result<BTreeMap<JobName, Pause>, ControlError>;

    /// Stores a new request for the leader.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be written.
    async fn submit(&self, request: &Request) -> Result<(), ControlError>;

    /// Every request not yet settled, oldest first.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be read.
    async fn pending(&self) -> Result<Vec<Request>, ControlError>;
}

/// The control store with the operator-facing API (`cronq pause/resume/trigger/backfill`).
#[derive(Clone)]
pub struct Control {
    store: Arc<dyn ControlStore>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Control")
    }
}

impl Deref for Control {
    type Target = dyn ControlStore;
    fn deref(&self) -> &Self::Target {
        &*self.store
    }
}

impl Control {
    /// Wraps any store.
    pub fn new(store: impl ControlStore) -> Self {
        Self {
            store: Arc::new(store),
        }
    }

    /// Stops publishing `job` fleet-wide until [`Control::resume`]; occurrences meanwhile
    /// are not published (and not caught up later). A job already paused keeps its pause
    /// and its start: `note` replaces its note when given, and without one nothing is
    /// written.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be read or written.
    pub async fn pause(&self, job: &JobName, note: Option<String>) -> Result<Paused, ControlError> {
        let before = self.store.paused().await?.remove(job);
        let pause = match &before {
            Some(was) if note.is_none() => {
                return Ok(Paused {
                    pause: was.clone(),
                    before,
                });
            }
            Some(was) => Pause {
                since: was.since,
                note,
            },
            None => Pause {
                since: Utc::now(),
                note,
            },
        };
        self.store.set_pause(job, Some(&pause)).await?;
        Ok(Paused { pause, before })
    }

    /// Restarts publishing `job`. Returns whether it was paused.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be written.
    pub async fn resume(&self, job: &JobName) -> Result<bool, ControlError> {
        self.store.set_pause(job, None).await
    }

    /// Asks the leader to publish one occurrence of `job` now, under a fresh key
    /// `JOB@manual-ID` that it returns. Each call is a separate request.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be written.
    pub async fn request_trigger(
        &self,
        job: &JobName,
        payload: Option<serde_json::Value>,
    ) -> Result<OccurrenceKey, ControlError> {
        self.request_trigger_at(job, payload, None).await
    }

    /// [`Control::request_trigger`] for the instant `at` when given (`cronq trigger
    /// --at`): the leader publishes the occurrence when `at` comes, not before; its
    /// scheduled time is `at`. The caller refuses an `at` in the past.
    ///
    /// # Errors
    /// [`ControlError`] when the store cannot be written.
    pub async fn request_trigger_at(
        &self,
        job: &JobName,
        payload: Option<serde_json::Value>,
        at: Option<DateTime<Utc>>,
    ) -> Result<OccurrenceKey, ControlError> {
        let key = OccurrenceKey::manual(job.clone());
        let id = match key.slot() {
            Slot::Manual(id) => id.clone(),
            Slot::Scheduled(_) => unreachable!("OccurrenceKey::manual always builds a manual slot"),
        };
        let request = Request {
            id,
            job: job.clone(),
            requested_at: Utc::now(),
            kind: RequestKind::Trigger {
                key: key.clone(),
                payload,
                at,
            },
        };
        self.store.submit(&request).await?;
        Ok(key)
    }

    /// Asks the leader to publish every occurrence of `job` with `from <= t <= to` under
    /// its normal key. Returns the request id.
    ///
    /// # Errors
    /// [`ControlError::EmptyRange`] when `from > to`; [`ControlError`] when the store
    /// cannot be written.
    pub async fn request_backfill(
        &self,
        job: &JobName,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<String, ControlError> {
        if from > to {
            return Err(ControlError::EmptyRange { from, to });
        }
        let request = Request {
            id: uuid::Uuid::now_v7().simple().to_string(),
            job: job.clone(),
            requested_at: Utc::now(),
            kind: RequestKind::Backfill {
                from,
                to,
                done_through: None,
            },
        };
        self.store.submit(&request).await?;
        Ok(request.id)
    }
}
