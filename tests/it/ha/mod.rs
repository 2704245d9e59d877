//! High availability of the engines underneath, on the harness of `scripts/ha` (a 3-node
//! RabbitMQ cluster, a Redis master with 2 replicas and 3 sentinels): a node of either is
//! lost while real `cronq producer` ×2 and `cronq consumer` ×2 run a job `@every 1s` with
//! `catchup = "all"`, and every second of the window still runs exactly once, as the run
//! history and the command's own trace say.
//!
//! - `rabbitmq_cluster`: the node the leader publishes to killed; the node leading the job
//!   queue stopped (`stop_app`) and started again; the node the leader publishes through
//!   partitioned from the other two; every queue replicated on three nodes; and, with
//!   producers only, the node of the leader's connection for herds killed while a herd
//!   of 1,500 jobs is published on it (no second of any job missing).
//! - `rabbitmq_maintenance`: `rabbitmq-upgrade drain` of the node the leader publishes
//!   through, and a leader transfer of the job queue; how long the publish paused.
//! - `redis_failover`: the Redis master killed (Sentinel promotes a replica) with and
//!   without `CRONQ_REDIS_MIN_REPLICAS`; a planned `SENTINEL FAILOVER`.
//! - `redis_sentinel`, without a fleet: the Redis stores through a `redis+sentinel://` URL;
//!   the connection following the master across a planned failover and a demoted master's
//!   `READONLY`; the replication barrier of `CRONQ_REDIS_MIN_REPLICAS`, and that the writes
//!   it guards are safe to run again.
//!
//! These tests change the harness's topology, so they run one at a time (the `ha` test
//! group of `.config/nextest.toml`), each from [`Ha::heal`](crate::support::ha::Ha::heal).

mod rabbitmq_cluster;
mod rabbitmq_maintenance;
mod redis_failover;
mod redis_sentinel;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::runlog::Outcome;

use crate::support::TestEnv;
use crate::support::deployment::{Deployment, LEADER, Options, Running, argv};
use crate::support::ha::{Ha, PHASE, connected_url};
use crate::support::history::{self, Entry, Mark, Trace};
use crate::support::until;

/// How long the backlog may take to settle once publishing stopped.
const DRAIN: Duration = Duration::from_secs(40);

/// The job every harness test runs.
const JOB: &str = "tick";

/// A fleet on the harness, and the trace its command writes.
pub struct HaFleet {
    pub running: Running,
    trace: PathBuf,
}

/// Which Redis the fleet runs on.
pub enum Redis {
    /// The machine's own (the RabbitMQ tests: only the cluster is under test).
    Shared,
    /// The harness's, through its sentinels, with `CRONQ_REDIS_MIN_REPLICAS`.
    Sentinel { min_replicas: u32 },
}

/// What became of every second of the window.
pub struct Report {
    pub expected: Vec<String>,
    pub entries: Vec<Entry>,
    pub trace: Trace,
    pub logs: String,
}

impl HaFleet {
    /// Starts 2 producers and 2 consumers on the cluster's node list and on `redis`, and
    /// waits until three seconds have run.
    pub async fn start(env: &TestEnv, ha: &Ha, redis: Redis) -> Self {
        Self::start_with_lease(env, ha, redis, Options::default().lease).await
    }

    /// [`HaFleet::start`] with the consumers' execution lease `lease` (`--lease`).
    pub async fn start_with_lease(
        env: &TestEnv,
        ha: &Ha,
        redis: Redis,
        lease: &'static str,
    ) -> Self {
        let trace = env.dir.join("trace");
        let toml = format!(
            "{LEADER}
[[job]]
name = \"{JOB}\"
schedule = \"@every 1s\"
catchup = \"all\"
overlap = \"allow\"
max_attempts = 3
backoff = \"1s\"
command = {}
",
            argv(&["sh", "-c", &history::traced_script(&trace, "0.3")]),
        );
        let mut options = Options {
            amqp_url: Some(ha.amqp_urls.clone()),
            lease,
            ..Options::default()
        };
        if let Redis::Sentinel { min_replicas } = redis {
            options.redis_url = Some(ha.sentinel_url.clone());
            options
                .env
                .push(("CRONQ_REDIS_MIN_REPLICAS", min_replicas.to_string()));
        }
        // The queues of the namespace are known by name (the nodes' own rabbitmqctl needs
        // the harness's cookie, which `scripts/ha ctl` has).
        let first = ha.amqp_urls.split(',').next().expect("a node URL");
        env.clean_broker_too(first, None);
        let running = Running::start_with(Deployment::Fleet, env, &toml, options).await;
        let fleet = Self { running, trace };
        fleet
            .running
            .until_succeeded(JOB, 3, PHASE, "three seconds to run")
            .await;
        fleet
    }

