//! Which config an operations command acts on: the one its target runs. A standalone
//! records the config file it loads in its data file, a fleet's leading producer in the
//! store (`cronq_shared::recorded`); the command reads that record, so it needs no
//! `--config`. A `--config` given that differs from the record gets a warning naming the
//! jobs that differ, and the record is used (it is what runs); one that does not differ is
//! used, for its handlers (the record has none). Where nothing is recorded
//! (a data file of an older version, a fleet not led since), `--config` is used, else the
//! command fails saying what to do (`docs/operations.md`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use cronq_backends::{Connect, Stores};
use cronq_shared::accounting::FileVersion;
use cronq_shared::broker::Broker;
use cronq_shared::config::{Config, DEFAULT_RETENTION};
use cronq_shared::recorded::{ConfigRecord, Drift, KEEP};

use crate::cli::Cli;
use crate::ops::lookup;
use crate::output;
use crate::settings::{Target, UsageError};

/// The config `target` runs (its file jobs, without the runtime ones) and its stores.
///
/// # Errors
/// When the stores cannot be reached; a config error for a `--config` that does not load;
/// a usage error when nothing is recorded and no `--config` is given.
pub async fn config_and_stores(cli: &Cli, target: &Target) -> anyhow::Result<(Config, Stores)> {
    let stores = lookup::stores(target, DEFAULT_RETENTION).await?;
    let config = config_of(cli, target, &stores).await?;
    if config.longest_retention() == DEFAULT_RETENTION {
        return Ok((config, stores));
    }
    // The history a command appends is trimmed to the config's longest retention.
    drop(stores);
    let stores = lookup::stores(target, config.longest_retention()).await?;
    Ok((config, stores))
}

/// The stores of `target`, for a command that needs no config but appends history, which
/// is trimmed to the longest retention of the config that runs (the default when there is
/// none).
///
/// # Errors
/// When the stores cannot be reached; a config error for a `--config` that does not load.
pub async fn stores(cli: &Cli, target: &Target) -> anyhow::Result<Stores> {
    match config_and_stores(cli, target).await {
        Ok((_, stores)) => Ok(stores),
        Err(e) if e.is::<UsageError>() => lookup::stores(target, DEFAULT_RETENTION).await,
        Err(e) => Err(e),
    }
}

/// The config `target` runs, its stores and its queue (a data file opened once for both).
///
/// # Errors
/// As [`config_and_stores`]; the queue unreachable.
pub async fn config_stores_and_queue(
    cli: &Cli,
    target: &Target,
) -> anyhow::Result<(Config, Stores, Arc<dyn Broker>)> {
    let mut deployment = lookup::open(target, DEFAULT_RETENTION, Connect::Now).await?;
    let config = match config_of(cli, target, &deployment.stores).await {
        Ok(config) => config,
        Err(e) => {
            deployment.broker.close().await;
            return Err(e);
        }
    };
    if config.longest_retention() != DEFAULT_RETENTION {
        deployment.broker.close().await;
        drop(deployment);
        deployment = lookup::open(target, config.longest_retention(), Connect::Now).await?;
    }
    Ok((config, deployment.stores, deployment.broker))
}

/// The config `target` runs, read from `stores` (see the module docs).
///
/// # Errors
/// As [`config_and_stores`].
pub async fn config_of(cli: &Cli, target: &Target, stores: &Stores) -> anyhow::Result<Config> {
    config_from(cli, target, newest(stores).await?)
}

