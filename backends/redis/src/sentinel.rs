//! Following a Redis master through Sentinel: a `ConnectionManager` reconnects only to the
//! address it was built with, so a `Follower` holds the manager of the current master and
//! swaps in a manager to the new one when the sentinels name another.
//!
//! Owns: finding the master (redis-rs's `SentinelClient`, which asks the sentinels in the
//! order given and checks with `ROLE` that the node it names is a master), and one watch
//! task per connection that looks again when a command saw a sign of failover (a
//! connection error, a timeout, `READONLY` or `MASTERDOWN`: `is_failover_sign`) and,
//! every [`WATCH_EVERY`], asks a sentinel whether the master moved. The periodic look is
//! what catches a planned switch (`SENTINEL FAILOVER`): the old master keeps accepting
//! writes, without an error, until Sentinel demotes it about 10 s later, and those writes
//! are then lost. On the same tick it reads which replicas the master has in sync, which
//! every guarded write awaits (the switch barrier, `replicas.rs`): those writes to
//! the old master fail instead.
//!
//! Invariants: one look at a time (the watch task does them all, nudges coalesce); a command
//! is never replayed: the one that failed returns its error to its caller, who decides
//! whether to try again (`connect.rs`); the master changes only to a node that says it is a
//! master, and each change is logged once with the old and the new address.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ErrorKind, RedisError, RedisResult, ServerErrorKind,
    TlsMode, Value,
};
use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

use cronq_shared::endpoints::Tls;

use crate::replicas::Awaited;
use crate::tls::certificates;
use crate::url::SentinelUrl;

/// How often the watch asks a sentinel where the master is, so a planned switch is followed
/// within about this long (plus the sentinels' own agreement, about a second). One small
/// command per connection per second is nothing to a sentinel.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// How often the watch asks while a failover seems under way (an awaited replica answers
/// but no longer replicates from the master): guarded writes fail until cronq follows the
/// new master, so it is looked for as soon as the sentinels name it.
const SWITCH_WATCH_EVERY: Duration = Duration::from_millis(100);

/// How long one look for the master may take (the sentinels, the new master's `ROLE`, the
/// connection to it): redis-rs bounds each step by 1 s; a look that takes longer is given
/// up and tried again on the next nudge or tick.
const LOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// The least time between two looks, so that a burst of failing commands (every one of them
/// nudges) makes one look, not one per command.
const LOOK_GAP: Duration = Duration::from_millis(200);

/// Timeouts of the watch's own connection to a sentinel.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(1);

/// A Redis master found through Sentinel, followed across failovers. Shared by every clone
/// of its `RedisConn`; the watch task stops when the last one is dropped.
pub(crate) struct Follower {
    shared: Arc<Shared>,
    /// The watch task, aborted when the follower is dropped: owned, never detached.
    _watch: AbortOnDropHandle<()>,
}

/// What the connection's clones and the watch task share.
struct Shared {
    /// The URL, redacted, for the log.
    url: String,
    /// The master's database.
    db: i64,
    current: RwLock<Master>,
    /// How many times the master changed.
    changes: AtomicU64,
    /// Set by a command that saw a sign of failover: look again now.
    nudge: Notify,
}

/// The master in use.
struct Master {
    manager: ConnectionManager,
    /// `host:port`, as the sentinels name it.
    addr: String,
    /// Its client: the watch's own connection to it, and its settings for its replicas.
    client: redis::Client,
    /// How many replicas a guarded write to it waits for at least (the switch barrier,
    /// `replicas.rs`; 0 without a watch). Read with `manager` under one lock, so a
    /// write never pairs a new master's count with the old master's connection.
    awaited: u32,
}

