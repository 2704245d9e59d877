//! In-process consumers for the consumer suites: a [`Fleet`] of `Consumer`s on one config
//! and one backend, with a publisher and readers for what became of each occurrence, and a
//! recording Rust handler.
//!
//! In memory the consumers share one `MemoryBroker`, `MemoryLedger` and `MemoryRunLog`; on
//! the real services each opens its own connections, and on SQLite each opens the test's
//! data file on its own connection, as separate processes would.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cronq_consumer::{Consumer, Handlers, Options};
use cronq_memory::MemoryBroker;
use cronq_memory::MemoryLedger;
use cronq_memory::MemoryRunLog;
use cronq_rabbitmq::AmqpBroker;
use cronq_redis::RedisLedger;
use cronq_redis::RedisRunLog;
use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::config::Config;
use cronq_shared::ledger::Ledger;
use cronq_shared::message::Occurrence;
use cronq_shared::names::{JobName, Names, Namespace, QueueName};
use cronq_shared::runlog::{Outcome, Run, RunLog};
use cronq_sqlite::SqliteBroker;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::backends::Backend;
use super::inspect::Inspect;
use super::{TestEnv, amqp_url, eventually, redis_url};
use super::{data_file, ports};

/// How long a consumer suite waits for what it expects.
pub const WAIT: Duration = Duration::from_secs(30);

/// The execution lease of a fleet's consumers.
pub const LEASE: Duration = Duration::from_secs(2);

/// The concrete broker behind a fleet, for what the port does not expose.
enum Ports {
    /// One in-memory broker whose clones every consumer of the fleet shares.
    Memory(MemoryBroker),
    /// RabbitMQ: each consumer opens its own connections, as separate processes would.
    Real(AmqpBroker),
    /// The test's data file: each consumer opens its own connection, as separate processes
    /// would; this broker is the fleet's own (the test's publisher and reader).
    Sqlite(SqliteBroker, TestEnv),
}

/// The three ports a consumer runs on.
type PortSet = (
    Arc<dyn Broker>,
    Arc<dyn Ledger>,
    Arc<dyn Inspect>,
    Arc<dyn RunLog>,
);

/// A running fleet of in-process consumers on one config, plus a publisher and readers.
pub struct Fleet {
    pub config: Config,
    pub names: Names,
    pub broker: Arc<dyn Broker>,
    pub ledger: Arc<dyn Ledger>,
    /// The same ledger, to read its records.
    pub records: Arc<dyn Inspect>,
    pub runlog: Arc<dyn RunLog>,
    ports: Ports,
    token: CancellationToken,
    tasks: JoinSet<()>,
}

impl Fleet {
    /// The ports of `backend` under the test's namespace, with the queues of the config
    /// `toml` declared; no consumer runs yet.
    pub async fn new(backend: Backend, env: &TestEnv, toml: &str) -> Self {
        let config = Config::from_toml(toml, Path::new("cronq.toml")).unwrap();
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let (ports, (broker, ledger, records, runlog)): (_, PortSet) = match backend {
            Backend::Memory => {
                let broker = MemoryBroker::new();
                let history = Arc::new(MemoryRunLog::default());
                let ledger = Arc::new(MemoryLedger::new(Arc::clone(&history)));
                (
                    Ports::Memory(broker.clone()),
                    (Arc::new(broker), ledger.clone(), ledger, history),
                )
            }
            Backend::Real => {
                for q in config.queues() {
                    env.track_queue(q.as_str());
                }
                let broker = AmqpBroker::connect(&amqp_url(), names.clone())
                    .await
                    .unwrap();
                let conn = cronq_redis::connect(&redis_url()).await.unwrap();
                let history = RedisRunLog::new(conn.clone(), &names, Duration::from_secs(3600));
                let ledger = Arc::new(RedisLedger::new(conn, names.clone(), history.clone()));
                (
                    Ports::Real(broker.clone()),
                    (Arc::new(broker), ledger.clone(), ledger, Arc::new(history)),
                )
            }
            Backend::Sqlite => {
                // The test's own process: one connection for its publisher and readers.
                let db = ports::open(env);
                let broker = SqliteBroker::new(db.clone());
                let (ledger, history) = ports::sqlite_ports_on(db);
                let ledger = Arc::new(ledger);
                (
                    Ports::Sqlite(broker.clone(), env.clone()),
                    (Arc::new(broker), ledger.clone(), ledger, Arc::new(history)),
                )
            }
        };
        broker.declare(&config.queues()).await.unwrap();
        Self {
            config,
            names,
            broker,
            ledger,
            records,
            runlog,
            ports,
            token: CancellationToken::new(),
            tasks: JoinSet::new(),
        }
    }

