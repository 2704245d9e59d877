//! The switch barrier: which replicas of the master a guarded write must reach, through
//! Sentinel, so that a failover, planned (`SENTINEL FAILOVER`) or not, can lose none of the
//! writes cronq counted as done.
//!
//! Why every replica: Sentinel promotes a replica before it tells the old master and the
//! other replicas to follow it, and in between the old master still takes writes, which the
//! replicas still following it acknowledge and lose when they resynchronise with the new
//! master. A write acknowledged by every replica the master has is on the one promoted,
//! whichever it is; a write made once the promoted one left is acknowledged by fewer, and
//! fails (its caller tries it again, on the new master once cronq follows it).
//!
//! Owns: the set of awaited replicas, kept by the watch task of `sentinel.rs` from the
//! master's `INFO replication` each tick. A replica joins when the master lists it `online`
//! and it acknowledged within [`LAG_MAX`]. It leaves only when it is gone for good: the
//! master no longer lists it as in sync and the replica itself does not answer `ROLE`
//! (killed, stopped, unreachable). A replica that answers but no longer replicates from this
//! master (a replica just promoted answers `master`; one told to follow another, `slave` of
//! it) stays awaited, so writes fail, until cronq moves to the new master or
//! [`DETACHED_HOLD`] has passed.
//!
//! Invariant: the count awaited only drops for a replica that does not answer (which
//! Sentinel cannot promote) or one detached for longer than [`DETACHED_HOLD`]; it is reset
//! only when the connection moves to another master, together with the move.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, RedisResult, Value};

/// How long a replica may go without acknowledging the master's stream (`lag=` in `INFO
/// replication`; a replica acknowledges every second) and still count as in sync. One that
/// lags longer (frozen, cut off) is probed like one that left.
pub(crate) const LAG_MAX: u64 = 3;

/// How long a replica that answers but no longer replicates from the master is still
/// awaited, so writes fail. A failover moves cronq to the new master within a few seconds
/// of the promotion (the sentinels name it, cronq asks every second); this bounds what an
/// operator's own `REPLICAOF NO ONE` on a replica costs.
pub(crate) const DETACHED_HOLD: Duration = Duration::from_secs(30);

/// How long a probe of a replica (`ROLE`) may take before it counts as gone.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The replicas a guarded write awaits, and since when each is detached (`None`: in sync).
#[derive(Debug, Default)]
pub(crate) struct Awaited {
    replicas: BTreeMap<String, Option<Instant>>,
}

/// What a replica that left the master's in-sync list answers.
#[derive(Debug, PartialEq, Eq)]
enum Probe {
    /// No answer: killed, stopped or unreachable. Sentinel cannot promote it.
    Gone,
    /// It answers (a promoted replica, or one reconnecting or following another master).
    Alive,
}

impl Awaited {
    /// The replicas the master lists in sync now, all awaited (a new master, or the start).
    pub(crate) fn of(info: &str) -> Self {
        Self {
            replicas: in_sync(info).into_iter().map(|r| (r, None)).collect(),
        }
    }

    /// Whether an awaited replica answers but no longer replicates from the master (a
    /// failover may be under way).
    pub(crate) fn detached(&self) -> bool {
        self.replicas.values().any(Option::is_some)
    }

    /// How many replicas a guarded write waits for.
    pub(crate) fn count(&self) -> u32 {
        u32::try_from(self.replicas.len()).unwrap_or(u32::MAX)
    }

