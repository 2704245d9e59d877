//! Resetting a `failed` idempotency record so a replayed occurrence may run again: an
//! extension of the ledger port for `cronq dlq replay`, with the same Redis key layout as
//! [`crate::ledger::redis`] (`ns:occ:KEY` hash, `ns:leases` zset).
//!
//! Invariant: only `failed` becomes runnable (`retrying`, attempt 1 may claim); every other
//! state, `succeeded` above all, is left as it is (G1).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use redis::Script;
use redis::aio::ConnectionManager;

use crate::connect::StoreError;
use crate::key::OccurrenceKey;
use crate::ledger::State;
use crate::names::Names;

/// Makes `failed` records runnable again.
#[async_trait]
pub trait RecordReset: Send + Sync {
    /// Resets `key`'s record when it is `failed`; returns the state it had (`None`: no
    /// record).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be reached or the record is unreadable.
    async fn reset_failed(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError>;
}

/// [`RecordReset`] on the Redis ledger's records.
#[derive(Clone)]
pub struct RedisResets {
    conn: ConnectionManager,
    names: Names,
    script: Script,
}

impl std::fmt::Debug for RedisResets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisResets")
            .field("namespace", self.names.namespace())
            .finish()
    }
}

impl RedisResets {
    /// Resets over an open connection (see [`crate::connect::redis`]).
    pub fn new(conn: ConnectionManager, names: Names) -> Self {
        Self {
            conn,
            names,
            script: Script::new(include_str!("reset.lua")),
        }
    }
}

#[async_trait]
impl RecordReset for RedisResets {
    async fn reset_failed(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        let key = key.to_string();
        let before: String = self
            .script
            .key(self.names.redis_key(&["occ", &key]))
            .key(self.names.redis_key(&["leases"]))
            .key(self.names.redis_key(&["occbody", &key]))
            .arg(&key)
            .invoke_async(&mut self.conn.clone())
            .await?;
        if before.is_empty() {
            return Ok(None);
        }
        State::parse(&before)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt {
                key: self.names.redis_key(&["occ", &key]),
                source: serde::de::Error::custom(format!("unknown state {before:?}")),
            })
    }
}

/// [`RecordReset`] over a plain map of states, for tests of the replay logic.
#[derive(Debug, Default)]
pub struct MemoryResets {
    states: Mutex<HashMap<String, State>>,
}

impl MemoryResets {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a key's state.
    pub fn set(&self, key: &OccurrenceKey, state: State) {
        self.lock().insert(key.to_string(), state);
    }

    /// A key's state.
    pub fn get(&self, key: &OccurrenceKey) -> Option<State> {
        self.lock().get(&key.to_string()).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, State>> {
        self.states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl RecordReset for MemoryResets {
    async fn reset_failed(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        let mut states = self.lock();
        let before = states.get(&key.to_string()).copied();
        if before == Some(State::Failed) {
            states.insert(key.to_string(), State::Retrying);
        }
        Ok(before)
    }
}
