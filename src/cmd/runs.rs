//! `cronq runs`: the run history, newest first, from the run log (Redis, or a data file),
//! with `--output` each attempt's output as kept with its run.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use cronq_shared::config::{DEFAULT_RETENTION, did_you_mean};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::runlog::{Run, RunLog, RunOutput};
use serde_json::json;

use crate::cli::{Cli, RunsArgs};
use crate::ops::{self, lookup};
use crate::output::{self, Table};
use crate::settings::UsageError;

/// How many of the newest runs name the jobs a misspelt `--job` is compared with.
const RECENT_FOR_NAMES: usize = 1000;

/// How many of a job's newest runs `--key` looks through for the occurrence's attempts.
const RECENT_FOR_KEY: usize = 10_000;

/// Prints up to `--limit` runs, newest first, as a table or one JSON document.
///
/// # Errors
/// A usage error for `--limit 0`, an unknown `--job`, or one with no runs that is close to
/// the name of a job with recent runs (a likely typo); Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &RunsArgs) -> anyhow::Result<()> {
    if args.limit == 0 {
        return Err(UsageError("--limit must be at least 1".into()).into());
    }
    let target = crate::settings::target(cli)?;
    let key: Option<OccurrenceKey> = match &args.key {
        Some(text) => Some(text.parse().map_err(|_| {
            UsageError(format!(
                "--key {text:?} is not an occurrence key: JOB@SCHEDULED_UTC (as `cronq runs` lists them, e.g. hello@2026-11-30T10:00:05Z) or JOB@manual-ID"
            ))
        })?),
        None => None,
    };
    let job = match (&args.job, &key) {
        (Some(name), _) => Some(lookup::job_filter(cli, name).await?),
        (None, Some(key)) => Some(key.job().clone()),
        (None, None) => None,
    };
    // `runs` never writes, so the retention (for trimming on write) does not matter.
    let stores = lookup::stores(&target, DEFAULT_RETENTION).await?;
    let runs = match &key {
        Some(key) => stores
            .runlog
            .list(job.as_ref(), RECENT_FOR_KEY)
            .await
            .context("while reading the run history")?
            .into_iter()
            .filter(|r| r.key == *key)
            .take(args.limit)
            .collect(),
        None => stores
            .runlog
            .list(job.as_ref(), args.limit)
            .await
            .context("while reading the run history")?,
    };
    let outputs = if args.output {
        outputs_of(&*stores.runlog, &runs).await?
    } else {
        HashMap::new()
    };
    let output_of = |r: &Run| outputs.get(r.key.as_str()).and_then(|o| o.get(&r.attempt));
    if args.json {
        let runs: Vec<_> = if args.output {
            runs.iter()
                .map(|r| ops::json::run_with_output(r, output_of(r)))
                .collect()
        } else {
            runs.iter().map(ops::json::run).collect()
        };
        output::print_json(&json!({ "runs": runs }));
        return Ok(());
    }
    if runs.is_empty() {
        if let Some(key) = &key {
            println!("no runs of {key} recorded");
            return Ok(());
        }
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
    if args.output {
        for r in &runs {
            print_output(r, output_of(r));
        }
    }
    Ok(())
}

/// The outputs kept of the keys of `runs`, by key and attempt.
async fn outputs_of(
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
fn print_output(r: &Run, kept: Option<&RunOutput>) {
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
