//! `barrier`: what `CRONQ_REDIS_MIN_REPLICAS` costs. A consumer's hot path writes twice per
//! occurrence (the claim, then the end), each a guarded write that, with N > 0, waits for
//! `WAIT N` in the same pipeline. The bench runs those two writes through the real
//! `RedisLedger` on one connection to `CRONQ_REDIS_URL` (a Sentinel URL, with replicas),
//! with N = 0 (the baseline) and each N asked for, in the same run:
//!
//! - one occurrence at a time: the latency of claim + end (p50, p99);
//! - `--barrier-concurrency` at once on the one connection, as a consumer with that
//!   `--concurrency` shares its connection: occurrences per second. `WAIT` blocks the
//!   connection's later replies until it returns, so this is where the barrier costs most.
//!
//! Needs Redis only (no RabbitMQ), with at least the largest N replicas. Not part of `all`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{TimeZone, Utc};
use cronq_redis::{RedisConn, RedisLedger, RedisRunLog};
use cronq_shared::config::Overlap;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{Claim, ClaimOutcome, End, Ledger, State, claim_token};
use cronq_shared::names::{JobName, QueueName};
use cronq_shared::runlog::{Outcome, Run};
use tokio::task::JoinSet;

use crate::env::BenchEnv;
use crate::report::Figure;
use crate::stats::{Distribution, Unit};

/// Sizes of the barrier bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct BarrierArgs {
    /// Occurrences (claim + end) per measurement.
    #[arg(
        id = "barrier_occurrences",
        long = "barrier-occurrences",
        default_value_t = 2_000
    )]
    pub occurrences: usize,
    /// How many run at once on the one connection in the throughput measurement.
    #[arg(
        id = "barrier_concurrency",
        long = "barrier-concurrency",
        default_value_t = 32
    )]
    pub concurrency: usize,
    /// The `CRONQ_REDIS_MIN_REPLICAS` values measured against 0.
    #[arg(
        id = "barrier_min_replicas",
        long = "barrier-min-replicas",
        value_delimiter = ',',
        default_value = "1"
    )]
    pub min_replicas: Vec<u32>,
}

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When Redis cannot be reached, or a write fails (fewer replicas than an N asked for).
pub async fn run(args: &BarrierArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for n in &args.min_replicas {
        let baseline = "CRONQ_REDIS_MIN_REPLICAS=0";
        figures.push(
            Figure::new(
                "barrier",
                format!("claim + end, one at a time, p50, CRONQ_REDIS_MIN_REPLICAS={n}"),
                Unit::Seconds,
            )
            .baseline(baseline),
        );
        figures.push(
            Figure::new(
                "barrier",
                format!("claim + end, one at a time, p99, CRONQ_REDIS_MIN_REPLICAS={n}"),
                Unit::Seconds,
            )
            .baseline(baseline),
        );
        figures.push(
            Figure::new(
                "barrier",
                format!(
                    "occurrences/s, {} at once on one connection, CRONQ_REDIS_MIN_REPLICAS={n}",
                    args.concurrency
                ),
                Unit::PerSecond,
            )
            .baseline(baseline),
        );
    }
    for run in 1..=runs {
        eprintln!("barrier: run {run}/{runs}");
        let env = BenchEnv::new()?;
        let measured = measure(&env, args, &mut figures).await;
        env.cleanup_redis().await;
        measured?;
    }
    Ok(figures)
}

