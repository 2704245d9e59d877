//! Connection settings shared by every command: service URLs, the namespace, the queues'
//! replication and the Redis replication barrier, from `CRONQ_AMQP_URL`,
//! `CRONQ_AMQP_QUORUM_SIZE`, `CRONQ_REDIS_URL`, `CRONQ_NAMESPACE` and
//! `CRONQ_REDIS_MIN_REPLICAS` (the forms `CRONQ_REDIS_URL` takes are the Redis backend's,
//! `cronq_redis::url`); and the TLS files of both services, `CRONQ_TLS_CA_FILE`, `CRONQ_TLS_CERT_FILE` and
//! `CRONQ_TLS_KEY_FILE` ([`tls`]).

pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use crate::names::{Names, Namespace};
use crate::signing::Keyring;

pub use tls::{PemFile, Tls, TlsRefusal};

/// How long a command waits for a service before it gives up (exit 1, see `docs/operations.md`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default broker URL.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Members of each quorum queue when `CRONQ_AMQP_QUORUM_SIZE` is not set: on a cluster of
/// three or more nodes, a queue survives the loss of one node.
pub const DEFAULT_QUORUM_SIZE: u16 = 3;

/// Default Redis URL.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The variable that sets [`Endpoints::redis_min_replicas`], named by the errors of writes
/// that did not reach that many replicas.
pub const MIN_REPLICAS_VARIABLE: &str = "CRONQ_REDIS_MIN_REPLICAS";

/// Where the services are and which namespace to use.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// `amqp://` or `amqps://` URL, or several separated by commas (a cluster's nodes; may
    /// hold credentials: never log it unredacted).
    pub amqp_url: String,
    /// Members of each quorum queue declared.
    pub amqp_quorum_size: u16,
    /// `redis://`, `rediss://` or Sentinel URL (`cronq_redis::url::RedisUrl`; same).
    pub redis_url: String,
    /// How many replicas must acknowledge each Redis write the guarantees rest on before it
    /// counts as done (`CRONQ_REDIS_MIN_REPLICAS`; 0: none, no wait).
    pub redis_min_replicas: u32,
    /// The prefix of every queue and key.
    pub namespace: Namespace,
    /// The message signing keys (`CRONQ_SIGNING_KEY`), when set: every message published
    /// is sealed with the first, and consumers run only what opens with one of them.
    pub keyring: Option<Arc<Keyring>>,
    /// The CAs trusted and the client certificate, for `amqps://` and `rediss://` (empty:
    /// the system's roots, no client certificate).
    pub tls: Tls,
}

impl Endpoints {
    /// The names of this deployment's queues and keys.
    pub fn names(&self) -> Names {
        Names::new(&self.namespace)
    }
}
