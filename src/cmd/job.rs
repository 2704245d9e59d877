//! `cronq job apply|get|delete|history`: runtime jobs in the job store
//! (`cronq_shared::jobs`), which every producer and consumer polls (docs/runtime-jobs.md).
//! Glue only: checking a job is `Config::runtime_jobs`, storing it the port's.

use anyhow::Context as _;
use cronq_shared::audit::{Entry, diff};
use cronq_shared::config::Config;
use cronq_shared::jobs::{Expect, Written, current};
use cronq_shared::names::JobName;

use crate::cli::{Cli, JobApplyArgs, JobArg, JobGetArgs};
use crate::ops::audit::{self, operator};
use crate::ops::handler_check;
use crate::output;
use crate::settings::UsageError;

/// The config the target runs (`crate::ops::running`: runtime jobs resolve against it) and
/// the target's stores.
async fn running(cli: &Cli) -> anyhow::Result<(Config, cronq_backends::Stores)> {
    let target = crate::settings::target(cli)?;
    crate::ops::running::config_and_stores(cli, &target).await
}

/// The audit entry of a runtime job's change by the command line.
fn entry(action: &str, job: &JobName, before: Option<&str>, after: Option<&str>) -> Entry {
    Entry::done(action, &operator(), audit::CLI)
        .job(Some(job.as_str()))
        .detail(Some(
            diff(before.unwrap_or_default(), after.unwrap_or_default()).join("\n"),
        ))
}

/// Creates or updates each `[[job]]` of `--file`.
///
/// # Errors
/// A config or usage error (an invalid job, a file job's name, an unknown handler, runtime
/// jobs refused by the config) before anything is written; the store unreachable.
pub async fn apply(cli: &Cli, args: &JobApplyArgs) -> anyhow::Result<()> {
    let (config, stores) = running(cli).await?;
    if !config.runtime.jobs {
        return Err(UsageError(format!(
            "{} says [runtime] jobs = false: runtime jobs are refused; add the job to the config file instead",
            config.path.display()
        ))
        .into());
    }
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
    let mut refused = Vec::new();
    for job in &jobs {
        let name = job.job.name.as_str();
        if config.job(name).is_some() {
            refused.push(format!(
                "job {name:?} is a job of the config file {}: change it there (file jobs are read-only at runtime)",
                config.path.display()
            ));
        }
        if !args.allow_unknown_handler
            && let Some(why) = handler_check::refusal(&config, &job.job, beats.as_deref())
        {
            refused.push(format!(
                "{}: job {name:?}: {why}; or give --allow-unknown-handler when they register it in Rust",
                args.file.display()
            ));
        }
    }
    if !refused.is_empty() {
        return Err(UsageError(format!("nothing applied:\n{}", refused.join("\n"))).into());
    }
    let store = &stores.jobs;
    let by = operator();
    for job in &jobs {
        let name = &job.job.name;
        let before = current(&**store, name)
            .await
            .with_context(|| format!("while reading job {:?}", name.as_str()))?;
        if before.as_ref().and_then(|r| r.spec.as_deref()) == Some(job.spec.as_str()) {
            println!(
                "job {:?} unchanged (revision {})",
                name.as_str(),
                before.map_or(0, |r| r.revision)
            );
            continue;
        }
        let expect = Expect::Revision(before.as_ref().map_or(0, |r| r.revision));
        let written = store
            .write(name, Some(&job.spec), &by, expect)
            .await
            .with_context(|| format!("while writing job {:?}", name.as_str()))?;
        let action = if before.is_none() {
            "job.create"
        } else {
            "job.update"
        };
        let old = before.as_ref().and_then(|r| r.spec.as_deref());
        let mut entry = entry(action, name, old, Some(&job.spec));
        match written {
            Written::Done(n) if before.is_none() => {
                println!("created job {:?} (revision {n})", name.as_str());
            }
            Written::Done(n) => println!("updated job {:?} (revision {n})", name.as_str()),
            Written::Stale { current } => {
                let why = format!(
                    "job {:?} changed meanwhile (now revision {current}): nothing written for it; apply again",
                    name.as_str()
                );
                entry = entry.refused(&why);
                audit::record(&*stores.audit, entry).await;
                anyhow::bail!(why);
            }
        }
        audit::record(&*stores.audit, entry).await;
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
        println!(
            "# job {:?}, revision {} by {} at {}",
            rev.name,
            rev.revision,
            rev.by,
            output::utc(rev.at)
        );
        print!("[[job]]\n{}", rev.spec.as_deref().unwrap_or_default());
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
    let before = current(&*stores.jobs, &name)
        .await
        .context("while reading the job")?;
    match stores
        .jobs
        .write(&name, None, &operator(), Expect::Any)
        .await
        .context("while deleting the job")?
    {
        Written::Done(n) => {
            let old = before.as_ref().and_then(|r| r.spec.as_deref());
            audit::record(&*stores.audit, entry("job.delete", &name, old, None)).await;
            println!(
                "deleted job {:?} (revision {n}); no more occurrences are published for it",
                name.as_str()
            );
            Ok(())
        }
        Written::Stale { .. } => {
            let why = missing(&config, &name);
            let entry = entry("job.delete", &name, None, None).refused(&why.0);
            audit::record(&*stores.audit, entry).await;
            Err(why.into())
        }
    }
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
    let mut before: Option<&str> = None;
    for rev in &revisions {
        let what = match (before, rev.spec.as_deref()) {
            (_, None) => "deleted",
            (None, Some(_)) => "created",
            (Some(_), Some(_)) => "updated",
        };
        println!(
            "revision {} {what} by {} at {}",
            rev.revision,
            rev.by,
            output::utc(rev.at)
        );
        for line in diff(
            before.unwrap_or_default(),
            rev.spec.as_deref().unwrap_or_default(),
        ) {
            println!("  {line}");
        }
        before = rev.spec.as_deref();
    }
    Ok(())
}

fn missing(config: &Config, name: &JobName) -> UsageError {
    let file = if config.job(name.as_str()).is_some() {
        format!(
            "; {:?} is a job of the config file {}",
            name.as_str(),
            config.path.display()
        )
    } else {
        String::new()
    };
    UsageError(format!("no runtime job {:?}{file}", name.as_str()))
}
