//! The consumer as a long-running part: subscribe, run deliveries under a concurrency bound,
//! reap orphaned claims, and shut down gracefully.
//!
//! Shutdown (`docs/consumer.md`): stop intake (cancel the subscription, requeue what was
//! prefetched but not started), let running attempts finish within the grace period, then
//! stop the rest; each stopped attempt releases its claim and republishes its occurrence so
//! it runs again at once elsewhere (the delivery was acked early, so redelivery cannot do it).

use std::collections::BTreeSet;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cronq_shared::broker::{Broker, Delivery, bounded};
use cronq_shared::config::Config;
use cronq_shared::ledger::Ledger;
use cronq_shared::message::Occurrence;
use cronq_shared::names::{JobName, QueueName};
use cronq_shared::signing::Keyring;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::handler::KILL_GRACE;
use crate::reaper::Reaper;
use crate::registry::{Handlers, JobHandler};
use crate::telemetry;
use crate::worker::Worker;

/// The default execution lease: a consumer that stops renewing its claim for this long is
/// taken for dead, and the occurrence runs again (README, guarantee G3).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long stopped attempts get to release their claims after the grace period.
const RELEASE_WAIT: Duration = Duration::from_secs(KILL_GRACE.as_secs() * 2 + 10);

/// How the consumer runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Serve only these logical queues; empty = every queue of the config.
    pub queues: Vec<String>,
    /// Attempts running at once; also the broker prefetch.
    pub concurrency: u16,
    /// How long running attempts may finish after shutdown is asked.
    pub grace: Duration,
    /// Execution lease: a claim lapses this long after its owner's last heartbeat.
    pub lease: Duration,
    /// This consumer's name in the run history.
    pub consumer_id: String,
    /// The signing keys (`CRONQ_SIGNING_KEY`): with them, a message that does not open with
    /// one of them is dead-lettered as `unauthenticated` and never runs.
    pub keyring: Option<Arc<Keyring>>,
}

impl Options {
    /// The logical queues of `config` these options select.
    ///
    /// # Errors
    /// [`Error::UnknownQueue`] when `queues` names a queue no job of `config` uses.
    pub fn select_queues(&self, config: &Config) -> Result<Vec<QueueName>, Error> {
        let known = config.queues();
        if self.queues.is_empty() {
            return Ok(known.into_iter().collect());
        }
        let mut chosen = BTreeSet::new();
        for name in &self.queues {
            match QueueName::new(name.trim()) {
                Ok(q) if known.contains(&q) => {
                    chosen.insert(q);
                }
                _ => {
                    return Err(Error::UnknownQueue {
                        queue: name.clone(),
                        known: known
                            .iter()
                            .map(QueueName::as_str)
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
            }
        }
        Ok(chosen.into_iter().collect())
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            queues: Vec::new(),
            concurrency: 4,
            grace: Duration::from_secs(30),
            lease: DEFAULT_LEASE,
            consumer_id: default_consumer_id(),
            keyring: None,
        }
    }
}

/// `HOST-PID`, the default consumer id.
pub fn default_consumer_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "consumer".to_owned());
    format!("{host}-{}", std::process::id())
}

/// A consumer: a config, the ports it runs on, and its Rust handlers.
pub struct Consumer {
    config: Arc<Config>,
    broker: Arc<dyn Broker>,
    ledger: Arc<dyn Ledger>,
    handlers: Handlers,
    options: Options,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("config", &self.config.path)
            .field("handlers", &self.handlers)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A consumer over the given ports (RabbitMQ + Redis, or in-memory for `standalone`).
    /// `ledger` also writes the run history: the consumer never does (see
    /// [`cronq_shared::ledger`]).
    pub fn new(
        config: Config,
        broker: Arc<dyn Broker>,
        ledger: Arc<dyn Ledger>,
        options: Options,
    ) -> Self {
        Self {
            config: Arc::new(config),
            broker,
            ledger,
            handlers: Handlers::new(),
            options,
        }
    }

    /// Registers an async closure or fn `handler(occurrence, token)` for `job` (see
    /// [`Handlers::register`]).
    pub fn register<F, Fut, E>(&mut self, job: JobName, handler: F) -> &mut Self
    where
        F: Fn(Occurrence, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        self.handlers.register(job, handler);
        self
    }

    /// Registers any [`JobHandler`] for `job`.
    pub fn register_handler(&mut self, job: JobName, handler: impl JobHandler) -> &mut Self {
        self.handlers.register_handler(job, handler);
        self
    }

    /// Replaces every registered handler.
    pub fn with_handlers(mut self, handlers: Handlers) -> Self {
        self.handlers = handlers;
        self
    }

    /// The logical queues this consumer serves.
    ///
    /// # Errors
    /// [`Error::UnknownQueue`] when `--queues` names a queue no job uses.
    pub fn queues(&self) -> Result<Vec<QueueName>, Error> {
        self.options.select_queues(&self.config)
    }

