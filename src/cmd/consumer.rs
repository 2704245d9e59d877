//! `cronq consumer`: glue from flags to [`cronq_consumer::Consumer`].

use anyhow::Context as _;
use cronq_consumer::{Consumer, Options, default_consumer_id};
use tokio_util::sync::CancellationToken;

use super::UsageError;
use crate::cli::{Cli, ConsumerArgs};

/// Runs until the root token is cancelled (SIGTERM/SIGINT), then drains within `--grace`.
pub async fn run(cli: &Cli, args: &ConsumerArgs, root: CancellationToken) -> anyhow::Result<()> {
    let config = super::load_config(cli)?;
    let endpoints = super::endpoints(cli)?;
    let options = Options {
        queues: args.queues.clone(),
        concurrency: args.concurrency.max(1),
        grace: args.grace,
        lease: args.lease,
        consumer_id: args.consumer_id.clone().unwrap_or_else(default_consumer_id),
    };
    // An unknown --queues name is a usage error (exit 2), found before connecting.
    options
        .select_queues(&config)
        .map_err(|e| UsageError(e.to_string()))?;
    for warning in &config.warnings {
        tracing::warn!(warning = %warning, "config");
    }
    super::signals::cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    let consumer = Consumer::connect(config, &endpoints, options)
        .await
        .context("while starting the consumer")?;
    consumer
        .run(root)
        .await
        .context("while running the consumer")?;
    Ok(())
}
