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
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use cronq_shared::broker::{Broker, Delivery, bounded};
use cronq_shared::config::{Config, Job};
use cronq_shared::jobs::JobStore;
use cronq_shared::ledger::Ledger;
use cronq_shared::message::Occurrence;
use cronq_shared::names::{JobName, QueueName};
use cronq_shared::registry::Serves;
use cronq_shared::runlog::RunLog;
use cronq_shared::signing::Keyring;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cancels::CancelWatch;
use crate::error::Error;
use crate::handler::KILL_GRACE;
use crate::handler::{Handlers, JobHandler};
use crate::reaper::Reaper;
use crate::telemetry;
use crate::view;
use crate::worker::Worker;

/// The default execution lease: a consumer that stops renewing its claim for this long is
/// taken for dead, and the occurrence runs again (README, guarantee G3).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The async runtime's worker threads `cronq consumer` runs on unless told otherwise
/// (`--threads`, or tokio's `TOKIO_WORKER_THREADS`): one. A delivery's work is a chain of
/// hand-offs between tasks (the subscription, the claim's batch, the handler, the end, the
/// ack); on one thread each is a queue operation, on several each may wake a parked thread
/// (a futex call and a task switch). In the throughput drain of `docs/benchmarks.md` that
/// cost the consumers' process a third of its CPU per occurrence. Nothing the binary runs
/// computes on that thread: a command handler is a child process, an http one a request,
/// and what is slow (a large config's view of its jobs, a scrape of `/metrics`) goes to
/// the blocking pool. A program embedding this library runs it on its own runtime: Rust
/// handlers that compute or block want more than one thread, so that the lease renewals
/// are not held up behind them.
pub const DEFAULT_THREADS: u16 = 1;

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
    format!("{}-{}", cronq_shared::host::name(), std::process::id())
}

/// A consumer: a config, the ports it runs on, and its Rust handlers.
pub struct Consumer {
    /// The config in force; a reload (SIGHUP, runtime jobs) replaces it.
    config: watch::Receiver<Arc<Config>>,
    broker: Arc<dyn Broker>,
    ledger: Arc<dyn Ledger>,
    handlers: Handlers,
    options: Options,
    /// Where attempts' outputs are kept, if anywhere ([`Consumer::keep_outputs`]).
    outputs: Option<Outputs>,
    /// The runtime jobs ([`Consumer::with_job_store`]).
    jobs: Option<Arc<dyn JobStore>>,
    /// Its attempts of jobs with an `sla`, for the registry beats ([`Consumer::running`]).
    running: crate::running::Running,
}