    /// Runs until `shutdown` is cancelled, then drains (see the module docs).
    ///
    /// # Errors
    /// [`Error`] when the queues are wrong, the broker refuses the subscription, or it
    /// ends unexpectedly.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let queues = self.queues()?;
        self.warn_unhandled(&queues);
        crate::telemetry::announce();
        // A consumer starting during a broker outage exits instead of waiting for ever.
        bounded("declare", self.broker.declare(&self.config.queues()))
            .await
            .map_err(Error::Broker)?;
        let concurrency = self.options.concurrency.max(1);
        let intake = shutdown.child_token();
        let subscribed = self.broker.consume(&queues, concurrency, intake.clone());
        let mut rx = bounded("consume", subscribed)
            .await
            .map_err(Error::Broker)?;
        let lease = self.options.lease.max(Duration::from_millis(300));
        let hold = lease * 2;
        tracing::info!(
            queues = %queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(","),
            concurrency,
            lease_ms = lease.as_millis() as u64,
            instance_id = %self.options.consumer_id,
            "consumer started"
        );
        let mut reaper = JoinSet::new();
        reaper.spawn(self.reaper(lease, hold).run(shutdown.clone()));
        let worker = Arc::new(self.worker(lease, hold));
        let abort = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let ended = receive(&mut rx, &worker, concurrency, &mut tasks, &abort, &shutdown).await;
        // 1. Stop intake; give back what was prefetched but not started.
        intake.cancel();
        rx.close();
        while let Ok(d) = rx.try_recv() {
            let _ = d.acker.requeue().await;
        }
        self.drain(&mut tasks, &abort).await;
        reaper.shutdown().await;
        tracing::info!("consumer stopped");
        if ended {
            return Err(Error::SubscriptionEnded);
        }
        Ok(())
    }

    /// Warns about each served job that has no handler: its occurrences will be
    /// dead-lettered.
    fn warn_unhandled(&self, queues: &[QueueName]) {
        for job in &self.config.jobs {
            if queues.contains(&job.queue)
                && job.handler.is_none()
                && !self.handlers.contains(&job.name)
            {
                tracing::warn!(job = %job.name, "job has no handler in the config and none is registered: its occurrences will be dead-lettered");
            }
        }
    }

    /// The reaper of claims whose owner stopped renewing them.
    fn reaper(&self, lease: Duration, hold: Duration) -> Reaper {
        Reaper {
            config: Arc::clone(&self.config),
            broker: Arc::clone(&self.broker),
            ledger: Arc::clone(&self.ledger),
            every: (lease / 2).clamp(Duration::from_millis(100), Duration::from_secs(5)),
            hold,
        }
    }

    /// What runs each delivery.
    fn worker(&self, lease: Duration, hold: Duration) -> Worker {
        Worker {
            config: Arc::clone(&self.config),
            broker: Arc::clone(&self.broker),
            ledger: Arc::clone(&self.ledger),
            handlers: self.handlers.clone(),
            http: reqwest::Client::new(),
            lease,
            hold,
            consumer_id: self.options.consumer_id.clone(),
            keyring: self.options.keyring.clone(),
            metrics: telemetry::Metrics::default(),
        }
    }

    /// Shutdown steps 2 and 3: lets running attempts finish within the grace period, then
    /// stops the rest (each releases its claim and republishes its occurrence), and aborts
    /// what still runs after that.
    async fn drain(&self, tasks: &mut JoinSet<()>, abort: &CancellationToken) {
        let running = tasks.len();
        if running > 0 {
            tracing::info!(
                running,
                grace_ms = self.options.grace.as_millis() as u64,
                "waiting for running attempts"
            );
        }
        let drained = tokio::time::timeout(self.options.grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        if drained {
            return;
        }
        tracing::warn!(
            left = tasks.len(),
            "grace period over: stopping attempts and releasing their claims"
        );
        abort.cancel();
        let released = tokio::time::timeout(RELEASE_WAIT, async {
            while tasks.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        if !released {
            tracing::error!(
                left = tasks.len(),
                "attempts did not stop: aborting them; their claims lapse after the lease"
            );
            tasks.shutdown().await;
        }
    }
}

/// Starts one task per delivery, at most `concurrency` at once, until `shutdown` is
/// cancelled or the subscription ends; returns whether it ended on its own.
async fn receive(
    rx: &mut mpsc::Receiver<Delivery>,
    worker: &Arc<Worker>,
    concurrency: u16,
    tasks: &mut JoinSet<()>,
    abort: &CancellationToken,
    shutdown: &CancellationToken,
) -> bool {
    let permits = Arc::new(Semaphore::new(usize::from(concurrency)));
    loop {
        while let Some(done) = tasks.try_join_next() {
            if let Err(err) = done {
                tracing::error!(error = %err, "a delivery task failed");
            }
        }
        let permit = tokio::select! {
            biased;
            () = shutdown.cancelled() => return false,
            p = Arc::clone(&permits).acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let delivery = tokio::select! {
            biased;
            () = shutdown.cancelled() => return false,
            d = rx.recv() => match d {
                Some(d) => d,
                None => return !shutdown.is_cancelled(),
            },
        };
        // Boxed so the spawn moves a pointer, not the whole (large) state machine.
        tasks.spawn(Box::pin(Arc::clone(worker).process(
            delivery,
            permit,
            abort.clone(),
            shutdown.clone(),
        )));
    }
}
