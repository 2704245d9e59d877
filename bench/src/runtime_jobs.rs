//! `runtime`: jobs created and changed at runtime at scale (default 100,000 runtime jobs).
//!
//! Per run, in namespaces of its own on the real RabbitMQ and Redis (one per side):
//! - `cronq job apply -f` of every job at once (one process, one file): applies per second;
//! - the jobs API (`PUT /api/v1/jobs/NAME` of a `cronq dashboard`, 16 requests at a time)
//!   changing [`HTTP_APPLIES`] of them: applies per second;
//! - a `cronq producer` leading over them: resident memory, beside the same producer with
//!   the same jobs in its config file (the baseline);
//! - `--runtime-changes` times, one job's schedule changed to `@every 1s` by `cronq job
//!   apply`: the time from the apply's return to the leader's first publish of that job
//!   (seen by a consumer of the job queue), p50 and p99; the baseline is the same change
//!   made in the file and a SIGHUP to the producer, timed from the signal.
//!
//! No job is due otherwise: every job fires on 29 February only.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::Utc;
use cronq_shared::message::Occurrence;
use cronq_shared::names::QueueName;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::env::BenchEnv;
use crate::procfs;
use crate::raw;
use crate::report::Figure;
use crate::scale::{leading, spawn_cronq, stop};
use crate::stats::{Distribution, Unit, format};

/// Sizes of the runtime-jobs bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct RuntimeArgs {
    /// Runtime jobs in the store.
    #[arg(id = "runtime_jobs", long = "runtime-jobs", default_value_t = 100_000)]
    pub jobs: usize,
    /// Schedule changes timed from the apply to the first publish, per run and side.
    #[arg(id = "runtime_changes", long = "runtime-changes", default_value_t = 10)]
    pub changes: usize,
    /// Skip the baseline side (the same jobs in the config file, changed with a SIGHUP).
    #[arg(id = "runtime_no_baseline", long = "runtime-no-baseline")]
    pub no_baseline: bool,
}

/// Jobs changed through the jobs API per run.
const HTTP_APPLIES: usize = 2_000;
/// Requests the API is sent at a time.
const HTTP_CONCURRENCY: usize = 16;
/// The schedule of every job but the one changed: never due during a run.
const QUIET: &str = "0 0 29 2 *";
/// How long a change may take to reach the leader's first publish.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// The dashboard's admin token in the bench.
const TOKEN: &str = "bench-runtime-jobs-token";

/// The producer's and the CLI's config: one named handler the jobs use.
const BASE: &str = "[handlers.bench]\ncommand = [\"true\"]\n";

fn job(name: &str, schedule: &str) -> String {
    format!("[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\nhandler = \"bench\"\n")
}

fn name_of(i: usize) -> String {
    format!("rt-{i}")
}

