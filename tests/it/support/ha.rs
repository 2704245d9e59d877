//! The high-availability harness of `scripts/ha`: a 3-node RabbitMQ cluster and a Redis
//! master with 2 replicas and 3 sentinels on loopback ports of their own, started once per
//! test run (`scripts/test` does). Fault tests kill and restart its nodes through the
//! script; the machine's own RabbitMQ and Redis are never touched.
//!
//! The tests that change its topology run one at a time (the `ha` test group of
//! `.config/nextest.toml`), each starting from [`Ha::heal`].
//!
//! For tests of the Redis stores on it without a fleet: [`scoped`] gives a test its own
//! namespace there, like [`super::scoped`] does on the local Redis, and deletes the
//! namespace's keys on whichever node is master at the end ([`delete_keys`]); [`Ha::node`]
//! reaches one Redis node directly (to read a replica, or demote a master behind the
//! sentinels' back).

use std::future::Future;
use std::process::Command;
use std::time::{Duration, Instant};

use cronq_redis::RedisUrl;
use cronq_shared::names::{Names, Namespace};

/// The harness, from the environment `scripts/ha` prints.
#[derive(Debug, Clone)]
pub struct Ha {
    script: String,
    /// The AMQP URLs of the three nodes, separated by commas (`CRONQ_AMQP_URL`).
    pub amqp_urls: String,
    /// The Erlang node names, in the order of `amqp_urls`.
    pub rabbit_nodes: Vec<String>,
    /// `redis+sentinel://…/cronq-ha`.
    pub sentinel_url: String,
    /// The Redis servers' ports.
    pub redis_ports: Vec<u16>,
    /// The sentinels' ports.
    pub sentinel_ports: Vec<u16>,
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test runs on the high-availability harness. Start it with \
             `eval \"$(scripts/ha)\"` (scripts/test does), then run the test again"
        )
    })
}

fn ports(list: &str) -> Vec<u16> {
    list.split(',')
        .map(|p| p.parse().expect("a port"))
        .collect()
}

/// The harness.
///
/// # Panics
/// When its variables are unset: the test cannot run, and must not pass silently.
pub fn ha() -> Ha {
    Ha {
        script: var("CRONQ_TEST_HA"),
        amqp_urls: var("CRONQ_TEST_HA_AMQP_URLS"),
        rabbit_nodes: var("CRONQ_TEST_HA_RABBIT_NODES")
            .split(',')
            .map(str::to_owned)
            .collect(),
        sentinel_url: var("CRONQ_TEST_HA_SENTINEL_URL"),
        redis_ports: ports(&var("CRONQ_TEST_HA_REDIS_PORTS")),
        sentinel_ports: ports(&var("CRONQ_TEST_HA_SENTINEL_PORTS")),
    }
}

