//! `pools`: the cost of a pool. The same backlog of occurrences (16 jobs, a no-op Rust
//! handler, overlap `allow`) drained by 2 in-process consumers on a runtime shaped as
//! `cronq consumer`'s, as `throughput` does, once
//! with no pool (the baseline) and once with every job in one `[pools.NAME]`, in the same
//! run, alternating which side goes first, each in a namespace of its own on the real
//! RabbitMQ and Redis. Two pooled sides: a pool as large as the consumers' concurrency
//! (never full: what taking and freeing a slot costs each run), and a pool of
//! `--pool-size` (full: the runs past it wait in the ledger and are woken one per freed
//! slot, through the broker).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::Broker as _;
use cronq_shared::config::Config;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::env::BenchEnv;
use crate::report::Figure;
use crate::stats::{Unit, ratio};
use crate::throughput;

/// Sizes of the pools bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct PoolsArgs {
    /// Occurrences per side and run.
    #[arg(
        id = "pools_occurrences",
        long = "pools-occurrences",
        default_value_t = 10_000
    )]
    pub occurrences: usize,
    /// Concurrency of each of the 2 consumers.
    #[arg(
        id = "pools_concurrency",
        long = "pools-concurrency",
        default_value_t = 32
    )]
    pub concurrency: u16,
    /// The size of the pool that is full.
    #[arg(long = "pool-size", default_value_t = 8)]
    pub pool_size: u32,
}

/// Jobs the occurrences are spread over.
const JOBS: usize = 16;

/// Consumers.
const CONSUMERS: usize = 2;

/// A drain that makes no progress for this long is a failure.
const STALL: Duration = Duration::from_secs(60);

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When a service is unreachable or a drain stalls.
pub async fn run(args: &PoolsArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let owned = args.clone();
    throughput::on_consumer_runtime("pools", cronq_consumer::DEFAULT_THREADS, async move {
        run_here(&owned, runs).await
    })
    .await
}

/// [`run`], on the runtime it starts.
async fn run_here(args: &PoolsArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let in_flight = u32::from(args.concurrency) * CONSUMERS as u32;
    let k = args.occurrences;
    let shape = format!(
        "{k} occurrences, {CONSUMERS} consumers x {}",
        args.concurrency
    );
    let mut open = Figure::new(
        "pools",
        format!("executed/s, {shape}, one pool of {in_flight} (never full)"),
        Unit::PerSecond,
    )
    .baseline("the same, no pool");
    let mut open_share = Figure::new("pools", "pool never full / no pool drain rate", Unit::Ratio);
    let mut full = Figure::new(
        "pools",
        format!("executed/s, {shape}, one pool of {} (full)", args.pool_size),
        Unit::PerSecond,
    )
    .baseline("the same, no pool");
    let mut full_share = Figure::new("pools", "pool full / no pool drain rate", Unit::Ratio);
    let sides = [None, Some(in_flight), Some(args.pool_size)];
    for run in 1..=runs {
        // Rotate which side goes first, so a machine warming up or slowing down does not
        // favour one side.
        let mut order: Vec<usize> = (0..sides.len()).collect();
        order.rotate_left((run - 1) % sides.len());
        let mut rates = [0.0; 3];
        for i in order {
            let env = BenchEnv::new()?;
            let measured = drain(&env, args, sides[i]).await;
            env.cleanup().await;
            let rate = measured?;
            eprintln!(
                "pools: run {run}/{runs}, {}: {rate:.0}/s",
                sides[i].map_or_else(|| "no pool".to_owned(), |n| format!("pool of {n}"))
            );
            rates[i] = rate;
        }
        open.runs.push(rates[1]);
        open.push_baseline(rates[0]);
        open_share.runs.push(ratio(rates[1], rates[0]));
        full.runs.push(rates[2]);
        full.push_baseline(rates[0]);
        full_share.runs.push(ratio(rates[2], rates[0]));
    }
    Ok(vec![open, open_share, full, full_share])
}

/// The jobs, in a pool of `pool` slots when given.
fn config(pool: Option<u32>) -> anyhow::Result<Config> {
    let defaults = "overlap = \"allow\"\nretention = \"1h\"\nmax_attempts = 1\n";
    let (head, job) = match pool {
        Some(n) => (format!("[pools.bench]\nsize = {n}\n"), "pool = \"bench\"\n"),
        None => (String::new(), ""),
    };
    let jobs = crate::workload::every_second("p", JOBS, crate::workload::Shape { defaults, job });
    Config::from_toml(&format!("{head}{jobs}"), Path::new("bench-pools.toml"))
        .context("while building the pools config")
}

/// Publishes the occurrences and drains them; the drain rate.
async fn drain(env: &BenchEnv, args: &PoolsArgs, pool: Option<u32>) -> anyhow::Result<f64> {
    let config = config(pool)?;
    for q in config.queues() {
        env.track_queue(&q);
    }
    let base: DateTime<Utc> = "2020-01-01T00:00:00Z".parse()?;
    let batch = throughput::backlog(&config, args.occurrences, base, Utc::now());
    let broker = AmqpBroker::connect(&env.endpoints.amqp_url, env.names())
        .await?
        .signing(env.endpoints.keyring.clone());
    broker.declare(&config.queues()).await?;
    for chunk in batch.chunks(1_000) {
        broker.publish(chunk).await.context("while publishing")?;
    }
    broker.close().await;

    let executed = Arc::new(AtomicUsize::new(0));
    let token = CancellationToken::new();
    let consumers = throughput::counting(
        env,
        &config,
        "bench-pools",
        CONSUMERS,
        args.concurrency,
        &executed,
        None,
    )
    .await?;
    let mut tasks = JoinSet::new();
    let started = Instant::now();
    for consumer in consumers {
        tasks.spawn(consumer.run(token.child_token()));
    }
    let mut last = (0, Instant::now());
    let result = loop {
        let now = executed.load(Ordering::Acquire);
        if now >= args.occurrences {
            break Ok(started.elapsed());
        }
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > STALL {
            break Err(anyhow::anyhow!(
                "stalled at {now} of {} for {STALL:?}",
                args.occurrences
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    token.cancel();
    while tasks.join_next().await.is_some() {}
    let took = result?;
    if executed.load(Ordering::Acquire) > args.occurrences {
        bail!("ran more occurrences than were published");
    }
    Ok(args.occurrences as f64 / took.as_secs_f64().max(1e-9))
}