/// `n` job tables, all quiet; job `loud` (if any) every second instead.
fn jobs_text(n: usize, loud: Option<usize>) -> String {
    let mut text = String::with_capacity(n * 70);
    for i in 0..n {
        let schedule = if Some(i) == loud { "@every 1s" } else { QUIET };
        text.push_str(&job(&name_of(i), schedule));
    }
    text
}

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When a `cronq` process fails, or a change never reaches a publish.
pub async fn run(args: &RuntimeArgs, runs: usize, cronq: &Path) -> anyhow::Result<Vec<Figure>> {
    let n = format(args.jobs as f64, Unit::Count);
    let mut bulk = Figure::new(
        "runtime",
        format!("`cronq job apply -f` of {n} jobs, applies/s"),
        Unit::PerSecond,
    );
    let mut http = Figure::new(
        "runtime",
        format!("jobs API PUT, {HTTP_CONCURRENCY} at a time, {n} jobs stored, applies/s"),
        Unit::PerSecond,
    );
    let mut rss = Figure::new(
        "runtime",
        format!("leading `cronq producer` RSS, {n} runtime jobs"),
        Unit::Bytes,
    )
    .baseline("same jobs in the config file");
    let mut p50 = Figure::new(
        "runtime",
        format!("apply to the leader's first publish p50, {n} runtime jobs"),
        Unit::Seconds,
    )
    .baseline("SIGHUP reload of the same change in the file, p50")
    .goal("< 2 s");
    let mut p99 = Figure::new(
        "runtime",
        format!("apply to the leader's first publish p99, {n} runtime jobs"),
        Unit::Seconds,
    )
    .baseline("SIGHUP reload of the same change in the file, p99")
    .goal("< 2 s");
    let mut own50 = Figure::new(
        "runtime",
        format!("first publish past the schedule's earliest instant after the apply p50, {n} runtime jobs"),
        Unit::Seconds,
    )
    .baseline("SIGHUP reload of the same change in the file, p50");
    let mut own99 = Figure::new(
        "runtime",
        format!("first publish past the schedule's earliest instant after the apply p99, {n} runtime jobs"),
        Unit::Seconds,
    )
    .baseline("SIGHUP reload of the same change in the file, p99");
    for run in 0..runs {
        let env = BenchEnv::new()?;
        // The file side in a namespace of its own: the config its producer records there
        // would make the same names file jobs, which `cronq job apply` refuses.
        let file_env = BenchEnv::new()?;
        let dir = std::env::temp_dir().join(format!("cronq-bench-{}", env.namespace()));
        std::fs::create_dir_all(&dir)?;
        // Alternate which side goes first, so neither always meets a warmer broker.
        let runtime_first = run % 2 == 0;
        let outcome = async {
            let mut file_side = None;
            if !runtime_first && !args.no_baseline {
                file_side = Some(file_jobs(&file_env, &dir, args, cronq).await?);
            }
            let rt = runtime(&env, &dir, args, cronq).await?;
            if runtime_first && !args.no_baseline {
                file_side = Some(file_jobs(&file_env, &dir, args, cronq).await?);
            }
            anyhow::Ok((rt, file_side))
        }
        .await;
        env.cleanup().await;
        file_env.cleanup().await;
        let _ = std::fs::remove_dir_all(&dir);
        let (rt, file) = outcome?;
        bulk.runs.push(rt.bulk);
        http.runs.push(rt.http);
        rss.runs.push(rt.side.rss as f64);
        let (ours, ours_own) = (rt.side.changes, rt.side.own);
        p50.runs.push(ours.p50);
        p99.runs.push(ours.p99);
        own50.runs.push(ours_own.p50);
        own99.runs.push(ours_own.p99);
        eprintln!(
            "runtime: run {}: bulk {:.0}/s, http {:.0}/s, rss {}, apply to publish p50 {:.3}s \
             p99 {:.3}s max {:.3}s; past the schedule's instant p50 {:.3}s p99 {:.3}s max {:.3}s",
            run + 1,
            rt.bulk,
            rt.http,
            format(rt.side.rss as f64, Unit::Bytes),
            ours.p50,
            ours.p99,
            ours.max,
            ours_own.p50,
            ours_own.p99,
            ours_own.max,
        );
        if let Some(file) = file {
            rss.push_baseline(file.rss as f64);
            p50.push_baseline(file.changes.p50);
            p99.push_baseline(file.changes.p99);
            own50.push_baseline(file.own.p50);
            own99.push_baseline(file.own.p99);
            eprintln!(
                "runtime: run {}: baseline rss {}, SIGHUP to publish p50 {:.3}s p99 {:.3}s; \
                 past the schedule's instant p50 {:.3}s p99 {:.3}s",
                run + 1,
                format(file.rss as f64, Unit::Bytes),
                file.changes.p50,
                file.changes.p99,
                file.own.p50,
                file.own.p99,
            );
        }
    }
    Ok(vec![bulk, http, rss, p50, p99, own50, own99])
}