impl Ha {
    /// Runs `scripts/ha ARGS`; its stdout.
    ///
    /// # Panics
    /// When it fails.
    pub fn run(&self, args: &[&str]) -> String {
        let started = Instant::now();
        let out = Command::new(&self.script)
            .args(args)
            .output()
            .expect("scripts/ha runs");
        assert!(
            out.status.success(),
            "scripts/ha {} failed after {:?}:\n{}{}",
            args.join(" "),
            started.elapsed(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Brings every node back (RabbitMQ nodes running and clustered, every Redis up with
    /// one master and two replicas, the sentinels agreeing).
    pub fn heal(&self) {
        self.run(&["heal"]);
    }

    /// `rabbitmqctl` on node `n` (1-based).
    pub fn ctl(&self, n: usize, args: &[&str]) -> String {
        let mut all = vec!["ctl".to_owned(), n.to_string()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        self.run(&refs)
    }

    /// `rabbitmqctl` on node `n` (1-based); its stdout, or `None` when it failed (a node
    /// stopped, a connection gone meanwhile).
    pub fn try_ctl(&self, n: usize, args: &[&str]) -> Option<String> {
        let out = Command::new(&self.script)
            .arg("ctl")
            .arg(n.to_string())
            .args(args)
            .output()
            .expect("scripts/ha runs");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The node (1-based) whose AMQP port `url` names, if it is one of the harness's.
    pub fn node_of_url(&self, url: &str) -> Option<usize> {
        let port = url.rsplit_once(':')?.1.split('/').next()?;
        self.amqp_urls
            .split(',')
            .position(|u| u.contains(&format!(":{port}/")))
            .map(|i| i + 1)
    }

    /// The node (1-based) that leads the quorum queue `queue`, as node 1 sees it.
    pub fn queue_leader(&self, queue: &str) -> Option<usize> {
        let out = self.ctl(
            1,
            &["list_queues", "name", "leader", "--no-table-headers", "-q"],
        );
        let leader = out.lines().find_map(|l| {
            let mut cols = l.split_whitespace();
            (cols.next()? == queue).then(|| cols.next().map(str::to_owned))?
        })?;
        self.rabbit_nodes
            .iter()
            .position(|n| *n == leader)
            .map(|i| i + 1)
    }

    /// How many members each quorum queue of the namespace `prefix` has, by queue name.
    pub fn queue_members(&self, prefix: &str) -> Vec<(String, usize)> {
        let out = self.ctl(
            1,
            &["list_queues", "name", "members", "--no-table-headers", "-q"],
        );
        out.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| {
                let (name, members) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
                (name.to_owned(), members.matches('@').count())
            })
            .collect()
    }
}

impl Ha {
    /// The master name the sentinels monitor (the last part of the Sentinel URL).
    pub fn master_name(&self) -> String {
        match RedisUrl::parse(&self.sentinel_url) {
            Ok(RedisUrl::Sentinel(s)) => s.master,
            other => panic!("CRONQ_TEST_HA_SENTINEL_URL is not a Sentinel URL: {other:?}"),
        }
    }

    /// The port of the Redis node that is master now, as the sentinels see it.
    pub fn master_port(&self) -> u16 {
        let out = self.run(&["redis-master"]);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("scripts/ha redis-master printed {out:?}"))
    }

    /// The ports of every Redis node but the master.
    pub fn replica_ports(&self) -> Vec<u16> {
        let master = self.master_port();
        self.redis_ports
            .iter()
            .copied()
            .filter(|p| *p != master)
            .collect()
    }

    /// Moves the leader of the quorum queue `queue` from node `from` to node `to`
    /// (`rabbit_quorum_queue:transfer_leadership`, what a drain does per queue; RabbitMQ
    /// 3.10 has no CLI command for one queue): its answer (`{migrated, NODE}` when it
    /// moved), `None` when the call failed.
    pub fn transfer_leadership(&self, queue: &str, from: usize, to: usize) -> Option<String> {
        self.try_ctl(
            from,
            &[
                "eval",
                &format!(
                    "{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<\"/\">>, queue, \
                     <<\"{queue}\">>)), rabbit_quorum_queue:transfer_leadership(Q, '{}').",
                    self.rabbit_nodes[to - 1]
                ),
            ],
        )
    }

    /// Kills the Redis node on `port` (`kill -9`).
    pub fn kill_redis(&self, port: u16) {
        self.run(&["kill-redis", &port.to_string()]);
    }

    /// Starts the Redis node on `port` again, as a replica of the current master.
    pub fn start_redis(&self, port: u16) {
        self.run(&["start-redis", &port.to_string()]);
    }

    /// A plain connection to one Redis node or sentinel, bypassing Sentinel's discovery.
    pub async fn node(&self, port: u16) -> redis::aio::MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .expect("a loopback Redis URL")
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("cannot reach the harness's Redis on {port}: {e}"))
    }

    /// Asks a sentinel for a planned switch (`SENTINEL FAILOVER`): a replica is promoted at
    /// once, the old master demoted about 10 s later. Returns at once.
    pub async fn failover(&self) {
        let mut sentinel = self.node(self.sentinel_ports[0]).await;
        let () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(self.master_name())
            .query_async(&mut sentinel)
            .await
            .expect("SENTINEL FAILOVER");
    }

    /// Where the sentinels say the master is now (`host:port`), per the first that answers.
    pub async fn named_master(&self) -> Option<String> {
        let name = self.master_name();
        for port in &self.sentinel_ports {
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
                continue;
            };
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                continue;
            };
            let named: redis::RedisResult<Option<(String, String)>> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&name)
                .query_async(&mut conn)
                .await;
            if let Ok(Some((host, port))) = named {
                return Some(format!("{host}:{port}"));
            }
        }
        None
    }
}

