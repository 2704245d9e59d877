//! `throughput`: occurrences executed per second by 2 in-process consumers (the consumer
//! library with a no-op Rust handler; full idempotency records and run history in Redis),
//! next to the raw broker loop on the same machine in the same run.
//!
//! Both sides get the same work: K occurrence bodies are published first (cronq: through
//! `AmqpBroker::publish` in batches of 1,000; raw: pipelined persistent publishes with
//! confirms into a quorum queue), then drained by 2 consumers with the same prefetch. The
//! figure is the drain rate; the publish rates are reported too.
//!
//! Both drains are CPU-bound on a small machine, where the consumers, RabbitMQ and Redis
//! share the cores, so the bench also reports the CPU time each of them spent per drained
//! occurrence (from `/proc`, when the services run on this machine): unlike the rates, CPU
//! time per message barely moves when other work shares the machine, and it says where
//! cronq's extra cost goes. Both raw forms are measured so: each message acked with its own
//! frame, and one ack with `multiple` per 32 deliveries (as cronq's coalescing settler does).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, TimeDelta, Utc};
use cronq_consumer::{Consumer, Options};
use cronq_producer::planner;
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::{Broker as _, Outgoing};
use cronq_shared::config::Config;
use cronq_shared::message::Trigger;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::env::BenchEnv;
use crate::report::Figure;
use crate::stats::{Unit, ratio};

/// Sizes of the throughput bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct ThroughputArgs {
    /// Occurrences per run.
    #[arg(long = "occurrences", default_value_t = 100_000)]
    pub occurrences: usize,
    /// Consumers (each with its own broker and Redis connections).
    #[arg(long = "consumers", default_value_t = 2)]
    pub consumers: usize,
    /// Concurrency (= prefetch) of each consumer, and prefetch of each raw consumer.
    #[arg(long = "concurrency", default_value_t = 32)]
    pub concurrency: u16,
    /// Jobs the occurrences are spread over (overlap = allow).
    #[arg(id = "throughput_jobs", long = "throughput-jobs", default_value_t = JOBS)]
    pub jobs: usize,
    /// What the ledger's floor does per occurrence: the floor itself, or cronq's ledger
    /// added back a step at a time (see `bench/src/floor.rs`).
    #[arg(long = "floor", value_enum, default_value_t)]
    pub floor: crate::floor::Form,
    /// Every Nth run of cronq's handler takes `--slow-for` instead of returning at once
    /// (0: none): a mixed workload, where the deliveries of slow runs stay unacked beside
    /// the others (held claims). Its figures are reported under a bench of their own.
    #[arg(long = "slow-every", default_value_t = 0)]
    pub slow_every: usize,
    /// How long a slow run of `--slow-every` takes.
    #[arg(long = "slow-for", default_value = "300ms", value_parser = humantime::parse_duration)]
    #[serde(with = "crate::precision::humantime_secs")]
    pub slow_for: Duration,
    /// Worker threads of the runtime every drain of this bench runs on, cronq's and its
    /// baselines': by default those of `cronq consumer` (`--threads`).
    #[arg(long = "throughput-threads", default_value_t = cronq_consumer::DEFAULT_THREADS, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
}

impl ThroughputArgs {
    /// The slow runs of a mixed workload: every how many runs, and how long.
    fn slow(&self) -> Option<Slow> {
        (self.slow_every > 0).then_some(Slow {
            every: self.slow_every,
            takes: self.slow_for,
        })
    }
}

/// Every `every`th run of the bench's handler takes `takes` ([`ThroughputArgs::slow_every`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slow {
    every: usize,
    takes: Duration,
}

/// Jobs the occurrences are spread over unless told otherwise.
const JOBS: usize = 16;

/// Deliveries one ack covers in the coalescing raw loop (`multiple`), as a consumer that
/// coalesces its acks does.
const COALESCED_ACKS: usize = 32;

/// Occurrences per confirmed publish batch (the producer's own batch size).
const BATCH: usize = 1_000;

