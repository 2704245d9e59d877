//! The consumer end to end, in process: deduplication, retries and dead letters, rejects,
//! overlap policies, handlers, store outages, queue selection, replays, and a
//! 1,000-occurrence run across three consumers.
//!
//! Every behaviour is written once as a plain async fn over a [`Backend`] and run twice:
//! `_memory` on the in-memory ports `cronq standalone` uses (the consumers of a fleet share
//! one `MemoryBroker`, `MemoryLedger` and `MemoryRunLog`), and `_real` on RabbitMQ and
//! Redis (each consumer with its own connections, as separate processes). So the in-memory
//! backend cannot drift from the real one.

use std::collections::{BTreeSet, HashMap};
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
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::{JobName, Names, Namespace, QueueName};
use cronq_shared::runlog::{Outcome, Run, RunLog};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::broker::occurrence;
use crate::support::inspect::Inspect;
use crate::support::{TestEnv, amqp_url, eventually, redis_url, scoped};

const WAIT: Duration = Duration::from_secs(30);
const LEASE: Duration = Duration::from_secs(2);

/// Which implementation of the ports a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `MemoryBroker`, `MemoryLedger`, `MemoryRunLog` (what `cronq standalone` runs on).
    Memory,
    /// `AmqpBroker` on RabbitMQ, `RedisLedger` and `RedisRunLog` on Redis.
    Real,
}

impl Backend {
    pub fn label(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Real => "real",
        }
    }
}

/// Runs one behaviour (`suite`) under a fresh [`TestEnv`] on `backend`.
pub async fn on<F, Fut>(backend: Backend, test: &str, suite: F)
where
    F: FnOnce(Backend, TestEnv) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    scoped(&format!("{test}-{}", backend.label()), |env| {
        suite(backend, env)
    })
    .await;
}

/// Instantiates a behaviour written once as `async fn(Backend, TestEnv)` as two tests;
/// `$short` names the test's namespace (at most 64 characters in all).
macro_rules! on_both_backends {
    ($suite:ident, $short:literal, $memory:ident, $real:ident) => {
        #[tokio::test]
        async fn $memory() {
            on(Backend::Memory, $short, $suite).await;
        }

        #[tokio::test]
        async fn $real() {
            on(Backend::Real, $short, $suite).await;
        }
    };
}

/// The concrete broker behind a fleet, for what the port does not expose.
enum Ports {
    /// One in-memory broker whose clones every consumer of the fleet shares.
    Memory(MemoryBroker),
    /// RabbitMQ: each consumer opens its own connections, as separate processes would.
    Real(AmqpBroker),
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
        };
        let consumer = Consumer::new(
            self.config.clone(),
            broker,
            ledger.unwrap_or(own_ledger),
            options,
        )
        .with_handlers(handlers);
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
                    let q = passive(&ch, queue.as_str()).await;
                    (q.consumer_count() >= n).then_some(())
                })
                .await;
                let _ = conn.close(200, "done".into()).await;
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
                let count = passive(&ch, self.names.queue(&queue).as_str())
                    .await
                    .message_count();
                let _ = conn.close(200, "done".into()).await;
                count
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
            Ports::Real(_) => {
                let conn = lapin::Connection::connect(&amqp_url(), Default::default())
                    .await
                    .unwrap();
                let ch = conn.create_channel().await.unwrap();
                ch.basic_publish(
                    self.names.exchange().as_str().into(),
                    queue.into(),
                    Default::default(),
                    body,
                    Default::default(),
                )
                .await
                .unwrap()
                .await
                .unwrap();
                let _ = conn.close(200, "done".into()).await;
            }
        }
    }

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

/// A passive declare of the broker queue `queue` (its counts), on RabbitMQ.
async fn passive(ch: &lapin::Channel, queue: &str) -> lapin::Queue {
    ch.queue_declare(
        queue.into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        Default::default(),
    )
    .await
    .unwrap()
}

/// What [`recording`] saw: `(key, start, end)` per run.
type Spans = Arc<Mutex<Vec<(String, Instant, Instant)>>>;

