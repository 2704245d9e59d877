//! Look-ups shared by the operations commands: a job by name (with "did you mean"), an
//! RFC 3339 instant from a flag, the service connections, and whether a producer leads.

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use std::time::Duration;

use cronq_backends::Stores;
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::config::{Config, Job, did_you_mean};
use cronq_shared::endpoints::Endpoints;
use cronq_shared::names::JobName;

use super::settings::UsageError;
use crate::cli::Cli;

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

/// A `--job` filter: checked against the config when one is given, else only its form.
///
/// # Errors
/// A usage error for an unknown job or an invalid name; a config error.
pub fn job_filter(cli: &Cli, name: &str) -> anyhow::Result<JobName> {
    if cli.config.is_some() {
        let config = super::settings::load_config(cli)?;
        return Ok(job(&config, name)?.name.clone());
    }
    JobName::new(name).context("--job")
}

/// An RFC 3339 instant given to `flag`.
///
/// # Errors
/// [`UsageError`] naming the flag, the value and the expected form.
pub fn instant(flag: &str, text: &str) -> Result<DateTime<Utc>, UsageError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            UsageError(format!(
                "{flag} {text:?} is not an RFC 3339 instant such as 2026-11-29T19:30:00Z: {e}"
            ))
        })
}

/// The fleet's stores (fails within 10 s, naming the redacted URL); `retention` bounds
/// the run history's trimming on write.
///
/// # Errors
/// When Redis cannot be reached.
pub async fn stores(endpoints: &Endpoints, retention: Duration) -> anyhow::Result<Stores> {
    cronq_backends::stores(endpoints, retention, None)
        .await
        .context("while connecting to Redis")
}

/// A broker connection (fails within 10 s, naming the redacted URL).
///
/// # Errors
/// When RabbitMQ cannot be reached.
pub async fn broker(endpoints: &Endpoints) -> anyhow::Result<AmqpBroker> {
    cronq_backends::broker(endpoints)
        .await
        .context("while connecting to RabbitMQ")
}

/// A warning for stderr when no producer leads the namespace now (requests then wait).
pub async fn no_leader_note(stores: &Stores, endpoints: &Endpoints) -> Option<String> {
    match stores.lease.holder().await {
        Ok(Some(_)) => None,
        Ok(None) => Some(format!(
            "note: no producer leads namespace {:?} now; the request waits until one does (start `cronq producer`)",
            endpoints.namespace.as_str()
        )),
        Err(_) => None,
    }
}
