//! How `cronq runs` reads and shows the run history: the `--key` it parses, the outputs
//! kept with the runs, the table, each attempt's output, and what an empty answer says
//! (with a "did you mean" when a job's name is likely a typo). Below the commands.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::Context as _;
use cronq_shared::config::did_you_mean;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::names::JobName;
use cronq_shared::runlog::{Run, RunLog, RunOutput};

use crate::output::{self, Table};
use crate::settings::UsageError;

/// How many of the newest runs name the jobs a misspelt `--job` is compared with.
const RECENT_FOR_NAMES: usize = 1000;

/// `--key`'s text as an occurrence key.
///
/// # Errors
/// A usage error naming the key's form.
pub fn key(text: &str) -> Result<OccurrenceKey, UsageError> {
    text.parse().map_err(|_| {
        UsageError(format!(
            "--key {text:?} is not an occurrence key: JOB@SCHEDULED_UTC (as `cronq runs` lists them, e.g. hello@2026-11-30T10:00:05Z) or JOB@manual-ID"
        ))
    })
}

/// What an empty history says: for `--key`, for `--job`, or for all runs.
///
/// # Errors
/// A usage error when `job` has no runs and is close to the name of a job with recent
/// runs (a likely typo); the run log unreadable.
pub async fn print_none(
    runlog: &dyn RunLog,
    key: Option<&OccurrenceKey>,
    job: Option<&JobName>,
) -> anyhow::Result<()> {
    if let Some(key) = key {
        println!("no runs of {key} recorded");
        return Ok(());
    }
    if let Some(job) = job {
        // Without a config to check the name against, a misspelt job shows no runs:
        // the recent history's job names say whether it is likely a typo.
        let recent = runlog
            .list(None, RECENT_FOR_NAMES)
            .await
            .context("while reading the run history")?;
        let names: BTreeSet<&str> = recent.iter().map(|r| r.key.job().as_str()).collect();
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
    Ok(())
}

/// The runs table, one line per attempt.
pub fn table(runs: &[Run]) -> Table {
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
    for r in runs {
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
    table
}

/// The outputs kept of the keys of `runs`, by key and attempt.
pub async fn outputs_of(
    runlog: &dyn RunLog,
    runs: &[Run],
) -> anyhow::Result<HashMap<String, BTreeMap<u32, RunOutput>>> {
    let mut outputs = HashMap::new();
    for r in runs {
        if !outputs.contains_key(r.key.as_str()) {
            let kept = runlog
                .outputs(&r.key)
                .await
                .with_context(|| format!("while reading the outputs of {}", r.key))?;
            outputs.insert(r.key.to_string(), kept);
        }
    }
    Ok(outputs)
}

/// One attempt's output under a heading naming it, each part under its own.
pub fn print_output(r: &Run, kept: Option<&RunOutput>) {
    println!("\n== {} attempt {} ({})", r.key, r.attempt, r.outcome);
    let Some(o) = kept else {
        println!("(no output kept)");
        return;
    };
    let cut = if o.truncated {
        " (cut to its limit)"
    } else {
        ""
    };
    if let Some(status) = o.http_status {
        println!("-- http status {status}{cut}");
    }
    for (name, text) in [
        ("stdout", &o.stdout),
        ("stderr", &o.stderr),
        ("http body", &o.http_body),
    ] {
        if !text.is_empty() {
            println!("-- {name}{cut}");
            println!("{}", text.trim_end_matches('\n'));
        }
    }
}
