//! Connection settings shared by every command: service URLs and the namespace, from
//! `CRONQ_AMQP_URL`, `CRONQ_REDIS_URL` and `CRONQ_NAMESPACE`.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::names::{Names, Namespace};
use crate::redacted::Redacted;

/// How long a command waits for a service before it gives up (SPEC section 5).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default broker URL.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Default Redis URL.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Where the services are and which namespace to use.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// `amqp://` or `amqps://` URL (may hold credentials: never log it unredacted).
    pub amqp_url: String,
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

/// Redis could not be reached or answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No connection within [`CONNECT_TIMEOUT`].
    #[error("cannot reach Redis at {url} within {secs}s: is it running? (start it with `redis-server`, or set CRONQ_REDIS_URL)", secs = CONNECT_TIMEOUT.as_secs())]
    Unreachable {
        /// Redacted URL.
        url: String,
        /// Why, when known.
        #[source]
        source: Option<redis::RedisError>,
    },
    /// A command failed.
    #[error("redis command failed")]
    Command(#[from] redis::RedisError),
    /// A stored value could not be read back.
    #[error("stored record under {key} is unreadable")]
    Corrupt {
        /// The Redis key.
        key: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// Opens a Redis connection that fails fast while Redis is down and reconnects by itself,
/// without replaying commands its caller gave up on (CRATES.md section 4).
///
/// # Errors
/// [`StoreError::Unreachable`] when Redis does not answer within [`CONNECT_TIMEOUT`].
pub async fn redis(url: &str) -> Result<ConnectionManager, StoreError> {
    let unreachable = |source| StoreError::Unreachable {
        url: Redacted(url).to_string(),
        source,
    };
    let client = redis::Client::open(url).map_err(|e| unreachable(Some(e)))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(3)))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_secs(2));
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        ConnectionManager::new_with_config(client, config),
    )
    .await
    {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(unreachable(Some(e))),
        Err(_) => Err(unreachable(None)),
    }
}