/// A Rust handler that records `(key, start, end)` and sleeps `took` (stopping early when
/// cancelled).
fn recording(took: Duration) -> (Handlers, Spans) {
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

fn assert_no_overlap(seen: &[(String, Instant, Instant)]) {
    let mut spans: Vec<_> = seen.iter().map(|(k, s, e)| (*s, *e, k.clone())).collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "runs overlap: {} and {}", w[0].2, w[1].2);
    }
}

const WORK: &str = r#"
[[job]]
name = "work"
schedule = "@every 1s"
overlap = "OVERLAP"
max_attempts = 1
"#;

async fn same_occurrence_five_times_runs_once(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "allow")).await;
    let (handlers, seen) = recording(Duration::from_millis(200));
    let stop = fleet.start("c1", handlers, 4).await;
    fleet
        .publish(std::iter::repeat_n(occurrence("work", 1), 5))
        .await;
    let runs = fleet.settled("work", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Succeeded);
    // Stop the consumer; anything not acked would go back to the queue.
    stop.cancel();
    fleet.halt().await;
    assert_eq!(
        fleet.queued("default").await,
        0,
        "all five deliveries were acked"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "one run, four duplicates acked"
    );
    fleet.stop().await;
}

on_both_backends!(
    same_occurrence_five_times_runs_once,
    "consumer_dup",
    consumer_same_occurrence_five_times_runs_once_memory,
    consumer_same_occurrence_five_times_runs_once_real
);

async fn thousand_occurrences_three_consumers_none_twice(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "allow")).await;
    let counts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    for id in ["c1", "c2", "c3"] {
        let mut handlers = Handlers::new();
        let c = counts.clone();
        handlers.register(JobName::new("work").unwrap(), move |occ: Occurrence, _t| {
            let c = c.clone();
            async move {
                *c.lock().unwrap().entry(occ.key.to_string()).or_default() += 1;
                Ok::<(), String>(())
            }
        });
        fleet.start(id, handlers, 8).await;
    }
    fleet.subscribed(3).await;
    let occs: Vec<Occurrence> = (0..1000).map(|i| occurrence("work", i)).collect();
    for chunk in occs.chunks(100) {
        fleet.publish(chunk.to_vec()).await;
    }
    // Publish a second copy of the first 100: duplicates must not run again.
    fleet.publish(occs[..100].to_vec()).await;
    let runs = fleet.settled("work", 1000).await;
    let counts = counts.lock().unwrap().clone();
    assert_eq!(counts.len(), 1000);
    assert!(counts.values().all(|&n| n == 1), "an occurrence ran twice");
    assert_eq!(runs.len(), 1000);
    assert!(runs.iter().all(|r| r.outcome == Outcome::Succeeded));
    let consumers: BTreeSet<_> = runs.iter().map(|r| r.consumer.clone()).collect();
    assert!(consumers.len() >= 2, "work was shared: {consumers:?}");
    fleet.stop().await;
}

on_both_backends!(
    thousand_occurrences_three_consumers_none_twice,
    "consumer_1000",
    consumer_thousand_occurrences_three_consumers_none_twice_memory,
    consumer_thousand_occurrences_three_consumers_none_twice_real
);

async fn failing_job_retries_with_backoff_then_dead_letters(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "flaky"
schedule = "@every 1s"
command = ["sh", "-c", "echo boom-$CRONQ_ATTEMPT >&2; exit 3"]
max_attempts = 3
backoff = "200ms"
backoff_max = "10s"
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    fleet.publish([occurrence("flaky", 1)]).await;
    let mut runs = fleet.settled("flaky", 1).await;
    runs.reverse(); // oldest first
    let summary: Vec<_> = runs.iter().map(|r| (r.attempt, r.outcome)).collect();
    assert_eq!(
        summary,
        [
            (1, Outcome::Retrying),
            (2, Outcome::Retrying),
            (3, Outcome::Failed)
        ]
    );
    assert!(
        runs[2].error.as_deref().unwrap().contains("boom-3"),
        "{runs:?}"
    );
    // Retry delays grow: at least backoff, then at least twice that.
    let gap = |a: usize| {
        (runs[a + 1].started_at - runs[a].started_at)
            .to_std()
            .unwrap()
    };
    assert!(gap(0) >= Duration::from_millis(200), "{:?}", gap(0));
    assert!(gap(1) >= Duration::from_millis(400), "{:?}", gap(1));
    let letters = eventually(WAIT, "the dead letter", || async {
        Some(fleet.broker.dead_letters().await.unwrap()).filter(|l| !l.is_empty())
    })
    .await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason, "failed");
    assert_eq!(letters[0].attempts, 3);
    assert_eq!(
        letters[0].key.as_deref(),
        Some(occurrence("flaky", 1).key.to_string().as_str())
    );
    assert!(letters[0].last_error.as_deref().unwrap().contains("boom-3"));
    fleet.stop().await;
}

