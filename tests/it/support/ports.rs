//! Each port built on a [`Backend`] under a test's namespace, for the port suites: the
//! queue, the ledger (with the run log it appends to), the run log alone, the leader lease
//! and the control store. A port comes back as a [`Port`], one type whichever backend is
//! behind it, so that one generic suite serves every backend.
//!
//! In memory the handles a suite gets share one state, as the processes of a deployment
//! share RabbitMQ and Redis; on the real services each handle has its own connection, and
//! on SQLite each handle opens the test's data file ([`data_file`]) on its own connection,
//! as separate processes would.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cronq_memory::{MemoryBroker, MemoryLease, MemoryLedger, MemoryRunLog};
use cronq_rabbitmq::AmqpBroker;
use cronq_rabbitmq::topology::quantize_delay;
use cronq_redis::{RedisLease, RedisLedger, RedisRunLog};
use cronq_shared::broker::{Broker, BrokerError, DeadLetter, Delivery, Outgoing, Pick};
use cronq_shared::control::Control;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::lease::{Holder, Lease, LeaseError, Term, TermRecord};
use cronq_shared::ledger::{
    self, Claim, ClaimOutcome, End, Ended, Heartbeat, Ledger, Orphan, Record, Settle, State,
};
use cronq_shared::names::{JobName, Names, QueueName};
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Run, RunLog, RunOutput};
use cronq_shared::signing::Keyring;
use cronq_shared::store::StoreError;
use cronq_sqlite::{Db, SqliteBroker, SqliteControl, SqliteLease, SqliteLedger, SqliteRunLog};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::backends::Backend;
use super::inspect::Inspect;
use super::rabbitmq;
use super::{TestEnv, redis_url};

/// How long a run log built here keeps its runs: longer than any test.
const RETENTION: Duration = Duration::from_secs(60);

/// The SQLite data file of a test: `cronq.db` in its directory.
pub fn data_file(env: &TestEnv) -> PathBuf {
    env.dir.join("cronq.db")
}

/// A connection of its own to the test's data file (created and migrated on first open),
/// as one more process would have.
pub fn open(env: &TestEnv) -> Db {
    super::data_file::open(&data_file(env))
}

/// The SQLite ledger on a connection of its own, and the run log it appends to (on the
/// same connection: one process's ledger and history).
pub fn sqlite_ports(env: &TestEnv) -> (SqliteLedger, SqliteRunLog) {
    sqlite_ports_on(open(env))
}

/// The SQLite ledger and its run log on `db`, a process's connection.
pub fn sqlite_ports_on(db: Db) -> (SqliteLedger, SqliteRunLog) {
    let history = SqliteRunLog::new(db.clone(), RETENTION, DEFAULT_MAX_RUNS);
    (SqliteLedger::new(db, history.clone()), history)
}

/// A port of whichever backend, behind one type.
pub struct Port<T: ?Sized>(Arc<T>);

impl<T: ?Sized> Clone for Port<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

/// A ledger whose records a test can read.
pub trait Records: Ledger + Inspect {}

impl<T: Ledger + Inspect> Records for T {}

/// The queue port of a backend, with the queue its suites use.
pub struct TestBroker {
    pub port: Port<dyn Broker>,
    /// `a`, declared by the suites themselves.
    pub queue: QueueName,
    /// The RabbitMQ broker behind `port`, to close.
    amqp: Option<AmqpBroker>,
}

impl TestBroker {
    /// Closes the broker's connections (RabbitMQ only).
    pub async fn close(self) {
        if let Some(amqp) = self.amqp {
            amqp.close().await;
        }
    }
}

/// The queue port of `backend`. On RabbitMQ its queue `a`, and the delay queue of the
/// 1.5 s delays the suites publish with, are deleted at clean-up.
pub async fn broker(backend: Backend, env: &TestEnv) -> TestBroker {
    signing_broker(backend, env, None).await
}

