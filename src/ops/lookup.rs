//! Look-ups shared by the operations commands: a job by name (with "did you mean"), an
//! RFC 3339 instant from a flag, the state of the [`Target`] (the services, or a
//! standalone's data file), and whether a producer leads.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};

use cronq_backends::{Connect, Deployment, OpenError, Stores};
use cronq_shared::broker::Broker;
use cronq_shared::config::{Config, DEFAULT_RETENTION, Job, did_you_mean};
use cronq_shared::names::JobName;

use crate::cli::Cli;
use crate::ops::running;
use crate::settings::{DEFAULT_DATA, Target, UsageError};

/// The job called `name` in `config`, or a usage error naming the file and suggesting a
/// likely match.
///
/// # Errors
/// [`UsageError`] when there is no such job.
pub fn job<'a>(config: &'a Config, name: &str) -> Result<&'a Job, UsageError> {
    if let Some(job) = config.job(name) {
        return Ok(job);
    }
    let names = config.jobs.iter().map(|j| j.name.as_str());
    let hint = match did_you_mean(name, names.clone()) {
        Some(s) => format!("did you mean \"{s}\"?"),
        None if config.jobs.is_empty() => "it defines no job".to_owned(),
        None => format!("its jobs are {}", names.collect::<Vec<_>>().join(", ")),
    };
    Err(UsageError(format!(
        "no job {name:?} in {}; {hint}",
        config.path.display()
    )))
}

/// `config` with the runtime jobs of `stores` merged in, as every producer and consumer
/// merges them (`cronq_shared::reload`): what the operations commands act on. A runtime
/// job that does not resolve against `config` (or that a file job shadows) is left out.
///
/// # Errors
/// When the job store cannot be read.
pub async fn with_runtime(config: Config, stores: &Stores) -> anyhow::Result<Config> {
    if !config.runtime.jobs {
        return Ok(config);
    }
    let revisions = stores
        .jobs
        .list()
        .await
        .context("while reading the runtime jobs")?;
    if revisions.is_empty() {
        return Ok(config);
    }
    Ok(config.with_runtime(&revisions).0)
}

/// The config `target` runs (`crate::ops::running`) with its runtime jobs merged in, and
/// its stores, for a command that acts on the job `name`: a job of the file, or a runtime
/// job.
///
/// # Errors
/// As [`crate::ops::running::config_and_stores`]; a usage error when `name` is neither a
/// file job nor a runtime job.
pub async fn job_with_stores(
    cli: &Cli,
    target: &Target,
    name: &str,
) -> anyhow::Result<(Config, Stores)> {
    let (config, stores) = running::config_and_stores(cli, target).await?;
    if config.job(name).is_some() {
        return Ok((config, stores));
    }
    let config = with_runtime(config, &stores).await?;
    job(&config, name)?;
    Ok((config, stores))
}

/// A `--job` filter for a command that needs no config otherwise (`runs`, `audit`):
/// checked against the config the target runs (`crate::ops::running`) when there is one,
/// else only its form.
///
/// # Errors
/// A usage error for an unknown job or an invalid name; a config error.
pub async fn job_filter(cli: &Cli, name: &str) -> anyhow::Result<JobName> {
    let found = match crate::settings::target(cli) {
        Ok(target) => match stores(&target, DEFAULT_RETENTION).await {
            Ok(stores) => match running::config_of(cli, &target, &stores).await {
                Ok(config) => Some((config, Some(stores))),
                Err(e) if e.is::<UsageError>() => None,
                Err(e) => return Err(e),
            },
            Err(_) if cli.config.is_some() => Some((crate::settings::load_config(cli)?, None)),
            Err(_) => None,
        },
        Err(_) if cli.config.is_some() => Some((crate::settings::load_config(cli)?, None)),
        Err(_) => None,
    };
    match found {
        Some((config, stores)) => job_in(&config, stores.as_ref(), name).await,
        None => JobName::new(name).context("--job"),
    }
}

/// A `--job` filter checked against `config`: a job of it, a runtime job, present or
/// deleted (one the job store of `stores` has a history of), or a job the run log has runs
/// of (one a config had before).
///
/// # Errors
/// A usage error for an unknown job.
pub async fn job_in(
    config: &Config,
    stores: Option<&Stores>,
    name: &str,
) -> anyhow::Result<JobName> {
    let no_job = match job(config, name) {
        Ok(job) => return Ok(job.name.clone()),
        Err(e) => e,
    };
    if let (Ok(other), Some(stores)) = (JobName::new(name), stores)
        && (stores
            .jobs
            .history(&other)
            .await
            .is_ok_and(|h| !h.is_empty())
            || stores
                .runlog
                .list(Some(&other), 1)
                .await
                .is_ok_and(|r| !r.is_empty()))
    {
        return Ok(other);
    }
    Err(no_job.into())
}

