//! `cronq dashboard`: the web dashboard and its JSON API (`crate::dashboard`) on the state
//! the operations commands use: Redis and RabbitMQ, or a standalone's data file (`--data`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use cronq_backends::{Connect, Stores};
use cronq_shared::broker::bounded;
use cronq_shared::config::{Config, DEFAULT_RETENTION};
use cronq_shared::recorded::ConfigRecord;
use tokio::sync::watch;
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
    // The config the target runs (`crate::ops::running`), and the record it came from;
    // followed below as the target records others.
    let (config, recorded) = {
        let stores = lookup::stores(&target, DEFAULT_RETENTION).await?;
        let record = running::newest(&stores).await?;
        let recorded = record.as_ref().map(|r| r.digest.clone());
        (running::config_from(cli, &target, record)?, recorded)
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
    let (file, feed) = watch::channel(config);
    let source = Source::of(feed, deployment, &target);
    super::signals::cancel_on_signal(root.clone()).context("while installing signal handlers")?;
    let metrics = crate::admin::install_metrics(&source.config().metrics)?;
    let stores = source.stores.clone();
    let following = follow_record(cli, &target, &stores, recorded, &file, root.child_token());
    let served = dashboard::serve(args.addr, source, access, metrics, root.child_token());
    dashboard::serve_following(served, following).await
}

/// How often the dashboard reads whether its target recorded another config.
const RECORD_EVERY: Duration = Duration::from_secs(5);

/// Reads the digest of the target's newest recorded config every [`RECORD_EVERY`] and,
/// when it is another than `seen`, reads that record and sends the config the target runs
/// by it into `file`, as [`running::config_from`] reads it at the start; until `token` is
/// cancelled. A record that does not read is logged and skipped: the dashboard keeps the
/// config it shows.
async fn follow_record(
    cli: &Cli,
    target: &Target,
    stores: &Stores,
    mut seen: Option<String>,
    file: &watch::Sender<Arc<Config>>,
    token: CancellationToken,
) {
    let mut every = tokio::time::interval(RECORD_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            _ = every.tick() => {}
        }
        let record = match another_record(stores, seen.as_deref()).await {
            Ok(Some(record)) => record,
            Ok(None) => continue,
            Err(err) => {
                tracing::warn!(error = %format!("{err:#}"), "dashboard: cannot read the recorded config; showing the one it has");
                continue;
            }
        };
        let digest = record.digest.clone();
        match running::config_from(cli, target, Some(record)) {
            Ok(config) => {
                tracing::info!(digest = %digest, jobs = config.jobs.len(), "dashboard: the target recorded another config; showing it");
                file.send_replace(Arc::new(config));
            }
            Err(err) => {
                tracing::warn!(digest = %digest, error = %format!("{err:#}"), "dashboard: the newest recorded config does not read; showing the one it has");
            }
        }
        seen = Some(digest);
    }
}

/// The newest record of `stores` when its digest is not `seen`; `None` when nothing was
/// recorded or the newest is `seen`. Only the digest is read when it did not move: a record
/// may be megabytes.
async fn another_record(
    stores: &Stores,
    seen: Option<&str>,
) -> anyhow::Result<Option<ConfigRecord>> {
    let digest = stores
        .jobs
        .config_digest()
        .await
        .context("while reading the recorded config's digest")?;
    if digest.is_none() || digest.as_deref() == seen {
        return Ok(None);
    }
    Ok(running::newest(stores)
        .await?
        .filter(|record| Some(record.digest.as_str()) != seen))
}
