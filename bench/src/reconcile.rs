//! `reconcile`: what the leader's continuous reconciliation (`cronq_producer`'s
//! `accounting_check`, every minute over the last hour) costs at many jobs. One check as
//! the leader makes it, over `--reconcile-jobs` jobs firing hourly (`H * * * *`, so the
//! hour's window expects one occurrence of each) with one succeeded run of each in the
//! real Redis run history: the check's wall time, the CPU it takes in this process (the
//! leader's share) and in Redis, and that CPU as a share of one core at the default
//! cadence (one check a minute).
//!
//! Three checks of the same history: the full check (`cronq_shared::accounting::reconcile`,
//! what every check cost before checks were incremental), the leader's first check
//! (`cronq_shared::accounting::Incremental`: a full read of the history), and its steady
//! state: [`STEADY`] checks of the window moved a minute at a time, each after the runs
//! of the minute that entered the window were written (not measured), as a minute of the
//! leader's life; the figure is the mean per check.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, TimeDelta, Utc};
use cronq_shared::accounting::{self, Incremental, Sources, Window};
use cronq_shared::config::Config;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Outcome, Run, RunLog};
use futures_util::StreamExt as _;

use crate::env::BenchEnv;
use crate::report::Figure;
use crate::stats::Unit;

/// Sizes of the reconcile bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct ReconcileArgs {
    /// Jobs the leader accounts for.
    #[arg(
        id = "reconcile_jobs",
        long = "reconcile-jobs",
        default_value_t = 100_000
    )]
    pub jobs: usize,
}

/// The leader's defaults: a check a minute, from an hour ago to two minutes ago.
const EVERY: Duration = Duration::from_secs(60);
const WINDOW: Duration = Duration::from_secs(3600);
const LAG: Duration = Duration::from_secs(120);

/// How many steady checks each run measures.
const STEADY: u32 = 10;

/// What one run measured of one kind of check.
#[derive(Default)]
struct Cost {
    wall: Duration,
    leader: Duration,
    redis: Option<Duration>,
}

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When a service is unreachable or the check fails.
pub async fn run(args: &ReconcileArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let kinds = [
        (
            "full",
            format!(
                "one full check over {} jobs, an hour's window (every check before)",
                args.jobs
            ),
        ),
        (
            "first",
            format!(
                "the leader's first check over {} jobs (a full read)",
                args.jobs
            ),
        ),
        (
            "steady",
            format!(
                "a steady check over {} jobs, the window a minute on (mean of {STEADY})",
                args.jobs
            ),
        ),
    ];
    let mut figures: Vec<[Figure; 4]> = kinds
        .iter()
        .map(|(_, label)| {
            [
                Figure::new("reconcile", format!("wall time of {label}"), Unit::Seconds),
                Figure::new("reconcile", format!("leader CPU of {label}"), Unit::Seconds),
                Figure::new(
                    "reconcile",
                    format!("leader CPU share of one core at one check a minute, {label}"),
                    Unit::Ratio,
                ),
                Figure::new("reconcile", format!("Redis CPU of {label}"), Unit::Seconds),
            ]
        })
        .collect();
    for run in 1..=runs {
        let env = BenchEnv::new()?;
        let measured = measure(&env, args).await;
        env.cleanup().await;
        let costs = measured?;
        for (((kind, _), cost), figures) in kinds.iter().zip(&costs).zip(&mut figures) {
            eprintln!(
                "reconcile: run {run}/{runs}, {kind}: {:.3} s wall, {:.3} s leader CPU{}",
                cost.wall.as_secs_f64(),
                cost.leader.as_secs_f64(),
                cost.redis.map_or(String::new(), |r| format!(
                    ", {:.3} s Redis CPU",
                    r.as_secs_f64()
                ))
            );
            figures[0].runs.push(cost.wall.as_secs_f64());
            figures[1].runs.push(cost.leader.as_secs_f64());
            figures[2]
                .runs
                .push(cost.leader.as_secs_f64() / EVERY.as_secs_f64());
            if let Some(r) = cost.redis {
                figures[3].runs.push(r.as_secs_f64());
            }
        }
    }
    Ok(figures
        .into_iter()
        .flatten()
        .filter(|f| !f.runs.is_empty())
        .collect())
}

