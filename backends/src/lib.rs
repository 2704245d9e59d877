//! The one place where cronq chooses and connects its backends: a fleet runs on RabbitMQ
//! (the queue) and Redis (every store), a standalone on one SQLite file (or in memory, for
//! tests and demos). The producer, the consumer and the operations commands only see the
//! port traits of `cronq-shared`; a new backend is a crate under `backends/` and a
//! constructor here.
//!
//! Invariant: which backend serves a [`Target`] is decided here only ([`open`],
//! [`open_stores`], [`open_broker`]); a caller gets the ports, never a backend's type.

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

use std::path::PathBuf;
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
use cronq_shared::broker::{Broker, BrokerError};
use cronq_shared::config::DEFAULT_RETENTION;
use cronq_shared::control::Control;
use cronq_shared::endpoints::Endpoints;
use cronq_shared::jobs::JobStore;
use cronq_shared::lease::Lease;
use cronq_shared::ledger::Ledger;
use cronq_shared::registry::Registry;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, RunLog};
use cronq_shared::signing::Keyring;
use cronq_shared::store::StoreError;
use cronq_sqlite::{
    Db, SqliteAudit, SqliteControl, SqliteLease, SqliteLedger, SqliteRegistry, SqliteRunLog,
};

pub use cronq_sqlite::{SqliteBroker, Sync};

/// The forms `CRONQ_REDIS_URL` takes, for the binary to check the URL before it connects.
pub use cronq_redis::RedisUrl;

/// Run records a standalone in memory keeps; the oldest are dropped first.
const MAX_RUNS_IN_MEMORY: usize = 10_000;

/// Where a deployment's state is.
#[derive(Debug, Clone)]
pub enum Target {
    /// The fleet's services: RabbitMQ and Redis.
    Fleet(Endpoints),
    /// A standalone's data file.
    Data {
        /// The file, as given.
        path: PathBuf,
        /// `--data-sync`.
        sync: Sync,
        /// The signing keys, as for a fleet.
        keyring: Option<Arc<Keyring>>,
    },
    /// A standalone's process memory: only that process reaches it.
    Memory {
        /// The signing keys, as for a fleet.
        keyring: Option<Arc<Keyring>>,
    },
}

impl Target {
    /// The signing keys the target's broker seals with.
    pub fn keyring(&self) -> Option<&Keyring> {
        match self {
            Self::Fleet(endpoints) => endpoints.keyring.as_deref(),
            Self::Data { keyring, .. } | Self::Memory { keyring } => keyring.as_deref(),
        }
    }
}

/// The ports of one deployment: its queue and its stores.
#[derive(Clone)]
pub struct Deployment {
    /// The queue port; it also tells the queues' depths, and closes its connection.
    pub broker: Arc<dyn Broker>,
    /// The stores.
    pub stores: Stores,
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment").finish_non_exhaustive()
    }
}

/// How a fleet's broker is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// As a service does: each node is tried until the connect timeout ([`broker`]).
    Patient,
    /// As a one-shot command does: a refused connection fails at once ([`broker_now`]).
    Now,
}

