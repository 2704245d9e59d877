//! `cronq verify`: every occurrence the schedules expected in a range and what became of
//! it, with every gap named; glue over `cronq_shared::accounting`, which the leader's
//! continuous check (`cronq_producer::accounting_check`) uses too.

use anyhow::Context as _;
use chrono::Utc;
use cronq_shared::accounting::{self, Sources, Window};
use cronq_shared::runlog::DEFAULT_MAX_RUNS;

use crate::cli::{Cli, VerifyArgs};
use crate::ops::{self, lookup, running};
use crate::output;
use crate::settings::UsageError;

/// Accounts for the range of `args` and prints a table per job and a line per gap (or one
/// JSON document).
///
/// # Errors
/// A usage error for a bad `--from`/`--to`, a range that ends before it starts, an unknown
/// `--job`; the stores or the queue unreachable; and, after printing, an error (exit 1)
/// when there is any gap.
pub async fn run(cli: &Cli, args: &VerifyArgs) -> anyhow::Result<()> {
    let from = lookup::instant("--from", &args.from)?;
    let to = lookup::instant("--to", &args.to)?;
    if to < from {
        return Err(UsageError(format!(
            "--to {} is before --from {}: give the range's first instant to --from",
            args.to, args.from
        ))
        .into());
    }
    let target = crate::settings::target(cli)?;
    let (config, stores, queue) = running::config_stores_and_queue(cli, &target).await?;
    let job = match &args.job {
        Some(name) => match lookup::job_in(&config, Some(&stores), name).await {
            Ok(job) => Some(job),
            Err(e) => {
                queue.close().await;
                return Err(e);
            }
        },
        None => None,
    };
    // Each file job as it was defined when its occurrences were due (the recorded loads).
    let history = match running::file_history(&stores, from, to).await {
        Ok(history) => history,
        Err(e) => {
            queue.close().await;
            return Err(e);
        }
    };
    let letters = ops::verify::dead_letter_reasons(&*queue).await?;
    let paused_now = stores
        .control
        .paused()
        .await
        .context("while reading the pauses")?;
    let terms = stores
        .lease
        .terms()
        .await
        .context("while reading the leadership terms")?;
    let window = Window {
        from,
        to,
        grace: args.grace,
        now: Utc::now(),
        job,
        max_runs: DEFAULT_MAX_RUNS,
        only_gaps: false,
    };
    let sources = Sources {
        runlog: &*stores.runlog,
        audit: &*stores.audit,
        jobs: &*stores.jobs,
        file_history: &history,
        terms: &terms,
    };
    let report = accounting::reconcile(sources, &config, &paused_now, &letters, &window)
        .await
        .context("while reading the run history, the audit log and the job store")?;
    if args.json {
        output::print_json(&ops::verify::as_json(&report, &window));
    } else {
        ops::verify::print_text(&report);
    }
    ops::verify::gaps(&report, from, to)
}