/// The config `target` runs, from `record`, the newest it recorded (none: nothing
/// recorded yet), and the file `--config` names.
///
/// # Errors
/// As [`config_of`].
pub fn config_from(
    cli: &Cli,
    target: &Target,
    record: Option<ConfigRecord>,
) -> anyhow::Result<Config> {
    let given = match cli.config.as_deref() {
        Some(path) => Some(cronq_shared::recorded::load_file(Path::new(path))?),
        None => None,
    };
    match (record, given) {
        (Some(record), given) => {
            let recorded = match record.load() {
                Ok(config) => config,
                Err(err) => {
                    if let Some(given) = given {
                        eprintln!(
                            "warning: the config recorded {} does not read ({err:#}); using {}",
                            place(target),
                            given.config.path.display()
                        );
                        return Ok(unwrap(given.config));
                    }
                    return Err(anyhow::Error::new(err).context(format!(
                        "while reading the config recorded {}: pass --config FILE",
                        place(target)
                    )));
                }
            };
            if let Some(given) = given {
                let drift = Drift::between(&recorded, &given.config, &given.text);
                if drift.is_empty() {
                    // The same jobs, with their handlers (which the record has not).
                    return Ok(unwrap(given.config));
                }
                eprintln!("{}", drift_warning(&given.config, &record, target, &drift));
            }
            Ok(recorded)
        }
        (None, Some(given)) => Ok(unwrap(given.config)),
        (None, None) => Err(UsageError(nothing_recorded(target)).into()),
    }
}

/// The versions of the config file in force over `[from, to]`, oldest first, from the
/// recorded loads (`cronq_shared::accounting::history`); empty when nothing is recorded.
/// A record that does not read ends the history there (older ones are not used).
///
/// # Errors
/// When the store cannot be read.
pub async fn file_history(
    stores: &Stores,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<Vec<FileVersion>> {
    let records = stores
        .jobs
        .config_records(KEEP)
        .await
        .context("while reading the recorded config")?;
    let mut versions = Vec::new();
    for (i, record) in records.iter().enumerate() {
        if record.since > to {
            continue; // loaded after the range
        }
        if i > 0 && records[i - 1].since <= from {
            break; // replaced before the range
        }
        match record.load() {
            Ok(config) => versions.push(FileVersion {
                since: record.since,
                config,
            }),
            Err(_) => break,
        }
    }
    versions.reverse();
    Ok(versions)
}

/// The newest record of `stores`, if any.
///
/// # Errors
/// When the store cannot be read.
pub async fn newest(stores: &Stores) -> anyhow::Result<Option<ConfigRecord>> {
    Ok(stores
        .jobs
        .config_records(1)
        .await
        .context("while reading the recorded config")?
        .pop())
}

fn unwrap(config: std::sync::Arc<Config>) -> Config {
    std::sync::Arc::try_unwrap(config).unwrap_or_else(|shared| (*shared).clone())
}

/// `in data file F` or `in namespace "N"`.
pub fn place(target: &Target) -> String {
    match target {
        Target::Fleet(endpoints) => format!(
            "in the store of namespace {:?}",
            endpoints.namespace.as_str()
        ),
        Target::Data { path, .. } => format!("in data file {}", path.display()),
        Target::Memory { .. } => "in the standalone's memory".to_owned(),
    }
}

/// What to start so that `target` records its config.
pub fn runner(target: &Target) -> String {
    match target {
        Target::Fleet(_) => {
            "`cronq producer --config FILE` once (its leader records its config)".to_owned()
        }
        Target::Data { path, .. } => format!(
            "`cronq standalone --config FILE --data {}` once (it records its config)",
            path.display()
        ),
        Target::Memory { .. } => {
            "`cronq standalone --config FILE` (it records its config)".to_owned()
        }
    }
}

/// The error when nothing is recorded and no `--config` was given.
pub fn nothing_recorded(target: &Target) -> String {
    format!(
        "no config recorded {} yet, and no --config: pass --config FILE (or set CRONQ_CONFIG), or start {}",
        place(target),
        runner(target)
    )
}

/// The warning for a `--config` whose jobs differ from the recorded ones.
fn drift_warning(given: &Config, record: &ConfigRecord, target: &Target, drift: &Drift) -> String {
    format!(
        "warning: --config {} differs from the config recorded {} ({}, loaded {} by {}): jobs {}; this command uses the recorded config, which is what runs (reload the producer or standalone to run the file)",
        given.path.display(),
        place(target),
        record.path,
        output::utc(record.at),
        record.by,
        drift.describe()
    )
}
