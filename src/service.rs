//! What the long-running commands (`cronq producer`, `cronq consumer`, `cronq standalone`)
//! wire beside their work: the ports the leader's side works on ([`leader_ports`]), the
//! instance's reports and the leader's fleet checks ([`Reports`], and [`ProducerFleet`] for
//! a producer), the readiness probes, and a standalone's wait to lead ([`until_leading`]).
//!
//! Invariant: a process that runs a producer reports itself and checks the fleet with the
//! same code, whatever else it runs; the commands in `src/cmd/` only choose what to pass.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use cronq_backends::Stores;
use cronq_consumer::Consumer;
use cronq_fleet::digester::Digester;
use cronq_fleet::reporter::Reporter;
use cronq_fleet::tally::Tally;
use cronq_producer::assembly::Ports;
use cronq_producer::{ConfigCheck, Leadership, ServingCheck, leader};
use cronq_shared::broker::Broker;
use cronq_shared::config::Config;
use cronq_shared::lease::Lease;
use cronq_shared::ledger::Ledger;
use cronq_shared::registry::{Registry, Role};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::admin::ReadyProbe;

/// How long a standalone waits to lead before it looks whether another one holds the file.
const STANDBY_NOTE_AFTER: Duration = Duration::from_secs(1);

/// Says where a standalone keeps its state: the data file `data`, or memory (`None`).
pub fn say_where(data: Option<&Path>) {
    match data {
        Some(path) => tracing::info!(
            data = %path.display(),
            "standalone: data file {}",
            path.display()
        ),
        None => tracing::info!(
            data = crate::settings::IN_MEMORY,
            "standalone: in memory (--data :memory:): nothing survives this process"
        ),
    }
}

/// The ports of `stores` and `broker` the leader's side works on; the pools' use is read
/// from `pool_ledger`.
pub fn leader_ports(
    stores: &Stores,
    broker: Arc<dyn Broker>,
    pool_ledger: Arc<dyn Ledger>,
) -> Ports {
    Ports {
        broker,
        ledger: stores.ledger.clone(),
        pool_ledger,
        runlog: stores.runlog.clone(),
        lease: stores.lease.clone(),
        control: stores.control.clone(),
        registry: stores.registry.clone(),
        jobs: stores.jobs.clone(),
        audit: stores.audit.clone(),
    }
}

/// A producing instance's part in the fleet registry: its reports, and while it leads, the
/// checks that every instance runs its config and that every job is served.
pub struct Reports {
    digester: Digester,
    reporter: Reporter,
    check: ConfigCheck,
    serving: ServingCheck,
}

impl Reports {
    /// The reports of `instance` in `role`, following `config`, adding what `tally`
    /// counts, leading as `leadership` says. One digest per config, for the reporter and
    /// the config check alike.
    pub async fn new(
        registry: Arc<dyn Registry>,
        instance: &str,
        role: Role,
        config: watch::Receiver<Arc<Config>>,
        tally: Tally,
        leadership: watch::Receiver<Option<Leadership>>,
    ) -> Self {
        let serving = ServingCheck::new(registry.clone(), config.clone(), leadership.clone());
        let (digester, digest) = Digester::new(config).await;
        let reporter = Reporter::new(registry.clone(), instance, role, digest.clone(), tally)
            .with_leading(leader::leading_since(leadership.clone()));
        let check = ConfigCheck::new(registry, digest, leadership);
        Self {
            digester,
            reporter,
            check,
            serving,
        }
    }

    /// The reports also say what `consumer`, in the same process, serves and runs.
    #[must_use]
    pub fn with_consumer(mut self, consumer: &Consumer) -> Self {
        self.reporter = self
            .reporter
            .with_serves(consumer.serves())
            .with_running(consumer.running());
        self
    }

    /// Reports and checks until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) {
        tokio::join!(
            self.digester.run(token.clone()),
            self.reporter.run(token.clone()),
            self.check.run(token.clone()),
            self.serving.run(token),
        );
    }
}

