//! `cronq producer`: join leader election; the leader publishes occurrences. Glue only: the
//! work is in the `cronq_producer` library.

use std::sync::Arc;

use anyhow::Context as _;
use cronq_producer::{Producer, Reloader, instance_id};
use cronq_shared::broker::amqp::AmqpBroker;
use cronq_shared::connect;
use cronq_shared::control::Control;
use cronq_shared::lease::redis::RedisLease;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::signals;
use crate::cli::{Cli, ServeArgs};

/// Runs until the root token is cancelled (SIGTERM/SIGINT), then releases leadership at
/// once and returns.
pub async fn run(cli: &Cli, args: &ServeArgs, root: CancellationToken) -> anyhow::Result<()> {
    let config = super::load_config(cli)?;
    let endpoints = super::endpoints(cli)?;
    for warning in &config.warnings {
        warn!(warning = %warning, "config warning");
    }
    if args.admin_addr.port() != 0 {
        warn!(admin_addr = %args.admin_addr, "the admin endpoint is not served by `cronq producer` in this build");
    }
    signals::cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    let hangups = signals::hangups().context("while installing the SIGHUP handler")?;

    let names = endpoints.names();
    let instance = instance_id();
    let redis = connect::redis(&endpoints.redis_url)
        .await
        .context("while connecting to Redis")?;
    // A client name lets an operator find this producer's connection in `CLIENT LIST`.
    let lease = RedisLease::new(redis.clone(), &names)
        .with_client_name(format!("cronq-producer:{}:{instance}", names.namespace()));
    let control = Control::redis(redis, &names);
    let broker = Arc::new(
        AmqpBroker::connect(&endpoints.amqp_url, names.clone())
            .await
            .context("while connecting to RabbitMQ")?,
    );
    info!(
        namespace = %names.namespace(),
        jobs = config.jobs.len(),
        instance_id = %instance,
        "producer configured"
    );

    let (reloader, config_rx) = Reloader::new(config, hangups);
    Producer::new(
        broker.clone(),
        Arc::new(lease),
        control,
        config_rx,
        instance,
    )
    .with_reloader(reloader)
    .run(root.child_token())
    .await
    .context("while running the producer")?;
    broker.close().await;
    Ok(())
}
