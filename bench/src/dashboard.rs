//! `dashboard`: how long `cronq dashboard` takes to answer its Jobs and Runs pages (and a
//! job's page) with many jobs and a long run history: `--dashboard-jobs` jobs in the config
//! and `--dashboard-history` entries in the Redis run-history stream (written straight into
//! the stream, untrimmed), then `--dashboard-requests` sequential GETs of each page on
//! loopback after a warm-up, timed from the request to the last byte of the answer (the
//! server's time plus a loopback round trip). p50 and p99 per page; goal p99 < 100 ms.
//! `--dashboard-runtime-jobs` runtime jobs are written into the job store too: the Jobs
//! page lists them, one has its page timed, and the Jobs page is also timed right after
//! each of `--dashboard-requests` changes of a runtime job (the dashboard then reads and
//! merges the runtime jobs again).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{TimeDelta, Utc};
use serde::Serialize;

use crate::env::BenchEnv;
use crate::report::Figure;
use crate::stats::{Distribution, Unit};

/// Sizes of the dashboard benchmark.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct DashboardArgs {
    /// Jobs in the dashboard's config.
    #[arg(long, default_value_t = 100_000)]
    pub dashboard_jobs: usize,
    /// Entries written into the run history.
    #[arg(long, default_value_t = 1_000_000)]
    pub dashboard_history: usize,
    /// Timed requests per page.
    #[arg(long, default_value_t = 100)]
    pub dashboard_requests: usize,
    /// Runtime jobs written into the job store (at least 1).
    #[arg(long, default_value_t = 1_000)]
    pub dashboard_runtime_jobs: usize,
}

/// What the figures after [`PAGES`] time.
const MORE: &[&str] = &[
    "Job page, a runtime job",
    "Jobs page right after a runtime job change",
];

/// The pages timed: what each shows, and its path. `job-092081` has the newest entry of
/// the history ([`fill_history`] gives entry `n` the job `n * 7919 % jobs`).
const PAGES: &[(&str, &str)] = &[
    ("Jobs page, first page by name", "/jobs"),
    (
        "Jobs page, search and sort by next fire",
        "/jobs?q=job-0999&sort=next",
    ),
    (
        "Jobs page, page 50 by last run",
        "/jobs?sort=last&order=desc&page=50",
    ),
    ("Jobs API, failed jobs", "/api/v1/jobs?outcome=failed"),
    ("Runs page, newest", "/runs"),
    ("Runs page, one job", "/runs?job=job-092081"),
    ("Job page", "/jobs/job-092081"),
];

const SCHEDULES: &[&str] = &[
    "*/5 * * * *",
    "0 3 * * *",
    "@every 60s",
    "15 */2 * * MON-FRI",
    "30 2 * * *",
];
const ZONES: &[&str] = &["UTC", "Europe/Berlin", "America/New_York", "Asia/Shanghai"];
const QUEUES: &[&str] = &["default", "reports", "sync", "batch"];

/// Runs the benchmark `runs` times.
///
/// # Errors
/// When the services cannot be reached, the dashboard does not start, or a page fails.
pub async fn run(args: &DashboardArgs, runs: usize, cronq: &Path) -> anyhow::Result<Vec<Figure>> {
    let mut figures: Vec<Figure> = PAGES
        .iter()
        .map(|(what, _)| *what)
        .chain(MORE.iter().copied())
        .flat_map(|what| {
            [
                Figure::new("dashboard", format!("{what}: p50"), Unit::Seconds),
                Figure::new("dashboard", format!("{what}: p99"), Unit::Seconds).goal("< 100 ms"),
            ]
        })
        .collect();
    for _ in 0..runs {
        let env = BenchEnv::new()?;
        let result = once(&env, args, cronq).await;
        env.cleanup().await;
        for (i, d) in result?.into_iter().enumerate() {
            figures[2 * i].runs.push(d.p50);
            figures[2 * i + 1].runs.push(d.p99);
        }
    }
    Ok(figures)
}

async fn once(
    env: &BenchEnv,
    args: &DashboardArgs,
    cronq: &Path,
) -> anyhow::Result<Vec<Distribution>> {
    let dir = std::env::temp_dir().join(env.namespace());
    std::fs::create_dir_all(&dir).context("while creating the bench directory")?;
    let config = dir.join("cronq.toml");
    std::fs::write(&config, config_text(args.dashboard_jobs))
        .context("while writing the config")?;
    for q in QUEUES {
        env.track_queue(&cronq_shared::names::QueueName::new(*q)?);
    }
    let stores = cronq_backends::stores(&env.endpoints, Duration::from_secs(86_400), None)
        .await
        .context("while connecting to Redis")?;
    for i in 0..args.dashboard_runtime_jobs.max(1) {
        write_runtime(&stores, i, SCHEDULES[i % SCHEDULES.len()]).await?;
    }
    let started = Instant::now();
    fill_history(env, args).await?;
    eprintln!(
        "dashboard: {} history entries written in {:.1}s",
        args.dashboard_history,
        started.elapsed().as_secs_f64()
    );
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let log = std::fs::File::create(dir.join("dashboard.log"))?;
    let mut child = tokio::process::Command::new(cronq)
        .args(["dashboard", "--config"])
        .arg(&config)
        .args(["--addr", &addr.to_string()])
        .env("CRONQ_NAMESPACE", env.namespace())
        .env("CRONQ_AMQP_URL", &env.endpoints.amqp_url)
        .env("CRONQ_REDIS_URL", &env.endpoints.redis_url)
        .env_remove("CRONQ_DASHBOARD_TOKEN")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("while starting {}", cronq.display()))?;
    let result = measure(
        &format!("http://{addr}"),
        args.dashboard_requests,
        started,
        &stores,
    )
    .await;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Writes the runtime job `rt-NNNNNN` with `schedule` (whatever its revision).
