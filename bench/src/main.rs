//! `cronq-bench`: cronq's benchmarks against the real RabbitMQ and Redis.
//!
//! Every figure is measured in one run beside a baseline from the same run (the machines
//! are shared and noisy), repeated `--runs` times and reported as min / median / max.
//! Each run works in its own namespace `bench-<random>`, deleted afterwards. None of this
//! is a test: nothing here asserts a time.
//!
//! - [`precision`]: publish lateness of the real producer vs a bare publish-with-confirm.
//! - [`throughput`]: occurrences executed per second by 2 consumers vs the raw broker loop.
//! - [`scale`]: a million jobs in one producer: load time, memory, idle CPU, `next_after`.
//! - [`failover`]: SIGKILL of the leading producer: time to the standby's first publish,
//!   losses and duplicates.
//! - [`footprint`]: idle memory of the `cronq` processes.
//! - [`standalone`]: `cronq standalone` on SQLite vs in memory: occurrences executed per
//!   second, publish lateness, CPU per occurrence (needs neither RabbitMQ nor Redis).
//! - [`digest`]: the config digest of the fleet registry at 100,000 and 1,000,000 jobs,
//!   next to the config load of the same file (needs neither RabbitMQ nor Redis).
//! - [`dashboard`]: how long `cronq dashboard` takes to answer its Jobs and Runs pages at
//!   100,000 jobs and 1,000,000 run-history entries (p50/p99 of 100 requests each).
//! - [`runtime_jobs`]: 100,000 runtime jobs: applies per second (CLI and API), the leader's
//!   memory against the same jobs in a file, and the time from an apply to the leader's
//!   first publish against a SIGHUP reload of the same change.
//! - [`pools`]: the drain rate of jobs in a pool (never full, and full) against the same
//!   jobs with none, in the same run.
//! - [`herd`]: 100,000 jobs due at the same instant in the real `cronq producer`: instant
//!   to last confirm against the raw pipelined burst of the same messages, the next
//!   seconds' lateness, and `/metrics` and dashboard probes during it.
//! - [`barrier`]: the cost of `CRONQ_REDIS_MIN_REPLICAS` on the consumer's ledger writes
//!   (needs Redis with replicas, e.g. through Sentinel; not part of `all`).
//!
//! Results: a table on stdout, a JSON file, with `--markdown` a section of
//! `docs/benchmarks-notebook.md` ([`report`]), and with `--charts DIR` SVG charts
//! ([`chart`]); `cronq-bench chart` draws the charts of saved reports.

mod barrier;
mod capture;
mod chart;
mod dashboard;
mod digest;
mod env;
mod failover;
mod floor;
mod footprint;
mod herd;
mod lateness;
mod pools;
mod precision;
mod procfs;
mod raw;
mod reconcile;
mod recorder;
mod report;
mod runtime_jobs;
mod scale;
mod standalone;
mod stats;
mod throughput;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};

use crate::report::Report;

/// cronq benchmarks against the real RabbitMQ (CRONQ_AMQP_URL) and Redis (CRONQ_REDIS_URL).
#[derive(Debug, Parser)]
#[command(name = "cronq-bench", version)]
struct Cli {
    /// Which benchmark to run.
    which: Which,
    /// Repetitions of each benchmark (failover repeats per kill instead).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where the JSON report goes.
    #[arg(long, default_value = "target/bench/results.json")]
    json: PathBuf,
    /// Also write the results section into this Markdown file (e.g. docs/benchmarks-notebook.md).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Also draw this run's charts (SVG) into this directory; with `chart`, where the
    /// charts go (default docs/benchmarks/charts).
    #[arg(long)]
    charts: Option<PathBuf>,
    /// With `chart`: the saved reports to draw (files, or directories of `*.json`).
    #[arg(long, default_value = "docs/benchmarks/runs")]
    from: Vec<PathBuf>,
    /// The `cronq` binary run by scale, failover, footprint and standalone (default: next
    /// to this one).
    #[arg(long)]
    cronq: Option<PathBuf>,
    #[command(flatten)]
    precision: precision::PrecisionArgs,
    #[command(flatten)]
    throughput: throughput::ThroughputArgs,
    #[command(flatten)]
    scale: scale::ScaleArgs,
    #[command(flatten)]
    failover: failover::FailoverArgs,
    #[command(flatten)]
    footprint: footprint::FootprintArgs,
    #[command(flatten)]
    standalone: standalone::StandaloneArgs,
    #[command(flatten)]
    dashboard: dashboard::DashboardArgs,
    #[command(flatten)]
    digest: digest::DigestArgs,
    #[command(flatten)]
    runtime: runtime_jobs::RuntimeArgs,
    #[command(flatten)]
    barrier: barrier::BarrierArgs,
    #[command(flatten)]
    capture: capture::CaptureArgs,
    #[command(flatten)]
    reconcile: reconcile::ReconcileArgs,
    #[command(flatten)]
    pools: pools::PoolsArgs,
    #[command(flatten)]
    herd: herd::HerdArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Precision,
    Throughput,
    Scale,
    Failover,
    Footprint,
    Standalone,
    /// The dashboard's page times.
    Dashboard,
    /// The config digest's cost at many jobs.
    Digest,
    /// Runtime jobs at scale: applies, memory, apply to first publish.
    Runtime,
    /// The cost of keeping each run's output: drains with it kept and not.
    Capture,
    /// The leader's continuous reconciliation at many jobs: one check's cost.
    Reconcile,
    /// The drain rate of pooled jobs against unpooled ones.
    Pools,
    /// Many jobs due at one instant: the producer's burst against the raw one.
    Herd,
    /// The cost of CRONQ_REDIS_MIN_REPLICAS (needs replicas: not part of `all`).
    Barrier,
    /// Every benchmark above but `barrier`, in that order.
    All,
    /// Runs nothing: draws the SVG charts of the saved reports (`--from`) into `--charts`.
    Chart,
}

