//! The Redis connection every store of this crate runs on.

use std::time::Duration;

use cronq_shared::endpoints::CONNECT_TIMEOUT;
use cronq_shared::redacted::Redacted;
use cronq_shared::store::StoreError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// Opens a Redis connection that fails fast while Redis is down and reconnects by itself,
/// without replaying commands its caller gave up on: unlike a client that queues commands
/// across a reconnect, a renewal the leader gave up on is never applied later.
///
/// # Errors
/// [`StoreError::Unreachable`] when Redis does not answer within [`CONNECT_TIMEOUT`].
pub async fn connect(url: &str) -> Result<ConnectionManager, StoreError> {
    let unreachable = |source: Option<redis::RedisError>| StoreError::Unreachable {
        store: crate::error::STORE,
        url: Redacted(url).to_string(),
        hint: "start it with `redis-server`, or set CRONQ_REDIS_URL",
        source: source.map(|e| Box::new(e) as _),
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
