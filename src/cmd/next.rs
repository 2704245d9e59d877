//! `cronq next`: preview the next fire times of each job, strictly after `--from`
//! (default now), in the job's zone and in UTC; a schedule with `H` also shows what it
//! resolved to for the job. A job that runs after other jobs (`after`) shows its expected
//! times: those its parents share.

use chrono::{DateTime, SecondsFormat, Utc};
use cronq_shared::config::{Config, Job};
use serde_json::json;

use crate::cli::{Cli, NextArgs};
use crate::ops::{lookup, running};
use crate::settings::UsageError;

/// Prints the next `--count` fire times per job, as a table or one JSON document. The
/// config's jobs; `--job` may also name a runtime job (then the job store is read).
///
/// # Errors
/// A config error, or a usage error for an unknown `--job`, a bad `--from` or `--count 0`.
pub async fn run(cli: &Cli, args: &NextArgs) -> anyhow::Result<()> {
    let from = match args.from.as_deref() {
        None => Utc::now(),
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|e| {
                UsageError(format!(
                    "--from {text:?} is not an RFC 3339 instant such as 2026-03-08T06:00:00Z: {e}"
                ))
            })?
            .with_timezone(&Utc),
    };
    if args.count == 0 {
        return Err(UsageError("--count must be at least 1".into()).into());
    }
    // With `--config`, the file is previewed (no service is needed); without, the config
    // the target runs, its runtime jobs included (`crate::ops::running`).
    let Some(_) = cli.config else {
        let target = crate::settings::target(cli)?;
        let (config, stores) = running::config_and_stores(cli, &target).await?;
        let config = lookup::with_runtime(config, &stores).await?;
        return preview(&config, args, from);
    };
    let config = crate::settings::load_config(cli)?;
    // A `--job` not in the file may be a runtime job of the target's job store.
    let config = match args.job.as_deref() {
        Some(name) if config.job(name).is_none() => match crate::settings::target(cli) {
            Ok(target) => {
                lookup::job_with_stores(cli, &target, name)
                    .await
                    .map_err(|e| match e.downcast::<UsageError>() {
                        Ok(UsageError(m)) => UsageError(format!("--job: {m}")).into(),
                        Err(e) => e,
                    })?
                    .0
            }
            Err(_) => config,
        },
        _ => config,
    };
    preview(&config, args, from)
}

/// Prints the preview of `config`'s jobs (or `--job`'s).
fn preview(config: &Config, args: &NextArgs, from: DateTime<Utc>) -> anyhow::Result<()> {
    let jobs: Vec<&Job> = match args.job.as_deref() {
        Some(name) => vec![find_job(config, name)?],
        None => config.jobs.iter().collect(),
    };
    let previews: Vec<(&Job, Vec<DateTime<Utc>>)> = jobs
        .into_iter()
        .map(|job| {
            (
                job,
                // A job with parents (`after`): their common scheduled times.
                config.times_after(job, from).take(args.count).collect(),
            )
        })
        .collect();
    if args.json {
        println!("{}", to_json(from, &previews));
    } else {
        print_table(&previews, args.count);
    }
    Ok(())
}

/// `--job J`: the job, or the lookup's error under the flag's name.
fn find_job<'a>(config: &'a Config, name: &str) -> Result<&'a Job, UsageError> {
    lookup::job(config, name).map_err(|UsageError(e)| UsageError(format!("--job: {e}")))
}

fn utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn to_json(from: DateTime<Utc>, previews: &[(&Job, Vec<DateTime<Utc>>)]) -> serde_json::Value {
    let jobs: Vec<_> = previews
        .iter()
        .map(|(job, times)| {
            let next: Vec<_> = times
                .iter()
                .map(|t| {
                    json!({
                        "utc": utc(*t),
                        "local": t.with_timezone(&job.timezone).to_rfc3339_opts(SecondsFormat::Secs, false),
                    })
                })
                .collect();
            let mut doc = json!({
                "job": job.name.as_str(),
                "schedule": job.schedule.as_str(),
                "timezone": job.timezone.name(),
                "next": next,
            });
            if let Some(resolved) = job.schedule.resolved() {
                doc["resolved"] = json!(resolved);
            }
            doc
        })
        .collect();
    json!({ "from": utc(from), "jobs": jobs })
}

fn print_table(previews: &[(&Job, Vec<DateTime<Utc>>)], count: usize) {
    for (i, (job, times)) in previews.iter().enumerate() {
        if i > 0 {
            println!();
        }
        match job.schedule.resolved() {
            None => println!(
                "{} ({:?} in {})",
                job.name,
                job.schedule.as_str(),
                job.timezone.name()
            ),
            Some(resolved) => println!(
                "{} ({:?}, H resolved to {resolved:?}, in {})",
                job.name,
                job.schedule.as_str(),
                job.timezone.name()
            ),
        }
        for t in times {
            let local = t.with_timezone(&job.timezone);
            println!(
                "  {}  {}",
                local.format("%Y-%m-%d %H:%M:%S %:z %Z"),
                utc(*t)
            );
        }
        if times.len() < count {
            println!("  (no further fire times)");
        }
    }
}