/// The runs of `config`'s occurrences in `(after, to]`, one succeeded run of each as the
/// consumers write them.
fn runs_of(config: &Config, after: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Run> {
    config
        .jobs
        .iter()
        .flat_map(|job| {
            job.schedule
                .iter_after(after)
                .take_while(|at| *at <= to)
                .map(|at| Run {
                    key: OccurrenceKey::scheduled(job.name.clone(), at),
                    job: job.name.clone(),
                    attempt: 1,
                    consumer: "bench".into(),
                    started_at: at + TimeDelta::milliseconds(20),
                    duration: Duration::from_millis(5),
                    outcome: Outcome::Succeeded,
                    error: None,
                    published_at: Some(at + TimeDelta::milliseconds(5)),
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Writes `runs` to `runlog`, 64 at a time.
async fn write(runlog: &Arc<dyn RunLog>, runs: &[Run]) -> anyhow::Result<()> {
    let recorded: Vec<Result<(), _>> = futures_util::stream::iter(runs.iter())
        .map(|run| {
            let runlog = runlog.clone();
            async move { runlog.record(run).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    recorded
        .into_iter()
        .collect::<Result<Vec<()>, _>>()
        .context("while writing the run history")?;
    Ok(())
}

/// The CPU this process and Redis spent since [`Meter::start`], and the wall time.
struct Meter {
    redis: Option<u32>,
    redis_before: Option<Duration>,
    cpu_before: Duration,
    started: Instant,
}

impl Meter {
    fn start() -> anyhow::Result<Self> {
        let redis = crate::procfs::find("redis-server");
        Ok(Self {
            redis,
            redis_before: redis.and_then(|p| crate::procfs::cpu_time(Some(p)).ok()),
            cpu_before: crate::procfs::cpu_time(None)?,
            started: Instant::now(),
        })
    }

    fn stop(self, into: &mut Cost) -> anyhow::Result<()> {
        into.wall += self.started.elapsed();
        into.leader += crate::procfs::cpu_time(None)?.saturating_sub(self.cpu_before);
        if let Some(r) = self.redis.zip(self.redis_before).and_then(|(p, before)| {
            Some(
                crate::procfs::cpu_time(Some(p))
                    .ok()?
                    .saturating_sub(before),
            )
        }) {
            into.redis = Some(into.redis.unwrap_or_default() + r);
        }
        Ok(())
    }
}

/// Checks that `report` found no gap and accounted for about `written` occurrences.
fn no_gaps(report: &accounting::Report, written: usize, what: &str) -> anyhow::Result<()> {
    let gaps: usize = report.accounts.iter().map(|a| a.gaps.len()).sum();
    let example = report
        .accounts
        .iter()
        .find_map(|a| a.gaps.first())
        .map(|(key, gap)| format!(" (as {key}: {gap})"))
        .unwrap_or_default();
    anyhow::ensure!(
        gaps == 0,
        "the {what} found {gaps} gaps{example}; {written} runs were written"
    );
    Ok(())
}

async fn measure(env: &BenchEnv, args: &ReconcileArgs) -> anyhow::Result<[Cost; 3]> {
    let mut text = String::with_capacity(args.jobs * 48);
    for i in 0..args.jobs {
        text.push_str(&format!(
            "[[job]]\nname = \"r{i}\"\nschedule = \"H * * * *\"\n"
        ));
    }
    let config = Arc::new(
        Config::from_toml(&text, Path::new("bench-reconcile.toml"))
            .context("while building the reconcile config")?,
    );
    let stores = cronq_backends::stores(&env.endpoints, Duration::from_secs(7200), None)
        .await
        .context("while connecting to Redis")?;
    let now = Utc::now();
    let window_at = |now: DateTime<Utc>| {
        let back = |d: Duration| now - TimeDelta::from_std(d).unwrap_or_default();
        Window {
            from: back(WINDOW),
            to: back(LAG),
            grace: LAG,
            now,
            job: None,
            max_runs: DEFAULT_MAX_RUNS,
            only_gaps: true,
        }
    };
    let window = window_at(now);
    // One succeeded run of each occurrence the window expects, as the consumers wrote them.
    let expected = runs_of(&config, window.from - TimeDelta::nanoseconds(1), window.to);
    write(&stores.runlog, &expected).await?;
    let sources = Sources {
        runlog: &*stores.runlog,
        audit: &*stores.audit,
        jobs: &*stores.jobs,
        file_history: &[],
        terms: &[],
    };
    let mut costs: [Cost; 3] = Default::default();
    let meter = Meter::start()?;
    let report =
        accounting::reconcile(sources, &config, &BTreeMap::new(), &HashMap::new(), &window)
            .await
            .context("while reconciling")?;
    meter.stop(&mut costs[0])?;
    no_gaps(&report, expected.len(), "full check")?;
    let mut incremental = Incremental::new();
    let meter = Meter::start()?;
    let first = incremental
        .check(sources, &config, &BTreeMap::new(), &window)
        .await
        .context("while reconciling (the first check)")?;
    meter.stop(&mut costs[1])?;
    anyhow::ensure!(
        first.accounts == report.accounts,
        "the first check's report differs from the full check's"
    );
    // The check reports only gaps: that it read every run written shows in what it keeps.
    anyhow::ensure!(
        incremental.kept() == expected.len(),
        "the first check kept {} runs; {} were written",
        incremental.kept(),
        expected.len()
    );
    let mut to = window.to;
    let mut written = expected.len();
    for minute in 1..=STEADY {
        let next = window_at(now + TimeDelta::minutes(minute.into()));
        let entering = runs_of(&config, to, next.to);
        write(&stores.runlog, &entering).await?;
        to = next.to;
        let meter = Meter::start()?;
        let steady = incremental
            .check(sources, &config, &BTreeMap::new(), &next)
            .await
            .context("while reconciling (a steady check)")?;
        meter.stop(&mut costs[2])?;
        no_gaps(&steady, entering.len(), "steady check")?;
        written += entering.len();
        anyhow::ensure!(
            !incremental.last_full(),
            "a steady check accounted for every job"
        );
    }
    // The window moved on: the runs of the occurrences that left it are dropped.
    anyhow::ensure!(
        incremental.kept() < written,
        "the steady checks kept all {written} runs written"
    );
    let steady = &mut costs[2];
    steady.wall /= STEADY;
    steady.leader /= STEADY;
    steady.redis = steady.redis.map(|r| r / STEADY);
    Ok(costs)
}
