//! Redis failures: a guarded write's ([`WriteError`]), and as the ports' [`StoreError`],
//! named after this store.

use redis::{ParsingError, RedisError};

use cronq_shared::store::{StoreError, Unreplicated};

/// The name errors give this store.
pub(crate) const STORE: &str = "Redis";

/// A failed Redis command as a [`StoreError`].
pub(crate) fn command(source: redis::RedisError) -> StoreError {
    StoreError::Command {
        store: STORE,
        source: Box::new(source),
    }
}

/// A guarded write's failure as a [`StoreError`]: the command's, or the barrier's.
pub(crate) fn written(err: WriteError) -> StoreError {
    match err {
        WriteError::Redis(source) => command(source),
        WriteError::Unreplicated(barrier) => StoreError::Unreplicated(barrier),
    }
}

/// A guarded write that failed: the command, or the replication barrier.
#[derive(Debug, Clone)]
pub(crate) enum WriteError {
    /// The command failed or the connection did (the write may or may not have run).
    Redis(RedisError),
    /// The write ran on the master, but too few replicas acknowledged it in time.
    Unreplicated(Unreplicated),
}

impl From<RedisError> for WriteError {
    fn from(err: RedisError) -> Self {
        Self::Redis(err)
    }
}

impl From<ParsingError> for WriteError {
    fn from(err: ParsingError) -> Self {
        Self::Redis(err.into())
    }
}
