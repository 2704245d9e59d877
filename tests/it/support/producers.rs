//! In-process producers for the producer suites (`Producer::new(..).run(token)`): a
//! [`World`] of ports on one backend that producers are started on, and what they published
//! to the `default` queue, drained through the `Broker` port.
//!
//! In memory the producers share one `MemoryBroker`, `MemoryLease` and control store; on
//! the real services each producer has its own connections, and on SQLite each opens the
//! test's data file on its own connection, as separate processes would.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_memory::MemoryBroker;
use cronq_memory::MemoryLease;
use cronq_producer::Producer;
use cronq_rabbitmq::AmqpBroker;
use cronq_redis::RedisLease;
use cronq_shared::broker::Broker;
use cronq_shared::config::Config;
use cronq_shared::control::Control;
use cronq_shared::lease::Lease;
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::{JobName, Names, Namespace, QueueName};
use cronq_sqlite::{SqliteBroker, SqliteControl, SqliteLease};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::backends::Backend;
use super::ports;
use super::{TestEnv, amqp_url, eventually, redis_url};

/// How long a producer suite waits for what it expects.
pub const WAIT: Duration = Duration::from_secs(20);

/// A short leader lease, so that a standby takes over quickly.
pub const LEADER: &str =
    "[leader]\nlease = \"2s\"\nrenew_deadline = \"1500ms\"\nretry = \"300ms\"\n";

/// `LEADER` plus one `@every 1s` job per name, each with `catchup`.
pub fn every_second(jobs: &[&str], catchup: &str) -> Config {
    let mut toml = LEADER.to_owned();
    for job in jobs {
        toml.push_str(&format!(
            "\n[[job]]\nname = \"{job}\"\nschedule = \"@every 1s\"\ncatchup = \"{catchup}\"\n"
        ));
    }
    Config::from_toml(&toml, Path::new("cronq.toml")).unwrap()
}

/// The job called `name`.
pub fn job(name: &str) -> JobName {
    JobName::new(name).unwrap()
}

/// Where a [`World`]'s producers get their ports.
enum Shared {
    /// The in-memory ports every producer shares (clones share state).
    Memory(MemoryBroker, MemoryLease, Control),
    /// RabbitMQ and Redis: a connection of its own per producer.
    Real,
    /// The test's data file: a connection of its own per producer.
    Sqlite(TestEnv),
}

/// One test's ports, and what reached the `default` queue so far.
pub struct World {
    names: Names,
    shared: Shared,
    /// For reading: the lease holder, pause flags and requests.
    lease: Arc<dyn Lease>,
    /// The control store, to make requests as an operator would.
    pub control: Control,
    seen: Arc<Mutex<Vec<Occurrence>>>,
    drain: CancellationToken,
}

/// A producer running in this process.
pub struct Running {
    /// Its instance name, as the lease shows it.
    pub instance: String,
    token: CancellationToken,
    task: JoinHandle<Result<(), cronq_producer::Error>>,
}

impl Running {
    /// Cancels it and waits until it has stopped (and released the lease).
    pub async fn stop(self) {
        self.token.cancel();
        self.task.await.unwrap().unwrap();
    }
}

impl World {
    /// The ports of `backend` under the test's namespace, already draining `default`.
    pub async fn new(backend: Backend, env: &TestEnv) -> Self {
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let (shared, lease, control): (_, Arc<dyn Lease>, _) = match backend {
            Backend::Memory => {
                let lease = MemoryLease::new();
                let control = Control::new(cronq_memory::MemoryControl::new(&lease));
                (
                    Shared::Memory(MemoryBroker::new(), lease.clone(), control.clone()),
                    Arc::new(lease),
                    control,
                )
            }
            Backend::Real => {
                env.track_queue("default");
                let conn = cronq_redis::connect(&redis_url()).await.unwrap();
                (
                    Shared::Real,
                    Arc::new(RedisLease::new(conn.clone(), &names)),
                    Control::new(cronq_redis::RedisControl::new(conn, &names)),
                )
            }
            Backend::Sqlite => (
                Shared::Sqlite(env.clone()),
                Arc::new(SqliteLease::new(ports::open(env))),
                Control::new(SqliteControl::new(ports::open(env))),
            ),
        };
        let mut world = Self {
            names,
            shared,
            lease,
            control,
            seen: Arc::default(),
            drain: CancellationToken::new(),
        };
        world.start_drain().await;
        world
    }

