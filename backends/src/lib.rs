//! The one place where cronq chooses and connects its backends: a fleet runs on RabbitMQ
//! (the queue) and Redis (every store), a standalone on one SQLite file (or in memory, for
//! tests and demos). The producer, the consumer and the operations commands only see the
//! port traits of `cronq-shared`; a new backend is a crate under `backends/` and a
//! constructor here.

use std::sync::Arc;
use std::time::Duration;

use cronq_memory::{
    MemoryAudit, MemoryBroker, MemoryControl, MemoryLease, MemoryLedger, MemoryRegistry,
    MemoryRunLog,
};
use cronq_rabbitmq::AmqpBroker;
use cronq_rabbitmq::topology::Replication;
use cronq_redis::{RedisAudit, RedisControl, RedisLease, RedisLedger, RedisRegistry, RedisRunLog};
use cronq_shared::audit::AuditLog;
use cronq_shared::broker::BrokerError;
use cronq_shared::control::Control;
use cronq_shared::endpoints::Endpoints;
use cronq_shared::jobs::JobStore;
use cronq_shared::lease::Lease;
use cronq_shared::ledger::Ledger;
use cronq_shared::registry::Registry;
use cronq_shared::runlog::RunLog;
use cronq_shared::signing::Keyring;
use cronq_shared::store::StoreError;
use cronq_sqlite::{
    Db, SqliteAudit, SqliteControl, SqliteLease, SqliteLedger, SqliteRegistry, SqliteRunLog,
};

pub use cronq_sqlite::{SqliteBroker, Sync};

/// The forms `CRONQ_REDIS_URL` takes, for the binary to check the URL before it connects.
pub use cronq_redis::RedisUrl;

