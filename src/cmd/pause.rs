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
    let target = crate::settings::target(cli)?;
    let (config, stores) = lookup::job_with_stores(cli, &target, &args.job).await?;
    let job = lookup::job(&config, &args.job)?;
    let control = &stores.control;
    let done = control
        .pause(&job.name, args.note.clone())
        .await
        .with_context(|| format!("while pausing job {:?}", job.name.as_str()))?;
    crate::ops::audit::record(
        &*stores.audit,
        crate::ops::audit::cli("pause", Some(job.name.as_str()))
            .detail(args.note.as_ref().map(|n| format!("note: {n}"))),
    )
    .await;
    let (name, since) = (job.name.as_str(), output::utc(done.pause.since));
    match (&done.before, &args.note) {
        (None, _) => println!(
            "paused job {name:?} fleet-wide since {since}{}; its occurrences are not published until `cronq resume {name}`",
            note_of(done.pause.note.as_deref()),
        ),
        (Some(was), None) => println!(
            "job {name:?} is already paused since {since}{}; nothing changed (give --note to replace the note, or `cronq resume {name}`)",
            note_of(was.note.as_deref()),
        ),
        (Some(was), Some(note)) => println!(
            "job {name:?} is already paused since {since}; its note is now {note:?} (it was {})",
            was.note
                .as_deref()
                .map_or_else(|| "none".to_owned(), |n| format!("{n:?}"))
        ),
    }
    Ok(())
}

/// ` (note: N)`, or nothing without a note.
fn note_of(note: Option<&str>) -> String {
    note.map(|n| format!(" (note: {n})")).unwrap_or_default()
}

/// Resumes a paused job; missed occurrences are not caught up (use `cronq backfill`).
///
/// # Errors
/// A config or unknown-job usage error; Redis unreachable, or the data file unusable.
pub async fn resume(cli: &Cli, args: &JobArg) -> anyhow::Result<()> {
    let target = crate::settings::target(cli)?;
    let (config, stores) = lookup::job_with_stores(cli, &target, &args.job).await?;
    let job = lookup::job(&config, &args.job)?;
    let control = &stores.control;
    let was = control
        .resume(&job.name)
        .await
        .with_context(|| format!("while resuming job {:?}", job.name.as_str()))?;
    let mut entry = crate::ops::audit::cli("resume", Some(job.name.as_str()));
    if !was {
        entry = entry.detail(Some("was not paused".into()));
    }
    crate::ops::audit::record(&*stores.audit, entry).await;
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
