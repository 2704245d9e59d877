//! `cronq runs`: the run history, newest first, from the run log (Redis, or a data file).

use anyhow::Context as _;
use cronq_shared::config::DEFAULT_RETENTION;
use serde_json::json;

use super::settings::UsageError;
use crate::cli::{Cli, RunsArgs};
use crate::ops::{self, lookup};
use crate::output::{self, Table};

/// Prints up to `--limit` runs, newest first, as a table or one JSON document.
///
/// # Errors
/// A usage error for `--limit 0` or an unknown `--job`; Redis unreachable, or the data file unusable.
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
