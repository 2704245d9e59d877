//! The producer's errors.

/// Why the producer stopped other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// One of the producer's tasks panicked.
    #[error("producer task {task} failed")]
    Task {
        /// `elector`, `scheduler` or `reloader`.
        task: &'static str,
        /// The panic.
        #[source]
        source: tokio::task::JoinError,
    },
}
