//! The high-availability harness of `scripts/ha`: a 3-node RabbitMQ cluster and a Redis
//! master with 2 replicas and 3 sentinels on loopback ports of their own, started once per
//! test run (`scripts/test` does). Fault tests kill and restart its nodes through the
//! script; the machine's own RabbitMQ and Redis are never touched.
//!
//! The tests that change its topology run one at a time (the `ha` test group of
//! `.config/nextest.toml`), each starting from [`Ha::heal`].

use std::process::Command;
use std::time::{Duration, Instant};

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

/// The (redacted) URL of the broker node a process's JSON log says it is connected to now:
/// its last `connected to the broker` or `reconnected to the broker` line.
pub fn connected_url(log: &str) -> Option<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("connected to the broker"))
        })
        .filter_map(|v| v["url"].as_str().map(str::to_owned))
        .next_back()
}

/// How long a harness fault test may wait for one phase (a node's restart, a failover).
pub const PHASE: Duration = Duration::from_secs(40);
