//! [`RedisConn`], the connection every store of this crate runs on: one server's
//! `ConnectionManager` as it is, or the current master of a Sentinel deployment
//! ([`crate::sentinel`]); and the replication barrier of the writes the guarantees rest on.
//!
//! Invariants: a command is sent once and its outcome returned as it came (no replay: the
//! stores' callers retry, see `connect.rs`); a guarded write waits for N =
//! `CRONQ_REDIS_MIN_REPLICAS` replicas or, through Sentinel, for every replica the master
//! has in sync when that is more (the switch barrier, `replicas.rs`); the write and
//! its `WAIT N` go in one pipeline on one connection, the one N was read for, so the `WAIT`
//! covers exactly that write even when the connection is swapped meanwhile, and fewer than
//! N acknowledgements make the write fail ([`Unreplicated`]).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisFuture, Value};

use cronq_shared::endpoints::MIN_REPLICAS_VARIABLE;
use cronq_shared::store::Unreplicated;

use crate::error::{STORE, WriteError};
use crate::script::{Call, is_noscript};
use crate::sentinel::{Follower, is_failover_sign};

/// How long a guarded write waits for its replicas (`WAIT N 1000`). Replicas on a healthy
/// network acknowledge within a millisecond, so a second only runs out when they are down
/// or far behind; it is well under what the callers must fit their tries into (the leader
/// renews every `[leader] retry`, 2 s by default, and steps down after `renew_deadline`,
/// 10 s; a consumer's execution lease is 30 s, renewed every 10 s, its end tried 5 times
/// within about 3 s of backoff) and under the connection's 3 s response timeout, so the
/// write and its wait come back as one answer.
pub const REPLICA_WAIT: Duration = Duration::from_secs(1);

/// A Redis connection: cheap to clone, every clone on the same connection (and, through
/// Sentinel, the same master). Implements [`ConnectionLike`], so `Script::invoke_async` and
/// `query_async` take it as they take a `ConnectionManager`.
#[derive(Clone)]
pub struct RedisConn {
    route: Route,
    min_replicas: u32,
}

#[derive(Clone)]
enum Route {
    /// One server (`redis://`, `rediss://`): the manager reconnects to it by itself.
    Server(ConnectionManager),
    /// The master a Sentinel deployment names, followed across failovers.
    Sentinel(Arc<Follower>),
    /// One guarded write's view of a Sentinel deployment: the master's manager as it was
    /// when the write read how many replicas to wait for, so the write and its `WAIT` go to
    /// the master that count was read for.
    Pinned(ConnectionManager, Arc<Follower>),
}

impl std::fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("RedisConn");
        if let Route::Sentinel(follower) | Route::Pinned(_, follower) = &self.route {
            s.field("master", &follower.addr());
        }
        s.field("min_replicas", &self.min_replicas).finish()
    }
}

impl RedisConn {
    /// One server's connection.
    pub(crate) fn server(manager: ConnectionManager) -> Self {
        Self {
            route: Route::Server(manager),
            min_replicas: 0,
        }
    }

    /// A Sentinel deployment's current master.
    pub(crate) fn sentinel(follower: Follower) -> Self {
        Self {
            route: Route::Sentinel(Arc::new(follower)),
            min_replicas: 0,
        }
    }

    /// Makes every write the guarantees rest on wait until `n` replicas have it
    /// (`CRONQ_REDIS_MIN_REPLICAS`); 0, the default, waits for none beyond the switch barrier
    /// (through Sentinel: every replica in sync, `replicas.rs`). See `docs/ha.md`.
    #[must_use]
    pub fn with_min_replicas(mut self, n: u32) -> Self {
        self.min_replicas = n;
        self
    }

    /// How many replicas each guarded write waits for at least.
    pub fn min_replicas(&self) -> u32 {
        self.min_replicas
    }

    /// The `host:port` of the master in use when it was found through Sentinel; `None` for
    /// one server.
    pub fn master(&self) -> Option<String> {
        match &self.route {
            Route::Server(_) => None,
            Route::Sentinel(follower) | Route::Pinned(_, follower) => Some(follower.addr()),
        }
    }

    /// How many times this connection moved to another master (always 0 for one server). A
    /// move is a new connection, so per-connection state (`CLIENT SETNAME`) must be set again.
    pub fn master_changes(&self) -> u64 {
        match &self.route {
            Route::Server(_) => 0,
            Route::Sentinel(follower) | Route::Pinned(_, follower) => follower.changes(),
        }
    }

    /// Runs a script that writes what a guarantee rests on: as it is when no replica is to
    /// be awaited, else followed by `WAIT` in the same pipeline.
    ///
    /// # Errors
    /// [`WriteError::Redis`] when the script or the connection fails;
    /// [`WriteError::Unreplicated`] when it ran but too few replicas acknowledged it.
    pub(crate) async fn write_script<T: FromRedisValue>(
        &self,
        call: &Call<'_>,
    ) -> Result<T, WriteError> {
        let (mut conn, barrier) = self.pinned();
        if barrier.count() == 0 {
            return Ok(call.query(&mut conn).await?);
        }
        let mut pipe = redis::pipe();
        pipe.add_command(call.cmd().clone());
        barrier.wait_after(&mut pipe);
        let values: Vec<Value> = match pipe.query_async(&mut conn).await {
            // Nothing ran: this node has not loaded the script yet (a new master, a
            // restart). Load it and send the pipeline again, as `Call::query` does.
            Err(err) if is_noscript(&err) => {
                call.load(&mut conn).await?;
                pipe.query_async(&mut conn).await?
            }
            other => other?,
        };
        let Ok::<[Value; 2], _>([reply, acknowledged]) = values.try_into() else {
            return Err(unexpected_reply());
        };
        barrier.check(acknowledged)?;
        Ok(redis::from_redis_value(reply)?)
    }

