//! Why a port operation on the data file failed ([`Failure`]), and what a caller can do
//! about it: try again, or report it as the stores' error. Imported by the writer thread
//! (`writer.rs`) and by the file's owner (`db.rs`, which passes it on to the ports), and
//! importing neither.

use rusqlite::ErrorCode;

use cronq_shared::store::StoreError;

/// The name errors give this store.
pub(crate) const STORE: &str = "SQLite";

/// Why a port operation on the file failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// SQLite refused or failed (I/O, disk full, locked past the busy timeout, …).
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// A stored value did not parse.
    #[error("stored value under {key} is unreadable")]
    Corrupt {
        /// Which row.
        key: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The blocking task running the statement panicked or was cancelled.
    #[error("the SQLite task stopped: {0}")]
    Task(String),
}

impl Failure {
    /// Whether trying again may succeed: the file was locked, an I/O error, a full disk.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Self::Sqlite(e) => matches!(
                e.sqlite_error_code(),
                Some(
                    ErrorCode::DatabaseBusy
                        | ErrorCode::DatabaseLocked
                        | ErrorCode::SystemIoFailure
                        | ErrorCode::DiskFull
                        | ErrorCode::CannotOpen
                        | ErrorCode::FileLockingProtocolFailed
                        | ErrorCode::ReadOnly
                )
            ),
            Self::Corrupt { .. } | Self::Task(_) => false,
        }
    }

    /// As the stores' error.
    pub(crate) fn into_store(self) -> StoreError {
        match self {
            Self::Corrupt { key, source } => StoreError::Corrupt { key, source },
            other => StoreError::Command {
                store: STORE,
                source: Box::new(other),
            },
        }
    }

    pub(crate) fn corrupt(key: impl Into<String>) -> impl FnOnce(serde_json::Error) -> Self {
        let key = key.into();
        move |source| Self::Corrupt { key, source }
    }
}
