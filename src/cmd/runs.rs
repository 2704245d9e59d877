//! `cronq runs`: the run history, newest first, from the run log (Redis, or a data file),
//! with `--output` each attempt's output as kept with its run.

use std::collections::HashMap;

use anyhow::Context as _;
use cronq_shared::config::DEFAULT_RETENTION;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::runlog::Run;
use serde_json::json;

use crate::cli::{Cli, RunsArgs};
use crate::ops::{self, lookup};
use crate::output;
use crate::settings::UsageError;

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
        Some(text) => Some(ops::runs::key(text)?),
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
        ops::runs::outputs_of(&*stores.runlog, &runs).await?
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
        return ops::runs::print_none(&*stores.runlog, key.as_ref(), job.as_ref()).await;
    }
    print!("{}", ops::runs::table(&runs).render());
    if args.output {
        for r in &runs {
            ops::runs::print_output(r, output_of(r));
        }
    }
    Ok(())
}