    /// Runs `pipe`, plain commands that write what a guarantee rests on, as [`write_script`]
    /// runs a script. Its replies read as `T`, as `pipe.query_async` would read them.
    ///
    /// [`write_script`]: Self::write_script
    ///
    /// # Errors
    /// As [`RedisConn::write_script`].
    pub(crate) async fn write<T: FromRedisValue>(
        &self,
        pipe: &mut Pipeline,
    ) -> Result<T, WriteError> {
        let (mut conn, barrier) = self.pinned();
        if barrier.count() == 0 {
            return Ok(pipe.query_async(&mut conn).await?);
        }
        barrier.wait_after(pipe);
        let mut values: Vec<Value> = pipe.query_async(&mut conn).await?;
        let acknowledged = values.pop().ok_or_else(unexpected_reply)?;
        barrier.check(acknowledged)?;
        Ok(redis::from_redis_value(Value::Array(values))?)
    }

    /// The connection one guarded write goes on, and the replicas it waits for: at least
    /// `CRONQ_REDIS_MIN_REPLICAS`; through Sentinel, every replica of the master in sync
    /// (the switch barrier, `replicas.rs`), read with the master's connection.
    fn pinned(&self) -> (Self, Barrier) {
        let min = self.min_replicas;
        match &self.route {
            Route::Sentinel(follower) => {
                let (manager, awaited) = follower.snapshot();
                let conn = Self {
                    route: Route::Pinned(manager, Arc::clone(follower)),
                    min_replicas: min,
                };
                (conn, Barrier { min, awaited })
            }
            _ => (self.clone(), Barrier { min, awaited: 0 }),
        }
    }
}

/// How many replicas one guarded write waits for, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Barrier {
    /// `CRONQ_REDIS_MIN_REPLICAS`.
    min: u32,
    /// The master's replicas in sync (through Sentinel; 0 otherwise).
    awaited: u32,
}

impl Barrier {
    /// The count: the larger of the two.
    fn count(self) -> u32 {
        self.min.max(self.awaited)
    }

    fn wait_after(self, pipe: &mut Pipeline) {
        // WAIT blocks this connection's next replies until N replicas acknowledged every
        // write sent on it before, or the timeout; it returns how many did.
        // https://redis.io/docs/latest/commands/wait/
        pipe.cmd("WAIT")
            .arg(self.count())
            .arg(u64::try_from(REPLICA_WAIT.as_millis()).unwrap_or(u64::MAX));
    }

    fn check(self, acknowledged: Value) -> Result<(), WriteError> {
        let acknowledged: i64 = redis::from_redis_value(acknowledged)?;
        let acknowledged = u32::try_from(acknowledged).unwrap_or(0);
        let required = self.count();
        if acknowledged >= required {
            return Ok(());
        }
        Err(WriteError::Unreplicated(Unreplicated {
            store: STORE,
            acknowledged,
            required,
            setting: if self.min >= self.awaited {
                MIN_REPLICAS_VARIABLE
            } else {
                SWITCH_BARRIER
            },
            waited: REPLICA_WAIT,
        }))
    }
}

/// What requires a guarded write to reach more replicas than `CRONQ_REDIS_MIN_REPLICAS`,
/// as the error names it.
const SWITCH_BARRIER: &str =
    "the switch barrier (every replica of the master in sync, see docs/ha.md)";

fn unexpected_reply() -> WriteError {
    WriteError::Redis(RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "a write and its WAIT did not answer with two replies",
    )))
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.route {
            Route::Server(manager) => manager.req_packed_command(cmd),
            Route::Sentinel(follower) => Box::pin(async move {
                let mut manager = follower.manager();
                let reply = manager.send_packed_command(cmd).await;
                if is_failover_sign(reply.as_ref().map(std::slice::from_ref)) {
                    follower.nudge();
                }
                reply
            }),
            Route::Pinned(manager, follower) => Box::pin(async move {
                let reply = manager.send_packed_command(cmd).await;
                if is_failover_sign(reply.as_ref().map(std::slice::from_ref)) {
                    follower.nudge();
                }
                reply
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.route {
            Route::Server(manager) => manager.req_packed_commands(pipeline, offset, count),
            Route::Sentinel(follower) => Box::pin(async move {
                // One manager for the whole pipeline: a write and its WAIT share a connection.
                let mut manager = follower.manager();
                let replies = manager.send_packed_commands(pipeline, offset, count).await;
                if is_failover_sign(replies.as_ref()) {
                    follower.nudge();
                }
                replies
            }),
            Route::Pinned(manager, follower) => Box::pin(async move {
                let replies = manager.send_packed_commands(pipeline, offset, count).await;
                if is_failover_sign(replies.as_ref()) {
                    follower.nudge();
                }
                replies
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.route {
            Route::Server(manager) => manager.get_db(),
            Route::Sentinel(follower) | Route::Pinned(_, follower) => follower.db(),
        }
    }
}
