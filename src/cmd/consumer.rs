//! `cronq consumer`: glue from flags to [`cronq_consumer::Consumer`], plus the admin
//! endpoints. SIGHUP reloads the config (named handlers, file jobs), as a producer's does.

use std::sync::Arc;

use anyhow::Context as _;
use cronq_consumer::{Consumer, Options, default_consumer_id};
use cronq_fleet::digester::Digester;
use cronq_fleet::reporter::Reporter;
use cronq_fleet::tally::{CountingLedger, Tally};
use cronq_shared::registry::Role;
use cronq_shared::reload::Reloader;
use tokio_util::sync::CancellationToken;

use crate::admin;
use crate::cli::{Cli, ConsumerArgs};

/// Runs until the root token is cancelled (SIGTERM/SIGINT), then drains within `--grace`.
pub async fn run(cli: &Cli, args: &ConsumerArgs, root: CancellationToken) -> anyhow::Result<()> {
    let config = crate::settings::load_config(cli)?;
    crate::settings::check_commands(cli, &config)?;
    let endpoints = crate::settings::endpoints(cli)?;
    let options = Options {
        queues: args.queues.clone(),
        concurrency: args.concurrency.max(1),
        grace: args.grace,
        lease: args.lease,
        consumer_id: args.consumer_id.clone().unwrap_or_else(default_consumer_id),
        keyring: endpoints.keyring.clone(),
    };
    // An unknown --queues name is a usage error (exit 2), found before connecting.
    options.select_queues(&config)?;
    for warning in &config.warnings {
        tracing::warn!(warning = %warning, "config");
    }
    let (forwarder, hangups) = super::signals::install(&root)?;
    let metrics = admin::install_metrics(&config.metrics)?;
    let stores = cronq_backends::stores(&endpoints, config.longest_retention(), None)
        .await
        .context("while starting the consumer: cannot connect to the idempotency store")?;
    let broker = cronq_backends::broker(&endpoints)
        .await
        .context("while starting the consumer: cannot connect to the message broker")?;
    let ready = crate::service::consumer_ready(Arc::clone(&stores.lease));
    // What this consumer runs to an end is counted for the Fleet page (docs/dashboard.md).
    let tally = Tally::default();
    let ledger = Arc::new(CountingLedger::new(stores.ledger, tally.clone()));
    let (reloader, config_rx) = Reloader::new(config.clone(), hangups);
    let mut reloader = reloader.with_store(stores.jobs.clone());
    // The runtime jobs are in the config from the start: a first term takes them over
    // with their cursors, rather than as new jobs a poll later.
    reloader.poll().await;
    // One digest per config, for the Fleet page.
    let (digester, digest_rx) = Digester::new(config_rx.clone()).await;
    let reporter = Reporter::new(
        stores.registry,
        &options.consumer_id,
        Role::Consumer,
        digest_rx,
        tally,
    );
    let consumer = Consumer::new(config, Arc::new(broker), ledger, options)
        .following(config_rx)
        .keep_outputs(Arc::clone(&stores.runlog), args.output.output_limit)
        .with_job_store(stores.jobs.clone());
    // The leader tells from it which jobs no consumer serves (docs/runtime-jobs.md).
    // ... and which runs breach their `sla` while they run (docs/alerts.md).
    let reporter = reporter
        .with_serves(consumer.serves())
        .with_running(consumer.running());
    let beside = root.child_token();
    let (served, ran, (), (), ()) = tokio::join!(
        admin::serve(args.serve.admin_addr, metrics, ready, root.clone()),
        async {
            let r = consumer.run(root.clone()).await;
            beside.cancel();
            r
        },
        reporter.run(beside.clone()),
        digester.run(beside.clone()),
        reloader.run(beside.clone()),
    );
    forwarder.stop().await;
    ran.context("while running the consumer")?;
    served
}