    /// Starts one consumer named `id` with `handlers`; returns its own stop token.
    pub async fn start(
        &mut self,
        id: &str,
        handlers: Handlers,
        concurrency: u16,
    ) -> CancellationToken {
        let options = Options {
            queues: Vec::new(),
            concurrency,
            grace: Duration::from_secs(5),
            lease: LEASE,
            consumer_id: id.to_owned(),
            keyring: None,
        };
        self.start_with(options, handlers, None).await
    }

    /// Starts one consumer with `options`, on the fleet's ledger unless `ledger` is given.
    pub async fn start_with(
        &mut self,
        options: Options,
        handlers: Handlers,
        ledger: Option<Arc<dyn Ledger>>,
    ) -> CancellationToken {
        let (broker, own_ledger): (Arc<dyn Broker>, Arc<dyn Ledger>) = match &self.ports {
            Ports::Memory(_) => (self.broker.clone(), self.ledger.clone()),
            Ports::Real(_) => {
                let broker = AmqpBroker::connect(&amqp_url(), self.names.clone())
                    .await
                    .unwrap();
                let conn = cronq_redis::connect(&redis_url()).await.unwrap();
                let history =
                    RedisRunLog::new(conn.clone(), &self.names, Duration::from_secs(3600));
                (
                    Arc::new(broker),
                    Arc::new(RedisLedger::new(conn, self.names.clone(), history)),
                )
            }
            Ports::Sqlite(_, env) => {
                // A process of its own: one connection for its queue and stores.
                let db = ports::open(env);
                let (ledger, _) = ports::sqlite_ports_on(db.clone());
                (Arc::new(SqliteBroker::new(db)), Arc::new(ledger))
            }
        };
        let consumer = Consumer::new(
            self.config.clone(),
            broker,
            ledger.unwrap_or(own_ledger),
            options,
        )
        .with_handlers(handlers)
        .keep_outputs(
            self.runlog.clone(),
            cronq_shared::runlog::DEFAULT_OUTPUT_LIMIT,
        );
        let token = self.token.child_token();
        let t = token.clone();
        self.tasks
            .spawn(async move { consumer.run(t).await.unwrap() });
        token
    }

    /// Waits until `n` consumers are subscribed to the default queue.
    pub async fn subscribed(&self, n: u32) {
        let queue = QueueName::new("default").unwrap();
        match &self.ports {
            Ports::Memory(broker) => {
                eventually(WAIT, &format!("{n} consumers on {queue}"), || async {
                    (broker.subscribers(&queue) >= n as usize).then_some(())
                })
                .await;
            }
            Ports::Real(_) => {
                let conn = lapin::Connection::connect(&amqp_url(), Default::default())
                    .await
                    .unwrap();
                let ch = conn.create_channel().await.unwrap();
                let queue = self.names.queue(&queue);
                eventually(WAIT, &format!("{n} consumers on {queue}"), || async {
                    let q = super::rabbitmq::passive(&ch, queue.as_str()).await.unwrap();
                    (q.consumer_count() >= n).then_some(())
                })
                .await;
                let _ = conn.close(200, "done".into()).await;
            }
            Ports::Sqlite(_, env) => {
                // Each consumer's broker is one subscriber in the file, serving every queue.
                let file = ports::data_file(env);
                eventually(WAIT, &format!("{n} consumers on {queue}"), || async {
                    (data_file::raw::subscribers(&file) >= n as usize).then_some(())
                })
                .await;
            }
        }
    }

    /// How many messages are ready (not delivered) in the logical queue `queue`.
    pub async fn queued(&self, queue: &str) -> u32 {
        let queue = QueueName::new(queue).unwrap();
        match &self.ports {
            Ports::Memory(broker) => u32::try_from(broker.ready(&queue).unwrap()).unwrap(),
            Ports::Real(_) => {
                let conn = lapin::Connection::connect(&amqp_url(), Default::default())
                    .await
                    .unwrap();
                let ch = conn.create_channel().await.unwrap();
                let count = super::rabbitmq::passive(&ch, self.names.queue(&queue).as_str())
                    .await
                    .unwrap()
                    .message_count();
                let _ = conn.close(200, "done".into()).await;
                count
            }
            Ports::Sqlite(broker, _) => {
                u32::try_from(broker.ready(&queue).await.unwrap().unwrap()).unwrap()
            }
        }
    }

