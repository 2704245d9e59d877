//! The error every store port ([`crate::ledger`], [`crate::runlog`]) returns, whatever
//! the backend: unreachable, a failed command, a write that did not reach enough replicas,
//! an unusable address, deployment or data file, or an unreadable record.

use std::time::Duration;

use crate::endpoints::CONNECT_TIMEOUT;

/// ` (no answer within 10s)` when a connection timed out; nothing when it failed sooner
/// (refused, reset), as its source then says.
fn unanswered(timed_out: bool) -> String {
    if timed_out {
        format!(" (no answer within {}s)", CONNECT_TIMEOUT.as_secs())
    } else {
        String::new()
    }
}

/// A store's URL that is not one of the forms its backend takes (Redis's forms:
/// `cronq_redis::url`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {problem}; expected {expected}")]
pub struct UrlError {
    /// The variable the URL comes from (`CRONQ_REDIS_URL`).
    pub variable: &'static str,
    /// What is wrong, without the credentials.
    pub problem: String,
    /// The form expected.
    pub expected: &'static str,
}

/// A backend's error, kept as the source.
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The store could not be reached or answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No connection: refused or failed (the source says why), or no answer within
    /// [`CONNECT_TIMEOUT`] (no source).
    #[error("cannot reach {store} at {url}{}: is it running? ({hint})", unanswered(source.is_none()))]
    Unreachable {
        /// Which store (`Redis`).
        store: &'static str,
        /// Redacted URL.
        url: String,
        /// What to do (`start it with `redis-server`, or set CRONQ_REDIS_URL`).
        hint: &'static str,
        /// Why, when known.
        #[source]
        source: Option<Source>,
    },
    /// The TLS handshake with the store failed for a reason the operator must fix.
    #[error("TLS with {store} at {url} failed: {refusal}")]
    Tls {
        /// Which store (`Redis`).
        store: &'static str,
        /// Redacted URL.
        url: String,
        /// Why, and what to do.
        refusal: crate::endpoints::TlsRefusal,
        /// The TLS error.
        #[source]
        source: Source,
    },
    /// A command failed. Its text ends with its cause's (the store's own error: a log field
    /// shows the error alone), which chains of causes print once (`crate::causes`).
    #[error("{store} command failed: {source}")]
    Command {
        /// Which store.
        store: &'static str,
        /// Why.
        #[source]
        source: Source,
    },
    /// A write the store applied but that too few replicas acknowledged in time
    /// ([`Unreplicated`]): it counts as failed.
    #[error(transparent)]
    Unreplicated(#[from] Unreplicated),
    /// The store's URL is not one of the forms it takes.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// The store answers, but is a deployment cronq cannot run on (Redis Cluster): named,
    /// with what to use instead. A usage error: the process exits 2.
    #[error("{store} at {url} is {what}, which cronq does not support; {instead}")]
    Unsupported {
        /// Which store (`Redis`).
        store: &'static str,
        /// Redacted URL.
        url: String,
        /// What it is (`a Redis Cluster node (cluster_enabled:1)`).
        what: &'static str,
        /// What to use instead.
        instead: &'static str,
    },
    /// A store kept in a file (a standalone's data file) cannot be used: named, with what to
    /// do.
    #[error("data file {path}: {problem}; {hint}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it.
        problem: String,
        /// What to do.
        hint: &'static str,
        /// Why, when known.
        #[source]
        source: Option<Source>,
    },
    /// A stored value could not be read back.
    #[error("stored record under {key} is unreadable")]
    Corrupt {
        /// The record's key.
        key: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// A write the primary applied but fewer replicas than required acknowledged within the
/// wait: a failover now could lose it, so it counts as failed. Whoever retries it runs it
/// again on a store that may already hold it; every write that waits is safe to run twice
/// (see `docs/operations.md`, "High availability").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{store} write reached {acknowledged} of the {required} replicas {setting} requires \
     within {} ms: it is on the master but may be lost if the master fails, so it counts as \
     failed (are the replicas up and in sync?)",
    .waited.as_millis()
)]
pub struct Unreplicated {
    /// Which store (`Redis`).
    pub store: &'static str,
    /// How many replicas acknowledged it.
    pub acknowledged: u32,
    /// How many were required.
    pub required: u32,
    /// The setting that requires them (`CRONQ_REDIS_MIN_REPLICAS`).
    pub setting: &'static str,
    /// How long the write waited for them.
    pub waited: Duration,
}
