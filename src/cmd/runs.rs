//! `cronq runs`: the run history, newest first, from the run log (Redis, or a data file).

use anyhow::Context as _;
use cronq_shared::config::{DEFAULT_RETENTION, did_you_mean};
use serde_json::json;

use super::settings::UsageError;
use crate::cli::{Cli, RunsArgs};
use crate::ops::{self, lookup};
use crate::output::{self, Table};

/// How many of the newest runs name the jobs a misspelt `--job` is compared with.
const RECENT_FOR_NAMES: usize = 1000;

/// Prints up to `--limit` runs, newest first, as a table or one JSON document.
///
/// # Errors
/// A usage error for `--limit 0`, an unknown `--job`, or one with no runs that is close to
/// the name of a job with recent runs (a likely typo); Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &RunsArgs) -> anyhow::Result<()> {
    if args.limit == 0 {
        return Err(UsageError("--limit must be at least 1".into()).into());
    }
    let target = super::settings::target(cli)?;
    let job = match &args.job {
        Some(name) => Some(lookup::job_filter(cli, name)?),
        None => None,
    };
    // `runs` never writes, so the retention (for trimming on write) does not matter.
    let stores = lookup::stores(&target, DEFAULT_RETENTION).await?;
    let runs = stores
        .runlog
        .list(job.as_ref(), args.limit)
        .await
        .context("while reading the run history")?;
    if args.json {
        let runs: Vec<_> = runs.iter().map(ops::json::run).collect();
        output::print_json(&json!({ "runs": runs }));
        return Ok(());
    }
    if runs.is_empty() {
        if let Some(job) = &job {
            // Without a config to check the name against, a misspelt job shows no runs:
            // the recent history's job names say whether it is likely a typo.
            let recent = stores
                .runlog
                .list(None, RECENT_FOR_NAMES)
                .await
                .context("while reading the run history")?;
            let names: std::collections::BTreeSet<&str> =
                recent.iter().map(|r| r.key.job().as_str()).collect();
            if let Some(near) = did_you_mean(job.as_str(), names.iter().copied()) {
                return Err(UsageError(format!(
                    "no runs of job {:?} recorded; did you mean \"{near}\"? (jobs with recent runs: {})",
                    job.as_str(),
                    names.into_iter().collect::<Vec<_>>().join(", ")
                ))
                .into());
            }
            println!("no runs of job {:?} recorded yet", job.as_str());
            return Ok(());
        }
        println!("no runs recorded yet");
        return Ok(());
    }
    let mut table = Table::new(&[
        "KEY",
        "ATTEMPT",
        "CONSUMER",
        "STARTED",
        "PUBLISHED LATE",
        "STARTED LATE",
        "DURATION",
        "OUTCOME",
        "ERROR",
    ]);
    for r in &runs {
        table.row(vec![
            r.key.to_string(),
            r.attempt.to_string(),
            r.consumer.clone(),
            output::utc(r.started_at),
            output::lateness(r.publish_lateness()),
            output::lateness(r.start_lateness()),
            output::duration(r.duration),
            r.outcome.to_string(),
            output::or_dash(r.error.as_deref()),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}
