//! `cronq standalone`: producer and consumer in one process over the in-memory queue and
//! stores, with the same semantics for one instance: no RabbitMQ, no Redis. Nothing
//! survives the process: it is for one machine, development and demos.

use std::sync::Arc;

use anyhow::Context as _;
use cronq_consumer::{Consumer, DEFAULT_LEASE, Options};
use cronq_producer::{Producer, Reloader, instance_id};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, ReadyProbe};
use crate::cli::{Cli, StandaloneArgs};

/// Run records kept in memory; the oldest are dropped first.
const MAX_RUNS: usize = 10_000;

/// Runs until the root token is cancelled, then stops publishing and drains within
/// `--grace`.
pub async fn run(cli: &Cli, args: &StandaloneArgs, root: CancellationToken) -> anyhow::Result<()> {
    let config = super::settings::load_config(cli)?;
    for warning in &config.warnings {
        tracing::warn!(warning = %warning, "config");
    }
    super::signals::cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    // Owns the SIGHUP forwarder; dropping it (on any return) aborts it.
    let mut signal_tasks = JoinSet::new();
    let hangups = super::signals::hangups(&mut signal_tasks, root.child_token())
        .context("while installing the SIGHUP handler")?;
    let metrics = admin::install_metrics()?;

    let (broker, stores) = cronq_backends::memory(MAX_RUNS);
    let instance = instance_id();
    let options = Options {
        queues: Vec::new(),
        concurrency: args.concurrency.max(1),
        grace: args.grace,
        lease: DEFAULT_LEASE,
        consumer_id: format!("standalone-{instance}"),
    };
    let consumer = Consumer::new(
        config.clone(),
        Arc::new(broker.clone()),
        stores.ledger,
        options,
    );
    let (reloader, config_rx) = Reloader::new(config, hangups);
    let producer = Producer::new(
        Arc::new(broker),
        stores.lease,
        stores.control,
        config_rx,
        instance,
    )
    .with_reloader(reloader);
    tracing::info!("standalone: producer and consumer in one process, in memory");

    let ready: ReadyProbe = Arc::new(|| Box::pin(async { Ok("standalone".to_owned()) }));
    // The producer stops at once on shutdown; the consumer drains within --grace. If one
    // half fails, the other is stopped too: half a standalone is no use.
    let token = root.child_token();
    let stop_all = |failed: bool| {
        if failed {
            token.cancel();
        }
    };
    let (served, produced, consumed) = tokio::join!(
        admin::serve(args.serve.admin_addr, metrics, ready, token.clone()),
        async {
            let r = producer.run(token.child_token()).await;
            stop_all(r.is_err());
            r
        },
        async {
            let r = consumer.run(token.child_token()).await;
            stop_all(r.is_err());
            r
        },
    );
    signal_tasks.shutdown().await;
    produced.context("while running the producer")?;
    consumed.context("while running the consumer")?;
    served
}