/// Where a consumer keeps its attempts' outputs, and how much of each stream.
#[derive(Clone)]
pub(crate) struct Outputs {
    pub(crate) runlog: Arc<dyn RunLog>,
    pub(crate) limit: usize,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("config", &self.config.borrow().path)
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
        // A receiver whose sender is gone keeps its value: the config never changes.
        let (_fixed, config) = watch::channel(Arc::new(config));
        Self {
            config,
            broker,
            ledger,
            handlers: Handlers::new(),
            options,
            outputs: None,
            jobs: None,
            running: crate::running::Running::default(),
        }
    }

    /// Reads `store`'s history when an occurrence of a job it does not know arrives: an
    /// occurrence of a runtime job deleted before this consumer saw it (it started after
    /// the delete) then ends `cancelled` ("job deleted") instead of being dead-lettered as
    /// unknown. Without it, every unknown job is dead-lettered.
    #[must_use]
    pub fn with_job_store(mut self, store: Arc<dyn JobStore>) -> Self {
        self.jobs = Some(store);
        self
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

    /// Keeps each attempt's output with its run in `runlog`: the last `limit` bytes of a
    /// command's stdout and of its stderr, an http handler's status and the first 4 KiB of
    /// its response body, the secrets of the job's handler masked (`cronq runs --output`).
    /// Without it, outputs are not kept. A `limit` of 0 keeps none.
    #[must_use]
    pub fn keep_outputs(mut self, runlog: Arc<dyn RunLog>, limit: usize) -> Self {
        self.outputs = (limit > 0).then_some(Outputs { runlog, limit });
        self
    }

    /// Registers any [`JobHandler`] for `job`.
    pub fn register_handler(&mut self, job: JobName, handler: impl JobHandler) -> &mut Self {
        self.handlers.register_handler(job, handler);
        self
    }

    /// Follows `config` instead of the config given to [`Consumer::new`]: each delivery
    /// runs under the config in force when it arrives (jobs added, changed or removed by
    /// a reload), and the queues of new jobs are subscribed to as they appear.
    pub fn following(mut self, config: watch::Receiver<Arc<Config>>) -> Self {
        self.config = config;
        self
    }

    /// Registers an async closure or fn `handler(occurrence, token)` under the handler
    /// name `name` (see [`Handlers::register_named`]).
    pub fn register_named<F, Fut, E>(&mut self, name: &str, handler: F) -> &mut Self
    where
        F: Fn(Occurrence, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        self.handlers.register_named(name, handler);
        self
    }

    /// What this consumer serves, as a function the fleet registry's reporter calls at each
    /// beat (`cronq_fleet::reporter::Reporter::with_serves`): the queues of
    /// `--queues` (or every queue), the handler names of the config in force and those
    /// registered in Rust, and the jobs registered in Rust. Take it once every handler is
    /// registered.
    pub fn serves(&self) -> impl Fn() -> Serves + Send + Sync + 'static {
        let config = self.config.clone();
        let queues = (!self.options.queues.is_empty()).then(|| {
            let mut queues: Vec<String> = self
                .options
                .queues
                .iter()
                .map(|q| q.trim().to_owned())
                .collect();
            queues.sort_unstable();
            queues
        });
        let registered = self.handlers.names();
        let jobs = self.handlers.jobs();
        move || {
            let mut handlers: BTreeSet<String> = config
                .borrow()
                .handlers
                .keys()
                .map(|n| n.to_string())
                .collect();
            handlers.extend(registered.iter().cloned());
            Serves {
                queues: queues.clone(),
                handlers: handlers.into_iter().collect(),
                jobs: jobs.clone(),
            }
        }
    }

    /// The attempts this consumer runs now of jobs with an `sla` on their start or
    /// duration, as a function the fleet registry's reporter calls at each beat
    /// (`cronq_fleet::reporter::Reporter::with_running`): the leader's alerts
    /// check them while they run.
    pub fn running(
        &self,
    ) -> impl Fn() -> Vec<cronq_shared::registry::InFlight> + Send + Sync + 'static {
        let running = self.running.clone();
        move || running.report()
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
        self.options.select_queues(&self.config.borrow())
    }

    /// Runs until `shutdown` is cancelled, then drains (see the module docs).
    ///
    /// # Errors
    /// [`Error`] when the queues are wrong, the broker refuses the subscription, or it
    /// ends unexpectedly.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        let queues = self.queues()?;
        // From here on the consumer reads the view: the config in force plus the jobs
        // reloads retired, whose queued occurrences still run.
        let mut beside = JoinSet::new();
        let (view, follower) = view::follow(self.config.clone(), shutdown.child_token());
        beside.spawn(follower);
        self.config = view;
        let config = self.config.borrow().clone();
        warn_unhandled(&config, &self.handlers, &queues, None);
        crate::telemetry::announce();
        // A consumer starting during a broker outage exits instead of waiting for ever.
        bounded("declare", self.broker.declare(&config.queues()))
            .await
            .map_err(Error::Broker)?;
        let concurrency = self.options.concurrency.max(1);
        let intake = shutdown.child_token();
        let subscribed = self.broker.consume(&queues, concurrency, intake.clone());
        let main = bounded("consume", subscribed)
            .await
            .map_err(Error::Broker)?;
        let mut rx = Intake::new(
            main,
            queues.iter().cloned().collect(),
            config,
            self.config.clone(),
            self.broker.clone(),
            self.handlers.clone(),
            self.options.clone(),
            intake.clone(),
        );
        let lease = self.options.lease.max(Duration::from_millis(300));
        let hold = lease * 2;
        tracing::info!(
            queues = %queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(","),
            concurrency,
            threads = tokio::runtime::Handle::current().metrics().num_workers(),
            lease_ms = lease.as_millis() as u64,
            instance_id = %self.options.consumer_id,
            "consumer started"
        );
        beside.spawn(self.reaper(lease, hold).run(shutdown.clone()));
        let (cancels, cancelled) = CancelWatch::new(Arc::clone(&self.ledger));
        beside.spawn(cancels.run(shutdown.child_token()));
        let worker = Arc::new(self.worker(lease, hold, cancelled));
        let abort = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let ended = receive(&mut rx, &worker, concurrency, &mut tasks, &abort, &shutdown).await;
        // 1. Stop intake; give back what was prefetched but not started.
        intake.cancel();
        rx.close().await;
        self.drain(&mut tasks, &abort).await;
        beside.shutdown().await;
        tracing::info!("consumer stopped");
        if ended {
            return Err(Error::SubscriptionEnded);
        }
        Ok(())
    }

    /// The reaper of claims whose owner stopped renewing them.
    fn reaper(&self, lease: Duration, hold: Duration) -> Reaper {
        Reaper {
            config: self.config.clone(),
            broker: Arc::clone(&self.broker),
            ledger: Arc::clone(&self.ledger),
            every: (lease / 2).clamp(Duration::from_millis(100), Duration::from_secs(5)),
            hold,
        }
    }

    /// What runs each delivery.
    fn worker(&self, lease: Duration, hold: Duration, cancels: watch::Receiver<u64>) -> Worker {
        Worker {
            cancels,
            config: self.config.clone(),
            broker: Arc::clone(&self.broker),
            ledger: Arc::clone(&self.ledger),
            handlers: self.handlers.clone(),
            http: reqwest::Client::new(),
            lease,
            hold,
            consumer_id: self.options.consumer_id.clone(),
            keyring: self.options.keyring.clone(),
            metrics: telemetry::Metrics::default(),
            outputs: self.outputs.clone(),
            jobs: self.jobs.clone(),
            running: self.running.clone(),
            in_flight: AtomicUsize::new(0),
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
    rx: &mut Intake,
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

/// Warns about each served job (of `added` only, when given) that has no handler here: its
/// occurrences will be dead-lettered.
fn warn_unhandled(
    config: &Config,
    handlers: &Handlers,
    queues: &[QueueName],
    added: Option<&[JobName]>,
) {
    let warn = |job: &Job| {
        if !queues.contains(&job.queue) || job.handler.is_some() || handlers.serves(job) {
            return;
        }
        match &job.handler_name {
            Some(name) => {
                tracing::warn!(job = %job.name, handler = %name, "job names a handler this consumer neither defines ([handlers.NAME]) nor has registered: its occurrences will be dead-lettered")
            }
            None => {
                tracing::warn!(job = %job.name, "job has no handler in the config and none is registered: its occurrences will be dead-lettered")
            }
        }
    };
    // The jobs a change added are looked up by name: one change among a million jobs does
    // not go through all of them.
    match added {
        Some(added) => added
            .iter()
            .filter_map(|name| config.job(name.as_str()))
            .for_each(warn),
        None => config.jobs.iter().for_each(warn),
    }
}

/// Capacity of the channel that carries the deliveries of the queues subscribed to after
/// the start: one, so what a later subscription prefetched waits in the broker's
/// subscription, where shutdown requeues it, not here.
const ADDED_CAPACITY: usize = 1;

/// How long the forwarders of later subscriptions get to end once intake stopped.
const FORWARDERS_STOP: Duration = Duration::from_secs(5);

/// The deliveries of every subscribed queue: the queues of the start, and the queues of
/// jobs a reload adds, subscribed to when they appear.
struct Intake {
    main: mpsc::Receiver<Delivery>,
    added_tx: mpsc::Sender<Delivery>,
    added: mpsc::Receiver<Delivery>,
    /// One task per later subscription, moving its deliveries into `added`.
    forwarders: JoinSet<()>,
    subscribed: BTreeSet<QueueName>,
    /// The config of the last look, to tell which jobs a reload added.
    seen: Arc<Config>,
    config: watch::Receiver<Arc<Config>>,
    following: bool,
    broker: Arc<dyn Broker>,
    handlers: Handlers,
    options: Options,
    token: CancellationToken,
}

impl Intake {
    #[expect(clippy::too_many_arguments, reason = "built once, in Consumer::run")]
    fn new(
        main: mpsc::Receiver<Delivery>,
        subscribed: BTreeSet<QueueName>,
        seen: Arc<Config>,
        mut config: watch::Receiver<Arc<Config>>,
        broker: Arc<dyn Broker>,
        handlers: Handlers,
        options: Options,
        token: CancellationToken,
    ) -> Self {
        config.mark_unchanged();
        let (added_tx, added) = mpsc::channel(ADDED_CAPACITY);
        Self {
            main,
            added_tx,
            added,
            forwarders: JoinSet::new(),
            subscribed,
            seen,
            config,
            following: true,
            broker,
            handlers,
            options,
            token,
        }
    }

    /// The next delivery; `None` when a subscription ended.
    ///
    /// # Cancel safety
    /// Cancel-safe: a delivery is only taken out of a channel when it is returned.
    async fn recv(&mut self) -> Option<Delivery> {
        loop {
            tokio::select! {
                d = self.main.recv() => return d,
                Some(d) = self.added.recv() => return Some(d),
                // A later subscription that ends on its own ends intake as the first
                // one's end does: the consumer stops, and its supervisor restarts it.
                Some(_) = self.forwarders.join_next(), if !self.forwarders.is_empty() => {
                    if !self.token.is_cancelled() {
                        tracing::error!("the subscription to the queues of reloaded jobs ended");
                        return None;
                    }
                }
                changed = self.config.changed(), if self.following => match changed {
                    Ok(()) => self.follow().await,
                    Err(_) => self.following = false,
                },
            }
        }
    }

    /// Takes in a reloaded config: warns about its new jobs that cannot run here, and
    /// subscribes to the queues it adds.
    async fn follow(&mut self) {
        let config = self.config.borrow_and_update().clone();
        // The jobs of the new config the last one lacked: what a reload from it retires.
        let added = config.retired(&self.seen);
        let wanted: BTreeSet<QueueName> = if self.options.queues.is_empty() {
            config.queues()
        } else {
            let named: BTreeSet<&str> = self.options.queues.iter().map(|q| q.trim()).collect();
            config
                .queues()
                .into_iter()
                .filter(|q| named.contains(q.as_str()))
                .collect()
        };
        let all: Vec<QueueName> = wanted.iter().cloned().collect();
        warn_unhandled(&config, &self.handlers, &all, Some(&added));
        let new: Vec<QueueName> = wanted.difference(&self.subscribed).cloned().collect();
        self.seen = config;
        if new.is_empty() {
            return;
        }
        let concurrency = self.options.concurrency.max(1);
        let subscribed = async {
            bounded("declare", self.broker.declare(&wanted)).await?;
            bounded(
                "consume",
                self.broker.consume(&new, concurrency, self.token.clone()),
            )
            .await
        };
        match subscribed.await {
            Ok(mut rx) => {
                tracing::info!(
                    queues = %new.iter().map(QueueName::as_str).collect::<Vec<_>>().join(","),
                    "consuming the queues of reloaded jobs"
                );
                self.subscribed.extend(new);
                let tx = self.added_tx.clone();
                self.forwarders.spawn(async move {
                    while let Some(d) = rx.recv().await {
                        if let Err(mpsc::error::SendError(d)) = tx.send(d).await {
                            let _ = d.acker.requeue().await;
                            break;
                        }
                    }
                });
            }
            Err(err) => tracing::error!(
                queues = %new.iter().map(QueueName::as_str).collect::<Vec<_>>().join(","),
                error = %err,
                "cannot subscribe to the queues of reloaded jobs: their occurrences wait in the queue until this consumer restarts or another consumer serves them"
            ),
        }
    }

    /// Stops taking deliveries and gives back what was received but not started.
    async fn close(&mut self) {
        self.main.close();
        while let Ok(d) = self.main.try_recv() {
            let _ = d.acker.requeue().await;
        }
        // Closed first, so a forwarder holding a delivery gives it back and ends.
        self.added.close();
        while let Ok(d) = self.added.try_recv() {
            let _ = d.acker.requeue().await;
        }
        let forwarded = async { while self.forwarders.join_next().await.is_some() {} };
        if tokio::time::timeout(FORWARDERS_STOP, forwarded)
            .await
            .is_err()
        {
            self.forwarders.shutdown().await;
        }
    }
}
