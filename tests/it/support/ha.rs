//! The Redis Sentinel topology of the `ha` tests (`scripts/ha`): a master and two replicas,
//! three sentinels monitoring them under one master name, and the script that kills,
//! restarts and heals them. Every test that changes the topology calls [`Topology::heal`]
//! first; the tests share the topology, so nextest runs them one at a time (the `redis-ha`
//! group of `.config/nextest.toml`).
//!
//! [`scoped`] gives a test its own namespace on it, like [`super::scoped`] does on the local
//! Redis, and deletes the namespace's keys on whichever node is master at the end.

use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use cronq_shared::endpoints::RedisUrl;
use cronq_shared::names::{Names, Namespace};

/// The Sentinel URL of the topology.
pub const SENTINEL_URL: &str = "CRONQ_TEST_HA_SENTINEL_URL";
/// Its Redis ports, master and replicas, comma-separated.
pub const REDIS_PORTS: &str = "CRONQ_TEST_HA_REDIS_PORTS";
/// Its sentinels' ports, comma-separated.
pub const SENTINEL_PORTS: &str = "CRONQ_TEST_HA_SENTINEL_PORTS";
/// The path of `scripts/ha`.
pub const SCRIPT: &str = "CRONQ_TEST_HA";

/// The topology the environment names.
#[derive(Debug, Clone)]
pub struct Topology {
    /// `redis+sentinel://…/MASTER`.
    pub sentinel_url: String,
    /// The master name the sentinels monitor.
    pub master_name: String,
    /// Every Redis node's port.
    pub redis_ports: Vec<u16>,
    /// Every sentinel's port.
    pub sentinel_ports: Vec<u16>,
    script: PathBuf,
}

/// The topology from the environment `scripts/ha` prints.
///
/// # Panics
/// When a variable is unset: the test cannot run, and must not pass silently.
pub fn topology() -> Topology {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: the ha tests run on a Redis Sentinel topology of their own \
                 (a master, two replicas, three sentinels). Start it with \
                 `eval \"$(scripts/ha)\"`, then run the tests again"
            )
        })
    };
    let ports = |name: &str| -> Vec<u16> {
        var(name)
            .split(',')
            .map(|p| {
                p.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}: bad port {p:?}"))
            })
            .collect()
    };
    let sentinel_url = var(SENTINEL_URL);
    let master_name = match RedisUrl::parse(&sentinel_url) {
        Ok(RedisUrl::Sentinel(s)) => s.master,
        other => panic!("{SENTINEL_URL} is not a Sentinel URL: {other:?}"),
    };
    Topology {
        master_name,
        redis_ports: ports(REDIS_PORTS),
        sentinel_ports: ports(SENTINEL_PORTS),
        script: PathBuf::from(var(SCRIPT)),
        sentinel_url,
    }
}