/// A drain that makes no progress for this long is a failure, not a slow run.
const STALL: Duration = Duration::from_secs(60);

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When a service is unreachable or a drain stalls.
pub async fn run(args: &ThroughputArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    // The baselines share the consumers' runtime, like for like.
    let owned = args.clone();
    on_consumer_runtime("throughput", args.threads, async move {
        run_here(&owned, runs).await
    })
    .await
}

/// Runs `work`, the bench `bench`, on a runtime of its own shaped as `cronq consumer`'s
/// (`threads` workers: the consumers measured are its), and waits for it.
///
/// # Errors
/// When the runtime does not start, or `work` fails or panics.
pub async fn on_consumer_runtime<T: Send + 'static>(
    bench: &str,
    threads: u16,
    work: impl Future<Output = anyhow::Result<T>> + Send + 'static,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(threads))
        .enable_all()
        .build()
        .with_context(|| format!("while starting the {bench} bench's runtime"))?;
    let ran = runtime.spawn(work).await;
    runtime.shutdown_background();
    ran.with_context(|| format!("the {bench} bench's task failed"))?
}

async fn run_here(args: &ThroughputArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let raw = "raw lapin, no cronq logic";
    let occurrences = crate::stats::format(args.occurrences as f64, Unit::Count);
    let jobs = crate::stats::format(args.jobs as f64, Unit::Count);
    // Another job count is another chart, not a point of the default's.
    let (k, of_jobs) = if args.jobs == JOBS {
        (format!("{occurrences} occurrences,"), String::new())
    } else {
        (
            format!("{occurrences} occurrences of {jobs} jobs,"),
            format!(", {jobs} jobs"),
        )
    };
    // So is another runtime than `cronq consumer`'s.
    let on = if args.threads == cronq_consumer::DEFAULT_THREADS {
        String::new()
    } else {
        format!(" on {} threads", args.threads)
    };
    let mut drain = Figure::new(
        "throughput",
        format!(
            "executed/s, {k} {} consumers x {}{on}",
            args.consumers, args.concurrency
        ),
        Unit::PerSecond,
    )
    .baseline(format!("{raw}: consumed+acked/s"));
    let mut share = Figure::new("throughput", "cronq / raw drain rate", Unit::Ratio).goal(">= 70%");
    let mut coalesced = Figure::new(
        "throughput",
        format!(
            "executed/s, {k} {} consumers x {}{on} (vs acks coalesced)",
            args.consumers, args.concurrency
        ),
        Unit::PerSecond,
    )
    .baseline(format!(
        "{raw}, one ack with multiple per {COALESCED_ACKS} deliveries: consumed+acked/s"
    ));
    let mut coalesced_share = Figure::new(
        "throughput",
        "cronq / coalescing raw drain rate",
        Unit::Ratio,
    )
    .goal(">= 50%");
    let mut cpu = Figure::new(
        "throughput",
        "CPU per occurrence drained: consumers + RabbitMQ + Redis",
        Unit::Seconds,
    )
    .baseline(format!("{raw}: consumers + RabbitMQ"));
    let mut cpu_share = Figure::new(
        "throughput",
        "raw / cronq CPU per occurrence (the drain ratio on a CPU-bound machine)",
        Unit::Ratio,
    );
    let mut cpu_coalesced = Figure::new(
        "throughput",
        "CPU per occurrence: coalesced raw loop",
        Unit::Seconds,
    )
    .baseline(format!(
        "{raw}, one ack with multiple per {COALESCED_ACKS} deliveries: consumers + RabbitMQ"
    ));
    let mut cpu_coalesced_share = Figure::new(
        "throughput",
        "cronq / coalesced raw CPU per occurrence",
        Unit::Ratio,
    )
    .goal("<= 200%");
    let coalesced_same = format!("{raw}, acks coalesced: same process");
    let mut coalesced_parts = Part::figures(
        |part| format!("CPU per occurrence drained: {part} (vs acks coalesced)"),
        &coalesced_same,
    );
    let floor_name = match args.floor {
        crate::floor::Form::Plain => {
            "the ledger's floor (coalescing raw loop + the fewest Redis commands)".to_owned()
        }
        form => format!("the ledger's floor, --floor {}", form.as_str()),
    };
    let mut floor_drain = Figure::new(
        "throughput",
        format!(
            "executed/s, {k} {} consumers x {}{on} (vs the ledger's floor)",
            args.consumers, args.concurrency
        ),
        Unit::PerSecond,
    )
    .baseline(format!("ledger floor: {floor_name}: claimed+ended+acked/s"));
    let mut cpu_floor = Figure::new(
        "throughput",
        format!("CPU per occurrence: {floor_name}"),
        Unit::Seconds,
    )
    .baseline(format!("{raw}, acks coalesced: consumers + RabbitMQ"));
    let mut cpu_floor_share = Figure::new(
        "throughput",
        "the ledger's floor / coalesced raw CPU per occurrence",
        Unit::Ratio,
    );
    let mut cpu_over_floor = Figure::new(
        "throughput",
        "cronq / the ledger's floor CPU per occurrence",
        Unit::Ratio,
    );
    let mut floor_parts = Part::figures(
        |part| format!("CPU per occurrence, the ledger's floor: {part}"),
        &coalesced_same,
    );
    let mut apart = Figure::new(
        "throughput",
        "projected cronq / raw with RabbitMQ, Redis and consumers on their own cores",
        Unit::Ratio,
    )
    .goal(">= 70%");
    let mut parts = Part::figures(
        |part| format!("CPU per occurrence drained: {part}"),
        &format!("{raw}: same process"),
    );
    let mut publish = Figure::new(
        "throughput",
        format!("published+confirmed/s (AmqpBroker, batches of 1,000{of_jobs})"),
        Unit::PerSecond,
    )
    .baseline(format!("{raw}: pipelined confirms"));
    for run in 1..=runs {
        eprintln!(
            "throughput: {} occurrences, run {run}/{runs}",
            args.occurrences
        );
        let env = BenchEnv::new()?;
        let measured = measure(&env, args).await;
        env.cleanup().await;
        let m = measured?;
        eprintln!(
            "  cronq: publish {:.0}/s, drain {:.0}/s; raw: publish {:.0}/s, drain {:.0}/s, acks coalesced {:.0}/s",
            m.cronq_publish, m.cronq_drain, m.raw_publish, m.raw_drain, m.raw_coalesced_drain
        );
        drain.runs.push(m.cronq_drain);
        drain.push_baseline(m.raw_drain);
        share.runs.push(ratio(m.cronq_drain, m.raw_drain));
        coalesced.runs.push(m.cronq_drain);
        coalesced.push_baseline(m.raw_coalesced_drain);
        coalesced_share
            .runs
            .push(ratio(m.cronq_drain, m.raw_coalesced_drain));
        if let (Some(c), Some(r)) = (&m.cronq_cpu, &m.raw_cpu) {
            cpu.runs
                .push(c.total().as_secs_f64() / args.occurrences as f64);
            cpu.push_baseline(r.total().as_secs_f64() / args.occurrences as f64);
            cpu_share
                .runs
                .push(ratio(r.total().as_secs_f64(), c.total().as_secs_f64()));
            apart.runs.push(projected_apart(c, r));
            Part::push(&mut parts, c, r, args.occurrences);
            if let Some(rc) = &m.raw_coalesced_cpu {
                cpu_coalesced
                    .runs
                    .push(c.total().as_secs_f64() / args.occurrences as f64);
                cpu_coalesced.push_baseline(rc.total().as_secs_f64() / args.occurrences as f64);
                cpu_coalesced_share
                    .runs
                    .push(ratio(c.total().as_secs_f64(), rc.total().as_secs_f64()));
                Part::push(&mut coalesced_parts, c, rc, args.occurrences);
                if let Some((_, Some(f))) = &m.floor {
                    cpu_floor
                        .runs
                        .push(f.total().as_secs_f64() / args.occurrences as f64);
                    cpu_floor.push_baseline(rc.total().as_secs_f64() / args.occurrences as f64);
                    cpu_floor_share
                        .runs
                        .push(ratio(f.total().as_secs_f64(), rc.total().as_secs_f64()));
                    cpu_over_floor
                        .runs
                        .push(ratio(c.total().as_secs_f64(), f.total().as_secs_f64()));
                    Part::push(&mut floor_parts, f, rc, args.occurrences);
                }
            }
        }
        if let Some((rate, _)) = m.floor {
            floor_drain.runs.push(m.cronq_drain);
            floor_drain.push_baseline(rate);
        }
        publish.runs.push(m.cronq_publish);
        publish.push_baseline(m.raw_publish);
    }
    let mut figures = vec![drain, share, coalesced, coalesced_share];
    if !cpu.runs.is_empty() {
        figures.extend([cpu, cpu_share, apart]);
        figures.extend(parts);
    }
    if !cpu_coalesced.runs.is_empty() {
        figures.extend([cpu_coalesced, cpu_coalesced_share]);
        figures.extend(coalesced_parts);
    }
    if !floor_drain.runs.is_empty() {
        figures.push(floor_drain);
    }
    if !cpu_floor.runs.is_empty() {
        figures.extend([cpu_floor, cpu_floor_share, cpu_over_floor]);
        figures.extend(floor_parts);
    }
    figures.push(publish);
    if let Some(slow) = args.slow() {
        // Apart from the no-op runs' figures, in the kept reports and their charts.
        let bench = format!(
            "throughput, 1 in {} runs {}",
            slow.every,
            humantime::format_duration(slow.takes)
        );
        for figure in &mut figures {
            figure.bench.clone_from(&bench);
        }
    }
    Ok(figures)
}

