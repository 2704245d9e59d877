//! Redis failures as the ports' [`StoreError`], named after this store.

use cronq_shared::store::StoreError;

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
pub(crate) fn written(err: crate::conn::WriteError) -> StoreError {
    match err {
        crate::conn::WriteError::Redis(source) => command(source),
        crate::conn::WriteError::Unreplicated(barrier) => StoreError::Unreplicated(barrier),
    }
}