impl Topology {
    fn script(&self, args: &[&str]) -> String {
        let out = Command::new(&self.script)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {} {args:?}: {e}", self.script.display()));
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}{}",
            self.script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Brings every node and sentinel back and waits until the topology is healthy (a
    /// master with both replicas in sync, every sentinel agreeing).
    pub fn heal(&self) {
        self.script(&["heal"]);
    }

    /// The port of the node that is master now.
    pub fn master(&self) -> u16 {
        let out = self.script(&["redis-master"]);
        out.parse()
            .unwrap_or_else(|_| panic!("scripts/ha redis-master printed {out:?}"))
    }

    /// The ports of every node but the master.
    pub fn replicas(&self) -> Vec<u16> {
        let master = self.master();
        self.redis_ports
            .iter()
            .copied()
            .filter(|p| *p != master)
            .collect()
    }

    /// Kills the node on `port` (SIGKILL).
    pub fn kill_redis(&self, port: u16) {
        self.script(&["kill-redis", &port.to_string()]);
    }

    /// Starts the node on `port` again, as a replica.
    pub fn start_redis(&self, port: u16) {
        self.script(&["start-redis", &port.to_string()]);
    }

    /// A plain connection to one node, bypassing Sentinel (to read a replica, or demote a
    /// node behind the sentinels' back).
    pub async fn node(&self, port: u16) -> redis::aio::MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("cannot reach the ha Redis node on {port}: {e}"))
    }

    /// Asks a sentinel for a planned switch (`SENTINEL FAILOVER`): a replica is promoted,
    /// the old master is demoted about 10 s later. Returns at once.
    pub async fn failover(&self) {
        let mut sentinel = self.node(self.sentinel_ports[0]).await;
        let () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(&self.master_name)
            .query_async(&mut sentinel)
            .await
            .expect("SENTINEL FAILOVER");
    }

    /// Where the sentinels say the master is now (`host:port`), per the first that answers.
    pub async fn named_master(&self) -> Option<String> {
        for port in &self.sentinel_ports {
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
                continue;
            };
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                continue;
            };
            let named: redis::RedisResult<Option<(String, String)>> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.master_name)
                .query_async(&mut conn)
                .await;
            if let Ok(Some((host, port))) = named {
                return Some(format!("{host}:{port}"));
            }
        }
        None
    }
}

/// One test's namespace on the topology.
#[derive(Debug, Clone)]
pub struct HaEnv {
    pub topology: Topology,
    pub namespace: String,
    pub names: Names,
}

/// Runs `body` under a fresh namespace on the topology; deletes the namespace's keys on the
/// master at the end, even if `body` panics.
pub async fn scoped<F, Fut>(test: &str, body: F)
where
    F: FnOnce(HaEnv) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let topology = topology();
    let namespace = format!("t-{test}-{:08x}", rand::random::<u32>());
    let names = Names::new(&Namespace::new(&namespace).unwrap());
    let env = HaEnv {
        topology,
        namespace,
        names,
    };
    let outcome = tokio::spawn(body(env.clone())).await;
    if outcome.is_err() {
        eprintln!("test {test} failed in namespace {}", env.namespace);
    }
    env.delete_namespace().await;
    if let Err(err) = outcome {
        std::panic::resume_unwind(err.into_panic());
    }
}

impl HaEnv {
    /// Deletes the namespace's keys on the master (healing first, so there is one).
    /// Best effort: a failure is printed, so the test's own failure stays the one shown.
    async fn delete_namespace(&self) {
        let topology = self.topology.clone();
        if tokio::task::spawn_blocking(move || topology.heal())
            .await
            .is_err()
        {
            eprintln!("clean-up: the ha topology did not heal");
            return;
        }
        delete_keys(&self.topology, &self.namespace).await;
    }

    /// [`Topology::heal`], off the async runtime's threads.
    pub async fn heal(&self) {
        let topology = self.topology.clone();
        tokio::task::spawn_blocking(move || topology.heal())
            .await
            .expect("scripts/ha heal");
    }

    /// The Redis key `parts` of this namespace.
    pub fn key(&self, parts: &[&str]) -> String {
        self.names.redis_key(parts)
    }
}

/// Deletes every key of `namespace` on the topology's master (for a test that ran
/// processes on the topology under a `TestEnv`'s namespace, whose clean-up only knows the
/// local Redis).
pub async fn delete_keys(topology: &Topology, namespace: &str) {
    let mut master = topology.node(topology.master()).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}:*"))
        .query_async(&mut master)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&keys).query_async(&mut master).await;
    }
}

/// Reads hash `key` on the node at `port` directly (a replica, say).
pub async fn hgetall_on(
    topology: &Topology,
    port: u16,
    key: &str,
) -> std::collections::HashMap<String, String> {
    let mut node = topology.node(port).await;
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut node)
        .await
        .unwrap()
}

/// How long the tests give a planned switch to be followed: Sentinel's own switch takes
/// one to two seconds, the connection's watch one more; the rest is slack for a loaded
/// machine.
pub const FOLLOW_WITHIN: Duration = Duration::from_secs(10);