impl Follower {
    /// Finds the master of `url` through its sentinels, connects to it (both with the TLS
    /// files of `tls` for `rediss+sentinel://`), and starts watching.
    ///
    /// # Errors
    /// The client's error when no sentinel names a master that answers (the caller bounds
    /// the time and says what to check).
    pub(crate) async fn connect(
        url: &SentinelUrl,
        tls: &Tls,
        redacted: String,
        config: ConnectionManagerConfig,
        watch_every: Option<Duration>,
    ) -> RedisResult<Self> {
        let mut sentinels = client(url, tls)?;
        let client = sentinels.async_get_client().await?;
        let addr = client.get_connection_info().addr().to_string();
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        tracing::debug!(url = %redacted, master = %addr, "found the Redis master through the sentinels");
        let (awaited, info) = match watch_every {
            Some(_) => match replicas_of(&client).await {
                Ok((awaited, info)) => (awaited, Some(info)),
                // An ACL without `INFO`: the watch tries again every tick, and warns.
                Err(err) => {
                    tracing::warn!(url = %redacted, master = %addr, error = %err, "cannot read the Redis master's replicas (INFO replication): guarded writes wait for CRONQ_REDIS_MIN_REPLICAS only until it answers");
                    (Awaited::default(), None)
                }
            },
            None => (Awaited::default(), None),
        };
        tracing::debug!(url = %redacted, master = %addr, awaited = awaited.count(), "guarded writes wait for every replica in sync");
        let shared = Arc::new(Shared {
            url: redacted,
            db: url.db,
            current: RwLock::new(Master {
                manager,
                addr,
                client,
                awaited: awaited.count(),
            }),
            changes: AtomicU64::new(0),
            nudge: Notify::new(),
        });
        let watch = Watch {
            shared: Arc::clone(&shared),
            sentinels,
            master_name: url.master.clone(),
            config,
            every: watch_every,
            poll: None,
            failing: false,
            awaited,
            info,
        };
        Ok(Self {
            shared,
            _watch: AbortOnDropHandle::new(tokio::spawn(watch.run())),
        })
    }

    /// The manager of the current master (cheap: a manager is a handle).
    pub(crate) fn manager(&self) -> ConnectionManager {
        self.shared.read().manager.clone()
    }

    /// The manager of the current master and how many replicas a guarded write to it must
    /// reach (the switch barrier, `replicas.rs`), read together.
    pub(crate) fn snapshot(&self) -> (ConnectionManager, u32) {
        let master = self.shared.read();
        (master.manager.clone(), master.awaited)
    }

    /// The current master's `host:port`.
    pub(crate) fn addr(&self) -> String {
        self.shared.read().addr.clone()
    }

    /// How many times the master changed since the connection was made.
    pub(crate) fn changes(&self) -> u64 {
        self.shared.changes.load(Ordering::Relaxed)
    }

    /// The master's database.
    pub(crate) fn db(&self) -> i64 {
        self.shared.db
    }

    /// Asks the watch to look for the master now (at most one look runs; nudges coalesce).
    pub(crate) fn nudge(&self) {
        self.shared.nudge.notify_one();
    }
}

impl Shared {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Master> {
        // A poisoned lock only means a panic elsewhere while swapping two plain values.
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `SentinelClient` of `url`: plain TCP or TLS (with the files of `tls`) to the
/// sentinels as to the master, the credentials and database for the master (and replicas)
/// only.
fn client(url: &SentinelUrl, tls: &Tls) -> RedisResult<SentinelClient> {
    let addrs = url.sentinels.iter().map(|(host, port)| {
        if url.tls {
            ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.clone(), *port)
        }
    });
    let mut builder = SentinelClientBuilder::new(addrs, &url.master, SentinelServerType::Master)?
        .set_client_to_redis_db(url.db);
    if url.tls {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
        if let Some(certs) = certificates(tls) {
            builder = builder
                .set_client_to_sentinel_certificates(certs.clone())
                .set_client_to_redis_certificates(certs);
        }
    }
    if let Some(user) = &url.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &url.password {
        builder = builder.set_client_to_redis_password(password);
    }
    builder.build()
}

/// Whether a command's outcome hints that the master moved: the connection failed or timed
/// out, or the node answered as a replica (`READONLY`: a demoted master; `MASTERDOWN`: a
/// replica cut off from its master). Looks into a pipeline's replies one level down.
pub(crate) fn is_failover_sign<'a>(
    outcome: Result<impl IntoIterator<Item = &'a Value>, &RedisError>,
) -> bool {
    let replica =
        |v: &Value| matches!(v, Value::ServerError(e) if e.kind().is_some_and(is_replica_answer));
    match outcome {
        Err(err) => {
            err.is_io_error() || matches!(err.kind(), ErrorKind::Server(k) if is_replica_answer(k))
        }
        Ok(values) => values.into_iter().any(|v| match v {
            Value::Array(items) => items.iter().any(replica),
            v => replica(v),
        }),
    }
}

/// What only a replica answers to a write.
fn is_replica_answer(kind: ServerErrorKind) -> bool {
    matches!(
        kind,
        ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown
    )
}