on_both_backends!(
    failing_job_retries_with_backoff_then_dead_letters,
    "consumer_retry",
    consumer_failing_job_retries_with_backoff_then_dead_letters_memory,
    consumer_failing_job_retries_with_backoff_then_dead_letters_real
);

async fn rejects_malformed_and_unknown_messages_and_stays_up(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "work"
schedule = "@every 1s"

[[job]]
name = "orphan"
schedule = "@every 1s"
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let (handlers, seen) = recording(Duration::from_millis(10));
    fleet.start("c1", handlers, 2).await;
    // A body that is not an occurrence, straight onto the queue.
    fleet.publish_raw("default", b"{not json").await;
    fleet
        .publish([occurrence("ghost", 1), occurrence("orphan", 1)])
        .await;
    let letters = eventually(WAIT, "three dead letters", || async {
        Some(fleet.broker.dead_letters().await.unwrap()).filter(|l| l.len() == 3)
    })
    .await;
    let reasons: BTreeSet<_> = letters.iter().map(|l| l.reason.clone()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("malformed: message is not a cronq occurrence")),
        "{reasons:?}"
    );
    assert!(
        reasons.contains("unknown job ghost: it is not in this consumer's config"),
        "{reasons:?}"
    );
    assert!(
        reasons.contains("no handler registered for job orphan"),
        "{reasons:?}"
    );
    // Still alive: a good occurrence runs.
    fleet.publish([occurrence("work", 1)]).await;
    fleet.settled("work", 1).await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    fleet.stop().await;
}

on_both_backends!(
    rejects_malformed_and_unknown_messages_and_stays_up,
    "consumer_reject",
    consumer_rejects_malformed_and_unknown_messages_and_stays_up_memory,
    consumer_rejects_malformed_and_unknown_messages_and_stays_up_real
);

async fn overlap_skip_two_consumers(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "skip")).await;
    let (h1, seen) = recording(Duration::from_millis(1500));
    let mut h2 = Handlers::new();
    // Both consumers share one recorder.
    let s = seen.clone();
    h2.register(JobName::new("work").unwrap(), move |occ: Occurrence, _t| {
        let s = s.clone();
        async move {
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            s.lock()
                .unwrap()
                .push((occ.key.to_string(), start, Instant::now()));
            Ok::<(), String>(())
        }
    });
    fleet.start("c1", h1, 2).await;
    fleet.start("c2", h2, 2).await;
    fleet.subscribed(2).await;
    for i in 0..4 {
        fleet.publish([occurrence("work", i)]).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let runs = fleet.settled("work", 4).await;
    let skipped = runs
        .iter()
        .filter(|r| r.outcome == Outcome::Skipped)
        .count();
    let succeeded = runs
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded)
        .count();
    assert!(skipped >= 1, "{runs:?}");
    assert_eq!(skipped + succeeded, 4, "{runs:?}");
    assert_no_overlap(&seen.lock().unwrap());
    fleet.stop().await;
}

on_both_backends!(
    overlap_skip_two_consumers,
    "consumer_skip",
    consumer_overlap_skip_two_consumers_memory,
    consumer_overlap_skip_two_consumers_real
);

/// A backfill or replay of a `skip` job asks for every occurrence to run: each waits its
/// turn instead of being recorded as skipped, and they still never overlap.
async fn operator_requested_occurrences_of_a_skip_job_all_run(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "skip")).await;
    let (handlers, seen) = recording(Duration::from_millis(400));
    fleet.start("c1", handlers, 4).await;
    fleet.subscribed(1).await;
    let requested = [Trigger::Backfill, Trigger::Backfill, Trigger::Replay];
    fleet
        .publish(requested.iter().enumerate().map(|(i, trigger)| {
            let mut occ = occurrence("work", i as u32);
            occ.trigger = *trigger;
            occ
        }))
        .await;
    let runs = fleet.settled("work", 3).await;
    assert!(
        runs.iter().all(|r| r.outcome == Outcome::Succeeded),
        "every requested occurrence must run: {runs:?}"
    );
    assert_no_overlap(&seen.lock().unwrap());
    fleet.stop().await;
}

