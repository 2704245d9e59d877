//! `capture`: the cost of keeping each run's output. Occurrences of command jobs (a shell
//! that prints a line to stdout and one to stderr) drained by 2 in-process consumers (on a
//! runtime shaped as `cronq consumer`'s, as `throughput` does) with the output kept (`keep_outputs`, the default of `cronq consumer`), against the same
//! drain with nothing kept (the baseline), in the same run, alternating which side goes
//! first. Each side runs in a namespace of its own on the real RabbitMQ and Redis; the
//! drain ends when the run history holds every occurrence's run. Besides the rates, the
//! CPU each side spent per run (the consumers, the commands they ran, and Redis, from
//! `/proc`): on a shared machine the rates move with its load, the CPU per run much less.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::Broker as _;
use cronq_shared::config::Config;
use cronq_shared::runlog::DEFAULT_OUTPUT_LIMIT;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::env::BenchEnv;
use crate::report::Figure;
use crate::stats::{Unit, ratio};
use crate::throughput;

/// Sizes of the capture bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct CaptureArgs {
    /// Occurrences per side and run.
    #[arg(
        id = "capture_occurrences",
        long = "capture-occurrences",
        default_value_t = 2_000
    )]
    pub occurrences: usize,
    /// Concurrency of each of the 2 consumers.
    #[arg(
        id = "capture_concurrency",
        long = "capture-concurrency",
        default_value_t = 16
    )]
    pub concurrency: u16,
}

/// Jobs the occurrences are spread over (overlap allowed).
const JOBS: usize = 16;

/// A drain that makes no progress for this long is a failure.
const STALL: Duration = Duration::from_secs(60);

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When a service is unreachable or a drain stalls.
pub async fn run(args: &CaptureArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let owned = args.clone();
    throughput::on_consumer_runtime("capture", cronq_consumer::DEFAULT_THREADS, async move {
        run_here(&owned, runs).await
    })
    .await
}

/// [`run`], on the runtime it starts.
async fn run_here(args: &CaptureArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let mut kept = Figure::new(
        "capture",
        format!(
            "executed/s, {} command runs, 2 consumers x {}, output kept",
            args.occurrences, args.concurrency
        ),
        Unit::PerSecond,
    )
    .baseline("the same, output not kept");
    let mut share =
        Figure::new("capture", "kept / not kept drain rate", Unit::Ratio).goal(">= 95%");
    let mut cpu = Figure::new(
        "capture",
        "CPU per run: consumers + commands + Redis, output kept",
        Unit::Seconds,
    )
    .baseline("the same, output not kept");
    let mut cpu_share =
        Figure::new("capture", "not kept / kept CPU per run", Unit::Ratio).goal(">= 95%");
    for run in 1..=runs {
        // Alternate which side goes first, so a machine warming up or slowing down does
        // not favour one side.
        let order = if run % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        };
        let mut rates = [0.0; 2];
        let mut cpus = [None; 2];
        for keep in order {
            let env = BenchEnv::new()?;
            let measured = drain(&env, args, keep).await;
            env.cleanup().await;
            let (rate, used) = measured?;
            eprintln!(
                "capture: run {run}/{runs}, output {}: {rate:.0}/s{}",
                if keep { "kept" } else { "not kept" },
                used.map_or(String::new(), |d| format!(
                    ", {:.0} µs CPU per run",
                    d.as_secs_f64() * 1e6 / args.occurrences as f64
                ))
            );
            rates[usize::from(!keep)] = rate;
            cpus[usize::from(!keep)] = used;
        }
        kept.runs.push(rates[0]);
        kept.push_baseline(rates[1]);
        share.runs.push(ratio(rates[0], rates[1]));
        if let [Some(on), Some(off)] = cpus {
            let per = |d: Duration| d.as_secs_f64() / args.occurrences as f64;
            cpu.runs.push(per(on));
            cpu.push_baseline(per(off));
            cpu_share
                .runs
                .push(ratio(off.as_secs_f64(), on.as_secs_f64()));
        }
    }
    let mut figures = vec![kept, share];
    if !cpu.runs.is_empty() {
        figures.extend([cpu, cpu_share]);
    }
    Ok(figures)
}

/// CPU used so far by this process, the children it waited for, and the local Redis;
/// `None` when Redis is not a local process.
fn cpu_now() -> Option<Duration> {
    let redis = crate::procfs::find("redis-server")?;
    Some(
        crate::procfs::cpu_time(None).ok()?
            + crate::procfs::children_cpu_time(None).ok()?
            + crate::procfs::cpu_time(Some(redis)).ok()?,
    )
}

fn config() -> anyhow::Result<Config> {
    let defaults = "overlap = \"allow\"\nretention = \"1h\"\nmax_attempts = 1\n";
    let job = "command = [\"/bin/sh\", \"-c\", \"echo out; echo err >&2\"]\n";
    let text = crate::workload::every_second("c", JOBS, crate::workload::Shape { defaults, job });
    Config::from_toml(&text, Path::new("bench-capture.toml"))
        .context("while building the capture config")
}

/// Publishes the occurrences, drains them with output kept or not; the drain rate, and the
/// CPU the drain used.
async fn drain(
    env: &BenchEnv,
    args: &CaptureArgs,
    keep: bool,
) -> anyhow::Result<(f64, Option<Duration>)> {
    let config = config()?;
    for q in config.queues() {
        env.track_queue(&q);
    }
    let base: DateTime<Utc> = "2020-01-01T00:00:00Z".parse()?;
    let now = Utc::now();
    let batch = throughput::backlog(&config, args.occurrences, base, now);
    let broker = AmqpBroker::connect(&env.endpoints.amqp_url, env.names())
        .await?
        .signing(env.endpoints.keyring.clone());
    broker.declare(&config.queues()).await?;
    for chunk in batch.chunks(1_000) {
        broker.publish(chunk).await.context("while publishing")?;
    }
    broker.close().await;

    let token = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let mut history = None;
    let mut consumers = Vec::new();
    for i in 0..2 {
        let (mut consumer, stores) = throughput::consumer(
            env,
            &config,
            &format!("bench-capture-{i}"),
            args.concurrency,
        )
        .await?;
        history.get_or_insert_with(|| Arc::clone(&stores.runlog));
        if keep {
            consumer = consumer.keep_outputs(Arc::clone(&stores.runlog), DEFAULT_OUTPUT_LIMIT);
        }
        consumers.push(consumer);
    }
    let history = history.context("no consumer")?;
    let started = Instant::now();
    let cpu_before = cpu_now();
    for consumer in consumers {
        tasks.spawn(consumer.run(token.child_token()));
    }
    // Every occurrence's run in the history ends the drain.
    let mut seen = 0;
    let mut progressed = Instant::now();
    loop {
        let runs = history
            .list(None, args.occurrences + 1)
            .await
            .context("while reading the run history")?
            .len();
        if runs >= args.occurrences {
            break;
        }
        if runs > seen {
            seen = runs;
            progressed = Instant::now();
        } else if progressed.elapsed() > STALL {
            token.cancel();
            bail!("the drain stalled at {runs} of {} runs", args.occurrences);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = started.elapsed();
    let used = cpu_before.zip(cpu_now()).map(|(a, b)| b.saturating_sub(a));
    token.cancel();
    while tasks.join_next().await.is_some() {}
    Ok((args.occurrences as f64 / took.as_secs_f64().max(1e-9), used))
}
