//! `cronq jobs`: each job of the config, then each runtime job of the job store, with its
//! schedule, zone, next fire (in its zone and UTC), pause flag (from the control store),
//! last outcome (from the run log) and whether a live consumer serves it (from the fleet
//! registry, `cronq_shared::registry::serving`).

use std::collections::HashMap;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use cronq_shared::config::Job;
use cronq_shared::control::Pause;
use cronq_shared::names::JobName;
use cronq_shared::registry::serving::{Fleet, Service};
use cronq_shared::runlog::Run;
use serde_json::json;

use crate::cli::{Cli, JsonArg};
use crate::ops::{self, lookup};
use crate::output::{self, Table};

/// How many of the newest runs are read at once to find each job's last outcome.
const RECENT_RUNS: usize = 2_000;

/// One job's line: the job, its next fire, its pause flag, its last run and whether it is
/// served (`None` when the fleet registry could not be read).
type Row<'c> = (
    &'c Job,
    Option<DateTime<Utc>>,
    Option<&'c Pause>,
    Option<Run>,
    Option<Service>,
);

/// Prints each job's status as a table or one JSON document.
///
/// # Errors
/// A config error; Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &JsonArg) -> anyhow::Result<()> {
    let target = super::settings::target(cli)?;
    let (config, stores) = ops::running::config_and_stores(cli, &target).await?;
    let config = lookup::with_runtime(config, &stores).await?;
    let beats = match stores.registry.instances().await {
        Ok(beats) => Some(beats),
        Err(e) => {
            eprintln!(
                "note: cannot read the fleet registry, so whether each job is served is not shown: {e}"
            );
            None
        }
    };
    let fleet = beats.as_deref().map(Fleet::new);
    let paused = stores
        .control
        .paused()
        .await
        .context("while reading pause flags")?;
    let log = &stores.runlog;
    let now = Utc::now();
    // One read of the recent history covers the jobs that ran lately; only the others
    // need a search of their own.
    let mut latest: HashMap<JobName, Run> = HashMap::new();
    for run in log
        .list(None, RECENT_RUNS)
        .await
        .context("while reading the run history")?
    {
        latest.entry(run.job.clone()).or_insert(run);
    }
    let mut rows = Vec::new();
    for job in &config.jobs {
        let last = match latest.remove(&job.name) {
            Some(run) => Some(run),
            None => log
                .list(Some(&job.name), 1)
                .await
                .context("while reading the run history")?
                .into_iter()
                .next(),
        };
        let next = job.schedule.next_after(now);
        let served = fleet.as_ref().map(|f| f.assess(job));
        rows.push((job, next, paused.get(&job.name), last, served));
    }
    if args.json {
        print_json(&rows);
        return Ok(());
    }
    let table = table(&rows);
    if table.is_empty() {
        println!("{} defines no job", config.path.display());
    } else {
        print!("{}", table.render());
    }
    Ok(())
}

/// `{"jobs": [...]}`, one object per row.
fn print_json(rows: &[Row<'_>]) {
    let jobs: Vec<_> = rows
        .iter()
        .map(|(job, next, pause, last, served)| {
            let mut row = ops::json::job(job, *next, *pause, last.as_ref());
            ops::json::served(&mut row, served.as_ref());
            row
        })
        .collect();
    output::print_json(&json!({ "jobs": jobs }));
}

/// The human table, one line per row.
fn table(rows: &[Row<'_>]) -> Table {
    let mut table = Table::new(&[
        "JOB",
        "SCHEDULE",
        "ZONE",
        "NEXT (ZONE)",
        "NEXT (UTC)",
        "PAUSED",
        "LAST",
        "SERVED",
    ]);
    for (job, next, pause, last, served) in rows {
        let paused = pause.map_or_else(
            || "no".to_owned(),
            |p| match &p.note {
                Some(n) => format!("since {} ({n})", output::utc(p.since)),
                None => format!("since {}", output::utc(p.since)),
            },
        );
        let last = last.as_ref().map_or_else(
            || "-".to_owned(),
            |r| format!("{} at {}", r.outcome, output::utc(r.started_at)),
        );
        table.row(vec![
            job.name.to_string(),
            job.schedule.as_str().to_owned(),
            job.timezone.name().to_owned(),
            next.map_or_else(
                || "never".into(),
                |t| output::local(&t.with_timezone(&job.timezone)),
            ),
            next.map_or_else(|| "never".into(), output::utc),
            paused,
            last,
            served.as_ref().map_or_else(|| "?".to_owned(), served_cell),
        ]);
    }
    table
}

/// The SERVED cell: `yes`, `no consumer`, or `NO: why`.
fn served_cell(served: &Service) -> String {
    match served {
        Service::Served => "yes".to_owned(),
        Service::NoConsumer => "no consumer".to_owned(),
        Service::Unserved(why) => format!("NO: {why}"),
    }
}