    /// A broker handle: the shared one in memory, a fresh connection on RabbitMQ and on
    /// SQLite.
    async fn broker(&self) -> Arc<dyn Broker> {
        match &self.shared {
            Shared::Memory(broker, _, _) => Arc::new(broker.clone()),
            Shared::Real => Arc::new(
                AmqpBroker::connect(&amqp_url(), self.names.clone())
                    .await
                    .unwrap(),
            ),
            Shared::Sqlite(env) => Arc::new(SqliteBroker::new(ports::open(env))),
        }
    }

    /// Consumes the `default` queue through the `Broker` port into `seen`, acking each.
    async fn start_drain(&mut self) {
        let broker = self.broker().await;
        let default = QueueName::new("default").unwrap();
        broker
            .declare(&BTreeSet::from([default.clone()]))
            .await
            .unwrap();
        let mut rx = broker
            .consume(&[default], 0, self.drain.clone())
            .await
            .unwrap();
        let seen = self.seen.clone();
        tokio::spawn(async move {
            while let Some(delivery) = rx.recv().await {
                let occ = Occurrence::decode(&delivery.body).unwrap();
                delivery.acker.ack().await.unwrap();
                seen.lock().unwrap().push(occ);
            }
            drop(broker);
        });
    }

    /// Starts a producer `instance` reading its config from `config`.
    pub async fn start(&self, instance: &str, config: watch::Receiver<Arc<Config>>) -> Running {
        let (lease, control): (Arc<dyn Lease>, Control) = match &self.shared {
            Shared::Memory(_, lease, control) => (Arc::new(lease.clone()), control.clone()),
            Shared::Real => {
                let conn = cronq_redis::connect(&redis_url()).await.unwrap();
                (
                    Arc::new(RedisLease::new(conn.clone(), &self.names)),
                    Control::new(cronq_redis::RedisControl::new(conn, &self.names)),
                )
            }
            Shared::Sqlite(env) => {
                // One process's lease and control store share its connection.
                let db = ports::open(env);
                (
                    Arc::new(SqliteLease::new(db.clone())),
                    Control::new(SqliteControl::new(db)),
                )
            }
        };
        let producer = Producer::new(self.broker().await, lease, control, config, instance);
        let token = CancellationToken::new();
        let task = tokio::spawn(producer.run(token.clone()));
        Running {
            instance: instance.to_owned(),
            token,
            task,
        }
    }

    /// Everything received so far.
    pub fn seen(&self) -> Vec<Occurrence> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until a scheduled occurrence of `job` at or after `at` has been received.
    pub async fn reached(&self, job: &str, at: DateTime<Utc>) {
        eventually(WAIT, &format!("{job} to reach {at}"), || async {
            self.seen()
                .iter()
                .any(|m| {
                    m.job.as_str() == job && m.trigger != Trigger::Manual && m.scheduled_at >= at
                })
                .then_some(())
        })
        .await;
    }

    /// Waits until `job` has `n` more scheduled seconds than now.
    pub async fn advance(&self, job: &str, n: usize) {
        let before = self.scheduled(job).len();
        eventually(WAIT, &format!("{n} more occurrences of {job}"), || async {
            (self.scheduled(job).len() >= before + n).then_some(())
        })
        .await;
    }

    /// The seconds of `job`'s scheduled (not manual) occurrences received so far.
    pub fn scheduled(&self, job: &str) -> Vec<i64> {
        self.seen()
            .iter()
            .filter(|m| m.job.as_str() == job && m.trigger != Trigger::Manual)
            .map(|m| m.scheduled_at.timestamp())
            .collect()
    }

    /// The current leader: (epoch, instance).
    pub async fn leader(&self) -> Option<(u64, String)> {
        self.lease
            .holder()
            .await
            .unwrap()
            .map(|h| (h.epoch, h.instance))
    }

    /// Waits for a leader whose epoch is above `newer_than`.
    pub async fn wait_leader(&self, newer_than: u64) -> (u64, String) {
        eventually(WAIT, "a leader", || async {
            self.leader().await.filter(|(e, _)| *e > newer_than)
        })
        .await
    }

    /// Stops draining; returns everything received.
    pub fn finish(self) -> Vec<Occurrence> {
        self.drain.cancel();
        self.seen()
    }
}