/// What one side (runtime jobs, or the same jobs in the file) measured.
struct Side {
    rss: u64,
    /// Apply (or signal) to first publish.
    changes: Distribution,
    /// First publish minus the earliest instant the new schedule could fire after the
    /// apply: cronq's own part of `changes`, without the schedule's wait.
    own: Distribution,
}

fn seconds(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

struct Runtime {
    bulk: f64,
    http: f64,
    side: Side,
}

/// Runs `cronq ARGS --config CONFIG` to completion in the env's namespace.
async fn cli(env: &BenchEnv, cronq: &Path, config: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(cronq)
        .args(["--config"])
        .arg(config)
        .args(args)
        .env("CRONQ_NAMESPACE", env.namespace())
        .env("CRONQ_AMQP_URL", &env.endpoints.amqp_url)
        .env("CRONQ_REDIS_URL", &env.endpoints.redis_url)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .with_context(|| format!("while running {}", cronq.display()))?;
    if !out.status.success() {
        bail!(
            "cronq {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The runtime side: the jobs applied, changed through the API, then led and changed.
async fn runtime(
    env: &BenchEnv,
    dir: &Path,
    args: &RuntimeArgs,
    cronq: &Path,
) -> anyhow::Result<Runtime> {
    let base = write(dir, "base.toml", BASE)?;
    let all = write(dir, "jobs.toml", &jobs_text(args.jobs, None))?;
    let started = Instant::now();
    cli(env, cronq, &base, &["job", "apply", "-f", path(&all)?]).await?;
    let bulk = args.jobs as f64 / started.elapsed().as_secs_f64();
    let http = api_applies(env, cronq, &base, args.jobs.min(HTTP_APPLIES)).await?;
    let one = dir.join("one.toml");
    let side = lead_and_change(env, cronq, &base, args.changes, |i, loud, _| {
        let name = name_of(i);
        let schedule = if loud { "@every 1s" } else { QUIET };
        let one = one.clone();
        let base = base.clone();
        async move {
            std::fs::write(&one, job(&name, schedule))?;
            cli(env, cronq, &base, &["job", "apply", "-f", path(&one)?]).await
        }
    })
    .await?;
    Ok(Runtime { bulk, http, side })
}

/// The baseline side: the same jobs in the producer's config, changed there with a SIGHUP.
async fn file_jobs(
    env: &BenchEnv,
    dir: &Path,
    args: &RuntimeArgs,
    cronq: &Path,
) -> anyhow::Result<Side> {
    let text = |loud| format!("{BASE}\n{}", jobs_text(args.jobs, loud));
    let config = write(dir, "file.toml", &text(None))?;
    lead_and_change(env, cronq, &config, args.changes, |i, loud, pid| {
        let text = text(loud.then_some(i));
        let config = config.clone();
        async move {
            std::fs::write(&config, text)?;
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid)?),
                nix::sys::signal::Signal::SIGHUP,
            )?;
            Ok(())
        }
    })
    .await
}

/// Starts a producer on `config`, waits until it leads, measures its memory, then makes
/// `changes` changes with `change(i, true, PID)` (job `i` every second; PID the
/// producer's) and times each to the first publish of job `i`, putting it back with
/// `change(i, false, PID)`.
async fn lead_and_change<F, Fut>(
    env: &BenchEnv,
    cronq: &Path,
    config: &Path,
    changes: usize,
    change: F,
) -> anyhow::Result<Side>
where
    F: Fn(usize, bool, u32) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut child = spawn_cronq(env, cronq, &["producer", "--config"], config, "info")?;
    let outcome = async {
        let pid = child.id().context("the producer exited at once")?;
        let (led, _tail) = leading(&mut child)?;
        tokio::time::timeout(Duration::from_secs(300), led)
            .await
            .context("the producer did not lead within 300 s")?
            .context("the producer exited before leading")?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss = procfs::memory(Some(pid))?.rss;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let token = CancellationToken::new();
        let queue = env
            .names()
            .queue(&QueueName::new("default").expect("a queue name"));
        let channel = env.amqp().await?.create_channel().await?;
        let observer = tokio::spawn({
            let token = token.clone();
            async move {
                raw::observe(channel, &queue, token, move |body| {
                    if let Ok(o) = Occurrence::decode(body) {
                        let _ = tx.send((o.job.as_str().to_owned(), o.scheduled_at, Utc::now()));
                    }
                })
                .await
            }
        });
        let mut samples = Vec::with_capacity(changes);
        let mut own = Vec::with_capacity(changes);
        for i in 0..changes {
            let name = name_of(i);
            change(i, true, pid).await?;
            let applied = Utc::now();
            let (scheduled, published) = tokio::time::timeout(CHANGE_TIMEOUT, async {
                while let Some((job, scheduled, at)) = rx.recv().await {
                    if job == name && at >= applied {
                        return Some((scheduled, at));
                    }
                }
                None
            })
            .await
            .ok()
            .flatten()
            .with_context(|| format!("{name}: no publish within {CHANGE_TIMEOUT:?}"))?;
            samples.push(seconds(published - applied));
            // The schedule's own wait ends at the occurrence's instant (or at the apply,
            // for an occurrence due between the write and the apply's return).
            own.push(seconds(published - scheduled.max(applied)));
            eprintln!(
                "runtime: change {}: to publish {:.4} s, past the schedule's instant {:.4} s",
                i + 1,
                samples[samples.len() - 1],
                own[own.len() - 1]
            );
            change(i, false, pid).await?;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            while rx.try_recv().is_ok() {}
        }
        token.cancel();
        let _ = observer.await;
        anyhow::Ok(Side {
            rss,
            changes: Distribution::of(&samples).context("no change timed")?,
            own: Distribution::of(&own).context("no change timed")?,
        })
    }
    .await;
    stop(&mut child).await;
    outcome
}