async fn write_runtime(
    stores: &cronq_backends::Stores,
    i: usize,
    schedule: &str,
) -> anyhow::Result<()> {
    let name = format!("rt-{i:06}");
    let job = cronq_shared::names::JobName::new(&name)?;
    let spec = format!("name = \"{name}\"\nschedule = \"{schedule}\"\nhandler = \"ok\"\n");
    stores
        .jobs
        .write(&job, Some(&spec), "bench", cronq_shared::jobs::Expect::Any)
        .await
        .context("while writing a runtime job")?;
    Ok(())
}

fn config_text(jobs: usize) -> String {
    let mut out = String::with_capacity(jobs * 120);
    out.push_str("[handlers.ok]\ncommand = [\"true\"]\n\n");
    for i in 0..jobs {
        out.push_str(&format!(
            "[[job]]\nname = \"job-{i:06}\"\nschedule = \"{}\"\ntimezone = \"{}\"\nqueue = \"{}\"\ncommand = [\"true\"]\n",
            SCHEDULES[i % SCHEDULES.len()],
            ZONES[i % ZONES.len()],
            QUEUES[i % QUEUES.len()]
        ));
    }
    out
}

/// Writes the history straight into the run log's stream (as `cronq-redis` writes each
/// entry, without its trimming), oldest first, one second apart up to now.
async fn fill_history(env: &BenchEnv, args: &DashboardArgs) -> anyhow::Result<()> {
    let client = redis::Client::open(env.endpoints.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let key = env.names().redis_key(&["runs"]);
    let now = Utc::now();
    let total = args.dashboard_history;
    let jobs = args.dashboard_jobs.max(1);
    let mut i = 0;
    while i < total {
        let mut pipe = redis::pipe();
        for n in i..(i + 5_000).min(total) {
            let at = now - TimeDelta::seconds(i64::try_from(total - n).unwrap_or(i64::MAX));
            let job = format!("job-{:06}", (n * 7_919) % jobs);
            let outcome = match n % 20 {
                0 => "failed",
                1 => "retrying",
                _ => "succeeded",
            };
            let error = if outcome == "succeeded" {
                ""
            } else {
                "exit status 3: boom"
            };
            pipe.cmd("XADD")
                .arg(&key)
                .arg("*")
                .arg("key")
                .arg(format!("{job}@{}", at.format("%Y-%m-%dT%H:%M:%SZ")))
                .arg("job")
                .arg(&job)
                .arg("attempt")
                .arg(1)
                .arg("consumer")
                .arg(format!("bench-c{}", n % 8))
                .arg("started_at")
                .arg(at.to_rfc3339())
                .arg("duration_ms")
                .arg(n % 5_000)
                .arg("outcome")
                .arg(outcome)
                .arg("error")
                .arg(error)
                .ignore();
        }
        let () = pipe
            .query_async(&mut conn)
            .await
            .context("while writing the history")?;
        i += 5_000;
    }
    Ok(())
}

/// GETs `url`, asserting success: the seconds to its last byte.
async fn get(
    http: &reqwest::Client,
    url: &str,
    path: &str,
    say_size: bool,
    what: &str,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    let resp = http
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {path}"))?;
    let status = resp.status();
    let body = resp.bytes().await?;
    let took = t.elapsed().as_secs_f64();
    anyhow::ensure!(status.is_success(), "GET {path} answered {status}");
    if say_size {
        eprintln!("dashboard: {what}: {} bytes", body.len());
    }
    Ok(took)
}

async fn measure(
    base: &str,
    requests: usize,
    started: Instant,
    stores: &cronq_backends::Stores,
) -> anyhow::Result<Vec<Distribution>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    wait_ready(&http, base, Duration::from_secs(300)).await?;
    eprintln!(
        "dashboard: ready {:.1}s after the start of the run",
        started.elapsed().as_secs_f64()
    );
    let mut out = Vec::new();
    let pages = PAGES.iter().copied().chain([(MORE[0], "/jobs/rt-000000")]);
    for (what, path) in pages {
        let url = format!("{base}{path}");
        let mut samples = Vec::with_capacity(requests);
        for i in 0..requests + 5 {
            let took = get(&http, &url, path, i == 0, what).await?;
            if i >= 5 {
                samples.push(took);
            }
        }
        out.push(Distribution::of(&samples).context("no samples")?);
    }
    let url = format!("{base}/jobs");
    let mut samples = Vec::with_capacity(requests);
    for i in 0..requests {
        write_runtime(stores, 0, SCHEDULES[i % SCHEDULES.len()]).await?;
        samples.push(get(&http, &url, "/jobs", false, MORE[1]).await?);
    }
    out.push(Distribution::of(&samples).context("no samples")?);
    Ok(out)
}

/// Waits until the dashboard at `base` has read its first snapshot (next fire times of
/// every job included), polling `/api/v1/fleet` every 200 ms for at most `within`.
///
/// # Errors
/// When it has not within `within`.
pub async fn wait_ready(
    http: &reqwest::Client,
    base: &str,
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let ready = match http.get(format!("{base}/api/v1/fleet")).send().await {
            Ok(r) => r
                .json::<serde_json::Value>()
                .await
                .is_ok_and(|v| !v["taken_at"].is_null()),
            Err(_) => false,
        };
        if ready {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the dashboard did not answer within {} s",
            within.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