on_both_backends!(
    operator_requested_occurrences_of_a_skip_job_all_run,
    "consumer_req_skip",
    consumer_operator_requested_occurrences_of_a_skip_job_all_run_memory,
    consumer_operator_requested_occurrences_of_a_skip_job_all_run_real
);

async fn overlap_queue_runs_all_in_turn(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "queue")).await;
    let (h1, seen) = recording(Duration::from_millis(500));
    fleet.start("c1", h1.clone(), 2).await;
    fleet.start("c2", h1, 2).await;
    fleet.subscribed(2).await;
    fleet.publish((0..3).map(|i| occurrence("work", i))).await;
    let runs = fleet.settled("work", 3).await;
    assert!(
        runs.iter().all(|r| r.outcome == Outcome::Succeeded),
        "{runs:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_no_overlap(&seen.lock().unwrap());
    fleet.stop().await;
}

on_both_backends!(
    overlap_queue_runs_all_in_turn,
    "consumer_queue",
    consumer_overlap_queue_runs_all_in_turn_memory,
    consumer_overlap_queue_runs_all_in_turn_real
);

/// How soon a replace must stop the running occurrence in tests: a generous bound on the
/// 250 ms heartbeat of a replace job plus the handler's stop, well below a lease's heartbeat.
const REPLACE_WITHIN: Duration = Duration::from_secs(5);

async fn overlap_replace_cancels_the_running_one(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "replace")).await;
    let (h1, seen) = recording(Duration::from_secs(20));
    fleet.start("c1", h1.clone(), 2).await;
    fleet.start("c2", h1, 2).await;
    fleet.subscribed(2).await;
    fleet.publish([occurrence("work", 0)]).await;
    let key0 = occurrence("work", 0).key;
    eventually(WAIT, "the first occurrence to run", || async {
        let rec = fleet.records.inspect(&key0).await;
        rec.filter(|r| r.state == cronq_shared::ledger::State::Running)
    })
    .await;
    fleet.publish([occurrence("work", 1)]).await;
    // Within about a second (the heartbeat of a replace job), far below the 20 s run and
    // the lease's heartbeat period.
    let runs = eventually(
        REPLACE_WITHIN,
        "the first occurrence to be cancelled",
        || async {
            let runs = fleet.runs("work").await;
            runs.iter()
                .any(|r| r.outcome == Outcome::Cancelled)
                .then_some(runs)
        },
    )
    .await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].key, key0);
    let key1 = occurrence("work", 1).key;
    assert_eq!(runs[0].error, Some(format!("replaced by {key1}")));
    eventually(WAIT, "the second occurrence to run", || async {
        let rec = fleet.records.inspect(&key1).await;
        rec.filter(|r| r.state == cronq_shared::ledger::State::Running)
    })
    .await;
    fleet.stop().await;
    assert_no_overlap(&seen.lock().unwrap());
}

on_both_backends!(
    overlap_replace_cancels_the_running_one,
    "consumer_replace",
    consumer_overlap_replace_cancels_the_running_one_memory,
    consumer_overlap_replace_cancels_the_running_one_real
);