    /// Updates the set from the master's `INFO replication` (`info`): replicas in sync join;
    /// those that left are probed through `master` (its credentials and TLS) and leave only
    /// when gone or detached longer than [`DETACHED_HOLD`]. Logs each change.
    pub(crate) async fn refresh(&mut self, info: &str, master: &redis::Client, url: &str) {
        let now = in_sync(info);
        for replica in &now {
            match self.replicas.insert(replica.clone(), None) {
                None => {
                    tracing::info!(url = %url, replica = %replica, awaited = self.replicas.len(), "a Redis replica is in sync: guarded writes wait for it");
                }
                Some(Some(since)) => {
                    tracing::info!(url = %url, replica = %replica, elapsed_ms = since.elapsed().as_millis(), "a detached Redis replica is in sync again");
                }
                Some(None) => {}
            }
        }
        let left: Vec<String> = self
            .replicas
            .keys()
            .filter(|r| !now.contains(r))
            .cloned()
            .collect();
        for replica in left {
            let probe = probe(master, &replica).await;
            let since = self
                .replicas
                .get_mut(&replica)
                .expect("a replica of the set");
            let held = since.get_or_insert_with(Instant::now).elapsed();
            if probe == Probe::Alive && held < DETACHED_HOLD {
                if held.is_zero() {
                    tracing::warn!(url = %url, replica = %replica, "a Redis replica answers but no longer replicates from the master (a failover?): guarded writes fail until it is back or cronq follows the new master");
                }
                continue;
            }
            self.replicas.remove(&replica);
            tracing::warn!(url = %url, replica = %replica, gone = probe == Probe::Gone, elapsed_ms = held.as_millis(), awaited = self.replicas.len(), "a Redis replica left: guarded writes no longer wait for it");
        }
    }
}

/// The `host:port` of each replica `INFO replication` lists `online` with an
/// acknowledgement within [`LAG_MAX`] seconds.
fn in_sync(info: &str) -> Vec<String> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().split_once(':')?;
            let index = name.strip_prefix("slave")?;
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            };
            let lag: u64 = field("lag")?.parse().ok()?;
            let addr = format!("{}:{}", field("ip")?, field("port")?);
            (field("state")? == "online" && lag <= LAG_MAX).then_some(addr)
        })
        .collect()
}

/// Whether `replica` (`host:port`) answers `ROLE`, reached as `master` is (credentials,
/// TLS). Any error counts as gone.
async fn probe(master: &redis::Client, replica: &str) -> Probe {
    let answered = tokio::time::timeout(PROBE_TIMEOUT, async {
        let client = client_of(master, replica)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(PROBE_TIMEOUT))
            .set_response_timeout(Some(PROBE_TIMEOUT));
        let mut conn: MultiplexedConnection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("ROLE").query_async::<Value>(&mut conn).await
    })
    .await;
    match answered {
        Ok(Ok(_)) => Probe::Alive,
        _ => Probe::Gone,
    }
}

/// A client of `addr` (`host:port`, a node a sentinel names) with `master`'s settings,
/// when that node answers `ROLE` as a master; `None` otherwise.
pub(crate) async fn master_at(master: &redis::Client, addr: &str) -> Option<redis::Client> {
    let client = client_of(master, addr).ok()?;
    let role = tokio::time::timeout(PROBE_TIMEOUT, async {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(PROBE_TIMEOUT))
            .set_response_timeout(Some(PROBE_TIMEOUT));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("ROLE").query_async::<Value>(&mut conn).await
    })
    .await;
    match role {
        Ok(Ok(Value::Array(items))) => match items.first() {
            Some(Value::BulkString(role)) if role == b"master" => Some(client),
            _ => None,
        },
        _ => None,
    }
}

/// A client of `replica` (`host:port`) with `master`'s settings.
fn client_of(master: &redis::Client, replica: &str) -> RedisResult<redis::Client> {
    let (host, port) = replica
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Client, "not a replica address"))
        })?;
    let info = master.get_connection_info().clone();
    let addr = match info.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    redis::Client::open(info.set_addr(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_in_sync_are_read_from_info() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
            slave0:ip=127.0.0.1,port=6392,state=online,offset=981,lag=0\r\n\
            slave1:ip=127.0.0.1,port=6393,state=wait_bgsave,offset=0,lag=0\r\n\
            slave2:ip=10.0.0.4,port=6379,state=online,offset=900,lag=7\r\n\
            slave_read_repl_offset:981\r\nmaster_repl_offset:981\r\n";
        assert_eq!(in_sync(info), ["127.0.0.1:6392"]);
        assert!(in_sync("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n").is_empty());
        assert_eq!(Awaited::of(info).count(), 1);
    }

    #[tokio::test]
    async fn a_replica_that_does_not_answer_leaves_at_once() {
        // Nothing listens on port 1 of loopback: the probe is refused.
        let master = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let mut awaited = Awaited::of("slave0:ip=127.0.0.1,port=1,state=online,offset=1,lag=0\r\n");
        assert_eq!(awaited.count(), 1);
        awaited
            .refresh("connected_slaves:0\r\n", &master, "test")
            .await;
        assert_eq!(awaited.count(), 0);
    }
}
