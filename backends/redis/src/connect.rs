//! Opening the Redis connection every store of this crate runs on, from `CRONQ_REDIS_URL`:
//! one server (`redis://`, `rediss://`), or a master found through Redis Sentinel
//! (`redis+sentinel://`, `rediss+sentinel://`, see [`RedisUrl`]) and followed across
//! failovers ([`crate::sentinel`]); over TLS with the files of `CRONQ_TLS_*` ([`Tls`]).

use std::time::Duration;

use cronq_shared::endpoints::{CONNECT_TIMEOUT, Tls};
use cronq_shared::redacted::Redacted;
use cronq_shared::store::StoreError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, IntoConnectionInfo as _};

use crate::conn::RedisConn;
use crate::sentinel::{Follower, WATCH_EVERY};
use crate::tls::certificates;
use crate::url::RedisUrl;

/// Opens a Redis connection that fails fast while Redis is down and reconnects by itself,
/// without replaying commands its caller gave up on: unlike a client that queues commands
/// across a reconnect, a renewal the leader gave up on is never applied later. Through
/// Sentinel it also follows the master to another node, on the same terms. Guarded writes
/// wait for no replica until [`RedisConn::with_min_replicas`].
///
/// # Errors
/// [`StoreError::Url`] when `url` is not one of the forms taken; [`StoreError::Unreachable`]
/// when Redis (or, through Sentinel, a master the sentinels name) does not answer within
/// [`CONNECT_TIMEOUT`]; [`StoreError::Unsupported`] when it is a Redis Cluster node.
pub async fn connect(url: &str) -> Result<RedisConn, StoreError> {
    open(url, Some(WATCH_EVERY), &Tls::default()).await
}

/// [`connect()`], a `rediss://` server (or, with `rediss+sentinel://`, the sentinels and
/// the master) reached with the TLS files of `tls`: the CAs of `CRONQ_TLS_CA_FILE` are then
/// the only ones trusted (redis-rs replaces the system's roots with them), and the client
/// certificate is given to a server that asks for one. A plain `redis://` URL ignores them.
///
/// # Errors
/// As [`connect()`]; [`StoreError::Tls`] when a TLS handshake failed for a reason the
/// operator must fix.
pub async fn connect_tls(url: &str, tls: &Tls) -> Result<RedisConn, StoreError> {
    open(url, Some(WATCH_EVERY), tls).await
}

/// [`connect()`], asking a sentinel every `watch_every` whether the master moved (`None`:
/// only when a command fails; for tests of that path, since a planned switch then goes
/// unseen until the old master is demoted, see [`crate::sentinel`]). One server has no
/// watch.
///
/// # Errors
/// As [`connect()`].
pub async fn connect_with(
    url: &str,
    watch_every: Option<Duration>,
) -> Result<RedisConn, StoreError> {
    open(url, watch_every, &Tls::default()).await
}

/// The client of one server's URL: with the TLS files when the URL is `rediss://`.
fn server_client(url: String, tls: &Tls) -> redis::RedisResult<redis::Client> {
    let info = url.into_connection_info()?;
    match certificates(tls) {
        Some(certs) if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) => {
            redis::Client::build_with_tls(info, certs)
        }
        _ => redis::Client::open(info),
    }
}

async fn open(
    url: &str,
    watch_every: Option<Duration>,
    tls: &Tls,
) -> Result<RedisConn, StoreError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(3)))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_secs(2));
    let redacted = Redacted(url).to_string();
    let unreachable = |hint, source: Option<redis::RedisError>| {
        let refusal = source.as_ref().and_then(|e| cronq_tls::diagnose(e));
        match (refusal, source) {
            (Some(refusal), Some(source)) => StoreError::Tls {
                store: crate::error::STORE,
                url: redacted.clone(),
                refusal,
                source: Box::new(source),
            },
            (_, source) => StoreError::Unreachable {
                store: crate::error::STORE,
                url: redacted.clone(),
                hint,
                source: source.map(|e| Box::new(e) as _),
            },
        }
    };
    let conn = match RedisUrl::parse(url)? {
        RedisUrl::Server(url) => {
            const HINT: &str = "start it with `redis-server`, or set CRONQ_REDIS_URL";
            let client = server_client(url, tls).map_err(|e| unreachable(HINT, Some(e)))?;
            let manager = ConnectionManager::new_with_config(client, config);
            match tokio::time::timeout(CONNECT_TIMEOUT, manager).await {
                Ok(Ok(manager)) => Ok(RedisConn::server(manager)),
                Ok(Err(e)) => Err(unreachable(HINT, Some(e))),
                Err(_) => Err(unreachable(HINT, None)),
            }
        }
        RedisUrl::Sentinel(sentinel) => {
            const HINT: &str = "check that the sentinels run and monitor that master name, and that the master answers; or set CRONQ_REDIS_URL";
            let follower = Follower::connect(&sentinel, tls, redacted.clone(), config, watch_every);
            match tokio::time::timeout(CONNECT_TIMEOUT, follower).await {
                Ok(Ok(follower)) => Ok(RedisConn::sentinel(follower)),
                Ok(Err(e)) => Err(unreachable(HINT, Some(e))),
                Err(_) => Err(unreachable(HINT, None)),
            }
        }
    }?;
    refuse_cluster(&conn, redacted).await?;
    Ok(conn)
}

/// Refuses a Redis Cluster node (`INFO cluster` says `cluster_enabled:1`): cronq's scripts
/// each touch keys of several slots, which a cluster refuses at run time, so it is better
/// said at start. A server that does not answer `INFO` (an ACL without it) is let through.
/// https://redis.io/docs/latest/commands/info/
async fn refuse_cluster(conn: &RedisConn, redacted: String) -> Result<(), StoreError> {
    let mut conn = conn.clone();
    let mut cmd = redis::cmd("INFO");
    let info = cmd.arg("cluster").query_async::<String>(&mut conn);
    let Ok(Ok(info)) = tokio::time::timeout(CONNECT_TIMEOUT, info).await else {
        return Ok(());
    };
    if !is_cluster(&info) {
        return Ok(());
    }
    Err(StoreError::Unsupported {
        store: crate::error::STORE,
        url: redacted,
        what: "a Redis Cluster node (cluster_enabled:1)",
        instead: "point CRONQ_REDIS_URL at a single master instead, with replicas and \
                  Redis Sentinel for failover (redis+sentinel://, see docs/ha.md)",
    })
}

/// Whether an `INFO cluster` reply says cluster mode is on.
fn is_cluster(info: &str) -> bool {
    info.lines().any(|line| line.trim() == "cluster_enabled:1")
}

#[cfg(test)]
mod tests {
    use super::is_cluster;

    #[test]
    fn cluster_enabled_is_read_from_info() {
        assert!(is_cluster("# Cluster\r\ncluster_enabled:1\r\n"));
        assert!(!is_cluster("# Cluster\r\ncluster_enabled:0\r\n"));
        assert!(!is_cluster(""));
    }
}
