//! What every subcommand reads besides its own arguments: the config file and the service
//! endpoints, from flags and environment; and [`UsageError`], for what clap cannot check.
//!
//! Invariant: a missing or unusable setting is a [`UsageError`] or a config error (exit
//! code 2), never a runtime failure.

use std::path::Path;

use anyhow::Context as _;
use cronq_shared::config::Config;
use cronq_shared::endpoints::Endpoints;
use cronq_shared::names::Namespace;

use crate::cli::Cli;

/// A usage error found after clap (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

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