struct Measured {
    cronq_publish: f64,
    cronq_drain: f64,
    raw_publish: f64,
    raw_drain: f64,
    /// The raw loop's drain rate with its acks coalesced.
    raw_coalesced_drain: f64,
    /// CPU spent during each drain; `None` when RabbitMQ or Redis does not run here.
    cronq_cpu: Option<CpuUse>,
    raw_cpu: Option<CpuUse>,
    raw_coalesced_cpu: Option<CpuUse>,
    /// The ledger's floor: its drain rate and CPU (none with signed bodies).
    floor: Option<(f64, Option<CpuUse>)>,
}

/// Whose CPU time is counted.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// The bench process: the consumers (cronq or raw).
    Consumers,
    /// The local RabbitMQ (`beam.smp`).
    Broker,
    /// The local Redis (`redis-server`).
    Store,
}

impl Part {
    const ALL: [Self; 3] = [Self::Consumers, Self::Broker, Self::Store];

    fn label(self) -> &'static str {
        match self {
            Self::Consumers => "the consumers' process",
            Self::Broker => "RabbitMQ",
            Self::Store => "Redis",
        }
    }

    /// A figure of CPU per occurrence for each part, named by `name` from the part's
    /// label, against `baseline`.
    fn figures(name: impl Fn(&str) -> String, baseline: &str) -> Vec<Figure> {
        Self::ALL
            .iter()
            .map(|part| {
                Figure::new("throughput", name(part.label()), Unit::Seconds)
                    .baseline(baseline.to_owned())
            })
            .collect()
    }

    /// Adds a run to each part's figure of [`Part::figures`]: `run`'s CPU per occurrence
    /// of `occurrences`, against `baseline`'s.
    fn push(figures: &mut [Figure], run: &CpuUse, baseline: &CpuUse, occurrences: usize) {
        let per = |cpu: &CpuUse, part| cpu.part(part).as_secs_f64() / occurrences as f64;
        for (figure, part) in figures.iter_mut().zip(Self::ALL) {
            figure.runs.push(per(run, part));
            figure.push_baseline(per(baseline, part));
        }
    }
}

