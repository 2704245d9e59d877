//! Redis implementation of the lease port: atomic Lua scripts over one key holding
//! `EPOCH TOKEN INSTANCE` with a millisecond TTL, plus a never-expiring epoch counter, and
//! the terms recorded (a hash, epoch -> `START_MS ALIVE_MS INSTANCE`, whose entry a renewal
//! moves in its own script).
//!
//! Use it over [`crate::connect()`] (a [`RedisConn`]): it fails fast while Redis is down
//! and never runs a command its caller gave up on after reconnecting (or after following
//! the master to another node), which the leader's renewal deadline
//! (`producer/src/leader.rs`) relies on. Acquire, renew and release are guarded writes:
//! with `CRONQ_REDIS_MIN_REPLICAS` they count only once that many replicas have them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use redis::{AsyncCommands as _, Script};

use cronq_shared::lease::{Holder, Lease, LeaseError, Term, TermRecord};

use crate::args::millis;
use crate::conn::RedisConn;
use crate::error::WriteError;
use crate::script::Call;
use cronq_shared::names::Names;

/// The lease in Redis.
#[derive(Clone)]
pub struct RedisLease {
    conn: RedisConn,
    key: String,
    epoch_key: String,
    /// The terms hash: epoch -> `START_MS ALIVE_MS INSTANCE`.
    terms_key: String,
    client_name: Option<String>,
    /// 1 + the connection's master changes when it was named; 0: not named (yet, or since
    /// an error that may have been a reconnect).
    named: Arc<AtomicU64>,
    scripts: Arc<Scripts>,
}

struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
    holder: Script,
    begin: Script,
}

impl RedisLease {
    /// The lease of the namespace `names`, over `conn`.
    pub fn new(conn: RedisConn, names: &Names) -> Self {
        Self {
            conn,
            key: lease_key(names),
            epoch_key: names.redis_key(&["leader", "epoch"]),
            terms_key: names.redis_key(&["leader", "terms"]),
            client_name: None,
            named: Arc::new(AtomicU64::new(0)),
            scripts: Arc::new(Scripts {
                acquire: Script::new(include_str!("lease/acquire.lua")),
                renew: Script::new(include_str!("lease/renew.lua")),
                release: Script::new(include_str!("lease/release.lua")),
                holder: Script::new(include_str!("lease/holder.lua")),
                begin: Script::new(include_str!("lease/begin.lua")),
            }),
        }
    }

