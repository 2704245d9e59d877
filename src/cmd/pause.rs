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
    let paused = control.paused().await.with_context(|| {
        format!(
            "while reading whether job {:?} is paused",
            job.name.as_str()
        )
    })?;
    if let Some(was) = paused.get(&job.name) {
        // Already paused: the pause keeps its start; its note changes only when one is given.
        let Some(note) = &args.note else {
            println!(
                "job {:?} is already paused since {}{}; nothing changed (give --note to replace the note, or `cronq resume {}`)",
                job.name.as_str(),
                output::utc(was.since),
                note_of(was.note.as_deref()),
                job.name
            );
            return Ok(());
        };
        let again = cronq_shared::control::Pause {
            since: was.since,
            note: Some(note.clone()),
        };
        control
            .set_pause(&job.name, Some(&again))
            .await
            .with_context(|| {
                format!(
                    "while replacing the note of paused job {:?}",
                    job.name.as_str()
                )
            })?;
        println!(
            "job {:?} is already paused since {}; its note is now {note:?} (it was {})",
            job.name.as_str(),
            output::utc(was.since),
            was.note
                .as_deref()
                .map_or_else(|| "none".to_owned(), |n| format!("{n:?}"))
        );
        return Ok(());
    }
    let pause = control
        .pause(&job.name, args.note.clone())
        .await
        .with_context(|| format!("while pausing job {:?}", job.name.as_str()))?;
    println!(
        "paused job {:?} fleet-wide since {}{}; its occurrences are not published until `cronq resume {}`",
        job.name.as_str(),
        output::utc(pause.since),
        note_of(pause.note.as_deref()),
        job.name
    );
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