/// Why a target could not be opened, naming the part that failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Redis could not be reached.
    #[error("while connecting to Redis")]
    Stores(#[source] StoreError),
    /// RabbitMQ could not be reached.
    #[error("while connecting to RabbitMQ")]
    Broker(#[source] BrokerError),
    /// The data file cannot be used.
    #[error("while opening the data file")]
    File(#[source] StoreError),
}

/// The queue and the stores of `target`; the run history and the audit log are kept for
/// `retention` (a data file's history holds at most `DEFAULT_MAX_RUNS` runs). A data file is
/// created when missing; one process that opens it twice gets two connections to it.
///
/// # Errors
/// [`OpenError`] naming what failed: Redis first, then RabbitMQ; or the data file.
pub async fn open(
    target: &Target,
    retention: Duration,
    connect: Connect,
) -> Result<Deployment, OpenError> {
    match target {
        Target::Fleet(endpoints) => {
            let stores = stores(endpoints, retention, None)
                .await
                .map_err(OpenError::Stores)?;
            let broker = fleet_broker(endpoints, connect).await?;
            Ok(Deployment { broker, stores })
        }
        Target::Data {
            path,
            sync,
            keyring,
        } => {
            let (broker, stores) =
                sqlite(path, *sync, retention, DEFAULT_MAX_RUNS, keyring.clone())
                    .await
                    .map_err(OpenError::File)?;
            Ok(Deployment {
                broker: Arc::new(broker),
                stores,
            })
        }
        Target::Memory { keyring } => {
            let (broker, stores) = memory(MAX_RUNS_IN_MEMORY, retention, keyring.clone());
            Ok(Deployment {
                broker: Arc::new(broker),
                stores,
            })
        }
    }
}

/// The stores of `target`, as [`open`] opens them; a fleet's broker is not connected.
///
/// # Errors
/// As [`open`].
pub async fn open_stores(target: &Target, retention: Duration) -> Result<Stores, OpenError> {
    match target {
        Target::Fleet(endpoints) => stores(endpoints, retention, None)
            .await
            .map_err(OpenError::Stores),
        _ => Ok(open(target, retention, Connect::Now).await?.stores),
    }
}

/// The queue of `target`, as [`open`] opens it; a fleet's stores are not connected.
///
/// # Errors
/// As [`open`].
pub async fn open_broker(target: &Target, connect: Connect) -> Result<Arc<dyn Broker>, OpenError> {
    match target {
        Target::Fleet(endpoints) => fleet_broker(endpoints, connect).await,
        _ => Ok(open(target, DEFAULT_RETENTION, connect).await?.broker),
    }
}

/// RabbitMQ at `endpoints`, connected as `connect` says.
async fn fleet_broker(
    endpoints: &Endpoints,
    connect: Connect,
) -> Result<Arc<dyn Broker>, OpenError> {
    let how = if connect == Connect::Now {
        Amqp::Once
    } else {
        Amqp::Patient
    };
    let broker = amqp(endpoints, how).await.map_err(OpenError::Broker)?;
    Ok(Arc::new(broker))
}

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
    amqp(endpoints, Amqp::Patient).await
}

/// As [`broker`], for a process that only publishes (the producer): smaller frames, so
/// smaller buffers on each of its connections ([`AmqpBroker::connect_publisher`]).
///
/// # Errors
/// As [`broker`].
pub async fn publisher(endpoints: &Endpoints) -> Result<AmqpBroker, BrokerError> {
    amqp(endpoints, Amqp::Publisher).await
}

/// As [`broker`], for a one-shot command: a broker that refuses the connection (not
/// running) is reported at once instead of after the services' connect timeout.
///
/// # Errors
/// [`BrokerError`] when no node accepted a connection.
pub async fn broker_now(endpoints: &Endpoints) -> Result<AmqpBroker, BrokerError> {
    amqp(endpoints, Amqp::Once).await
}

/// How [`amqp`] connects.
#[derive(Clone, Copy)]
enum Amqp {
    /// [`broker`].
    Patient,
    /// [`broker_now`].
    Once,
    /// [`publisher`].
    Publisher,
}

async fn amqp(endpoints: &Endpoints, how: Amqp) -> Result<AmqpBroker, BrokerError> {
    let (urls, names, tls) = (&endpoints.amqp_url, endpoints.names(), &endpoints.tls);
    let replication = Replication::new(endpoints.amqp_quorum_size);
    let broker = match how {
        Amqp::Patient => AmqpBroker::connect_with(urls, names, replication, tls).await,
        Amqp::Once => AmqpBroker::connect_once(urls, names, replication, tls).await,
        Amqp::Publisher => AmqpBroker::connect_publisher(urls, names, replication, tls).await,
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