/// CPU time used so far by the bench process, RabbitMQ and Redis, or between two readings.
#[derive(Debug, Clone, Copy)]
struct CpuUse([Duration; 3]);

impl CpuUse {
    /// Now; `None` when a service is not a local process (or /proc is unreadable).
    fn now(services: Option<(u32, u32)>) -> Option<Self> {
        let (broker, store) = services?;
        Some(Self([
            crate::procfs::cpu_time(None).ok()?,
            crate::procfs::cpu_time(Some(broker)).ok()?,
            crate::procfs::cpu_time(Some(store)).ok()?,
        ]))
    }

    fn since(self, earlier: Self) -> Self {
        Self(std::array::from_fn(|i| {
            self.0[i].saturating_sub(earlier.0[i])
        }))
    }

    fn part(&self, part: Part) -> Duration {
        self.0[part as usize]
    }

    fn total(&self) -> Duration {
        self.0.iter().sum()
    }
}

/// The drain ratio to expect when each service has cores of its own, as in a deployment:
/// consumers scale out, so the rate is bounded by the busiest service. Assumed: each
/// service gets one core for this load (Redis runs commands on one thread; a quorum queue's
/// leader is one Erlang process), so its rate is one over its CPU time per occurrence: the
/// raw loop's is RabbitMQ's, cronq's the slower of RabbitMQ and Redis. A model built from
/// measured CPU times, not a measurement: reported beside the measured ratio, never instead.
fn projected_apart(cronq: &CpuUse, raw: &CpuUse) -> f64 {
    let bound = cronq
        .part(Part::Broker)
        .max(cronq.part(Part::Store))
        .as_secs_f64();
    ratio(raw.part(Part::Broker).as_secs_f64(), bound)
}