    /// Puts `body` (not necessarily an occurrence) on the logical queue `queue`, as a
    /// foreign publisher could.
    pub async fn publish_raw(&self, queue: &str, body: &[u8]) {
        match &self.ports {
            Ports::Memory(broker) => {
                assert!(broker.publish_raw(&QueueName::new(queue).unwrap(), body.to_vec()));
            }
            Ports::Real(_) => super::rabbitmq::publish_raw(&self.names, queue, body).await,
            Ports::Sqlite(_, env) => data_file::raw::publish(&ports::data_file(env), queue, body),
        }
    }

    /// Publishes `occs` to the `default` queue.
    pub async fn publish(&self, occs: impl IntoIterator<Item = Occurrence>) {
        let queue = QueueName::new("default").unwrap();
        let batch: Vec<Outgoing> = occs
            .into_iter()
            .map(|occurrence| Outgoing {
                queue: queue.clone(),
                occurrence,
                delay: Duration::ZERO,
            })
            .collect();
        self.broker.publish(&batch).await.unwrap();
    }

    /// Every run of `job`, newest first.
    pub async fn runs(&self, job: &str) -> Vec<Run> {
        self.runlog
            .list(Some(&JobName::new(job).unwrap()), 10_000)
            .await
            .unwrap()
    }

    /// Waits until `job` has `n` runs with a terminal outcome, and returns all its runs.
    pub async fn settled(&self, job: &str, n: usize) -> Vec<Run> {
        eventually(WAIT, &format!("{n} terminal runs of {job}"), || async {
            let runs = self.runs(job).await;
            let done = runs
                .iter()
                .filter(|r| {
                    !matches!(
                        r.outcome,
                        Outcome::Retrying | Outcome::Lost | Outcome::Interrupted
                    )
                })
                .count();
            (done >= n).then_some(runs)
        })
        .await
    }

    /// Stops every consumer and waits for them; the fleet's ports stay open.
    pub async fn halt(&mut self) {
        self.token.cancel();
        while let Some(res) = self.tasks.join_next().await {
            res.unwrap();
        }
    }

    /// Stops every consumer, waits for them and closes the fleet's ports.
    pub async fn stop(mut self) {
        self.halt().await;
        if let Ports::Real(broker) = &self.ports {
            broker.close().await;
        }
    }
}

/// What [`recording`] saw: `(key, start, end)` per run.
pub type Spans = Arc<Mutex<Vec<(String, Instant, Instant)>>>;

/// A Rust handler that records `(key, start, end)` and sleeps `took` (stopping early when
/// cancelled).
pub fn recording(took: Duration) -> (Handlers, Spans) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut handlers = Handlers::new();
    let s = seen.clone();
    handlers.register(
        JobName::new("work").unwrap(),
        move |occ: Occurrence, token: tokio_util::sync::CancellationToken| {
            let s = s.clone();
            async move {
                let start = Instant::now();
                let cancelled = tokio::select! {
                    () = tokio::time::sleep(took) => false,
                    () = token.cancelled() => true,
                };
                s.lock()
                    .unwrap()
                    .push((occ.key.to_string(), start, Instant::now()));
                if cancelled {
                    Err("cancelled".to_owned())
                } else {
                    Ok(())
                }
            }
        },
    );
    (handlers, seen)
}

/// Asserts that no two of the recorded runs overlapped in time.
pub fn assert_no_overlap(seen: &[(String, Instant, Instant)]) {
    let mut spans: Vec<_> = seen.iter().map(|(k, s, e)| (*s, *e, k.clone())).collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "runs overlap: {} and {}", w[0].2, w[1].2);
    }
}

/// The job `work`, no retries, with overlap policy `OVERLAP` to be replaced.
pub const WORK: &str = r#"
[[job]]
name = "work"
schedule = "@every 1s"
overlap = "OVERLAP"
max_attempts = 1
"#;
