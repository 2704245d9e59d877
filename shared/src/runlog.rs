//! The run history port: one entry per attempt (and per occurrence settled without running),
//! newest first for `cronq runs`. Two implementations: `cronq-redis` (`RedisRunLog`, a
//! Redis stream capped by length and trimmed by age) and `cronq-memory` (`MemoryRunLog`).
//!
//! Owns: storing and listing runs. Leaves to the consumer: deciding outcomes. The entries
//! of attempts and of occurrences settled without running have one writer, the ledger, in
//! the same atomic step as the record ([`crate::ledger`]); [`RunLog::record`] is for the
//! backends and tools. Invariant: the history is bounded: at most about
//! [`DEFAULT_MAX_RUNS`] entries, none much older than the retention.
//!
//! Beside its entry, an attempt's output ([`RunOutput`]: a command's stdout and stderr
//! tails, an http handler's status and body head) is kept by [`RunLog::keep_output`] under
//! the same bounds, apart from the entry so that the history stays small to list.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::key::OccurrenceKey;
use crate::names::JobName;
use crate::store::StoreError;

/// How many runs are kept at most, by default.
pub const DEFAULT_MAX_RUNS: usize = 100_000;

/// How much of each of a command's stdout and stderr an attempt keeps, by default: the
/// last 64 KiB (a consumer's `--output-limit`).
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024;

/// How much of an http handler's response body an attempt keeps: the first 4 KiB.
pub const HTTP_BODY_LIMIT: usize = 4 * 1024;

/// What an attempt printed or was answered, kept with its run: a command's stdout and
/// stderr tails, an http handler's response status and the head of its body. Secrets of
/// the job's handler are masked before it is kept ([`RunOutput::masked`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOutput {
    /// The end of a command's stdout.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout: String,
    /// The end of a command's stderr.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// An http handler's response status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// The start of an http handler's response body.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub http_body: String,
    /// Whether a part was cut to its limit (a stream's start, a body's end).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl RunOutput {
    /// Nothing to keep.
    pub fn is_empty(&self) -> bool {
        self.stdout.is_empty()
            && self.stderr.is_empty()
            && self.http_status.is_none()
            && self.http_body.is_empty()
    }

    /// This output with every occurrence of each of `secrets` replaced by `***`. Secrets
    /// shorter than 4 characters are left alone: masking them would garble the text and
    /// hide nothing.
    #[must_use]
    pub fn masked<'a>(mut self, secrets: impl IntoIterator<Item = &'a str>) -> Self {
        for secret in secrets.into_iter().filter(|s| s.chars().count() >= 4) {
            for text in [&mut self.stdout, &mut self.stderr, &mut self.http_body] {
                if text.contains(secret) {
                    *text = text.replace(secret, "***");
                }
            }
        }
        self
    }
}

/// How an attempt ended, as the history shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The handler succeeded.
    Succeeded,
    /// The attempt failed and a retry is scheduled.
    Retrying,
    /// The last attempt failed; the occurrence is in the dead-letter queue.
    Failed,
    /// Not run: an earlier occurrence of the job was running (overlap `skip`).
    Skipped,
    /// Stopped by a newer occurrence (overlap `replace`).
    Cancelled,
    /// Not run: it could not start before its deadline.
    Missed,
    /// Stopped by a consumer shutdown; republished to run again elsewhere.
    Interrupted,
    /// The consumer lost its claim (its lease lapsed); another consumer runs it again.
    Lost,
}

impl Outcome {
    /// Every outcome, in declaration order: [`Outcome::index`] is the position here.
    pub const ALL: [Self; 8] = [
        Self::Succeeded,
        Self::Retrying,
        Self::Failed,
        Self::Skipped,
        Self::Cancelled,
        Self::Missed,
        Self::Interrupted,
        Self::Lost,
    ];

    /// The outcome's position in [`Outcome::ALL`] (its declaration order), a dense index
    /// for per-outcome tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Cancelled => "cancelled",
            Self::Missed => "missed",
            Self::Interrupted => "interrupted",
            Self::Lost => "lost",
        }
    }

    /// Parses [`Outcome::as_str`] output.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "succeeded" => Self::Succeeded,
            "retrying" => Self::Retrying,
            "failed" => Self::Failed,
            "skipped" => Self::Skipped,
            "cancelled" => Self::Cancelled,
            "missed" => Self::Missed,
            "interrupted" => Self::Interrupted,
            "lost" => Self::Lost,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt in the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The occurrence.
    pub key: OccurrenceKey,
    /// Its job.
    pub job: JobName,
    /// 1 for the first try.
    pub attempt: u32,
    /// Which consumer ran (or settled) it.
    pub consumer: String,
    /// When the attempt started (or was settled).
    pub started_at: DateTime<Utc>,
    /// How long it ran; zero when it did not run.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// The error, if any.
    pub error: Option<String>,
    /// When the message this attempt ran from was published (its `published_at`): for a
    /// first attempt the producer's publish, for a retry, a replay or a manual trigger the
    /// publish of that attempt's own message. `None` for an entry written without a message
    /// (a waiter superseded by a newer occurrence) and for entries older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<DateTime<Utc>>,
}

