//! What `cronq job apply|get|delete|history` says and records of a runtime job: why a
//! job is refused before anything is written, one job's write with its audit entry, a
//! revision and a history as text, and the error for a job that does not exist. Checking a
//! job stays `Config::runtime_jobs`, storing it the job store port's.

use anyhow::Context as _;
use cronq_backends::Stores;
use cronq_shared::audit::{Entry, diff};
use cronq_shared::config::{Config, RuntimeJob};
use cronq_shared::jobs::{Expect, Revision, Written, current};
use cronq_shared::names::JobName;
use cronq_shared::registry::Beat;

use crate::ops::audit::{self, operator};
use crate::ops::handler_check;
use crate::output;
use crate::settings::UsageError;

/// The audit entry of a runtime job's change by the command line.
fn entry(action: &str, job: &JobName, before: Option<&str>, after: Option<&str>) -> Entry {
    Entry::done(action, &operator(), audit::CLI)
        .job(Some(job.as_str()))
        .detail(Some(
            diff(before.unwrap_or_default(), after.unwrap_or_default()).join("\n"),
        ))
}

/// Why each of `jobs` (read from `file`) may not be applied: a file job's name, or (unless
/// `allow_unknown_handler`) a handler no consumer offers.
pub fn refusals(
    config: &Config,
    jobs: &[RuntimeJob],
    beats: Option<&[Beat]>,
    file: &std::path::Path,
    allow_unknown_handler: bool,
) -> Vec<String> {
    let mut refused = Vec::new();
    for job in jobs {
        let name = job.job.name.as_str();
        if config.job(name).is_some() {
            refused.push(format!(
                "job {name:?} is a job of the config file {}: change it there (file jobs are read-only at runtime)",
                config.path.display()
            ));
        }
        if !allow_unknown_handler && let Some(why) = handler_check::refusal(config, &job.job, beats)
        {
            refused.push(format!(
                "{}: job {name:?}: {why}; or give --allow-unknown-handler when they register it in Rust",
                file.display()
            ));
        }
    }
    refused
}

/// Writes `job` unless its spec is unchanged and records it in the audit log; returns the
/// line that says what became of it.
///
/// # Errors
/// The store unreachable; the job changed meanwhile (recorded as refused).
pub async fn write(stores: &Stores, job: &RuntimeJob, by: &str) -> anyhow::Result<String> {
    let store = &stores.jobs;
    let name = &job.job.name;
    let before = current(&**store, name)
        .await
        .with_context(|| format!("while reading job {:?}", name.as_str()))?;
    if before.as_ref().and_then(|r| r.spec.as_deref()) == Some(job.spec.as_str()) {
        return Ok(format!(
            "job {:?} unchanged (revision {})",
            name.as_str(),
            before.map_or(0, |r| r.revision)
        ));
    }
    let expect = Expect::Revision(before.as_ref().map_or(0, |r| r.revision));
    let written = store
        .write(name, Some(&job.spec), by, expect)
        .await
        .with_context(|| format!("while writing job {:?}", name.as_str()))?;
    let action = if before.is_none() {
        "job.create"
    } else {
        "job.update"
    };
    let old = before.as_ref().and_then(|r| r.spec.as_deref());
    let mut entry = entry(action, name, old, Some(&job.spec));
    let line = match written {
        Written::Done(n) if before.is_none() => {
            format!("created job {:?} (revision {n})", name.as_str())
        }
        Written::Done(n) => format!("updated job {:?} (revision {n})", name.as_str()),
        Written::Stale { current } => {
            let why = format!(
                "job {:?} changed meanwhile (now revision {current}): nothing written for it; apply again",
                name.as_str()
            );
            entry = entry.refused(&why);
            audit::record(&*stores.audit, entry).await;
            anyhow::bail!(why);
        }
    };
    audit::record(&*stores.audit, entry).await;
    Ok(line)
}

/// Deletes `name` from the job store, prints it and records it in the audit log.
///
/// # Errors
/// A usage error when no such runtime job exists (recorded as refused); the store
/// unreachable.
pub async fn delete(config: &Config, stores: &Stores, name: &JobName) -> anyhow::Result<()> {
    let before = current(&*stores.jobs, name)
        .await
        .context("while reading the job")?;
    match stores
        .jobs
        .write(name, None, &operator(), Expect::Any)
        .await
        .context("while deleting the job")?
    {
        Written::Done(n) => {
            let old = before.as_ref().and_then(|r| r.spec.as_deref());
            audit::record(&*stores.audit, entry("job.delete", name, old, None)).await;
            println!(
                "deleted job {:?} (revision {n}); no more occurrences are published for it",
                name.as_str()
            );
            Ok(())
        }
        Written::Stale { .. } => {
            let why = missing(config, name);
            let entry = entry("job.delete", name, None, None).refused(&why.0);
            audit::record(&*stores.audit, entry).await;
            Err(why.into())
        }
    }
}

/// `Ok` unless the config refuses runtime jobs.
///
/// # Errors
/// A usage error when the config says `[runtime] jobs = false`.
pub fn allowed(config: &Config) -> Result<(), UsageError> {
    if !config.runtime.jobs {
        return Err(UsageError(format!(
            "{} says [runtime] jobs = false: runtime jobs are refused; add the job to the config file instead",
            config.path.display()
        )));
    }
    Ok(())
}

/// A revision as `cronq job get` prints it: a heading comment, then its `[[job]]` table.
pub fn print_revision(rev: &Revision) {
    println!(
        "# job {:?}, revision {} by {} at {}",
        rev.name,
        rev.revision,
        rev.by,
        output::utc(rev.at)
    );
    print!("[[job]]\n{}", rev.spec.as_deref().unwrap_or_default());
}

/// Each revision, oldest first, with what it changed.
pub fn print_history(revisions: &[Revision]) {
    let mut before: Option<&str> = None;
    for rev in revisions {
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
}

/// The usage error for a runtime job that does not exist (naming the config file when
/// the name is one of its jobs).
pub fn missing(config: &Config, name: &JobName) -> UsageError {
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