/// A `cronq producer`'s [`Reports`], started once it may lead.
pub struct ProducerFleet {
    /// The fleet registry.
    pub registry: Arc<dyn Registry>,
    /// This producer's instance id.
    pub instance: String,
    /// The config in force.
    pub config: watch::Receiver<Arc<Config>>,
    /// What its leader publishes.
    pub tally: Tally,
    /// Its leadership.
    pub leadership: watch::Receiver<Option<Leadership>>,
    /// Resolves once its first term begins.
    pub first_term: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl ProducerFleet {
    /// Reports until `token` is cancelled. The config's digest (both parts need it) takes
    /// seconds at a million jobs, so it is computed only once this producer leads, or once
    /// its first election has had a `[leader] retry` to make it leader: it never delays
    /// the take-over (docs/benchmarks-notebook.md). Until then the instance is not
    /// reported.
    pub async fn run(self, token: CancellationToken) {
        let decided = self.config.borrow().leader.retry;
        let first = tokio::time::timeout(decided, self.first_term);
        if token.run_until_cancelled(first).await.is_none() {
            return;
        }
        let reports = Reports::new(
            self.registry,
            &self.instance,
            Role::Producer,
            self.config,
            self.tally,
            self.leadership,
        );
        let Some(reports) = token.run_until_cancelled(reports).await else {
            return;
        };
        reports.run(token).await;
    }
}

/// A producer is ready while the store answers the lease lookup; the detail says leader
/// or standby.
pub fn producer_ready(lease: Arc<dyn Lease>, instance: String) -> ReadyProbe {
    Arc::new(move || {
        let (lease, instance) = (lease.clone(), instance.clone());
        Box::pin(async move {
            match lease.holder().await {
                Ok(Some(h)) if h.instance == instance => Ok(format!("leader, epoch {}", h.epoch)),
                Ok(Some(h)) => Ok(format!(
                    "standby, leader {} (epoch {})",
                    h.instance, h.epoch
                )),
                Ok(None) => Ok("standby, no leader yet".to_owned()),
                Err(e) => Err(format!("redis: {e}")),
            }
        })
    })
}

/// A consumer is ready while the store answers (the broker reconnects by itself and holds
/// no state here): one read of the lease stands for a ping.
pub fn consumer_ready(lease: Arc<dyn Lease>) -> ReadyProbe {
    Arc::new(move || {
        let lease = Arc::clone(&lease);
        Box::pin(async move {
            lease
                .holder()
                .await
                .map(|_| "consuming".to_owned())
                .map_err(|e| format!("redis: {e}"))
        })
    })
}

/// Runs `work`; if it fails, cancels `token`, the process's other work: half a standalone
/// is no use.
pub async fn or_stop<T, E>(
    work: impl Future<Output = Result<T, E>>,
    token: &CancellationToken,
) -> Result<T, E> {
    let r = work.await;
    if r.is_err() {
        token.cancel();
    }
    r
}

/// Runs a standalone's consumer half once its producer leads ([`until_leading`]), until
/// `token` is cancelled.
///
/// # Errors
/// As [`Consumer::run`].
pub async fn consume_once_leading(
    first_term: impl Future<Output = ()>,
    lease: &dyn Lease,
    instance: &str,
    consumer: Consumer,
    token: CancellationToken,
) -> Result<(), cronq_consumer::Error> {
    if !until_leading(first_term, lease, instance, &token).await {
        return Ok(());
    }
    consumer.run(token).await
}

/// Waits until a standalone's producer leads (`true`), or `token` is cancelled; says
/// once that it is a standby when another standalone leads the file meanwhile.
pub async fn until_leading(
    first_term: impl Future<Output = ()>,
    lease: &dyn Lease,
    instance: &str,
    token: &CancellationToken,
) -> bool {
    tokio::pin!(first_term);
    // Long enough for an uncontested start to win the lease, so only a real standby says so.
    if let Ok(()) = tokio::time::timeout(STANDBY_NOTE_AFTER, &mut first_term).await {
        // It also resolves when the producer stopped without leading (shutdown).
        if token.is_cancelled() {
            return false;
        }
        tracing::info!(instance_id = %instance, "standalone: leading: running the jobs");
        return true;
    }
    if let Ok(Some(holder)) = lease.holder().await
        && holder.instance != instance
    {
        tracing::info!(
            instance_id = %instance,
            leader = %holder.instance,
            "standalone: another standalone runs on this data file: waiting as standby; it takes over within the leader lease when that one stops"
        );
    }
    tokio::select! {
        () = &mut first_term => {
            if token.is_cancelled() {
                return false;
            }
            tracing::info!(instance_id = %instance, "standalone: the standby took over: now running the jobs");
            true
        }
        () = token.cancelled() => false,
    }
}
