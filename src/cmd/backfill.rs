//! `cronq backfill`: ask the leading producer (through the control store) to publish every
//! occurrence of a job with `from <= t <= to` under its normal key; consumers ack the ones
//! that already succeeded as duplicates without running them.

use anyhow::Context as _;
use chrono::{DateTime, TimeDelta, Utc};
use cronq_shared::schedule::Schedule;

use super::lookup;
use super::settings::UsageError;
use crate::cli::{BackfillArgs, Cli};
use crate::output;

/// More occurrences than this need `--yes`.
pub const CONFIRM_ABOVE: usize = 10_000;

/// Counting stops here: the exact number of a huge range does not matter.
const COUNT_CAP: usize = 1_000_000;

/// Requests the backfill and prints how many occurrences it covers.
///
/// # Errors
/// A usage error for an unknown job, a bad or reversed range, or a large range without
/// `--yes`; Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &BackfillArgs) -> anyhow::Result<()> {
    let config = super::settings::load_config(cli)?;
    let job = lookup::job(&config, &args.job)?;
    let from = lookup::instant("--from", &args.from)?;
    let to = lookup::instant("--to", &args.to)?;
    if from > to {
        return Err(UsageError(format!(
            "--from {} is after --to {}: the range is empty; swap them",
            args.from, args.to
        ))
        .into());
    }
    let count = count(&job.schedule, from, to);
    let shown = if count > COUNT_CAP && job.schedule.is_every().is_none() {
        format!("more than {COUNT_CAP}")
    } else {
        count.to_string()
    };
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
    let target = super::settings::target(cli)?;
    let stores = lookup::stores(&target, config.longest_retention()).await?;
    let control = &stores.control;
    let id = control
        .request_backfill(&job.name, from, to)
        .await
        .with_context(|| format!("while requesting a backfill of job {:?}", job.name.as_str()))?;
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

/// Occurrences with `from <= t <= to` (the range the producer's backfill walks): exact for
/// `@every`, counted up to just past [`COUNT_CAP`] for cron schedules.
fn count(schedule: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> usize {
    if let Some(every) = schedule.is_every() {
        // Epoch-aligned: k * every for every k with from <= k * every <= to.
        let step = i64::try_from(every.as_secs()).unwrap_or(i64::MAX).max(1);
        let first = from.timestamp() + (step - from.timestamp().rem_euclid(step)) % step;
        let first = if from.timestamp_subsec_nanos() > 0 && from.timestamp() % step == 0 {
            first + step
        } else {
            first
        };
        let n = if first > to.timestamp() {
            0
        } else {
            (to.timestamp() - first) / step + 1
        };
        return usize::try_from(n).unwrap_or(usize::MAX);
    }
    schedule
        .iter_after(from - TimeDelta::nanoseconds(1))
        .take_while(|t| *t <= to)
        .take(COUNT_CAP + 1)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_matches_walking_the_schedule() {
        let walk = |s: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>| {
            s.iter_after(from - TimeDelta::nanoseconds(1))
                .take_while(|t| *t <= to)
                .count()
        };
        for spec in ["@every 1s", "@every 7s", "@every 90s"] {
            let s = Schedule::parse(spec, chrono_tz::UTC).unwrap();
            let base: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
            for (a, b) in [(0, 0), (0, 1), (3, 200), (1, 1000), (5, 4)] {
                let from = base + TimeDelta::seconds(a) + TimeDelta::milliseconds(a * 100 % 1000);
                let to = base + TimeDelta::seconds(b);
                if from <= to {
                    assert_eq!(
                        count(&s, from, to),
                        walk(&s, from, to),
                        "{spec} {from} {to}"
                    );
                }
            }
        }
    }
}