/// The task that looks for the master: on a nudge, and on each tick when a sentinel names
/// another master than the one in use.
struct Watch {
    shared: Arc<Shared>,
    sentinels: SentinelClient,
    master_name: String,
    config: ConnectionManagerConfig,
    /// How often to ask a sentinel; `None`: only on nudges.
    every: Option<Duration>,
    /// The watch's connection to a sentinel, made again after an error.
    poll: Option<MultiplexedConnection>,
    /// The last look failed: the next failures of this outage are logged at debug only
    /// (every failing command nudges, and its caller logs its own error).
    failing: bool,
    /// The replicas guarded writes wait for (empty without a watch).
    awaited: Awaited,
    /// The watch's own connection to the master, for `INFO replication` (not the writes'
    /// connection, where a `WAIT` holds later replies back); made again after an error.
    info: Option<MultiplexedConnection>,
}

impl Watch {
    async fn run(mut self) {
        let every = self.every.unwrap_or(WATCH_EVERY);
        loop {
            // While an awaited replica answers but left the master (a failover under way),
            // ask the sentinels often: every write fails until cronq follows the new master.
            let wait = if self.awaited.detached() {
                SWITCH_WATCH_EVERY
            } else {
                every
            };
            let named = tokio::select! {
                biased;
                () = self.shared.nudge.notified() => None,
                () = tokio::time::sleep(wait), if self.every.is_some() => {
                    self.refresh_awaited().await;
                    match self.moved().await {
                        Some(named) => Some(named),
                        None => continue,
                    }
                }
            };
            self.look(named).await;
            tokio::time::sleep(LOOK_GAP).await;
        }
    }

    /// Reads the master's replicas and publishes how many guarded writes await. A failure
    /// leaves the count as it is (writes then wait for as many as before).
    async fn refresh_awaited(&mut self) {
        let client = self.shared.read().client.clone();
        let info = match &mut self.info {
            Some(conn) => replication(conn).await,
            None => match info_connection(&client).await {
                Ok(conn) => replication(self.info.insert(conn)).await,
                Err(err) => Err(err),
            },
        };
        let info = match info {
            Ok(info) => info,
            Err(err) => {
                tracing::debug!(url = %self.shared.url, error = %err, "cannot read the Redis master's replicas");
                self.info = None;
                return;
            }
        };
        self.awaited.refresh(&info, &client, &self.shared.url).await;
        let mut master = self
            .shared
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // The master may have moved meanwhile (only this task moves it, so it did not).
        master.awaited = self.awaited.count();
    }

    /// The `host:port` a sentinel names when it is another master than the one in use
    /// (`None` too when none answers: the commands' own errors nudge then).
    async fn moved(&mut self) -> Option<String> {
        let named = match self.poll_sentinel().await {
            Ok(Some((host, port))) => format!("{host}:{port}"),
            Ok(None) => return None,
            Err(err) => {
                tracing::debug!(url = %self.shared.url, error = %err, "cannot ask a sentinel where the Redis master is");
                self.poll = None;
                return None;
            }
        };
        (named != self.shared.read().addr).then_some(named)
    }