/// The local RabbitMQ and Redis processes, when both run on this machine.
fn local_services() -> Option<(u32, u32)> {
    Some((
        crate::procfs::find("beam.smp")?,
        crate::procfs::find("redis-server")?,
    ))
}

/// `jobs` jobs with no handler (a Rust one is registered), overlap allowed.
fn config_text(jobs: usize) -> String {
    let defaults = "overlap = \"allow\"\nretention = \"1h\"\n";
    crate::workload::every_second("t", jobs, crate::workload::Shape { defaults, job: "" })
}

/// `n` occurrences spread over `config`'s jobs, one a second from `base`, as the leader
/// would publish them (`now` as their publish time).
pub(crate) fn backlog(
    config: &Config,
    n: usize,
    base: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Vec<Outgoing> {
    (0..n)
        .map(|i| {
            let job = &config.jobs[i % config.jobs.len()];
            let at = base + TimeDelta::seconds(i64::try_from(i).unwrap_or(i64::MAX));
            Outgoing {
                queue: job.queue.clone(),
                occurrence: planner::occurrence(job, at, Trigger::Backfill, 0, now),
                delay: Duration::ZERO,
            }
        })
        .collect()
}

/// `count` consumers of `config` (named `PREFIX-N`), each running `concurrency` attempts
/// at once with a Rust handler per job that only counts into `executed`.
pub(crate) async fn counting(
    env: &BenchEnv,
    config: &Config,
    prefix: &str,
    count: usize,
    concurrency: u16,
    executed: &Arc<AtomicUsize>,
    slow: Option<Slow>,
) -> anyhow::Result<Vec<Consumer>> {
    let mut consumers = Vec::new();
    for i in 0..count {
        let (mut consumer, _) =
            consumer(env, config, &format!("{prefix}-{i}"), concurrency).await?;
        for job in &config.jobs {
            let executed = Arc::clone(executed);
            consumer.register(job.name.clone(), move |_occ, _token| {
                let n = executed.fetch_add(1, Ordering::Relaxed);
                let takes = slow.filter(|s| n.is_multiple_of(s.every)).map(|s| s.takes);
                async move {
                    if let Some(takes) = takes {
                        tokio::time::sleep(takes).await;
                    }
                    Ok::<(), String>(())
                }
            });
        }
        consumers.push(consumer);
    }
    Ok(consumers)
}

/// A consumer of `config` named `id` running `concurrency` attempts at once, on stores
/// and a broker of its own, as `cronq consumer` starts one; with its stores.
pub(crate) async fn consumer(
    env: &BenchEnv,
    config: &Config,
    id: &str,
    concurrency: u16,
) -> anyhow::Result<(Consumer, cronq_backends::Stores)> {
    let options = Options {
        concurrency,
        grace: Duration::from_secs(5),
        consumer_id: id.to_owned(),
        keyring: env.endpoints.keyring.clone(),
        ..Options::default()
    };
    let stores = cronq_backends::stores(&env.endpoints, config.longest_retention(), None)
        .await
        .context("while starting a consumer")?;
    let broker = cronq_backends::broker(&env.endpoints)
        .await
        .context("while starting a consumer")?;
    let consumer = Consumer::new(
        config.clone(),
        Arc::new(broker),
        Arc::clone(&stores.ledger),
        options,
    );
    Ok((consumer, stores))
}

fn per_second(count: usize, took: Duration) -> f64 {
    count as f64 / took.as_secs_f64().max(1e-9)
}

async fn measure(env: &BenchEnv, args: &ThroughputArgs) -> anyhow::Result<Measured> {
    let config = Config::from_toml(
        &config_text(args.jobs.max(1)),
        Path::new("bench-throughput.toml"),
    )
    .context("while building the throughput config")?;
    for q in config.queues() {
        env.track_queue(&q);
    }
    // The work: K distinct occurrences, spread over the jobs, at past instants.
    let base: DateTime<Utc> = "2020-01-01T00:00:00Z".parse()?;
    let now = Utc::now();
    let batch = backlog(&config, args.occurrences, base, now);
    // With CRONQ_SIGNING_KEY, the baseline moves the same signed bodies cronq does.
    let keyring = env.endpoints.keyring.clone();
    let bodies: Vec<Vec<u8>> = batch.iter().map(|o| o.body(keyring.as_deref())).collect();

    // Baseline first, so cronq's Redis records do not exist yet while it runs.
    let services = local_services();
    let (raw_publish, raw_drain, raw_cpu) =
        raw_loop(env, &bodies, args, services, Drain::EachAcked).await?;
    let (_, raw_coalesced_drain, raw_coalesced_cpu) =
        raw_loop(env, &bodies, args, services, Drain::Coalesced).await?;
    // The floor reads plain occurrence bodies (a signed one wraps its occurrence).
    let floor = if keyring.is_none() {
        let (_, drain, cpu) = raw_loop(env, &bodies, args, services, Drain::Floor).await?;
        Some((drain, cpu))
    } else {
        None
    };

    let broker = AmqpBroker::connect(&env.endpoints.amqp_url, env.names())
        .await?
        .signing(keyring.clone());
    broker.declare(&config.queues()).await?;
    let started = Instant::now();
    for chunk in batch.chunks(BATCH) {
        broker
            .publish(chunk)
            .await
            .context("while publishing occurrences")?;
    }
    let cronq_publish = per_second(batch.len(), started.elapsed());
    broker.close().await;

    let executed = Arc::new(AtomicUsize::new(0));
    let token = CancellationToken::new();
    let consumers = counting(
        env,
        &config,
        "bench-consumer",
        args.consumers.max(1),
        args.concurrency,
        &executed,
        args.slow(),
    )
    .await?;
    let mut tasks = JoinSet::new();
    let started = Instant::now();
    let cpu_before = CpuUse::now(services);
    for consumer in consumers {
        tasks.spawn(consumer.run(token.child_token()));
    }
    let waited = wait_for(&executed, args.occurrences, "cronq consumers").await;
    let took = started.elapsed();
    let cronq_cpu = cpu_before
        .zip(CpuUse::now(services))
        .map(|(a, b)| b.since(a));
    token.cancel();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Err(err)) => eprintln!("throughput: a consumer ended with an error: {err:#}"),
            Err(err) => eprintln!("throughput: a consumer panicked: {err}"),
            Ok(Ok(())) => {}
        }
    }
    waited?;
    Ok(Measured {
        cronq_publish,
        cronq_drain: per_second(args.occurrences, took),
        raw_publish,
        raw_drain,
        raw_coalesced_drain,
        cronq_cpu,
        raw_cpu,
        raw_coalesced_cpu,
        floor,
    })
}

