//! `cronq standalone`: producer and consumer in one process, on one SQLite data file
//! (`--data`, default `cronq.db`): no RabbitMQ, no Redis, and everything (queue, cursors,
//! pauses, records, history, dead letters) survives a restart; or in memory with
//! `--data :memory:`, where nothing does.
//!
//! Two standalones on one file: the one holding the leader lease in the file runs the jobs;
//! the other waits as a standby (its consumer half starts only once it leads,
//! `crate::service::until_leading`) and takes over within the lease when the first stops.

use std::sync::Arc;

use anyhow::Context as _;
use cronq_backends::{Connect, Deployment};
use cronq_consumer::{Consumer, Options};
use cronq_fleet::tally::{CountingLedger, Tally};
use cronq_producer::assembly::assemble;
use cronq_producer::instance_id;
use cronq_shared::registry::Role;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, ReadyProbe};
use crate::cli::{Cli, StandaloneArgs};
use crate::dashboard::{Beside, beside};
use crate::service::{self, Reports};

/// Runs until the root token is cancelled, then stops publishing and drains within
/// `--grace`.
pub async fn run(cli: &Cli, args: &StandaloneArgs, root: CancellationToken) -> anyhow::Result<()> {
    let data = crate::settings::standalone_data(cli)?;
    service::say_where(data.as_deref());
    let (config, text) = crate::settings::load_config_and_text(cli)?;
    crate::settings::check_commands(cli, &config)?;
    for warning in &config.warnings {
        tracing::warn!(warning = %warning, "config");
    }
    let keyring = crate::settings::keyring(cli)?;
    let dashboard = Beside::load(args.dashboard_addr, &args.token)?;
    let target = crate::settings::standalone_target(cli, data, keyring.clone());
    let retention = config.longest_retention();
    let deployment = cronq_backends::open(&target, retention, Connect::Patient).await?;
    let (forwarder, hangups) = super::signals::install(&root)?;
    let metrics = admin::install_metrics(&config.metrics)?;
    let shown_metrics = metrics.clone();
    let asked = dashboard.map(|d| (d, deployment.clone()));
    let Deployment { broker, stores } = deployment;

    let instance = instance_id();
    let options = Options {
        queues: Vec::new(),
        concurrency: args.concurrency.max(1),
        grace: args.grace,
        lease: args.lease,
        consumer_id: format!("standalone-{instance}"),
        keyring,
    };
    // One instance on the Fleet page, counting what both halves do (docs/dashboard.md).
    let tally = Tally::default();
    let ledger = Arc::new(CountingLedger::new(stores.ledger.clone(), tally.clone()));
    // The pools' use on /metrics reads the same ledger (reads are not counted). Both
    // halves follow one config: a SIGHUP reload reaches the consumer half too, so a job
    // added to the file runs instead of being dead-lettered as unknown.
    let ports = service::leader_ports(&stores, broker.clone(), ledger.clone());
    let (copy, trailing) = (config.clone(), args.reconcile.trailing());
    let leader = assemble(copy, text, hangups, ports, &instance, &tally, trailing).await;
    // The dashboard shows the config file as the leader half loads it (each reload).
    let dashboard = asked.map(|(d, deployment)| {
        let start = || Arc::new(config.clone());
        d.showing(leader.loads.clone(), start, deployment, &target)
    });
    let consumer = Consumer::new(config, broker, ledger, options)
        .following(leader.config.clone())
        .keep_outputs(Arc::clone(&stores.runlog), args.output.output_limit)
        .with_job_store(stores.jobs.clone());
    let leadership = leader.producer.leadership();
    let (registry, role) = (stores.registry.clone(), Role::Standalone);
    // It serves what its consumer half serves, in the same process.
    let reports = Reports::new(registry, &instance, role, leader.config, tally, leadership);
    let reports = reports.await.with_consumer(&consumer);
    let first_term = leader.producer.first_term();

    let ready: ReadyProbe = Arc::new(|| Box::pin(async { Ok("standalone".to_owned()) }));
    // The producer stops at once on shutdown; the consumer drains within --grace. If one
    // half fails, the other is stopped too: half a standalone is no use.
    let token = root.child_token();
    let shown = beside::serve(dashboard, shown_metrics, token.child_token());
    let t = token.child_token();
    let half = service::consume_once_leading(first_term, &*stores.lease, &instance, consumer, t);
    let (served, shown, produced, consumed, (), ()) = tokio::join!(
        admin::serve(args.serve.admin_addr, metrics, ready, token.clone()),
        service::or_stop(shown, &token),
        service::or_stop(leader.producer.run(token.child_token()), &token),
        service::or_stop(half, &token),
        reports.run(token.child_token()),
        leader.checks.run(token.child_token()),
    );
    forwarder.stop().await;
    produced.context("while running the producer")?;
    consumed.context("while running the consumer")?;
    shown.context("while serving the dashboard")?;
    served
}
