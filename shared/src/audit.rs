//! The audit log port: one entry per operator action (a runtime job's create, update or
//! delete, pause, resume, trigger, backfill, cancel, dead-letter replay, a dashboard
//! log-in), done or refused, with who, when, from where and what (docs/security.md, "Audit
//! log").
//!
//! Rules every backend keeps (the port suite checks them on each):
//! - [`AuditLog::list`] answers newest first (by [`Entry::at`], then by the order of
//!   recording), filtered by job and by a lower bound on `at`, at most `limit` entries.
//! - The log is bounded: [`AuditLog::record`] drops the entries older than the retention
//!   the backend was built with (the config's longest `retention`), and the oldest beyond
//!   [`MAX_ENTRIES`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::store::StoreError;

/// How many entries are kept at most.
pub const MAX_ENTRIES: usize = 100_000;

/// How many entries a listing answers when not told.
pub const DEFAULT_LIMIT: usize = 100;

/// How an action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It was done.
    Done,
    /// It was refused (not allowed, stale, invalid, too large, in conflict); nothing
    /// changed.
    Refused,
}

impl Outcome {
    /// `done` or `refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Refused => "refused",
        }
    }
}

/// One recorded action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// When.
    pub at: DateTime<Utc>,
    /// Who: a token's name (HTTP), or `user@host` (the CLI); `-` when unknown.
    pub who: String,
    /// What: `job.create`, `job.update`, `job.delete`, `pause`, `resume`, `trigger`,
    /// `backfill`, `cancel`, `dlq.replay`, `login`.
    pub action: String,
    /// The job it concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Done or refused.
    pub outcome: Outcome,
    /// Why it was refused (or a note on what was done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What: a job change's diff, a trigger's key, a backfill's range, the replayed keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// From where: the remote address for HTTP, `cli` for the command line.
    pub from: String,
}

impl Entry {
    /// A done `action` by `who` from `from`, now.
    pub fn done(action: &str, who: &str, from: &str) -> Self {
        Self {
            at: Utc::now(),
            who: who.to_owned(),
            action: action.to_owned(),
            job: None,
            outcome: Outcome::Done,
            reason: None,
            detail: None,
            from: from.to_owned(),
        }
    }

    /// This entry about `job`.
    #[must_use]
    pub fn job(mut self, job: Option<&str>) -> Self {
        self.job = job.map(str::to_owned);
        self
    }

    /// This entry with `detail`.
    #[must_use]
    pub fn detail(mut self, detail: Option<String>) -> Self {
        self.detail = detail.filter(|d| !d.is_empty());
        self
    }

    /// This entry refused for `reason`.
    #[must_use]
    pub fn refused(mut self, reason: &str) -> Self {
        self.outcome = Outcome::Refused;
        self.reason = Some(reason.to_owned());
        self
    }
}

/// Which entries to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Only this job's.
    pub job: Option<String>,
    /// Only those at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// At most this many.
    pub limit: usize,
}

impl Default for Filter {
    fn default() -> Self {
        Self {
            job: None,
            since: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl Filter {
    /// Whether `entry` passes the job and time filters.
    pub fn matches(&self, entry: &Entry) -> bool {
        self.job
            .as_deref()
            .is_none_or(|j| entry.job.as_deref() == Some(j))
            && self.since.is_none_or(|s| entry.at >= s)
    }
}

/// The operators' actions, kept per retention.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Appends `entry`, and drops the entries past the retention or the cap.
    ///
    /// # Errors
    /// When the store cannot be written.
    async fn record(&self, entry: &Entry) -> Result<(), StoreError>;

    /// The entries `filter` selects, newest first.
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn list(&self, filter: &Filter) -> Result<Vec<Entry>, StoreError>;
}

/// The lines `old` has and `new` lacks (`- `), then those `new` adds (`+ `): what a
/// runtime job's revision changed, as `cronq job history` and the audit log show it.
pub fn diff(old: &str, new: &str) -> Vec<String> {
    let removed = old
        .lines()
        .filter(|l| !new.lines().any(|n| n == *l))
        .map(|l| format!("- {l}"));
    let added = new
        .lines()
        .filter(|l| !old.lines().any(|o| o == *l))
        .map(|l| format!("+ {l}"));
    removed.chain(added).collect()
}

#[cfg(test)]
mod tests {
    use super::diff;

    #[test]
    fn diff_lists_removed_then_added_lines() {
        assert_eq!(
            diff("a = 1\nb = 2\n", "a = 1\nb = 3\n"),
            ["- b = 2", "+ b = 3"]
        );
        assert_eq!(diff("", "a = 1\n"), ["+ a = 1"]);
    }
}