/// One test's namespace on the harness's Redis.
#[derive(Debug, Clone)]
pub struct HaEnv {
    pub ha: Ha,
    pub namespace: String,
    pub names: Names,
}

/// Runs `body` under a fresh namespace on the harness's Redis; deletes the namespace's keys
/// on the master at the end, even if `body` panics.
pub async fn scoped<F, Fut>(test: &str, body: F)
where
    F: FnOnce(HaEnv) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let namespace = format!("t-{test}-{:08x}", rand::random::<u32>());
    let env = HaEnv {
        ha: ha(),
        names: Names::new(&Namespace::new(&namespace).expect("a test namespace")),
        namespace,
    };
    let outcome = tokio::spawn(body(env.clone())).await;
    if outcome.is_err() {
        eprintln!("test {test} failed in namespace {}", env.namespace);
    }
    // Healed first, so there is a master to clean.
    let ha = env.ha.clone();
    if tokio::task::spawn_blocking(move || ha.heal()).await.is_ok() {
        delete_keys(&env.ha, &env.namespace).await;
    } else {
        eprintln!("clean-up: the harness did not heal");
    }
    if let Err(err) = outcome {
        std::panic::resume_unwind(err.into_panic());
    }
}

impl HaEnv {
    /// [`Ha::heal`], off the async runtime's threads.
    pub async fn heal(&self) {
        let ha = self.ha.clone();
        tokio::task::spawn_blocking(move || ha.heal())
            .await
            .expect("scripts/ha heal");
    }

    /// The Redis key `parts` of this namespace.
    pub fn key(&self, parts: &[&str]) -> String {
        self.names.redis_key(parts)
    }
}

/// Deletes every key of `namespace` on the harness's master (also for a test that ran
/// processes there under a `TestEnv`'s namespace, whose clean-up only knows the local Redis).
pub async fn delete_keys(ha: &Ha, namespace: &str) {
    let mut master = ha.node(ha.master_port()).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}:*"))
        .query_async(&mut master)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&keys).query_async(&mut master).await;
    }
}

/// Reads hash `key` on the Redis node at `port` directly (a replica, say).
pub async fn hgetall_on(
    ha: &Ha,
    port: u16,
    key: &str,
) -> std::collections::HashMap<String, String> {
    let mut node = ha.node(port).await;
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut node)
        .await
        .expect("HGETALL on a harness node")
}

/// How long the tests give a planned switch to be followed: Sentinel's own switch takes
/// one to three seconds, the connection's watch one more; the rest is slack for a loaded
/// machine.
pub const FOLLOW_WITHIN: Duration = Duration::from_secs(15);

/// The (redacted) URL of the broker node a process's JSON log says it is connected to now:
/// its last `connected to the broker` or `reconnected to the broker` line.
pub fn connected_url(log: &str) -> Option<String> {
    super::json_log::lines(log)
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("connected to the broker"))
        })
        .filter_map(|v| v["url"].as_str().map(str::to_owned))
        .next_back()
}

/// The (redacted) URL of the broker node a producer's JSON log says its connection for
/// herds went to last.
pub fn herd_url(log: &str) -> Option<String> {
    super::json_log::lines(log)
        .filter(|v| v["message"].as_str() == Some("connected to the broker for herds"))
        .filter_map(|v| v["url"].as_str().map(str::to_owned))
        .next_back()
}

/// How long a harness fault test may wait for one phase (a node's restart, a failover).
pub const PHASE: Duration = Duration::from_secs(40);
