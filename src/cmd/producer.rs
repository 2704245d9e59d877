//! `cronq producer`: join leader election; the leader publishes occurrences. Glue only: the
//! work is in the `cronq_producer` library, the fleet's part in `crate::service`.

use std::sync::Arc;

use anyhow::Context as _;
use cronq_fleet::tally::Tally;
use cronq_producer::assembly;
use cronq_producer::instance_id;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::signals;
use crate::admin;
use crate::cli::{Cli, ProducerArgs};
use crate::service::{self, ProducerFleet};

/// Runs until the root token is cancelled (SIGTERM/SIGINT), then releases leadership at
/// once and returns.
pub async fn run(cli: &Cli, args: &ProducerArgs, root: CancellationToken) -> anyhow::Result<()> {
    let loading = std::time::Instant::now();
    let (config, text) = crate::settings::load_config_and_text(cli)?;
    let loaded_ms = u64::try_from(loading.elapsed().as_millis()).unwrap_or(u64::MAX);
    let endpoints = crate::settings::endpoints(cli)?;
    for warning in &config.warnings {
        warn!(warning = %warning, "config warning");
    }
    let (forwarder, hangups) = signals::install(&root)?;
    let metrics = admin::install_metrics(&config.metrics)?;

    let names = endpoints.names();
    let instance = instance_id();
    // A client name lets an operator find this producer's connection in `CLIENT LIST`.
    let client = format!("cronq-producer:{}:{instance}", names.namespace());
    let stores = cronq_backends::stores(&endpoints, config.longest_retention(), Some(client))
        .await
        .context("while connecting to Redis")?;
    let broker = Arc::new(
        cronq_backends::publisher(&endpoints)
            .await
            .context("while connecting to RabbitMQ")?,
    );
    info!(
        namespace = %names.namespace(),
        jobs = config.jobs.len(),
        loaded_ms,
        instance_id = %instance,
        "producer configured"
    );

    let ready = service::producer_ready(stores.lease.clone(), instance.clone());
    // What the leader publishes is counted for the Fleet page (docs/dashboard.md).
    let tally = Tally::default();
    let ports = service::leader_ports(&stores, broker.clone(), stores.ledger.clone());
    let trailing = args.reconcile.trailing();
    let leader =
        assembly::assemble(config, text, hangups, ports, &instance, &tally, trailing).await;
    let fleet = ProducerFleet {
        registry: stores.registry,
        instance,
        config: leader.config,
        tally,
        leadership: leader.producer.leadership(),
        first_term: Box::pin(leader.producer.first_term()),
    };
    // The fleet's part stops with the producer, so the record leaves last.
    let beside = root.child_token();
    let (served, ran, (), ()) = tokio::join!(
        admin::serve(args.serve.admin_addr, metrics, ready, root.clone()),
        async {
            let r = leader.producer.run(root.child_token()).await;
            beside.cancel();
            r
        },
        fleet.run(beside.clone()),
        leader.checks.run(beside.clone()),
    );
    forwarder.stop().await;
    broker.close().await;
    ran.context("while running the producer")?;
    served
}