/// jemalloc, as the `cronq` binary allocates (src/main.rs): the in-process consumers and
/// producers measured here are the ones a `cronq` process runs.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // lapin and redis both use rustls; pin one crypto provider so neither panics choosing.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("cronq-bench: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("cronq-bench: {err:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(mut cli: Cli) -> anyhow::Result<()> {
    if cli.which == Which::Chart {
        let out = cli
            .charts
            .clone()
            .unwrap_or_else(|| PathBuf::from("docs/benchmarks/charts"));
        for path in chart::write_all(&cli.from, &out)? {
            eprintln!("cronq-bench: chart {}", path.display());
        }
        return Ok(());
    }
    let samples = recorder::install()?;
    // The report states the burst's length even when it follows `--duration`.
    cli.precision.burst.get_or_insert(cli.precision.duration);
    let runs = cli.runs.max(1);
    let cronq = cli.cronq.clone().unwrap_or_else(scale::default_cronq);
    let command = std::iter::once("cronq-bench".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let mut report = Report::new(command);
    report.sizes.insert("runs".into(), runs.into());
    let all = cli.which == Which::All;
    let mut failures = Vec::new();
    if all || cli.which == Which::Precision {
        report
            .sizes
            .insert("precision".into(), serde_json::to_value(&cli.precision)?);
        match precision::run(&cli.precision, runs, &samples).await {
            Ok((f, c)) => {
                report.figures.extend(f);
                report.curves.extend(c);
            }
            Err(e) => failures.push(format!("precision failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Throughput {
        report
            .sizes
            .insert("throughput".into(), serde_json::to_value(&cli.throughput)?);
        match throughput::run(&cli.throughput, runs).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("throughput failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Scale {
        report
            .sizes
            .insert("scale".into(), serde_json::to_value(&cli.scale)?);
        match scale::run(&cli.scale, runs, &cronq).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("scale failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Failover {
        report
            .sizes
            .insert("failover".into(), serde_json::to_value(&cli.failover)?);
        match failover::run(&cli.failover, &cronq).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("failover failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Footprint {
        report
            .sizes
            .insert("footprint".into(), serde_json::to_value(&cli.footprint)?);
        match footprint::run(&cli.footprint, runs, &cronq).await {
            Ok((f, notes)) => {
                report.figures.extend(f);
                report.notes.extend(notes);
            }
            Err(e) => failures.push(format!("footprint failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Standalone {
        report
            .sizes
            .insert("standalone".into(), serde_json::to_value(&cli.standalone)?);
        match standalone::run(&cli.standalone, runs, &cronq).await {
            Ok((f, notes)) => {
                report.figures.extend(f);
                report.notes.extend(notes);
            }
            Err(e) => failures.push(format!("standalone failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Dashboard {
        report
            .sizes
            .insert("dashboard".into(), serde_json::to_value(&cli.dashboard)?);
        match dashboard::run(&cli.dashboard, runs, &cronq).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("dashboard failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Digest {
        report
            .sizes
            .insert("digest".into(), serde_json::to_value(&cli.digest)?);
        match digest::run(&cli.digest, runs) {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("digest failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Runtime {
        report
            .sizes
            .insert("runtime".into(), serde_json::to_value(&cli.runtime)?);
        match runtime_jobs::run(&cli.runtime, runs, &cronq).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("runtime failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Capture {
        report
            .sizes
            .insert("capture".into(), serde_json::to_value(&cli.capture)?);
        match capture::run(&cli.capture, runs).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("capture failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Reconcile {
        report
            .sizes
            .insert("reconcile".into(), serde_json::to_value(&cli.reconcile)?);
        match reconcile::run(&cli.reconcile, runs).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("reconcile failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Pools {
        report
            .sizes
            .insert("pools".into(), serde_json::to_value(&cli.pools)?);
        match pools::run(&cli.pools, runs).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("pools failed: {e:#}")),
        }
    }
    if all || cli.which == Which::Herd {
        report
            .sizes
            .insert("herd".into(), serde_json::to_value(&cli.herd)?);
        match herd::run(&cli.herd, runs, &cronq).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("herd failed: {e:#}")),
        }
    }
    if cli.which == Which::Barrier {
        report
            .sizes
            .insert("barrier".into(), serde_json::to_value(&cli.barrier)?);
        match barrier::run(&cli.barrier, runs).await {
            Ok(f) => report.figures.extend(f),
            Err(e) => failures.push(format!("barrier failed: {e:#}")),
        }
    }
    report.notes.extend(failures.iter().cloned());
    print!("{}", report.table());
    report.save_json(&cli.json)?;
    eprintln!("cronq-bench: JSON report in {}", cli.json.display());
    if let Some(path) = &cli.markdown {
        report
            .write_markdown(path)
            .with_context(|| format!("while writing the Markdown section to {}", path.display()))?;
        eprintln!("cronq-bench: results section written to {}", path.display());
    }
    if let Some(dir) = &cli.charts {
        for path in chart::write_all(std::slice::from_ref(&cli.json), dir)? {
            eprintln!("cronq-bench: chart {}", path.display());
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} benchmark(s) failed (see the notes above)",
            failures.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::Cli;

    #[test]
    fn every_benchmark_s_flags_are_distinct() {
        Cli::command().debug_assert();
    }
}
