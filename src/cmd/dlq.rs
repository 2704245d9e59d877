//! `cronq dlq list` and `cronq dlq replay`: glue over the broker's dead-letter queue and
//! [`cronq_consumer::replay::replay()`], which holds the replay rules.

use cronq_consumer::replay::{self, Plan, Selector};
use cronq_shared::broker::{bounded, fold_copies};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::State;
use serde_json::json;

use crate::cli::{Cli, JsonArg, ReplayArgs};
use crate::ops::{self, lookup, running};
use crate::output::{self, Table};
use crate::settings::UsageError;

/// Lists every dead run, oldest first, without consuming or reordering the queue; copies
/// of one run are listed once, with their count.
///
/// # Errors
/// RabbitMQ unreachable, or the data file unusable.
pub async fn list(cli: &Cli, args: &JsonArg) -> anyhow::Result<()> {
    let target = crate::settings::target(cli)?;
    let queue = lookup::queue(&target).await?;
    let letters = bounded("list dead letters", queue.dead_letters()).await;
    queue.close().await;
    let letters = letters
        .map_err(|e| anyhow::Error::new(e).context("while listing the dead-letter queue"))?;
    let letters = fold_copies(&letters);
    if args.json {
        let letters: Vec<_> = letters.iter().map(ops::json::dead_letter).collect();
        output::print_json(&json!({ "count": letters.len(), "letters": letters }));
        return Ok(());
    }
    if letters.is_empty() {
        println!("the dead-letter queue is empty");
        return Ok(());
    }
    let mut table = Table::new(&[
        "KEY",
        "JOB",
        "ATTEMPTS",
        "COPIES",
        "REASON",
        "LAST ERROR",
        "DEAD-LETTERED AT",
    ]);
    for f in &letters {
        let l = &f.letter;
        table.row(vec![
            output::or_dash(l.key.as_deref()),
            output::or_dash(l.job.as_deref()),
            l.attempts.to_string(),
            f.copies.to_string(),
            l.reason.clone(),
            output::or_dash(l.last_error.as_deref()),
            output::utc(l.dead_lettered_at),
        ]);
    }
    print!("{}", table.render());
    let copies: usize = letters.iter().map(|f| f.copies).sum();
    let extra = if copies > letters.len() {
        format!(
            " ({copies} letters: a run dead-lettered twice by a consumer that died before it acked is one run, replayed once)"
        )
    } else {
        String::new()
    };
    println!(
        "{} dead letter{}{extra}; replay with `cronq dlq replay --job JOB | --key KEY | --all`",
        letters.len(),
        if letters.len() == 1 { "" } else { "s" }
    );
    Ok(())
}

/// Replays the selected dead letters (or, with `--dry-run`, shows which would be).
///
/// # Errors
/// A usage error without a selector, for an unknown `--job` or a malformed `--key`;
/// RabbitMQ or Redis unreachable, or the data file unusable; an interrupted replay (run it again).
pub async fn replay(cli: &Cli, args: &ReplayArgs) -> anyhow::Result<()> {
    if !args.all && args.job.is_none() && args.key.is_none() {
        return Err(UsageError(
            "dlq replay needs a selector: --job JOB, --key KEY or --all (add --dry-run to preview; `cronq dlq list` shows the letters)".into(),
        )
        .into());
    }
    let key = match &args.key {
        Some(text) => Some(
            text.parse::<OccurrenceKey>()
                .map_err(|e| UsageError(format!("--key: {e}")))?,
        ),
        None => None,
    };
    let target = crate::settings::target(cli)?;
    let (config, stores, queue) = running::config_stores_and_queue(cli, &target).await?;
    // A runtime job's letters replay as a file job's do.
    let config = lookup::with_runtime(config, &stores).await?;
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
    let selector = Selector {
        job,
        key,
        all: args.all,
    };
    let report = replay::replay(
        &*queue,
        &*stores.ledger,
        &config,
        &selector,
        target.keyring(),
        args.dry_run,
    )
    .await;
    queue.close().await;
    let report = report?;
    let keys: Vec<&str> = report
        .entries
        .iter()
        .filter(|e| matches!(e.plan, Plan::Replayed | Plan::WouldReplay))
        .filter_map(|e| e.key.as_deref())
        .collect();
    let detail = format!(
        "{}{} replayed: {}",
        if args.dry_run { "dry run: " } else { "" },
        report.replayed,
        keys.join(" ")
    );
    crate::ops::audit::record(
        &*stores.audit,
        crate::ops::audit::cli("dlq.replay", args.job.as_deref()).detail(Some(detail)),
    )
    .await;
    let mut table = Table::new(&["KEY", "JOB", "REASON", "RESULT"]);
    let mut kept = 0;
    for e in &report.entries {
        let result = match &e.plan {
            Plan::WouldReplay => "would replay".to_owned(),
            Plan::Replayed => match e.record {
                Some(State::Succeeded) => {
                    "replayed (already succeeded: will not run again)".to_owned()
                }
                _ => "replayed".to_owned(),
            },
            Plan::Kept(why) => {
                kept += 1;
                format!("kept: {why}")
            }
            Plan::Gone => "gone (taken by another replay)".to_owned(),
        };
        table.row(vec![
            output::or_dash(e.key.as_deref()),
            output::or_dash(e.job.as_deref()),
            e.reason.clone(),
            result,
        ]);
    }
    if table.is_empty() {
        println!(
            "no dead letter matches ({} in the dead-letter queue)",
            report.listed
        );
        return Ok(());
    }
    print!("{}", table.render());
    if args.dry_run {
        println!(
            "dry run: {} of {} selected letters would be replayed; nothing was changed",
            report.entries.len() - kept,
            report.entries.len()
        );
    } else {
        println!(
            "replayed {} of {} selected letters; {kept} kept in the dead-letter queue",
            report.replayed,
            report.entries.len()
        );
    }
    Ok(())
}