/// Changes `n` of the stored jobs through the jobs API of a `cronq dashboard` (their
/// schedule, still quiet), [`HTTP_CONCURRENCY`] requests at a time; returns applies per
/// second.
async fn api_applies(env: &BenchEnv, cronq: &Path, config: &Path, n: usize) -> anyhow::Result<f64> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = tokio::process::Command::new(cronq)
        .args(["--config"])
        .arg(config)
        .args(["dashboard", "--addr", &addr])
        .env("CRONQ_NAMESPACE", env.namespace())
        .env("CRONQ_AMQP_URL", &env.endpoints.amqp_url)
        .env("CRONQ_REDIS_URL", &env.endpoints.redis_url)
        .env("CRONQ_DASHBOARD_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("while starting {} dashboard", cronq.display()))?;
    let outcome = async {
        let client = reqwest::Client::new();
        let base = format!("http://{addr}/api/v1/jobs");
        let ready = Instant::now();
        while client.get(&base).send().await.is_err() {
            if ready.elapsed() > Duration::from_secs(60) {
                bail!("the dashboard did not answer on {addr} within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let started = Instant::now();
        let mut sent = futures_util::stream::iter(0..n)
            .map(|i| {
                let client = client.clone();
                let url = format!("{base}/{}", name_of(i));
                async move {
                    let body = "schedule = \"30 0 29 2 *\"\nhandler = \"bench\"\n";
                    let resp = client
                        .put(&url)
                        .bearer_auth(TOKEN)
                        .body(body)
                        .send()
                        .await?;
                    if !resp.status().is_success() {
                        bail!("PUT {url}: {} {}", resp.status(), resp.text().await?);
                    }
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(HTTP_CONCURRENCY);
        while let Some(done) = sent.next().await {
            done?;
        }
        anyhow::Ok(n as f64 / started.elapsed().as_secs_f64())
    }
    .await;
    stop(&mut child).await;
    outcome
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("while writing {}", path.display()))?;
    Ok(path)
}

fn path(p: &Path) -> anyhow::Result<&str> {
    p.to_str().context("a UTF-8 temporary path")
}