/// An RFC 3339 instant given to `flag`.
///
/// # Errors
/// [`UsageError`] naming the flag, the value and the expected form.
pub fn instant(flag: &str, text: &str) -> Result<DateTime<Utc>, UsageError> {
    rfc3339(text).map_err(|message| UsageError(format!("{flag} {message}")))
}

/// `text` as an RFC 3339 instant; the error message starts with the value (the caller
/// names the flag or field before it).
///
/// # Errors
/// The message, for text that is not RFC 3339.
pub fn rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!("{text:?} is not an RFC 3339 instant such as 2026-11-29T19:30:00Z: {e}")
        })
}

/// The stores of `target` (the services fail within 10 s, naming the redacted URL; a data
/// file at once, naming the file); `retention` bounds the run history's trimming on write.
///
/// # Errors
/// When Redis cannot be reached or the data file cannot be used; a usage error when the
/// data file does not exist.
pub async fn stores(target: &Target, retention: Duration) -> anyhow::Result<Stores> {
    existing(target)?;
    hinted(target, cronq_backends::open_stores(target, retention).await)
}

/// The queue of `target` (RabbitMQ is tried once per node: a refused connection fails at
/// once, naming the redacted URL).
///
/// # Errors
/// As [`stores`], for RabbitMQ.
pub async fn queue(target: &Target) -> anyhow::Result<Arc<dyn Broker>> {
    existing(target)?;
    hinted(
        target,
        cronq_backends::open_broker(target, Connect::Now).await,
    )
}

/// The stores and the queue of `target` (a data file opened once for both), its broker
/// connected as `connect` says.
///
/// # Errors
/// As [`stores`] and [`queue`].
pub async fn open(
    target: &Target,
    retention: Duration,
    connect: Connect,
) -> anyhow::Result<Deployment> {
    existing(target)?;
    hinted(
        target,
        cronq_backends::open(target, retention, connect).await,
    )
}

/// A usage error for a data file that does not exist: an operations command never creates
/// one.
fn existing(target: &Target) -> Result<(), UsageError> {
    match target {
        Target::Data { path, .. } if !path.exists() => Err(UsageError(format!(
            "data file {} does not exist: give the file `cronq standalone --data PATH` runs on (it creates it on first start)",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// `result`, with [`data_file_hint`] when `target` is the fleet.
fn hinted<T>(target: &Target, result: Result<T, OpenError>) -> anyhow::Result<T> {
    let result = result.map_err(anyhow::Error::new);
    match target {
        Target::Fleet(_) => data_file_hint(result),
        Target::Data { .. } | Target::Memory { .. } => result,
    }
}

/// A fleet's service that failed, when a standalone's default data file is in the working
/// directory: the user most likely meant to read that file, so say how.
fn data_file_hint<T>(result: anyhow::Result<T>) -> anyhow::Result<T> {
    result.map_err(|err| {
        if std::path::Path::new(DEFAULT_DATA).exists() {
            err.context(format!(
                "without --data this reads the fleet's Redis and RabbitMQ; a standalone's data file {DEFAULT_DATA} is in this directory: pass --data {DEFAULT_DATA} (or set CRONQ_DATA) to read it"
            ))
        } else {
            err
        }
    })
}

/// A warning for stderr when nothing leads `target` now (requests then wait).
pub async fn no_leader_note(stores: &Stores, target: &Target) -> Option<String> {
    match stores.lease.holder().await {
        Ok(Some(_)) | Err(_) => None,
        Ok(None) => Some(match target {
            Target::Fleet(endpoints) => format!(
                "note: no producer leads namespace {:?} now; the request waits until one does (start `cronq producer`)",
                endpoints.namespace.as_str()
            ),
            Target::Data { path, .. } => format!(
                "note: no standalone runs on data file {} now; the request waits until one does (start `cronq standalone --data {}`)",
                path.display(),
                path.display()
            ),
            Target::Memory { .. } => {
                "note: the standalone does not lead now; the request waits until it does".to_owned()
            }
        }),
    }
}