impl Run {
    /// This attempt as the history shows it when its claim was lost (fenced, or given up
    /// by its owner): outcome `lost`, the error saying so after the attempt's own. A run
    /// already `lost` is returned as it is.
    #[must_use]
    pub fn lost(self) -> Self {
        if self.outcome == Outcome::Lost {
            return self;
        }
        Self {
            outcome: Outcome::Lost,
            error: self.error_as_lost(),
            ..self
        }
    }

    /// From the occurrence's scheduled instant to the publish of the message this attempt
    /// ran from; `None` for a manual trigger (no scheduled instant) and for an entry without
    /// a publish time.
    pub fn publish_lateness(&self) -> Option<TimeDelta> {
        self.key
            .scheduled_at()
            .zip(self.published_at)
            .map(|(at, published)| published - at)
    }

    /// From the occurrence's scheduled instant to this attempt's start; `None` for a
    /// manual trigger.
    pub fn start_lateness(&self) -> Option<TimeDelta> {
        self.key.scheduled_at().map(|at| self.started_at - at)
    }

    /// The error [`Run::lost`] gives this run.
    pub fn error_as_lost(&self) -> Option<String> {
        if self.outcome == Outcome::Lost {
            return self.error.clone();
        }
        Some(lost_error(self.error.as_deref()))
    }
}

/// The error shown for an attempt whose claim was lost, after its own error `after`.
pub fn lost_error(after: Option<&str>) -> String {
    after.map_or_else(
        || "lost the claim: the lease lapsed and another consumer took over".to_owned(),
        |e| format!("lost the claim after: {e}"),
    )
}

/// Where [`RunLog::tail`] reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailFrom {
    /// The runs appended at or after this instant (the store's clock).
    Since(DateTime<Utc>),
    /// The runs appended after this position, as an earlier [`Tail::next`] gave it.
    After(String),
}

/// What [`RunLog::tail`] read: runs in the order they were appended, and where to go on.
#[derive(Debug, Clone, PartialEq)]
pub struct Tail {
    /// Oldest first.
    pub runs: Vec<Run>,
    /// Where the next read starts: after the last of `runs` (the same start when none).
    pub next: TailFrom,
}

/// The run history port.
#[async_trait]
pub trait RunLog: Send + Sync + 'static {
    /// Appends one run (the ledger appends those of attempts itself, see
    /// [`crate::ledger`]).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached.
    async fn record(&self, run: &Run) -> Result<(), StoreError>;

    /// Up to `limit` runs, newest first, of one job or of all.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached or an entry is unreadable.
    async fn list(&self, job: Option<&JobName>, limit: usize) -> Result<Vec<Run>, StoreError>;

    /// Up to `limit` runs appended from `from` on, in the order they were appended: what
    /// follows the history as it grows (the leader's alerts). Runs trimmed by the history's
    /// bounds before they were read are not returned.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached or an entry is unreadable.
    async fn tail(&self, from: &TailFrom, limit: usize) -> Result<Tail, StoreError>;

    /// Keeps `output` of attempt `attempt` of `key`, under the history's bounds (its
    /// retention; at most about as many outputs as runs). A second output of the same
    /// attempt replaces the first.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached.
    async fn keep_output(
        &self,
        key: &OccurrenceKey,
        attempt: u32,
        output: &RunOutput,
    ) -> Result<(), StoreError>;

    /// The outputs kept of `key`'s attempts, by attempt (empty: none kept, or expired).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached or an output is unreadable.
    async fn outputs(&self, key: &OccurrenceKey) -> Result<BTreeMap<u32, RunOutput>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_is_masked_everywhere_but_not_for_tiny_secrets() {
        let output = RunOutput {
            stdout: "token=s3cr3t-t0k and s3cr3t-t0k again".into(),
            stderr: "a: s3cr3t-t0k".into(),
            http_status: None,
            http_body: "abc".into(),
            truncated: false,
        };
        let masked = output.masked(["s3cr3t-t0k", "abc", ""]);
        assert_eq!(masked.stdout, "token=*** and *** again");
        assert_eq!(masked.stderr, "a: ***");
        assert_eq!(
            masked.http_body, "abc",
            "a secret of 3 characters is not masked"
        );
        let json = serde_json::to_string(&RunOutput::default()).unwrap();
        assert_eq!(json, "{}", "an empty output is stored as nothing");
    }

    #[test]
    fn every_outcome_is_listed_at_its_index_and_parses_back() {
        for (i, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome.index(), i, "{outcome}");
            assert_eq!(Outcome::parse(outcome.as_str()), Some(outcome));
        }
        assert_eq!(Outcome::parse("done"), None);
    }
}