    /// The harness node (1-based) the leading producer is connected to now, and its log.
    pub fn leader_node(&self, env: &TestEnv, ha: &Ha) -> (usize, String) {
        let (name, _) = self.running.leader().expect("a leader");
        let log = env.log(&name);
        let url = connected_url(&log).expect("the leader logged its node");
        let node = ha.node_of_url(&url).expect("a node of the harness");
        (node, log)
    }

    /// Waits until seconds scheduled 8 s after `at` were published and have run: the
    /// pipeline works again after a fault. Returns when the first second scheduled after
    /// `at` was published, as the producers logged it.
    pub async fn resumed(&self, at: DateTime<Utc>) {
        let after = at.timestamp() + 8;
        until(PHASE, "publishing and running to resume", || async {
            let ran =
                self.running.entries(JOB).await.iter().any(|e| {
                    e.outcome == Outcome::Succeeded && history::scheduled(&e.key) >= after
                });
            if ran {
                Ok(())
            } else {
                Err(self.running.logs())
            }
        })
        .await;
    }

    /// Stops publishing and waits until every second of the window has one terminal
    /// outcome and no command runs. The window runs from the first to the last second
    /// published or run: a producer stopped right after a publish was confirmed may exit
    /// before it logs it, and that second still runs; a second in the middle that was
    /// never published has no outcome, which fails.
    pub async fn settle(self) -> Report {
        self.running.stop_producing().await;
        let published = self.running.published(JOB);
        let (expected, entries, trace) = until(DRAIN, "every second to settle", || async {
            let entries = self.running.entries(JOB).await;
            let trace = Trace::read(&self.trace);
            let mut seen = published.clone();
            seen.extend(entries.iter().map(|e| e.key.clone()));
            let expected = history::ticks(JOB, &seen, 1);
            let problems = history::problems(&expected, &entries);
            if problems.is_empty() && trace.open().is_empty() {
                Ok((expected, entries, trace))
            } else {
                Err(format!(
                    "{problems:#?}\nstill running: {:?}\n{}",
                    trace.open(),
                    self.running.logs()
                ))
            }
        })
        .await;
        Report {
            expected,
            entries,
            trace,
            logs: self.running.logs(),
        }
    }
}

/// The latest publish of a second scheduled at or after `from`: milliseconds from its
/// scheduled second to the confirm the producers logged, and its key.
pub fn publish_pause(env: &TestEnv, from: DateTime<Utc>) -> (i64, String) {
    let mut worst = (0, String::new());
    for name in ["producer-1", "producer-2"] {
        for line in env.log(name).lines() {
            let Ok(l) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if l["message"].as_str() != Some("published occurrence") {
                continue;
            }
            let (Some(key), Some(at)) = (l["key"].as_str(), l["timestamp"].as_str()) else {
                continue;
            };
            let Ok(at) = DateTime::parse_from_rfc3339(at) else {
                continue;
            };
            let due = history::scheduled(key);
            if due < from.timestamp() {
                continue;
            }
            let late = at.timestamp_millis() - due * 1000;
            if late > worst.0 {
                worst = (late, key.to_owned());
            }
        }
    }
    worst
}

impl Report {
    /// The seconds whose command started more than once.
    pub fn run_twice(&self) -> BTreeMap<String, usize> {
        self.expected
            .iter()
            .map(|k| (k.clone(), self.trace.count(Mark::Start, k)))
            .filter(|(_, n)| *n > 1)
            .collect()
    }

    /// Every second of the window succeeded, and its command ran once.
    pub fn assert_once_each(&self) {
        let context = || {
            format!(
                "{}\n{}",
                history::describe(&self.expected, &self.entries, &self.trace),
                self.logs
            )
        };
        let terminal = history::terminal(&self.entries);
        for key in &self.expected {
            assert_eq!(
                terminal[key].outcome,
                Outcome::Succeeded,
                "{key}\n{}",
                context()
            );
        }
        let twice = self.run_twice();
        assert!(twice.is_empty(), "ran twice: {twice:?}\n{}", context());
        assert!(
            self.expected.len() >= 10,
            "the window is {} seconds long: too short to show anything",
            self.expected.len()
        );
    }
}
