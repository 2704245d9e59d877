//! `cronq dlq list` and `cronq dlq replay`: glue over the broker's dead-letter queue and
//! [`cronq_consumer::replay::replay()`], which holds the replay rules.

use cronq_consumer::replay::{self, Selector};
use cronq_shared::broker::{bounded, fold_copies};
use cronq_shared::key::OccurrenceKey;

use crate::cli::{Cli, JsonArg, ReplayArgs};
use crate::ops::{self, lookup, running};
use crate::output;
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
        output::print_json(&ops::dlq::list_json(&letters));
        return Ok(());
    }
    ops::dlq::print_list(&letters);
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
    let detail = ops::dlq::replay_detail(&report, args.dry_run);
    crate::ops::audit::record(
        &*stores.audit,
        crate::ops::audit::cli("dlq.replay", args.job.as_deref()).detail(Some(detail)),
    )
    .await;
    ops::dlq::print_replay(&report, args.dry_run);
    Ok(())
}