async fn measure(env: &BenchEnv, args: &BarrierArgs, figures: &mut [Figure]) -> anyhow::Result<()> {
    let conn = cronq_redis::connect(&env.endpoints.redis_url).await?;
    if let Some(master) = conn.master() {
        eprintln!("barrier: through Sentinel, master {master}");
    }
    let base = Measured::of(&conn.clone().with_min_replicas(0), env, args, "n0").await?;
    for (i, n) in args.min_replicas.iter().enumerate() {
        let got = Measured::of(
            &conn.clone().with_min_replicas(*n),
            env,
            args,
            &format!("n{n}"),
        )
        .await
        .with_context(|| format!("with CRONQ_REDIS_MIN_REPLICAS={n}"))?;
        for (figure, (value, baseline)) in figures[i * 3..i * 3 + 3].iter_mut().zip([
            (got.p50, base.p50),
            (got.p99, base.p99),
            (got.rate, base.rate),
        ]) {
            figure.runs.push(value);
            figure.push_baseline(baseline);
        }
    }
    Ok(())
}

/// One measurement at one N.
struct Measured {
    p50: f64,
    p99: f64,
    rate: f64,
}

impl Measured {
    async fn of(
        conn: &RedisConn,
        env: &BenchEnv,
        args: &BarrierArgs,
        tag: &str,
    ) -> anyhow::Result<Self> {
        let names = env.names();
        let history = RedisRunLog::new(conn.clone(), &names, Duration::from_secs(3600));
        let ledger = Arc::new(RedisLedger::new(conn.clone(), names, history));
        // One at a time.
        let job = JobName::new(format!("seq-{tag}"))?;
        let mut latencies = Vec::with_capacity(args.occurrences);
        for i in 0..args.occurrences {
            let t0 = Instant::now();
            occurrence(&*ledger, &job, i).await?;
            latencies.push(t0.elapsed().as_secs_f64());
        }
        let lat = Distribution::of(&latencies).context("no occurrence measured")?;
        // Many at once, on the same connection.
        let job = JobName::new(format!("par-{tag}"))?;
        let per_task = args.occurrences.div_ceil(args.concurrency.max(1));
        let t0 = Instant::now();
        let mut tasks = JoinSet::new();
        for t in 0..args.concurrency.max(1) {
            let (ledger, job) = (Arc::clone(&ledger), job.clone());
            tasks.spawn(async move {
                for i in t * per_task..(t + 1) * per_task {
                    occurrence(&*ledger, &job, i).await?;
                }
                anyhow::Ok(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        let rate = (per_task * args.concurrency.max(1)) as f64 / t0.elapsed().as_secs_f64();
        Ok(Self {
            p50: lat.p50,
            p99: lat.p99,
            rate,
        })
    }
}

/// Claims occurrence `i` of `job` and records it succeeded, as a consumer does.
async fn occurrence(ledger: &dyn Ledger, job: &JobName, i: usize) -> anyhow::Result<()> {
    let at = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .context("a fixed instant")?
        + chrono::Duration::seconds(i64::try_from(i)?);
    let key = OccurrenceKey::scheduled(job.clone(), at);
    let claim = Claim {
        key: key.clone(),
        job: job.clone(),
        queue: QueueName::new("default")?,
        attempt: 1,
        overlap: Overlap::Allow,
        max_concurrent: 1,
        pool: None,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(3600),
        body: br#"{"kind":"occurrence_v1"}"#.to_vec(),
        scheduled_at: at,
        recheck: Duration::from_secs(60),
        consumer: "bench".to_owned(),
        token: claim_token(),
        held: false,
    };
    let ClaimOutcome::Claimed { lease, .. } = ledger.claim(&claim).await? else {
        anyhow::bail!("{key}: not claimed (a fresh key always is)");
    };
    let end = End {
        state: Some(State::Succeeded),
        error: None,
        retention: Duration::from_secs(3600),
        next: None,
        run: Some(Run {
            key,
            job: job.clone(),
            attempt: 1,
            consumer: "bench".to_owned(),
            started_at: Utc::now(),
            duration: Duration::from_millis(1),
            outcome: Outcome::Succeeded,
            error: None,
            published_at: Some(Utc::now()),
        }),
    };
    anyhow::ensure!(
        ledger.complete(&lease, &end).await?.recorded,
        "end not recorded"
    );
    Ok(())
}
