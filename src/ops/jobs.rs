//! How `cronq jobs` gathers and shows each job's line: its next fire, pause flag, last run
//! (one read of the recent history, then a search for each job not in it), whether it is
//! served, the jobs that run after it and its limits; then the pools' table. Below the
//! commands: the command reads the stores it hands in.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use cronq_shared::config::{Config, Job};
use cronq_shared::control::Pause;
use cronq_shared::names::JobName;
use cronq_shared::registry::serving::{Fleet, Service};
use cronq_shared::runlog::{Run, RunLog};
use serde_json::json;

use crate::ops::pools;
use crate::output::{self, Table};

/// How many of the newest runs are read at once to find each job's last outcome.
const RECENT_RUNS: usize = 2_000;

/// One job's line: the job, its next fire, its pause flag, its last run, whether it is
/// served (`None` when the fleet registry could not be read) and its children.
pub type Row<'c> = (
    &'c Job,
    Option<DateTime<Utc>>,
    Option<&'c Pause>,
    Option<Run>,
    Option<Service>,
    Vec<&'c str>,
);

/// One line per job of `config`, in its order, as of `now`.
///
/// # Errors
/// The run log unreadable.
pub async fn rows<'c>(
    config: &'c Config,
    runlog: &dyn RunLog,
    fleet: Option<&Fleet<'_>>,
    paused: &'c BTreeMap<JobName, Pause>,
    now: DateTime<Utc>,
) -> anyhow::Result<Vec<Row<'c>>> {
    // One read of the recent history covers the jobs that ran lately; only the others
    // need a search of their own.
    let mut latest: HashMap<JobName, Run> = HashMap::new();
    for run in runlog
        .list(None, RECENT_RUNS)
        .await
        .context("while reading the run history")?
    {
        latest.entry(run.job.clone()).or_insert(run);
    }
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for job in &config.jobs {
        for parent in job.parents() {
            children
                .entry(parent.as_str())
                .or_default()
                .push(job.name.as_str());
        }
    }
    let index = config.index();
    let mut rows = Vec::new();
    for job in &config.jobs {
        let last = match latest.remove(&job.name) {
            Some(run) => Some(run),
            None => runlog
                .list(Some(&job.name), 1)
                .await
                .context("while reading the run history")?
                .into_iter()
                .next(),
        };
        let next = index.next_time(job, now);
        let served = fleet.as_ref().map(|f| f.assess(job));
        let kids = children.remove(job.name.as_str()).unwrap_or_default();
        rows.push((job, next, paused.get(&job.name), last, served, kids));
    }
    Ok(rows)
}

/// The pools' table, after a blank line (nothing when there is no pool).
pub fn print_pools(pools: Option<Pools>) {
    if let Some(pools) = pools.filter(|p| !p.is_empty()) {
        let mut t = Table::new(&["POOL", "SIZE", "RUNNING", "WAITING", "NEXT"]);
        for (name, pool) in &pools {
            t.row(vec![
                name.to_string(),
                pool.size.to_string(),
                pool.gate.running.len().to_string(),
                pool.gate.waiting.to_string(),
                if pool.gate.next.is_empty() {
                    "-".to_owned()
                } else {
                    pool.gate.next.join(" ")
                },
            ]);
        }
        print!("\n{}", t.render());
    }
}

/// `{"jobs": [...], "pools": [...]}`, one object per row and per pool (`pools` null when
/// the ledger could not be read).
pub fn print_json(rows: &[Row<'_>], pools: Option<&Pools>) {
    let jobs: Vec<_> = rows
        .iter()
        .map(|(job, next, pause, last, served, children)| {
            let mut row = super::json::job(job, *next, *pause, last.as_ref());
            super::json::served(&mut row, served.as_ref());
            pools::job_fields(&mut row, job);
            super::json::chain(&mut row, job, children);
            row
        })
        .collect();
    let pools = pools.map(|p| {
        p.iter()
            .map(|(name, pool)| pools::pool_json(name, pool))
            .collect::<Vec<_>>()
    });
    output::print_json(&json!({ "jobs": jobs, "pools": pools }));
}

/// Each pool's use, by name.
pub type Pools = BTreeMap<Arc<str>, pools::PoolUse>;

/// The human table, one line per row.
pub fn table(rows: &[Row<'_>], pools: Option<&Pools>) -> Table {
    let mut table = Table::new(&[
        "JOB",
        "SCHEDULE",
        "ZONE",
        "NEXT (ZONE)",
        "NEXT (UTC)",
        "PAUSED",
        "LAST",
        "SERVED",
        "LIMITS",
    ]);
    for (job, next, pause, last, served, children) in rows {
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
            schedule_cell(job, children),
            job.timezone.name().to_owned(),
            next.map_or_else(
                || "never".into(),
                |t| output::local(&t.with_timezone(&job.timezone)),
            ),
            next.map_or_else(|| "never".into(), output::utc),
            paused,
            last,
            served.as_ref().map_or_else(|| "?".to_owned(), served_cell),
            pools::cell(job, pools),
        ]);
    }
    table
}

/// The SCHEDULE cell: the schedule (a job with parents: `after a, b`), then the jobs that
/// run after it, if any: `@every 1m; then b, c`.
fn schedule_cell(job: &Job, children: &[&str]) -> String {
    if children.is_empty() {
        job.schedule.as_str().to_owned()
    } else {
        format!("{}; then {}", job.schedule.as_str(), children.join(", "))
    }
}

/// The SERVED cell: `yes`, `no consumer`, or `NO: why`.
fn served_cell(served: &Service) -> String {
    match served {
        Service::Served => "yes".to_owned(),
        Service::NoConsumer => "no consumer".to_owned(),
        Service::Unserved(why) => format!("NO: {why}"),
    }
}
