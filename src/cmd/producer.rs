//! `cronq producer`: join leader election; the leader publishes occurrences. Glue only: the
//! work is in the `cronq_producer` library.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use anyhow::Context as _;
use cronq_backends::Stores;
use cronq_fleet::digester::Digester;
use cronq_fleet::reporter::Reporter;
use cronq_fleet::tally::Tally;
use cronq_producer::assembly::{self, Assembly, Ports};
use cronq_producer::{ConfigCheck, Leadership, ServingCheck, instance_id, leader};
use cronq_shared::broker::Broker;
use cronq_shared::config::Config;
use cronq_shared::lease::Lease;
use cronq_shared::ledger::Ledger;
use cronq_shared::registry::{Registry, Role};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::signals;
use crate::admin::{self, ReadyProbe};
use crate::cli::{Cli, ProducerArgs};

/// Runs until the root token is cancelled (SIGTERM/SIGINT), then releases leadership at
/// once and returns.
pub async fn run(cli: &Cli, args: &ProducerArgs, root: CancellationToken) -> anyhow::Result<()> {
    let (config, text) = crate::settings::load_config_and_text(cli)?;
    let endpoints = crate::settings::endpoints(cli)?;
    for warning in &config.warnings {
        warn!(warning = %warning, "config warning");
    }
    signals::cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    let metrics = admin::install_metrics(&config.metrics)?;
    // Owns the SIGHUP forwarder; dropping it (on any return) aborts it.
    let mut signal_tasks = JoinSet::new();
    let hangups = signals::hangups(&mut signal_tasks, root.child_token())
        .context("while installing the SIGHUP handler")?;

    let names = endpoints.names();
    let instance = instance_id();
    // A client name lets an operator find this producer's connection in `CLIENT LIST`.
    let client = format!("cronq-producer:{}:{instance}", names.namespace());
    let stores = cronq_backends::stores(&endpoints, config.longest_retention(), Some(client))
        .await
        .context("while connecting to Redis")?;
    let broker = Arc::new(
        cronq_backends::broker(&endpoints)
            .await
            .context("while connecting to RabbitMQ")?,
    );
    info!(
        namespace = %names.namespace(),
        jobs = config.jobs.len(),
        instance_id = %instance,
        "producer configured"
    );

    let ready = readiness(stores.lease.clone(), instance.clone());
    // What the leader publishes is counted for the Fleet page (docs/dashboard.md).
    let tally = Tally::default();
    let ports = leader_ports(&stores, broker.clone(), stores.ledger.clone());
    let trailing = args.reconcile.trailing();
    let Assembly {
        producer,
        config,
        checks,
    } = assembly::assemble(config, text, hangups, ports, &instance, &tally, trailing).await;
    let fleet = Fleet {
        registry: stores.registry,
        instance,
        config,
        tally,
        leadership: producer.leadership(),
        first_term: Box::pin(producer.first_term()),
    };
    // The fleet's part stops with the producer, so the record leaves last.
    let beside = root.child_token();
    let (served, ran, (), ()) = tokio::join!(
        admin::serve(args.serve.admin_addr, metrics, ready, root.clone()),
        async {
            let r = producer.run(root.child_token()).await;
            beside.cancel();
            r
        },
        fleet.run(beside.clone()),
        checks.run(beside.clone()),
    );
    signal_tasks.shutdown().await;
    broker.close().await;
    ran.context("while running the producer")?;
    served
}

/// The ports of `stores` and `broker` the leader's side works on; the pools' use is read
/// from `pool_ledger`.
pub(super) fn leader_ports(
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

/// The producer's part in the fleet registry: its reports, and while it leads, the checks
/// that every instance runs its config and that every job is served.
struct Fleet {
    registry: Arc<dyn Registry>,
    instance: String,
    config: watch::Receiver<Arc<Config>>,
    tally: Tally,
    leadership: watch::Receiver<Option<Leadership>>,
    first_term: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Fleet {
    /// Reports until `token` is cancelled. The config's digest (both parts need it) takes
    /// seconds at a million jobs, so it is computed only once this producer leads, or once
    /// its first election has had a `[leader] retry` to make it leader: it never delays
    /// the take-over (docs/benchmarks-notebook.md). Until then the instance is not
    /// reported.
    async fn run(self, token: CancellationToken) {
        let decided = self.config.borrow().leader.retry;
        let first = tokio::time::timeout(decided, self.first_term);
        if token.run_until_cancelled(first).await.is_none() {
            return;
        }
        // One digest per config, for the reporter and the config check alike.
        let serving = ServingCheck::new(
            self.registry.clone(),
            self.config.clone(),
            self.leadership.clone(),
        );
        let Some((digester, digest)) = token.run_until_cancelled(Digester::new(self.config)).await
        else {
            return;
        };
        let reporter = Reporter::new(
            self.registry.clone(),
            self.instance,
            Role::Producer,
            digest.clone(),
            self.tally,
        )
        .with_leading(leader::leading_since(self.leadership.clone()));
        let check = ConfigCheck::new(self.registry, digest, self.leadership);
        tokio::join!(
            digester.run(token.clone()),
            reporter.run(token.clone()),
            check.run(token.clone()),
            serving.run(token),
        );
    }
}

/// Ready while Redis answers the lease lookup; the detail says leader or standby.
fn readiness(lease: Arc<dyn Lease>, instance: String) -> ReadyProbe {
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