/// Waits until `count` reaches `target`, failing when it stops moving for [`STALL`].
async fn wait_for(count: &AtomicUsize, target: usize, who: &str) -> anyhow::Result<()> {
    let mut last = (0, Instant::now());
    loop {
        let now = count.load(Ordering::Acquire);
        if now >= target {
            return Ok(());
        }
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > STALL {
            bail!("{who} stalled at {now} of {target} for {STALL:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How a baseline drains its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// Each delivery acked with a frame of its own.
    EachAcked,
    /// One ack with `multiple` per [`COALESCED_ACKS`] deliveries.
    Coalesced,
    /// [`Drain::Coalesced`], each batch claimed and ended in Redis first: the ledger's
    /// floor ([`crate::floor`]).
    Floor,
}

impl Drain {
    fn ack_every(self) -> usize {
        match self {
            Self::EachAcked => 1,
            Self::Coalesced | Self::Floor => COALESCED_ACKS,
        }
    }

    /// The baseline queue's name in the namespace.
    fn queue(self) -> String {
        match self {
            Self::Floor => "throughput-floor".to_owned(),
            other => format!("throughput-acks-{}", other.ack_every()),
        }
    }
}

/// The raw broker loop: publish every body with pipelined confirms (batches of
/// [`BATCH`]), then drain with as many manual-ack consumers as cronq has, as `drain`
/// says. Returns the publish rate, the drain rate and the CPU used while draining.
async fn raw_loop(
    env: &BenchEnv,
    bodies: &[Vec<u8>],
    args: &ThroughputArgs,
    services: Option<(u32, u32)>,
    drain: Drain,
) -> anyhow::Result<(f64, f64, Option<CpuUse>)> {
    let queue = env.raw_queue(&drain.queue());
    let conn = env.amqp().await?;
    let ch = crate::raw::confirm_channel(&conn).await?;
    crate::raw::declare_quorum(&ch, &queue).await?;
    let started = Instant::now();
    for chunk in bodies.chunks(BATCH) {
        crate::raw::publish_confirmed(&ch, &queue, chunk).await?;
    }
    let publish = per_second(bodies.len(), started.elapsed());
    let count = Arc::new(AtomicUsize::new(0));
    let token = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let mut conns = Vec::new();
    // The floor's Redis connections, opened before the drain is timed, as the AMQP ones.
    let mut ledgers = Vec::new();
    for _ in 0..args.consumers.max(1) {
        conns.push(env.amqp().await?);
        if drain == Drain::Floor {
            let prefix = env.names().redis_key(&["floor", ""]);
            let url = &env.endpoints.redis_url;
            ledgers.push(crate::floor::Ledger::open(url, prefix, args.floor).await?);
        }
    }
    let started = Instant::now();
    let cpu_before = CpuUse::now(services);
    let mut ledgers = ledgers.into_iter();
    for (i, c) in conns.iter().enumerate() {
        let (ch, q, n, t) = (
            c.create_channel().await?,
            queue.clone(),
            Arc::clone(&count),
            token.clone(),
        );
        let (prefetch, target) = (args.concurrency, bodies.len());
        // A ledger for each connection with the floor, none for the other drains.
        if let Some(ledger) = ledgers.next() {
            tasks.spawn(async move {
                let consumer = format!("floor-{i}");
                let acks = COALESCED_ACKS;
                crate::floor::consume(ch, &q, prefetch, acks, ledger, consumer, n, target, t).await
            });
        } else {
            let ack_every = drain.ack_every();
            tasks.spawn(async move {
                crate::raw::consume_acking(ch, &q, prefetch, ack_every, n, target, t).await
            });
        }
    }
    let waited = wait_for(&count, bodies.len(), "raw consumers").await;
    let took = started.elapsed();
    let cpu = cpu_before
        .zip(CpuUse::now(services))
        .map(|(a, b)| b.since(a));
    token.cancel();
    while let Some(joined) = tasks.join_next().await {
        if let Ok(Err(err)) = joined {
            eprintln!("throughput: a raw consumer ended with an error: {err:#}");
        }
    }
    for c in conns {
        let _ = c.close(200, "baseline done".into()).await;
    }
    let _ = conn.close(200, "baseline done".into()).await;
    waited?;
    Ok((publish, per_second(bodies.len(), took), cpu))
}
