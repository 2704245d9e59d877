//! One module per subcommand; each is thin glue over the libraries.

mod backfill;
mod check;
mod consumer;
mod dlq;
mod jobs;
mod lookup;
mod next;
mod pause;
mod producer;
mod runs;
mod signals;
mod standalone;
mod trigger;

use std::path::Path;

use anyhow::Context as _;
use cronq_shared::config::{Config, ConfigError};
use cronq_shared::endpoints::Endpoints;
use cronq_shared::names::Namespace;
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, Command, DlqCommand};

/// A usage error found after clap (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Runs the chosen subcommand.
pub async fn dispatch(cli: Cli, root: CancellationToken) -> anyhow::Result<()> {
    match &cli.command {
        Command::Check => check::run(&cli),
        Command::Next(args) => next::run(&cli, args),
        Command::Producer(args) => producer::run(&cli, args, root).await,
        Command::Consumer(args) => consumer::run(&cli, args, root).await,
        Command::Standalone(args) => standalone::run(&cli, args, root).await,
        Command::Jobs(args) => jobs::run(&cli, args).await,
        Command::Runs(args) => runs::run(&cli, args).await,
        Command::Pause(args) => pause::pause(&cli, args).await,
        Command::Resume(args) => pause::resume(&cli, args).await,
        Command::Trigger(args) => trigger::run(&cli, args).await,
        Command::Backfill(args) => backfill::run(&cli, args).await,
        Command::Dlq(DlqCommand::List(args)) => dlq::list(&cli, args).await,
        Command::Dlq(DlqCommand::Replay(args)) => dlq::replay(&cli, args).await,
        Command::Probe(args) => crate::admin::probe(&args.url).await,
    }
}

/// 2 for config and usage errors, 1 for everything else.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let usage = err.chain().any(|e| {
        e.is::<ConfigError>() || e.is::<UsageError>() || e.is::<cronq_shared::names::NameError>()
    });
    if usage { 2 } else { 1 }
}

/// Loads the config named by `--config` or `CRONQ_CONFIG`.
pub fn load_config(cli: &Cli) -> anyhow::Result<Config> {
    let path = cli.config.as_deref().ok_or_else(|| {
        UsageError("no config file: pass --config FILE or set CRONQ_CONFIG".into())
    })?;
    Ok(Config::load(Path::new(path))?)
}

/// The service endpoints and namespace from flags and environment.
pub fn endpoints(cli: &Cli) -> anyhow::Result<Endpoints> {
    let namespace = Namespace::new(&cli.namespace).context("CRONQ_NAMESPACE")?;
    Ok(Endpoints {
        amqp_url: cli.amqp_url.clone(),
        redis_url: cli.redis_url.clone(),
        namespace,
    })
}
