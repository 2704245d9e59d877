//! `cronq job apply|get|delete|history`: runtime jobs in the job store
//! (`cronq_shared::jobs`), which every producer and consumer polls (docs/runtime-jobs.md).
//! Glue only: checking a job is `Config::runtime_jobs`, storing it the port's.

use anyhow::Context as _;
use cronq_shared::config::Config;
use cronq_shared::jobs::current;
use cronq_shared::names::JobName;

use crate::cli::{Cli, JobApplyArgs, JobArg, JobGetArgs};
use crate::ops::audit::operator;
use crate::ops::runtime_job::{self, missing};
use crate::settings::UsageError;

/// The config the target runs (`crate::ops::running`: runtime jobs resolve against it) and
/// the target's stores.
async fn running(cli: &Cli) -> anyhow::Result<(Config, cronq_backends::Stores)> {
    let target = crate::settings::target(cli)?;
    crate::ops::running::config_and_stores(cli, &target).await
}

/// Creates or updates each `[[job]]` of `--file`.
///
/// # Errors
/// A config or usage error (an invalid job, a file job's name, an unknown handler, runtime
/// jobs refused by the config) before anything is written; the store unreachable.
pub async fn apply(cli: &Cli, args: &JobApplyArgs) -> anyhow::Result<()> {
    let (config, stores) = running(cli).await?;
    runtime_job::allowed(&config)?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("while reading {}", args.file.display()))?;
    let jobs = config.runtime_jobs(&text, &args.file)?;
    // `after` names jobs among the file's and the runtime ones these join.
    let revisions = stores
        .jobs
        .list()
        .await
        .context("while listing the runtime jobs")?;
    config.check_applied(&revisions, &jobs, &args.file)?;
    // Which handlers the live consumers offer; the config stands in when it is unknown.
    let beats = stores.registry.instances().await.ok();
    let refused = runtime_job::refusals(
        &config,
        &jobs,
        beats.as_deref(),
        &args.file,
        args.allow_unknown_handler,
    );
    if !refused.is_empty() {
        return Err(UsageError(format!("nothing applied:\n{}", refused.join("\n"))).into());
    }
    let by = operator();
    for job in &jobs {
        runtime_job::write(&stores, job, &by).await?;
    }
    Ok(())
}

/// Prints a runtime job's current definition.
///
/// # Errors
/// A usage error when no such runtime job exists; the store unreachable.
pub async fn get(cli: &Cli, args: &JobGetArgs) -> anyhow::Result<()> {
    let (config, stores) = running(cli).await?;
    let name = JobName::new(&args.job)?;
    let store = stores.jobs;
    let Some(rev) = current(&*store, &name)
        .await
        .context("while reading the job")?
    else {
        return Err(missing(&config, &name).into());
    };
    if args.json {
        println!("{}", crate::ops::json::revision(&rev));
    } else {
        runtime_job::print_revision(&rev);
    }
    Ok(())
}

/// Deletes a runtime job.
///
/// # Errors
/// A usage error when no such runtime job exists; the store unreachable.
pub async fn delete(cli: &Cli, args: &JobArg) -> anyhow::Result<()> {
    let (config, stores) = running(cli).await?;
    let name = JobName::new(&args.job)?;
    runtime_job::delete(&config, &stores, &name).await
}

/// Prints every revision of a runtime job, with what each changed.
///
/// # Errors
/// A usage error when the job was never written; the store unreachable.
pub async fn history(cli: &Cli, args: &JobArg) -> anyhow::Result<()> {
    let (config, stores) = running(cli).await?;
    let name = JobName::new(&args.job)?;
    let store = stores.jobs;
    let revisions = store
        .history(&name)
        .await
        .context("while reading the job's history")?;
    if revisions.is_empty() {
        return Err(missing(&config, &name).into());
    }
    runtime_job::print_history(&revisions);
    Ok(())
}
