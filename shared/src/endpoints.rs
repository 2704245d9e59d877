//! Connection settings shared by every command: service URLs and the namespace, from
//! `CRONQ_AMQP_URL`, `CRONQ_AMQP_QUORUM_SIZE`, `CRONQ_REDIS_URL` and `CRONQ_NAMESPACE`.

use std::time::Duration;

use crate::names::{Names, Namespace};

/// How long a command waits for a service before it gives up (exit 1, see `docs/operations.md`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default broker URL.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Members of each quorum queue when `CRONQ_AMQP_QUORUM_SIZE` is not set: on a cluster of
/// three or more nodes, a queue survives the loss of one node.
pub const DEFAULT_QUORUM_SIZE: u16 = 3;

/// Default Redis URL.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Where the services are and which namespace to use.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// `amqp://` or `amqps://` URL, or several separated by commas (a cluster's nodes; may
    /// hold credentials: never log it unredacted).
    pub amqp_url: String,
    /// Members of each quorum queue declared.
    pub amqp_quorum_size: u16,
    /// `redis://` or `rediss://` URL (same).
    pub redis_url: String,
    /// The prefix of every queue and key.
    pub namespace: Namespace,
}

impl Endpoints {
    /// The names of this deployment's queues and keys.
    pub fn names(&self) -> Names {
        Names::new(&self.namespace)
    }
}