async fn command_timeout_kills_the_whole_process_group(backend: Backend, env: TestEnv) {
    let pidfile = env.dir.join("grandchild.pid");
    let toml = format!(
        r#"
[[job]]
name = "hang"
schedule = "@every 1s"
timeout = "1s"
max_attempts = 1
command = ["sh", "-c", "sleep 60 & echo $! > {}; wait"]
"#,
        pidfile.display()
    );
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    fleet.publish([occurrence("hang", 1)]).await;
    let runs = fleet.settled("hang", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Failed);
    assert!(
        runs[0]
            .error
            .as_deref()
            .unwrap()
            .starts_with("timed out after 1s"),
        "{runs:?}"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(WAIT, "the grandchild `sleep 60` to be killed", || async {
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "));
        gone.then_some(())
    })
    .await;
    fleet.stop().await;
}

on_both_backends!(
    command_timeout_kills_the_whole_process_group,
    "consumer_timeout",
    consumer_command_timeout_kills_the_whole_process_group_memory,
    consumer_command_timeout_kills_the_whole_process_group_real
);

async fn command_gets_env_and_payload(backend: Backend, env: TestEnv) {
    let out = env.dir.join("out.txt");
    let toml = format!(
        r#"
[[job]]
name = "envy"
schedule = "@every 1s"
timezone = "Asia/Shanghai"
payload = {{ region = "cn" }}
command = ["sh", "-c", "echo $CRONQ_JOB $CRONQ_KEY $CRONQ_ATTEMPT $CRONQ_SCHEDULED_AT > {0}; cat >> {0}"]
"#,
        out.display()
    );
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    let mut occ = occurrence("envy", 1);
    occ.scheduled_local = occ
        .scheduled_at
        .with_timezone(&chrono_tz::Asia::Shanghai)
        .fixed_offset();
    occ.payload = serde_json::json!({"region": "cn"});
    fleet.publish([occ]).await;
    let runs = fleet.settled("envy", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Succeeded, "{runs:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text,
        "envy envy@2026-11-29T00:00:01Z 1 2026-11-29T08:00:01+08:00\n{\"region\":\"cn\"}"
    );
    fleet.stop().await;
}

on_both_backends!(
    command_gets_env_and_payload,
    "consumer_env",
    consumer_command_gets_env_and_payload_memory,
    consumer_command_gets_env_and_payload_real
);

async fn http_handler_success_and_failure(backend: Backend, env: TestEnv) {
    use axum::routing::post;
    let bodies: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let b = bodies.clone();
    let app = axum::Router::new()
        .route(
            "/ok",
            post(move |body: axum::body::Bytes| {
                let b = b.clone();
                async move {
                    b.lock()
                        .unwrap()
                        .push(serde_json::from_slice(&body).unwrap());
                    "fine"
                }
            }),
        )
        .route(
            "/fail",
            post(|| async { (axum::http::StatusCode::SERVICE_UNAVAILABLE, "try later") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let toml = format!(
        r#"
[[job]]
name = "hook-ok"
schedule = "@every 1s"
http = {{ url = "http://{addr}/ok", headers = {{ "X-Token" = "t" }} }}

[[job]]
name = "hook-fail"
schedule = "@every 1s"
max_attempts = 1
http = {{ url = "http://{addr}/fail" }}
"#
    );
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    fleet
        .publish([occurrence("hook-ok", 1), occurrence("hook-fail", 1)])
        .await;
    let ok = fleet.settled("hook-ok", 1).await;
    assert_eq!(ok[0].outcome, Outcome::Succeeded, "{ok:?}");
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(body["kind"], "occurrence.v1");
    assert_eq!(body["key"], occurrence("hook-ok", 1).key.to_string());
    let failed = fleet.settled("hook-fail", 1).await;
    assert_eq!(failed[0].outcome, Outcome::Failed);
    assert_eq!(
        failed[0].error.as_deref(),
        Some(
            format!("POST http://{addr}/fail answered 503 Service Unavailable: try later").as_str()
        )
    );
    server.abort();
    fleet.stop().await;
}

on_both_backends!(
    http_handler_success_and_failure,
    "consumer_http",
    consumer_http_handler_success_and_failure_memory,
    consumer_http_handler_success_and_failure_real
);

async fn panicking_rust_handler_is_a_failed_attempt(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "boom"
schedule = "@every 1s"
max_attempts = 1

[[job]]
name = "work"
schedule = "@every 1s"
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let (mut handlers, seen) = recording(Duration::from_millis(10));
    handlers.register(
        JobName::new("boom").unwrap(),
        |_occ: Occurrence, _t| async move {
            if true {
                panic!("kaboom");
            }
            Ok::<(), String>(())
        },
    );
    fleet.start("c1", handlers, 2).await;
    fleet.publish([occurrence("boom", 1)]).await;
    let runs = fleet.settled("boom", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Failed);
    assert_eq!(runs[0].error.as_deref(), Some("handler panicked: kaboom"));
    fleet.publish([occurrence("work", 1)]).await;
    fleet.settled("work", 1).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "the consumer carried on");
    fleet.stop().await;
}

on_both_backends!(
    panicking_rust_handler_is_a_failed_attempt,
    "consumer_panic",
    consumer_panicking_rust_handler_is_a_failed_attempt_memory,
    consumer_panicking_rust_handler_is_a_failed_attempt_real
);

async fn records_missed_past_the_deadline(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "work"
schedule = "@every 1s"
deadline = "1m"
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let (handlers, seen) = recording(Duration::from_millis(10));
    fleet.start("c1", handlers, 2).await;
    // Scheduled in 2026-11-29 00:00, long before now + 1 minute.
    fleet.publish([occurrence("work", 1)]).await;
    let runs = fleet.settled("work", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Missed, "{runs:?}");
    assert!(seen.lock().unwrap().is_empty());
    fleet.stop().await;
}

on_both_backends!(
    records_missed_past_the_deadline,
    "consumer_missed",
    consumer_records_missed_past_the_deadline_memory,
    consumer_records_missed_past_the_deadline_real
);

/// A ledger that can be made unreachable.
struct Flaky {
    inner: Arc<dyn Ledger>,
    down: std::sync::atomic::AtomicBool,
    refused: std::sync::atomic::AtomicUsize,
}

impl Flaky {
    fn new(inner: Arc<dyn Ledger>) -> Self {
        Self {
            inner,
            down: std::sync::atomic::AtomicBool::new(false),
            refused: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn check(&self) -> Result<(), cronq_shared::store::StoreError> {
        use std::sync::atomic::Ordering;
        if self.down.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(cronq_shared::store::StoreError::Unreachable {
                store: "Redis",
                url: "redis://test".into(),
                hint: "a test made it unreachable",
                source: None,
            });
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Ledger for Flaky {
    async fn claim(
        &self,
        c: &cronq_shared::ledger::Claim,
    ) -> Result<cronq_shared::ledger::ClaimOutcome, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.claim(c).await
    }
    async fn heartbeat(
        &self,
        l: &cronq_shared::ledger::Lease,
        d: Duration,
    ) -> Result<cronq_shared::ledger::Heartbeat, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.heartbeat(l, d).await
    }
    async fn complete(
        &self,
        l: &cronq_shared::ledger::Lease,
        e: &cronq_shared::ledger::End,
    ) -> Result<cronq_shared::ledger::Ended, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.complete(l, e).await
    }
    async fn settle(
        &self,
        s: &cronq_shared::ledger::Settle,
    ) -> Result<cronq_shared::ledger::Ended, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.settle(s).await
    }
    async fn reap(
        &self,
        limit: usize,
        hold: Duration,
    ) -> Result<Vec<cronq_shared::ledger::Orphan>, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.reap(limit, hold).await
    }
    async fn admit_replay(
        &self,
        key: &cronq_shared::key::OccurrenceKey,
    ) -> Result<Option<cronq_shared::ledger::State>, cronq_shared::store::StoreError> {
        self.check()?;
        self.inner.admit_replay(key).await
    }
}

/// The store down at first: nothing runs and nothing is acked until it is back; then the
/// occurrence runs once.
async fn store_outage_runs_nothing_until_it_is_back(backend: Backend, env: TestEnv) {
    use std::sync::atomic::Ordering;

    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "skip")).await;
    let ledger = Arc::new(Flaky::new(fleet.ledger.clone()));
    ledger.down.store(true, Ordering::SeqCst);
    let (handlers, seen) = recording(Duration::from_millis(10));
    let options = Options {
        lease: LEASE,
        consumer_id: "mem".into(),
        ..Options::default()
    };
    fleet
        .start_with(options, handlers, Some(ledger.clone()))
        .await;
    let queue = QueueName::new("default").unwrap();
    let out = Outgoing {
        queue: queue.clone(),
        occurrence: occurrence("work", 1),
        delay: Duration::ZERO,
    };
    fleet.broker.publish(&[out.clone(), out]).await.unwrap();
    eventually(
        WAIT,
        "claims to be refused while the store is down",
        || async { (ledger.refused.load(Ordering::SeqCst) >= 3).then_some(()) },
    )
    .await;
    assert!(seen.lock().unwrap().is_empty(), "nothing ran");
    assert!(fleet.runlog.list(None, 10).await.unwrap().is_empty());
    ledger.down.store(false, Ordering::SeqCst);
    let runs = eventually(
        WAIT,
        "the occurrence to run once the store is back",
        || async {
            let runs = fleet.runlog.list(None, 10).await.unwrap();
            (!runs.is_empty()).then_some(runs)
        },
    )
    .await;
    assert_eq!(runs[0].outcome, Outcome::Succeeded);
    eventually(WAIT, "both deliveries settled", || async {
        (fleet.queued("default").await == 0).then_some(())
    })
    .await;
    fleet.halt().await;
    assert_eq!(seen.lock().unwrap().len(), 1, "the duplicate did not run");
    assert_eq!(fleet.runlog.list(None, 10).await.unwrap().len(), 1);
    fleet.stop().await;
}