/// As [`broker`], sealing what it publishes with `keyring`.
pub async fn signing_broker(
    backend: Backend,
    env: &TestEnv,
    keyring: Option<Arc<Keyring>>,
) -> TestBroker {
    let queue = QueueName::new("a").unwrap();
    match backend {
        Backend::Memory => TestBroker {
            port: Port(Arc::new(MemoryBroker::new().signing(keyring))),
            queue,
            amqp: None,
        },
        Backend::Real => {
            env.track_queue(queue.as_str());
            let broker = rabbitmq::connect(env).await.signing(keyring);
            let delay = quantize_delay(Duration::from_millis(1500));
            env.track_raw_queue(&broker.names().delay_queue(delay));
            TestBroker {
                port: Port(Arc::new(broker.clone())),
                queue,
                amqp: Some(broker),
            }
        }
        Backend::Sqlite => TestBroker {
            port: Port(Arc::new(SqliteBroker::new(open(env)).signing(keyring))),
            queue,
            amqp: None,
        },
    }
}

/// The ledger of `backend`, and the run log it appends each ended record's run to.
pub async fn ledger_with_log(
    backend: Backend,
    env: &TestEnv,
) -> (Port<dyn Records>, Arc<dyn RunLog>) {
    match backend {
        Backend::Memory => {
            let history = Arc::new(MemoryRunLog::default());
            let ledger = MemoryLedger::new(Arc::clone(&history));
            (Port(Arc::new(ledger)), history)
        }
        Backend::Real => {
            let (ledger, history) = redis_ports(env).await;
            (Port(Arc::new(ledger)), Arc::new(history))
        }
        Backend::Sqlite => {
            let (ledger, history) = sqlite_ports(env);
            (Port(Arc::new(ledger)), Arc::new(history))
        }
    }
}

/// The ledger of `backend` (its run log unread).
pub async fn ledger(backend: Backend, env: &TestEnv) -> Port<dyn Records> {
    ledger_with_log(backend, env).await.0
}

/// The run log of `backend`, on its own.
pub async fn runlog(backend: Backend, env: &TestEnv) -> Port<dyn RunLog> {
    match backend {
        Backend::Memory => Port(Arc::new(MemoryRunLog::default())),
        Backend::Real => {
            let conn = cronq_redis::connect(&redis_url()).await.unwrap();
            Port(Arc::new(RedisRunLog::new(conn, &names(env), RETENTION)))
        }
        Backend::Sqlite => Port(Arc::new(SqliteRunLog::new(
            open(env),
            RETENTION,
            DEFAULT_MAX_RUNS,
        ))),
    }
}

/// Two producers' handles on the one leader lease of `backend`.
pub async fn leases(backend: Backend, env: &TestEnv) -> (Port<dyn Lease>, Port<dyn Lease>) {
    match backend {
        Backend::Memory => {
            let lease = MemoryLease::new();
            (Port(Arc::new(lease.clone())), Port(Arc::new(lease)))
        }
        Backend::Real => {
            let names = names(env);
            (
                Port(Arc::new(redis_lease(&names).await)),
                Port(Arc::new(redis_lease(&names).await)),
            )
        }
        Backend::Sqlite => (
            Port(Arc::new(SqliteLease::new(open(env)))),
            Port(Arc::new(SqliteLease::new(open(env)))),
        ),
    }
}

/// The leader lease of `backend` and the control store it fences.
pub async fn lease_and_control(backend: Backend, env: &TestEnv) -> (Port<dyn Lease>, Control) {
    match backend {
        Backend::Memory => {
            let lease = MemoryLease::new();
            let control = Control::new(cronq_memory::MemoryControl::new(&lease));
            (Port(Arc::new(lease)), control)
        }
        Backend::Real => {
            let names = names(env);
            let conn = cronq_redis::connect(&redis_url()).await.unwrap();
            (
                Port(Arc::new(redis_lease(&names).await)),
                Control::new(cronq_redis::RedisControl::new(conn, &names)),
            )
        }
        Backend::Sqlite => (
            Port(Arc::new(SqliteLease::new(open(env)))),
            Control::new(SqliteControl::new(open(env))),
        ),
    }
}

/// Two processes' handles on the one fleet registry of `backend`.
pub async fn registries(
    backend: Backend,
    env: &TestEnv,
) -> (
    Arc<dyn cronq_shared::registry::Registry>,
    Arc<dyn cronq_shared::registry::Registry>,
) {
    match backend {
        Backend::Memory => {
            let r = cronq_memory::MemoryRegistry::new();
            (Arc::new(r.clone()), Arc::new(r))
        }
        Backend::Real => {
            let names = names(env);
            let a = cronq_redis::connect(&redis_url()).await.unwrap();
            let b = cronq_redis::connect(&redis_url()).await.unwrap();
            (
                Arc::new(cronq_redis::RedisRegistry::new(a, &names)),
                Arc::new(cronq_redis::RedisRegistry::new(b, &names)),
            )
        }
        Backend::Sqlite => (
            Arc::new(cronq_sqlite::SqliteRegistry::new(open(env))),
            Arc::new(cronq_sqlite::SqliteRegistry::new(open(env))),
        ),
    }
}

