//! `cronq dashboard`: the web dashboard and its JSON API (`crate::dashboard`) on the state
//! the operations commands use: Redis and RabbitMQ, or a standalone's data file (`--data`).

use std::sync::Arc;

use anyhow::Context as _;
use cronq_backends::Connect;
use cronq_shared::broker::bounded;
use cronq_shared::config::DEFAULT_RETENTION;
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, DashboardArgs};
use crate::dashboard::{self, Access, Source};
use crate::ops::{lookup, running};
use crate::settings::Target;

/// Serves the dashboard until SIGTERM or SIGINT.
///
/// # Errors
/// A config or usage error (token, target); Redis or RabbitMQ unreachable at start, or the
/// data file unusable; the address taken.
pub async fn run(cli: &Cli, args: &DashboardArgs, root: CancellationToken) -> anyhow::Result<()> {
    let access = Access::load(
        args.token.tokens_file.as_deref(),
        args.token.dashboard_token_file.as_deref(),
    )?;
    let target = crate::settings::target(cli)?;
    // The config the target runs (`crate::ops::running`), as at the start.
    let config = {
        let stores = lookup::stores(&target, DEFAULT_RETENTION).await?;
        running::config_of(cli, &target, &stores).await?
    };
    let deployment = lookup::open(&target, config.longest_retention(), Connect::Patient).await?;
    let config = Arc::new(config);
    if let Target::Fleet(_) = target {
        // The queues exist once declared (as every producer and consumer does), so
        // their depths can be read without RabbitMQ refusing a passive declare.
        let queues = config.queues();
        let declare = deployment.broker.declare(&queues);
        if let Err(err) = bounded("declare the queues", declare).await {
            tracing::warn!(error = %anyhow::Error::new(err), "dashboard: cannot declare the queues; their depths show as unknown");
        }
    }
    let source = Source::of(config, deployment, &target);
    super::signals::cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    let metrics = crate::admin::install_metrics(&source.config.metrics)?;
    dashboard::serve(args.addr, source, access, metrics, root.child_token()).await
}