on_both_backends!(
    store_outage_runs_nothing_until_it_is_back,
    "consumer_outage",
    consumer_store_outage_runs_nothing_until_it_is_back_memory,
    consumer_store_outage_runs_nothing_until_it_is_back_real
);

async fn serves_only_the_queues_it_is_given(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "work"
schedule = "@every 1s"

[[job]]
name = "report"
schedule = "@every 1s"
queue = "reports"
command = ["true"]
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let options = Options {
        queues: vec!["reports".into()],
        lease: LEASE,
        consumer_id: "r".into(),
        ..Options::default()
    };
    fleet.start_with(options, Handlers::new(), None).await;
    let reports = QueueName::new("reports").unwrap();
    fleet.publish([occurrence("work", 1)]).await;
    fleet
        .broker
        .publish(&[Outgoing {
            queue: reports,
            occurrence: occurrence("report", 1),
            delay: Duration::ZERO,
        }])
        .await
        .unwrap();
    let runs = fleet.settled("report", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Succeeded);
    fleet.halt().await;
    assert!(
        fleet.runs("work").await.is_empty(),
        "the default queue is not served"
    );
    assert_eq!(
        fleet.queued("default").await,
        1,
        "the default queue's message waits"
    );
    fleet.stop().await;
}

on_both_backends!(
    serves_only_the_queues_it_is_given,
    "consumer_queues",
    consumer_serves_only_the_queues_it_is_given_memory,
    consumer_serves_only_the_queues_it_is_given_real
);

