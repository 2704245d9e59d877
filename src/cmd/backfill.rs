//! `cronq backfill`: ask the leading producer (through the control store) to publish every
//! occurrence of a job with `from <= t <= to` under its normal key; consumers ack the ones
//! that already succeeded as duplicates without running them.

use anyhow::Context as _;

use crate::cli::{BackfillArgs, Cli};
use crate::ops::backfill::{CONFIRM_ABOVE, Preview};
use crate::ops::lookup;
use crate::output;
use crate::settings::UsageError;

/// Requests the backfill and prints how many occurrences it covers.
///
/// # Errors
/// A usage error for an unknown job, a bad or reversed range, or a large range without
/// `--yes`; Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &BackfillArgs) -> anyhow::Result<()> {
    let from = lookup::instant("--from", &args.from)?;
    let to = lookup::instant("--to", &args.to)?;
    if from > to {
        return Err(UsageError(format!(
            "--from {} is after --to {}: the range is empty; swap them",
            args.from, args.to
        ))
        .into());
    }
    let target = crate::settings::target(cli)?;
    let (config, stores) = lookup::job_with_stores(cli, &target, &args.job).await?;
    let job = lookup::job(&config, &args.job)?;
    let Preview { count, shown } = Preview::of(&job.schedule, from, to);
    if count > CONFIRM_ABOVE && !args.yes {
        return Err(UsageError(format!(
            "backfill of job {:?} from {} to {} covers {shown} occurrences, more than {CONFIRM_ABOVE}: pass --yes to publish them all, or narrow --from/--to",
            job.name.as_str(),
            output::utc(from),
            output::utc(to)
        ))
        .into());
    }
    if count == 0 {
        println!(
            "job {:?} has no occurrence from {} to {}: nothing to backfill",
            job.name.as_str(),
            output::utc(from),
            output::utc(to)
        );
        return Ok(());
    }
    let control = &stores.control;
    let id = control
        .request_backfill(&job.name, from, to)
        .await
        .with_context(|| format!("while requesting a backfill of job {:?}", job.name.as_str()))?;
    crate::ops::audit::record(
        &*stores.audit,
        crate::ops::audit::cli("backfill", Some(job.name.as_str())).detail(Some(format!(
            "{} to {} ({shown} occurrences)",
            output::utc(from),
            output::utc(to)
        ))),
    )
    .await;
    println!(
        "requested backfill {id} of job {:?}: {shown} occurrences from {} to {}; the leading producer publishes them under their normal keys (already-succeeded ones do not run again)",
        job.name.as_str(),
        output::utc(from),
        output::utc(to)
    );
    if let Some(note) = lookup::no_leader_note(&stores, &target).await {
        eprintln!("{note}");
    }
    Ok(())
}
