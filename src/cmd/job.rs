//! `cronq job apply|get|delete|history`: runtime jobs in the job store
//! (`cronq_shared::jobs`), which every producer and consumer polls (docs/runtime-jobs.md).
//! Glue only: checking a job is `Config::runtime_jobs`, storing it the port's.

use anyhow::Context as _;
use cronq_shared::config::Config;
use cronq_shared::jobs::current;
use cronq_shared::names::JobName;
use futures_util::StreamExt as _;

use crate::cli::{Cli, JobApplyArgs, JobArg, JobGetArgs};
use crate::ops::audit::operator;
use crate::ops::runtime_job::{self, missing};
use crate::settings::UsageError;

/// How many jobs of one `cronq job apply` are written at a time.
const WRITES_IN_FLIGHT: usize = 16;

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
    // `after` names jobs among the file's and the runtime ones these join; without it no
    // applied job can name a missing parent or close a cycle, and the store's jobs are not
    // read.
    if jobs.iter().any(|j| j.job.is_after()) {
        let revisions = stores
            .jobs
            .list()
            .await
            .context("while listing the runtime jobs")?;
        config.check_applied(&revisions, &jobs, &args.file)?;
    }
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
    // Several writes in flight (each a few store round trips), said in the file's order;
    // the first failure stops the writes not yet started, and those in flight finish
    // (their audit entries written) and are said before it.
    let failed = std::sync::atomic::AtomicBool::new(false);
    let mut written = futures_util::stream::iter(&jobs)
        .map(|job| {
            let (stores, by, failed) = (&stores, &by, &failed);
            async move {
                if failed.load(std::sync::atomic::Ordering::Relaxed) {
                    return Ok(None);
                }
                let line = runtime_job::write(stores, job, by).await;
                if line.is_err() {
                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                line.map(Some)
            }
        })
        .buffered(WRITES_IN_FLIGHT);
    let mut first_error = None;
    while let Some(line) = written.next().await {
        match line {
            Ok(Some(line)) => println!("{line}"),
            Ok(None) => {}
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
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