async fn replay_of_a_failed_occurrence_runs_it_again_once(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "work"
schedule = "@every 1s"
max_attempts = 1
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let c = calls.clone();
    let mut handlers = Handlers::new();
    handlers.register(JobName::new("work").unwrap(), move |_occ, _token| {
        let n = c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            if n == 0 {
                Err("first try fails".to_owned())
            } else {
                Ok(())
            }
        }
    });
    fleet.start("c1", handlers, 1).await;
    fleet.publish([occurrence("work", 1)]).await;
    let runs = fleet.settled("work", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Failed);
    let mut replay = occurrence("work", 1);
    replay.trigger = cronq_shared::message::Trigger::Replay;
    // Not admitted: a failed occurrence is final, the replay is acked without running. One
    // consumer with concurrency 1 takes them in order, so once work@2 ran, the replay was
    // looked at.
    fleet.publish([replay.clone(), occurrence("work", 2)]).await;
    fleet.settled("work", 2).await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    // `cronq dlq replay` admits it first (one ledger operation), then publishes attempt 1.
    assert_eq!(
        fleet.ledger.admit_replay(&replay.key).await.unwrap(),
        Some(cronq_shared::ledger::State::Failed)
    );
    fleet.publish([replay.clone()]).await;
    let runs = fleet.settled("work", 3).await;
    assert_eq!(runs[0].key, replay.key, "{runs:?}");
    assert_eq!(runs[0].outcome, Outcome::Succeeded, "{runs:?}");
    assert_eq!(runs[0].attempt, 1);
    // Succeeded is final: neither a schedule duplicate nor another replay runs it again.
    fleet.publish([occurrence("work", 1), replay]).await;
    fleet.publish([occurrence("work", 3)]).await;
    fleet.settled("work", 4).await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 4);
    fleet.stop().await;
}

on_both_backends!(
    replay_of_a_failed_occurrence_runs_it_again_once,
    "consumer_replay",
    consumer_replay_of_a_failed_occurrence_runs_it_again_once_memory,
    consumer_replay_of_a_failed_occurrence_runs_it_again_once_real
);
