//! `reconcile`: what the leader's continuous reconciliation (`cronq_producer`'s
//! `accounting_check`, every minute over the last hour) costs at many jobs. One check as
//! the leader makes it, over `--reconcile-jobs` jobs firing hourly (`H * * * *`, so the
//! hour's window expects one occurrence of each) with one succeeded run of each in the
//! real Redis run history: the check's wall time, the CPU it takes in this process (the
//! leader's share) and in Redis, and that CPU as a share of one core at the default
//! cadence (one check a minute).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{TimeDelta, Utc};
use cronq_shared::accounting::{self, Sources, Window};
use cronq_shared::config::Config;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Outcome, Run};
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

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When a service is unreachable or the check fails.
pub async fn run(args: &ReconcileArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let label = format!("one check over {} jobs, an hour's window", args.jobs);
    let mut wall = Figure::new("reconcile", format!("wall time of {label}"), Unit::Seconds);
    let mut cpu = Figure::new("reconcile", format!("leader CPU of {label}"), Unit::Seconds);
    let mut store = Figure::new("reconcile", format!("Redis CPU of {label}"), Unit::Seconds);
    let mut share = Figure::new(
        "reconcile",
        "leader CPU share of one core at one check a minute",
        Unit::Ratio,
    );
    let redis = crate::procfs::find("redis-server");
    for run in 1..=runs {
        let env = BenchEnv::new()?;
        let measured = measure(&env, args).await;
        env.cleanup().await;
        let (took, leader, in_redis) = measured?;
        eprintln!(
            "reconcile: run {run}/{runs}: {:.2} s wall, {:.2} s leader CPU{}",
            took.as_secs_f64(),
            leader.as_secs_f64(),
            in_redis.map_or(String::new(), |r| format!(
                ", {:.2} s Redis CPU",
                r.as_secs_f64()
            ))
        );
        wall.runs.push(took.as_secs_f64());
        cpu.runs.push(leader.as_secs_f64());
        share.runs.push(leader.as_secs_f64() / EVERY.as_secs_f64());
        if let (Some(r), Some(_)) = (in_redis, redis) {
            store.runs.push(r.as_secs_f64());
        }
    }
    let mut figures = vec![wall, cpu, share];
    if !store.runs.is_empty() {
        figures.push(store);
    }
    Ok(figures)
}

async fn measure(
    env: &BenchEnv,
    args: &ReconcileArgs,
) -> anyhow::Result<(Duration, Duration, Option<Duration>)> {
    let mut text = String::with_capacity(args.jobs * 48);
    for i in 0..args.jobs {
        text.push_str(&format!(
            "[[job]]\nname = \"r{i}\"\nschedule = \"H * * * *\"\n"
        ));
    }
    let config = Config::from_toml(&text, Path::new("bench-reconcile.toml"))
        .context("while building the reconcile config")?;
    let stores = cronq_backends::stores(&env.endpoints, Duration::from_secs(7200), None)
        .await
        .context("while connecting to Redis")?;
    let now = Utc::now();
    let back = |d: Duration| now - TimeDelta::from_std(d).unwrap_or_default();
    let window = Window {
        from: back(WINDOW),
        to: back(LAG),
        grace: LAG,
        now,
        job: None,
        max_runs: DEFAULT_MAX_RUNS,
        only_gaps: true,
    };
    // One succeeded run of each occurrence the window expects, as the consumers wrote them.
    let expected: Vec<Run> = config
        .jobs
        .iter()
        .flat_map(|job| {
            job.schedule
                .iter_after(window.from - TimeDelta::seconds(1))
                .take_while(|at| *at <= window.to)
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
        .collect();
    let runlog = stores.runlog.clone();
    let recorded: Vec<Result<(), _>> = futures_util::stream::iter(expected.iter())
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
    let sources = Sources {
        runlog: &*stores.runlog,
        audit: &*stores.audit,
        jobs: &*stores.jobs,
        file_history: &[],
        terms: &[],
    };
    let redis = crate::procfs::find("redis-server");
    let redis_before = redis.and_then(|p| crate::procfs::cpu_time(Some(p)).ok());
    let cpu_before = crate::procfs::cpu_time(None)?;
    let started = Instant::now();
    let report =
        accounting::reconcile(sources, &config, &BTreeMap::new(), &HashMap::new(), &window)
            .await
            .context("while reconciling")?;
    let took = started.elapsed();
    let leader = crate::procfs::cpu_time(None)?.saturating_sub(cpu_before);
    let in_redis = redis.zip(redis_before).and_then(|(p, before)| {
        Some(
            crate::procfs::cpu_time(Some(p))
                .ok()?
                .saturating_sub(before),
        )
    });
    let gaps: usize = report.accounts.iter().map(|a| a.gaps.len()).sum();
    let accounted: usize = report.accounts.iter().map(|a| a.expected).sum();
    // The check judges an occurrence once its time to end has passed: those of the last
    // minute may still be pending, so it may expect up to a minute's worth fewer.
    let minute = expected.len() / 50;
    anyhow::ensure!(
        gaps == 0 && accounted <= expected.len() && accounted + minute >= expected.len(),
        "the check expected {accounted} occurrences with {gaps} gaps; {} runs were written",
        expected.len()
    );
    Ok((took, leader, in_redis))
}