/// The Redis ledger under the test's namespace, and its run log.
pub async fn redis_ports(env: &TestEnv) -> (RedisLedger, RedisRunLog) {
    let conn = cronq_redis::connect(&redis_url()).await.unwrap();
    let names = names(env);
    let history = RedisRunLog::new(conn.clone(), &names, RETENTION);
    (RedisLedger::new(conn, names, history.clone()), history)
}

/// The Redis ledger under the test's namespace.
pub async fn redis_ledger(env: &TestEnv) -> RedisLedger {
    redis_ports(env).await.0
}

/// The Redis type of the record of occurrence `key` under the test's namespace (`string`
/// for a held claim's, `hash` for any other, `none`): which form
/// `backends/redis/src/ledger/record.lua` keeps it in.
pub async fn record_type(env: &TestEnv, key: &str) -> String {
    redis::cmd("TYPE")
        .arg(env.names().redis_key(&["occ", key]))
        .query_async(&mut env.redis().await)
        .await
        .unwrap()
}

/// A handle on the Redis leader lease of `names`, on a connection of its own.
pub async fn redis_lease(names: &Names) -> RedisLease {
    RedisLease::new(cronq_redis::connect(&redis_url()).await.unwrap(), names)
}

fn names(env: &TestEnv) -> Names {
    env.names()
}

#[async_trait]
impl<T: Broker + ?Sized> Broker for Port<T> {
    async fn declare(
        &self,
        queues: &std::collections::BTreeSet<QueueName>,
    ) -> Result<(), BrokerError> {
        self.0.declare(queues).await
    }

    async fn publish(&self, batch: &[Outgoing]) -> Result<(), BrokerError> {
        self.0.publish(batch).await
    }

    async fn consume(
        &self,
        queues: &[QueueName],
        prefetch: u16,
        token: CancellationToken,
    ) -> Result<mpsc::Receiver<Delivery>, BrokerError> {
        self.0.consume(queues, prefetch, token).await
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), BrokerError> {
        self.0.dead_letter(letter).await
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, BrokerError> {
        self.0.dead_letters().await
    }

    async fn replay(
        &self,
        select: &(dyn for<'l> Fn(&'l DeadLetter) -> Pick + Send + Sync),
    ) -> Result<usize, BrokerError> {
        self.0.replay(select).await
    }
}

#[async_trait]
impl<T: Ledger + ?Sized> Ledger for Port<T> {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        self.0.claim(claim).await
    }

    async fn heartbeat(
        &self,
        lease: &ledger::ExecutionLease,
        duration: Duration,
    ) -> Result<Heartbeat, StoreError> {
        self.0.heartbeat(lease, duration).await
    }

    async fn keep(
        &self,
        lease: &ledger::ExecutionLease,
        duration: Duration,
        body: &[u8],
        retention: Duration,
    ) -> Result<Heartbeat, StoreError> {
        self.0.keep(lease, duration, body, retention).await
    }

    async fn complete(
        &self,
        lease: &ledger::ExecutionLease,
        end: &End,
    ) -> Result<Ended, StoreError> {
        self.0.complete(lease, end).await
    }

    async fn settle(&self, settle: &Settle) -> Result<Ended, StoreError> {
        self.0.settle(settle).await
    }

    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError> {
        self.0.reap(limit, hold).await
    }

    async fn admit_replay(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        self.0.admit_replay(key).await
    }

    async fn cancel(&self, cancel: &ledger::Cancel) -> Result<ledger::Cancelled, StoreError> {
        self.0.cancel(cancel).await
    }

    async fn cancels(&self) -> Result<u64, StoreError> {
        self.0.cancels().await
    }

    async fn gates(&self, gates: &[String]) -> Result<Vec<ledger::GateUse>, StoreError> {
        self.0.gates(gates).await
    }

    async fn record(&self, key: &OccurrenceKey) -> Result<Option<ledger::Record>, StoreError> {
        self.0.record(key).await
    }
}