    /// Names the Redis connection (`CLIENT SETNAME`) so an operator (or a test) can find it
    /// in `CLIENT LIST`; the name is set again after a reconnect or a move to another
    /// master. No spaces allowed.
    pub fn with_client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }

    /// Sets the client name if this connection may not carry it yet. Best effort.
    async fn name_connection(&self) {
        let Some(name) = &self.client_name else {
            return;
        };
        let named = self.conn.master_changes() + 1;
        if self.named.load(Ordering::Relaxed) == named {
            return;
        }
        let mut conn = self.conn.clone();
        let res: redis::RedisResult<()> = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(name)
            .query_async(&mut conn)
            .await;
        if res.is_ok() {
            self.named.store(named, Ordering::Relaxed);
        }
    }

    fn failed(&self, op: &'static str) -> impl FnOnce(redis::RedisError) -> LeaseError + '_ {
        move |source| {
            // The manager reconnects with a fresh, unnamed connection: name it next time.
            self.named.store(0, Ordering::Relaxed);
            LeaseError::Store {
                store: crate::error::STORE,
                op,
                source: Box::new(source),
            }
        }
    }

    /// A guarded write's failure: the command's (as [`RedisLease::failed`]), or too few
    /// replicas (the write is on the master but does not count).
    fn unconfirmed(&self, op: &'static str) -> impl FnOnce(WriteError) -> LeaseError + '_ {
        move |err| match err {
            WriteError::Redis(source) => self.failed(op)(source),
            WriteError::Unreplicated(barrier) => LeaseError::Unreplicated { op, barrier },
        }
    }
}

/// The Redis key of the namespace's leader lease (the control store fences on it).
pub(crate) fn lease_key(names: &Names) -> String {
    names.redis_key(&["leader"])
}

#[async_trait]
impl Lease for RedisLease {
    async fn acquire(&self, instance: &str, ttl: Duration) -> Result<Option<Term>, LeaseError> {
        self.name_connection().await;
        let mut term = Term::new(0, instance);
        let mut invocation = Call::new(&self.scripts.acquire, 2);
        invocation
            .key(&self.key)
            .key(&self.epoch_key)
            .arg(&term.token)
            .arg(instance)
            .arg(millis(ttl));
        let epoch: Option<u64> = self
            .conn
            .write_script(&invocation)
            .await
            .map_err(self.unconfirmed("acquire"))?;
        Ok(epoch.map(|epoch| {
            term.epoch = epoch;
            term
        }))
    }

    async fn renew(&self, term: &Term, ttl: Duration) -> Result<bool, LeaseError> {
        self.name_connection().await;
        let mut invocation = Call::new(&self.scripts.renew, 2);
        invocation
            .key(&self.key)
            .key(&self.terms_key)
            .arg(term.value())
            .arg(millis(ttl))
            .arg(term.epoch)
            .arg(Utc::now().timestamp_millis());
        let renewed: i64 = self
            .conn
            .write_script(&invocation)
            .await
            .map_err(self.unconfirmed("renew"))?;
        Ok(renewed == 1)
    }

    async fn release(&self, term: &Term) -> Result<bool, LeaseError> {
        let mut invocation = Call::new(&self.scripts.release, 1);
        invocation.key(&self.key).arg(term.value());
        let released: i64 = self
            .conn
            .write_script(&invocation)
            .await
            .map_err(self.unconfirmed("release"))?;
        Ok(released == 1)
    }

    async fn holder(&self) -> Result<Option<Holder>, LeaseError> {
        let mut conn = self.conn.clone();
        let found: Option<(String, i64)> = Call::new(&self.scripts.holder, 1)
            .key(&self.key)
            .query(&mut conn)
            .await
            .map_err(self.failed("holder"))?;
        let Some((value, pttl)) = found else {
            return Ok(None);
        };
        let term = Term::parse(&value).ok_or_else(|| LeaseError::Corrupt {
            key: self.key.clone(),
            value: value.clone(),
        })?;
        Ok(Some(Holder {
            epoch: term.epoch,
            instance: term.instance,
            remaining: Duration::from_millis(u64::try_from(pttl).unwrap_or(0)),
        }))
    }

    async fn begin(
        &self,
        term: &Term,
        start: DateTime<Utc>,
        keep: Duration,
    ) -> Result<(), LeaseError> {
        let start = start.timestamp_millis();
        let keep = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        let mut invocation = Call::new(&self.scripts.begin, 1);
        invocation
            .key(&self.terms_key)
            .arg(term.epoch)
            .arg(start)
            .arg(&term.instance)
            .arg(start.saturating_sub(keep));
        let _: i64 = self
            .conn
            .write_script(&invocation)
            .await
            .map_err(self.unconfirmed("begin"))?;
        Ok(())
    }

    async fn terms(&self) -> Result<Vec<TermRecord>, LeaseError> {
        let mut conn = self.conn.clone();
        let all: std::collections::HashMap<String, String> = conn
            .hgetall(&self.terms_key)
            .await
            .map_err(self.failed("terms"))?;
        let mut out = Vec::with_capacity(all.len());
        for (epoch, value) in all {
            let record = parse_term(&epoch, &value).ok_or_else(|| LeaseError::Corrupt {
                key: self.terms_key.clone(),
                value: format!("{epoch} => {value}"),
            })?;
            out.push(record);
        }
        out.sort_by_key(|r| r.epoch);
        Ok(out)
    }
}

/// A terms hash entry: `epoch` => `START_MS ALIVE_MS INSTANCE`.
fn parse_term(epoch: &str, value: &str) -> Option<TermRecord> {
    let mut parts = value.splitn(3, ' ');
    let start = parts.next()?.parse().ok()?;
    let alive = parts.next()?.parse().ok()?;
    Some(TermRecord {
        epoch: epoch.parse().ok()?,
        instance: parts.next()?.to_owned(),
        start: DateTime::<Utc>::from_timestamp_millis(start)?,
        alive: DateTime::<Utc>::from_timestamp_millis(alive)?,
    })
}