    async fn poll_sentinel(&mut self) -> RedisResult<Option<(String, String)>> {
        let conn = match &mut self.poll {
            Some(conn) => conn,
            None => {
                let sentinel = self.sentinels.async_get_sentinel_client().await?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(SENTINEL_TIMEOUT))
                    .set_response_timeout(Some(SENTINEL_TIMEOUT));
                self.poll.insert(
                    sentinel
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                )
            }
        };
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master_name)
            .query_async(conn)
            .await
    }

    /// Asks the sentinels for the master and, when it is another node, swaps in a manager
    /// to it. Bounded by [`LOOK_TIMEOUT`]; a failure is logged and left to the next look.
    ///
    /// `named`: the master a sentinel just named (`GET-MASTER-ADDR-BY-NAME`), taken when it
    /// says it is a master. The sentinel leading a failover names the promoted replica as
    /// soon as the promotion is done and it tells the others to follow it, while its
    /// `SENTINEL MASTERS` (what redis-rs's lookup reads) keeps the old address until every
    /// replica follows, a second or two later, during which every guarded write fails.
    async fn look(&mut self, named: Option<String>) {
        let current = self.shared.read().addr.clone();
        let watching = self.every.is_some();
        let base = self.shared.read().client.clone();
        let found = tokio::time::timeout(LOOK_TIMEOUT, async {
            let promoted = match named {
                Some(named) => crate::replicas::master_at(&base, &named).await,
                None => None,
            };
            let client = match promoted {
                Some(client) => client,
                None => self.sentinels.async_get_client().await?,
            };
            let addr = client.get_connection_info().addr().to_string();
            if addr == current {
                return Ok(None);
            }
            let manager =
                ConnectionManager::new_with_config(client.clone(), self.config.clone()).await?;
            // The new master's replicas in sync now (often none yet: Sentinel tells the
            // others to follow it after the promotion); they join as they come.
            let (awaited, info) = if watching {
                let (awaited, info) = replicas_of(&client).await?;
                (awaited, Some(info))
            } else {
                (Awaited::default(), None)
            };
            let master = Master {
                manager,
                addr,
                client,
                awaited: awaited.count(),
            };
            Ok::<_, RedisError>(Some((master, awaited, info)))
        })
        .await;
        let url = &self.shared.url;
        let error = match found {
            Ok(Ok(Some((master, awaited, info)))) => {
                let to = master.addr.clone();
                self.awaited = awaited;
                self.info = info;
                *self
                    .shared
                    .current
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = master;
                self.shared.changes.fetch_add(1, Ordering::Relaxed);
                tracing::info!(url = %url, from = %current, to = %to, "the Redis master changed: following it");
                None
            }
            Ok(Ok(None)) => {
                tracing::debug!(url = %url, master = %current, "the Redis master is where it was");
                None
            }
            Ok(Err(err)) => Some(err.to_string()),
            Err(_) => Some(format!("no answer within {} ms", LOOK_TIMEOUT.as_millis())),
        };
        let failed = error.is_some();
        match error {
            Some(error) if !self.failing => {
                tracing::warn!(url = %url, master = %current, error = %error, "cannot find the Redis master through the sentinels, trying again");
            }
            Some(error) => {
                tracing::debug!(url = %url, master = %current, error = %error, "still cannot find the Redis master through the sentinels");
            }
            None => {}
        }
        self.failing = failed;
    }
}

/// A connection of the watch's own to the master `client` names.
async fn info_connection(client: &redis::Client) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(SENTINEL_TIMEOUT))
        .set_response_timeout(Some(SENTINEL_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// The replicas the master `client` names has in sync now, and the watch's connection to it.
async fn replicas_of(client: &redis::Client) -> RedisResult<(Awaited, MultiplexedConnection)> {
    let mut info = info_connection(client).await?;
    let awaited = Awaited::of(&replication(&mut info).await?);
    Ok((awaited, info))
}

/// The master's `INFO replication`.
async fn replication(conn: &mut MultiplexedConnection) -> RedisResult<String> {
    redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(resp: &[u8]) -> Value {
        redis::parse_redis_value(resp).expect("a valid RESP reply")
    }

    fn sign(values: &[Value]) -> bool {
        is_failover_sign(Ok::<_, &RedisError>(values))
    }

    #[test]
    fn a_replica_answer_is_a_sign() {
        let readonly = reply(b"-READONLY You can't write against a read only replica.\r\n");
        let masterdown = reply(b"-MASTERDOWN Link with MASTER is down\r\n");
        assert!(sign(std::slice::from_ref(&readonly)));
        assert!(sign(&[masterdown]));
        // A pipeline: a write refused, then its WAIT; or inside an EXEC.
        assert!(sign(&[readonly.clone(), Value::Int(0)]));
        assert!(sign(&[Value::Array(vec![Value::Okay, readonly])]));
    }

    #[test]
    fn connection_errors_and_timeouts_are_signs() {
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::BrokenPipe,
        ] {
            let err = RedisError::from(std::io::Error::from(kind));
            assert!(is_failover_sign(Err::<&[Value], _>(&err)), "{kind:?}");
        }
    }

    #[test]
    fn other_answers_are_not() {
        let noscript = reply(b"-NOSCRIPT No matching script.\r\n");
        let wrongtype =
            reply(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert!(!sign(&[Value::Okay, Value::Int(1)]));
        assert!(!sign(&[noscript, wrongtype]));
        let parse = RedisError::from((ErrorKind::UnexpectedReturnType, "not a number"));
        assert!(!is_failover_sign(Err::<&[Value], _>(&parse)));
    }
}