#[async_trait]
impl<T: Inspect + ?Sized> Inspect for Port<T> {
    async fn inspect(&self, key: &OccurrenceKey) -> Option<Record> {
        self.0.inspect(key).await
    }
}

#[async_trait]
impl<T: RunLog + ?Sized> RunLog for Port<T> {
    async fn record(&self, run: &Run) -> Result<(), StoreError> {
        self.0.record(run).await
    }

    async fn list(&self, job: Option<&JobName>, limit: usize) -> Result<Vec<Run>, StoreError> {
        self.0.list(job, limit).await
    }

    async fn tail(
        &self,
        from: &cronq_shared::runlog::TailFrom,
        limit: usize,
    ) -> Result<cronq_shared::runlog::Tail, StoreError> {
        self.0.tail(from, limit).await
    }

    async fn keep_output(
        &self,
        key: &OccurrenceKey,
        attempt: u32,
        output: &RunOutput,
    ) -> Result<(), StoreError> {
        self.0.keep_output(key, attempt, output).await
    }

    async fn outputs(
        &self,
        key: &OccurrenceKey,
    ) -> Result<std::collections::BTreeMap<u32, RunOutput>, StoreError> {
        self.0.outputs(key).await
    }
}

#[async_trait]
impl<T: Lease + ?Sized> Lease for Port<T> {
    async fn acquire(&self, instance: &str, ttl: Duration) -> Result<Option<Term>, LeaseError> {
        self.0.acquire(instance, ttl).await
    }

    async fn renew(&self, term: &Term, ttl: Duration) -> Result<bool, LeaseError> {
        self.0.renew(term, ttl).await
    }

    async fn release(&self, term: &Term) -> Result<bool, LeaseError> {
        self.0.release(term).await
    }

    async fn holder(&self) -> Result<Option<Holder>, LeaseError> {
        self.0.holder().await
    }

    async fn begin(
        &self,
        term: &Term,
        start: chrono::DateTime<chrono::Utc>,
        keep: Duration,
    ) -> Result<(), LeaseError> {
        self.0.begin(term, start, keep).await
    }

    async fn terms(&self) -> Result<Vec<TermRecord>, LeaseError> {
        self.0.terms().await
    }
}

/// Two processes' handles on the one runtime job store of `backend`.
pub async fn job_stores(
    backend: Backend,
    env: &TestEnv,
) -> (
    Arc<dyn cronq_shared::jobs::JobStore>,
    Arc<dyn cronq_shared::jobs::JobStore>,
) {
    match backend {
        Backend::Memory => {
            let s = cronq_memory::MemoryJobStore::new();
            (Arc::new(s.clone()), Arc::new(s))
        }
        Backend::Real => {
            let names = names(env);
            let a = cronq_redis::connect(&redis_url()).await.unwrap();
            let b = cronq_redis::connect(&redis_url()).await.unwrap();
            (
                Arc::new(cronq_redis::RedisJobStore::new(a, &names)),
                Arc::new(cronq_redis::RedisJobStore::new(b, &names)),
            )
        }
        Backend::Sqlite => (
            Arc::new(cronq_sqlite::SqliteJobStore::new(open(env))),
            Arc::new(cronq_sqlite::SqliteJobStore::new(open(env))),
        ),
    }
}

/// Two processes' handles on the one audit log of `backend`, keeping entries for
/// `retention`.
pub async fn audit_logs(
    backend: Backend,
    env: &TestEnv,
    retention: Duration,
) -> (
    Arc<dyn cronq_shared::audit::AuditLog>,
    Arc<dyn cronq_shared::audit::AuditLog>,
) {
    match backend {
        Backend::Memory => {
            let s = cronq_memory::MemoryAudit::new(retention);
            (Arc::new(s.clone()), Arc::new(s))
        }
        Backend::Real => {
            let names = names(env);
            let a = cronq_redis::connect(&redis_url()).await.unwrap();
            let b = cronq_redis::connect(&redis_url()).await.unwrap();
            (
                Arc::new(cronq_redis::RedisAudit::new(a, &names, retention)),
                Arc::new(cronq_redis::RedisAudit::new(b, &names, retention)),
            )
        }
        Backend::Sqlite => (
            Arc::new(cronq_sqlite::SqliteAudit::new(open(env), retention)),
            Arc::new(cronq_sqlite::SqliteAudit::new(open(env), retention)),
        ),
    }
}
