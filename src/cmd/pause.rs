//! `cronq pause` and `cronq resume`: set or clear a job's pause flag in the control store,
//! which every producer reads, so it holds fleet-wide and across failover.

use anyhow::Context as _;

use crate::cli::{Cli, JobArg, PauseArgs};
use crate::ops::lookup;
use crate::output;

/// Pauses a job fleet-wide: the leading producer stops publishing it within
/// about a second (one `[leader] retry`, if shorter).
///
/// # Errors
/// A config or unknown-job usage error; Redis unreachable, or the data file unusable.
pub async fn pause(cli: &Cli, args: &PauseArgs) -> anyhow::Result<()> {
    let config = super::settings::load_config(cli)?;
    let job = lookup::job(&config, &args.job)?;
    let target = super::settings::target(cli)?;
    let stores = lookup::stores(&target, config.longest_retention()).await?;
    let control = &stores.control;
    let pause = control
        .pause(&job.name, args.note.clone())
        .await
        .with_context(|| format!("while pausing job {:?}", job.name.as_str()))?;
    let note = pause
        .note
        .as_deref()
        .map(|n| format!(" (note: {n})"))
        .unwrap_or_default();
    println!(
        "paused job {:?} fleet-wide since {}{note}; its occurrences are not published until `cronq resume {}`",
        job.name.as_str(),
        output::utc(pause.since),
        job.name
    );
    Ok(())
}

/// Resumes a paused job; missed occurrences are not caught up (use `cronq backfill`).
///
/// # Errors
/// A config or unknown-job usage error; Redis unreachable, or the data file unusable.
pub async fn resume(cli: &Cli, args: &JobArg) -> anyhow::Result<()> {
    let config = super::settings::load_config(cli)?;
    let job = lookup::job(&config, &args.job)?;
    let target = super::settings::target(cli)?;
    let stores = lookup::stores(&target, config.longest_retention()).await?;
    let control = &stores.control;
    let was = control
        .resume(&job.name)
        .await
        .with_context(|| format!("while resuming job {:?}", job.name.as_str()))?;
    if was {
        println!(
            "resumed job {:?}; occurrences missed while paused are not caught up (use `cronq backfill`)",
            job.name.as_str()
        );
    } else {
        println!("job {:?} was not paused", job.name.as_str());
    }
    Ok(())
}
