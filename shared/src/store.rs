//! The error every store port ([`crate::ledger`], [`crate::runlog`]) returns, whatever
//! the backend: unreachable, a failed command, an unusable data file, or an unreadable
//! record.

use crate::endpoints::CONNECT_TIMEOUT;

/// A backend's error, kept as the source.
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The store could not be reached or answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No connection within [`CONNECT_TIMEOUT`].
    #[error("cannot reach {store} at {url} within {secs}s: is it running? ({hint})", secs = CONNECT_TIMEOUT.as_secs())]
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
    /// A command failed.
    #[error("{store} command failed")]
    Command {
        /// Which store.
        store: &'static str,
        /// Why.
        #[source]
        source: Source,
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