/// The stores of one deployment. The ledger appends the runs it ends to `runlog`.
#[derive(Clone)]
pub struct Stores {
    /// Idempotency records, execution leases, overlap locks.
    pub ledger: Arc<dyn Ledger>,
    /// The run history.
    pub runlog: Arc<dyn RunLog>,
    /// The producers' leader lease.
    pub lease: Arc<dyn Lease>,
    /// Cursors, pauses, trigger and backfill requests.
    pub control: Control,
    /// The instances alive, their config digests, the per-minute counts.
    pub registry: Arc<dyn Registry>,
    /// Runtime jobs (`cronq job apply`).
    pub jobs: Arc<dyn JobStore>,
    /// The operators' actions, kept as long as the runs.
    pub audit: Arc<dyn AuditLog>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

/// Connects the fleet's broker: RabbitMQ at `endpoints.amqp_url` (`amqps://` with
/// `endpoints.tls`), sealing what it publishes with `endpoints.keyring`.
///
/// # Errors
/// [`BrokerError`] when RabbitMQ cannot be reached within the connect timeout.
pub async fn broker(endpoints: &Endpoints) -> Result<AmqpBroker, BrokerError> {
    amqp(endpoints, false).await
}

/// As [`broker`], for a one-shot command: a broker that refuses the connection (not
/// running) is reported at once instead of after the services' connect timeout.
///
/// # Errors
/// [`BrokerError`] when no node accepted a connection.
pub async fn broker_now(endpoints: &Endpoints) -> Result<AmqpBroker, BrokerError> {
    amqp(endpoints, true).await
}

/// [`broker`], or with `once` [`broker_now`].
async fn amqp(endpoints: &Endpoints, once: bool) -> Result<AmqpBroker, BrokerError> {
    let (urls, names, tls) = (&endpoints.amqp_url, endpoints.names(), &endpoints.tls);
    let replication = Replication::new(endpoints.amqp_quorum_size);
    let broker = if once {
        AmqpBroker::connect_once(urls, names, replication, tls).await
    } else {
        AmqpBroker::connect_with(urls, names, replication, tls).await
    };
    broker.map(|broker| broker.signing(endpoints.keyring.clone()))
}

/// Connects the fleet's stores: Redis at `endpoints.redis_url` (one server, or the master
/// its sentinels name; `rediss://` with `endpoints.tls`), their guarded writes waiting for `endpoints.redis_min_replicas`
/// replicas. `retention` bounds the run history (the longest job retention); `client` names
/// the lease's connection, so an operator finds it in `CLIENT LIST`.
///
/// # Errors
/// [`StoreError::Unreachable`] when Redis cannot be reached within the connect timeout;
/// [`StoreError::Url`] when the URL is not one of the forms taken.
pub async fn stores(
    endpoints: &Endpoints,
    retention: Duration,
    client: Option<String>,
) -> Result<Stores, StoreError> {
    let names = endpoints.names();
    let conn = cronq_redis::connect_tls(&endpoints.redis_url, &endpoints.tls)
        .await?
        .with_min_replicas(endpoints.redis_min_replicas);
    let history = RedisRunLog::new(conn.clone(), &names, retention);
    let mut lease = RedisLease::new(conn.clone(), &names);
    if let Some(client) = client {
        lease = lease.with_client_name(client);
    }
    Ok(Stores {
        ledger: Arc::new(RedisLedger::new(
            conn.clone(),
            names.clone(),
            history.clone(),
        )),
        runlog: Arc::new(history),
        lease: Arc::new(lease),
        registry: Arc::new(RedisRegistry::new(conn.clone(), &names)),
        jobs: Arc::new(cronq_redis::RedisJobStore::new(conn.clone(), &names)),
        audit: Arc::new(RedisAudit::new(conn.clone(), &names, retention)),
        control: Control::new(RedisControl::new(conn, &names)),
    })
}

/// The ports of a standalone, in process memory; the history keeps at most `max_runs`, the
/// audit log entries for `retention`; the broker seals what it publishes with `keyring`.
pub fn memory(
    max_runs: usize,
    retention: Duration,
    keyring: Option<Arc<Keyring>>,
) -> (MemoryBroker, Stores) {
    let history = Arc::new(MemoryRunLog::new(max_runs));
    let lease = MemoryLease::new();
    let control = Control::new(MemoryControl::new(&lease));
    let stores = Stores {
        ledger: Arc::new(MemoryLedger::new(Arc::clone(&history))),
        runlog: history,
        lease: Arc::new(lease),
        control,
        registry: Arc::new(MemoryRegistry::new()),
        jobs: Arc::new(cronq_memory::MemoryJobStore::new()),
        audit: Arc::new(MemoryAudit::new(retention)),
    };
    (MemoryBroker::new().signing(keyring), stores)
}

/// The ports of a standalone on the data file at `path` (created, or brought to the
/// current schema, when opened); the history keeps at most `max_runs`, none older than
/// `retention`. Every process that opens the file shares its queue and stores. The broker
/// seals what it publishes with `keyring`.
///
/// # Errors
/// [`StoreError::File`] naming the file when it cannot be used (not a cronq data file,
/// written by a newer cronq, read-only, disk full).
pub async fn sqlite(
    path: &std::path::Path,
    sync: Sync,
    retention: Duration,
    max_runs: usize,
    keyring: Option<Arc<Keyring>>,
) -> Result<(SqliteBroker, Stores), StoreError> {
    let path = path.to_owned();
    let db = tokio::task::spawn_blocking(move || Db::open(&path, sync))
        .await
        .map_err(|e| StoreError::Command {
            store: "SQLite",
            source: Box::new(e),
        })??;
    let history = SqliteRunLog::new(db.clone(), retention, max_runs);
    let stores = Stores {
        ledger: Arc::new(SqliteLedger::new(db.clone(), history.clone())),
        runlog: Arc::new(history),
        lease: Arc::new(SqliteLease::new(db.clone())),
        control: Control::new(SqliteControl::new(db.clone())),
        registry: Arc::new(SqliteRegistry::new(db.clone())),
        jobs: Arc::new(cronq_sqlite::SqliteJobStore::new(db.clone())),
        audit: Arc::new(SqliteAudit::new(db.clone(), retention)),
    };
    Ok((SqliteBroker::new(db).signing(keyring), stores))
}
