//! `scale`: one producer with many jobs (default 1,000,000), none of them due.
//!
//! The jobs spread over thousands of distinct (schedule, zone) pairs ([`mix`]), so sharing
//! parsed schedules helps only as much as it would in a real deployment.
//!
//! In the bench process: the config load (`Config::from_toml`) next to a plain TOML parse
//! of the same text, the leader's timer build (the planner's take-over plus the one
//! min-heap, as the scheduler does it on taking over), and `Schedule::next_after` in ns per
//! call next to croner's own `find_next_occurrence` on the same pattern. Then the real
//! `cronq producer` binary on the generated file: time until it leads, resident memory,
//! and CPU while nothing is due, next to the same binary with a one-job config.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{TimeDelta, Utc};
use cronq_producer::planner;
use cronq_producer::timer::{Entry, Timer};
use cronq_shared::config::Config;
use cronq_shared::schedule::Schedule;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::oneshot;

mod mix;

pub use mix::{Mix, QUIET};

use crate::env::BenchEnv;
use crate::procfs;
use crate::report::Figure;
use crate::stats::{Unit, ratio};

/// The idle RSS figure's name before its job count (`crate::chart` reads it back).
pub const RSS_IDLE: &str = "`cronq producer` RSS while idle, ";
/// The peak RSS figure's name before its job count (`crate::chart` reads it back).
pub const RSS_PEAK: &str = "`cronq producer` peak RSS (VmHWM), ";

/// Sizes of the scale bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct ScaleArgs {
    /// Jobs loaded into one producer.
    #[arg(id = "scale_jobs", long = "scale-jobs", default_value_t = 1_000_000)]
    pub jobs: usize,
    /// How long CPU is measured while nothing is due.
    #[arg(long = "idle", default_value = "10s", value_parser = humantime::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub idle: Duration,
    /// `next_after` calls per pattern.
    #[arg(long = "next-calls", default_value_t = 200_000)]
    pub next_calls: usize,
    /// Measure the `cronq producer` process only: no load, timer or `next_after` in the
    /// bench process (a plain TOML parse of ten million jobs alone takes tens of GB).
    #[arg(long = "producer-only")]
    pub producer_only: bool,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The schedules whose `next_after` is timed alone: the mix, plus a leap-day pattern
/// (the longest search: up to 8 years ahead).
pub const TIMED: &[(&str, &str)] = &[
    ("0 0 1 1 *", "UTC"),
    ("*/30 * 1 1 *", "America/New_York"),
    ("@every 1d", "UTC"),
    ("0 9 * * SUN", "Asia/Shanghai"),
    ("0 9 29 2 *", "Asia/Shanghai"),
];

/// How long the child producer may take to lead with all its jobs: this, and
/// [`READY_PER_MILLION`] more per million jobs.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How much longer the child producer may take to lead per million jobs.
const READY_PER_MILLION: Duration = Duration::from_secs(30);

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When the config does not load, the producer binary is missing or never leads.
pub async fn run(args: &ScaleArgs, runs: usize, cronq: &Path) -> anyhow::Result<Vec<Figure>> {
    let n = crate::stats::format(args.jobs as f64, Unit::Count);
    let mut load = Figure::new("scale", format!("config load, {n} jobs"), Unit::Seconds)
        .baseline("plain TOML parse of the same file");
    let mut timer = Figure::new(
        "scale",
        format!("leader timer build (plan + heap), {n} jobs"),
        Unit::Seconds,
    );
    let mut ready = Figure::new(
        "scale",
        format!("`cronq producer` start to leading, {n} jobs"),
        Unit::Seconds,
    )
    .baseline("same, 1 job");
    let mut rss = Figure::new("scale", format!("{RSS_IDLE}{n} jobs"), Unit::Bytes)
        .baseline("same, 1 job")
        .goal("< 1 GB");
    let mut peak =
        Figure::new("scale", format!("{RSS_PEAK}{n} jobs"), Unit::Bytes).baseline("same, 1 job");
    let mut per_job = Figure::new(
        "scale",
        format!("`cronq producer` RSS per job (above the 1-job process), {n} jobs"),
        Unit::Bytes,
    );
    let mut projected = Figure::new(
        "scale",
        format!("`cronq producer` RSS projected linearly to 1,000,000 jobs (from {n})"),
        Unit::Bytes,
    )
    .goal("< 1 GB");
    let mut load_per_job = Figure::new(
        "scale",
        format!("config load per job, {n} jobs"),
        Unit::Seconds,
    )
    .baseline("plain TOML parse, per job");
    let mut cpu = Figure::new(
        "scale",
        format!("`cronq producer` CPU while none due, {n} jobs"),
        Unit::CoreShare,
    )
    .baseline("same, 1 job")
    .goal("< 2% of one core");
    let mut next: Vec<Figure> = TIMED
        .iter()
        .map(|(p, tz)| {
            let f = Figure::new(
                "scale",
                format!("Schedule::next_after `{p}` ({tz})"),
                Unit::NanosPerCall,
            );
            if p.starts_with('@') {
                f
            } else {
                f.baseline("croner find_next_occurrence")
            }
        })
        .collect();
    let mut mixed = Figure::new(
        "scale",
        "next_after over the loaded jobs (mixed)",
        Unit::NanosPerCall,
    );
    let mut distinct = Figure::new(
        "scale",
        format!("distinct (schedule, zone) pairs among the {n} jobs"),
        Unit::Count,
    );
    let dir = std::env::temp_dir().join(format!("cronq-bench-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("while creating {}", dir.display()))?;
    let big = dir.join("scale.toml");
    let small = dir.join("one.toml");
    let mix = Mix::new(Utc::now())?;
    let (text, pairs) = mix.config_text(args.jobs);
    eprintln!(
        "scale: {} jobs over {pairs} distinct (schedule, zone) pairs (of {} in the mix), none due within {}",
        args.jobs,
        mix.len(),
        humantime::format_duration(QUIET)
    );
    std::fs::write(&big, &text).with_context(|| format!("while writing {}", big.display()))?;
    std::fs::write(&small, mix.config_text(1).0)?;
    for run in 1..=runs {
        eprintln!("scale: {} jobs, run {run}/{runs}", args.jobs);
        if !args.producer_only {
            // In-process: load, timer, next_after.
            let started = Instant::now();
            let table: toml::Table =
                toml::from_str(&text).context("while parsing the scale TOML")?;
            load.push_baseline(started.elapsed().as_secs_f64());
            drop(table);
            let started = Instant::now();
            let config =
                Config::from_toml(&text, &big).context("while loading the scale config")?;
            load.runs.push(started.elapsed().as_secs_f64());
            let started = Instant::now();
            let heap = build_timer(&config);
            timer.runs.push(started.elapsed().as_secs_f64());
            eprintln!(
                "  load {:.2}s, timer {:.2}s ({} entries), bench RSS {:.0} MiB",
                load.runs[run - 1],
                timer.runs[run - 1],
                heap.len(),
                procfs::memory(None).map_or(0.0, |m| m.rss as f64 / 1048576.0)
            );
            distinct.runs.push(pairs as f64);
            let calls = args.next_calls.min(config.jobs.len()).max(1);
            let now = Utc::now();
            let started = Instant::now();
            let mut first: Option<chrono::DateTime<Utc>> = None;
            for job in config.jobs.iter().take(calls) {
                if let Some(next) = std::hint::black_box(job.schedule.next_after(now)) {
                    first = Some(first.map_or(next, |f| f.min(next)));
                }
            }
            mixed
                .runs
                .push(started.elapsed().as_nanos() as f64 / calls as f64);
            match first {
                None => bail!("no loaded job has a next fire time"),
                Some(at) if at <= now + TimeDelta::seconds(60) => {
                    bail!("a loaded job fires at {at}: the producer would not be idle")
                }
                Some(_) => {}
            }
            drop(heap);
            drop(config);
            for (figure, (pattern, tz)) in next.iter_mut().zip(TIMED) {
                let (ours, theirs) = next_after_cost(pattern, tz, args.next_calls)?;
                figure.runs.push(ours);
                if let Some(theirs) = theirs {
                    figure.push_baseline(theirs);
                }
            }
        }
        // The real binary.
        let env = BenchEnv::new()?;
        let measured = async {
            let one = producer_process(&env, cronq, &small, args.idle, 1).await?;
            let many = producer_process(&env, cronq, &big, args.idle, args.jobs).await?;
            anyhow::Ok((one, many))
        }
        .await;
        env.track_queue(&cronq_shared::names::QueueName::new("default")?);
        env.cleanup().await;
        let (one, many) = measured?;
        eprintln!(
            "  producer: ready {:.2}s, RSS {:.0} MiB (peak {:.0}), CPU {:.2}%; 1 job: ready {:.2}s, RSS {:.0} MiB, CPU {:.2}%",
            many.ready.as_secs_f64(),
            many.rss as f64 / 1048576.0,
            many.peak as f64 / 1048576.0,
            many.cpu * 100.0,
            one.ready.as_secs_f64(),
            one.rss as f64 / 1048576.0,
            one.cpu * 100.0
        );
        ready.runs.push(many.ready.as_secs_f64());
        ready.push_baseline(one.ready.as_secs_f64());
        rss.runs.push(many.rss as f64);
        rss.push_baseline(one.rss as f64);
        peak.runs.push(many.peak as f64);
        peak.push_baseline(one.peak as f64);
        cpu.runs.push(many.cpu);
        cpu.push_baseline(one.cpu);
        let jobs = args.jobs.max(1) as f64;
        let growth = (many.rss as f64 - one.rss as f64).max(0.0) / jobs;
        per_job.runs.push(growth);
        projected.runs.push(one.rss as f64 + growth * 1e6);
        if let Some(l) = load.runs.last() {
            load_per_job.runs.push(l / jobs);
        }
        if let Some(b) = load.baseline.as_ref().and_then(|b| b.runs.last()) {
            load_per_job.push_baseline(b / jobs);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut figures = vec![
        distinct,
        load,
        load_per_job,
        timer,
        ready,
        rss,
        peak,
        per_job,
    ];
    if args.jobs < 1_000_000 {
        figures.push(projected);
    }
    figures.extend([cpu, mixed]);
    figures.extend(next);
    // `--producer-only` measures nothing in the bench process.
    figures.retain(|f| !f.runs.is_empty());
    Ok(figures)
}

/// What the scheduler builds on taking over: each job's plan (no cursor yet) and one heap
/// of next fires.
pub fn build_timer(config: &Config) -> Timer {
    let now = Utc::now();
    let entries = config
        .jobs
        .iter()
        .enumerate()
        .filter_map(|(index, job)| {
            let plan = planner::take_over(
                &job.schedule,
                job.catchup,
                job.catchup_window,
                job.jitter,
                None,
                now,
            );
            plan.next.map(|at| Entry {
                fire: planner::fire_at(job, at),
                at,
                job: u32::try_from(index).expect("fewer than 2^32 jobs"),
            })
        })
        .collect();
    Timer::from_entries(entries)
}

/// ns per `Schedule::next_after` call, and per croner `find_next_occurrence` call on the
/// same cron pattern (none for `@every`), from `calls` start instants 37 s apart.
pub fn next_after_cost(
    pattern: &str,
    tz: &str,
    calls: usize,
) -> anyhow::Result<(f64, Option<f64>)> {
    let zone = chrono_tz::Tz::from_str(tz).map_err(|e| anyhow::anyhow!("zone {tz}: {e}"))?;
    let schedule =
        Schedule::parse(pattern, zone).with_context(|| format!("schedule {pattern:?}"))?;
    let calls = calls.max(1);
    let start = Utc::now();
    let at = |i: usize| start + TimeDelta::seconds(37 * i64::try_from(i).unwrap_or(0));
    let began = Instant::now();
    for i in 0..calls {
        std::hint::black_box(schedule.next_after(at(i)));
    }
    let ours = began.elapsed().as_nanos() as f64 / calls as f64;
    if pattern.starts_with('@') {
        return Ok((ours, None));
    }
    let cron = croner::Cron::from_str(pattern).with_context(|| format!("croner {pattern:?}"))?;
    let began = Instant::now();
    for i in 0..calls {
        std::hint::black_box(
            cron.find_next_occurrence(&at(i).with_timezone(&zone), false)
                .ok(),
        );
    }
    Ok((ours, Some(began.elapsed().as_nanos() as f64 / calls as f64)))
}

/// One producer process's figures.
struct ProcessFigures {
    ready: Duration,
    rss: u64,
    peak: u64,
    cpu: f64,
}

/// Runs `cronq producer --config FILE` until it leads, then measures it idle.
async fn producer_process(
    env: &BenchEnv,
    cronq: &Path,
    config: &Path,
    idle: Duration,
    jobs: usize,
) -> anyhow::Result<ProcessFigures> {
    let millions = u32::try_from(jobs.div_ceil(1_000_000)).unwrap_or(u32::MAX);
    let timeout = READY_TIMEOUT + READY_PER_MILLION * millions;
    let started = Instant::now();
    let mut child = spawn_cronq(env, cronq, &["producer", "--config"], config, "info")?;
    let pid = child.id().context("the producer exited at once")?;
    let (rx, reader) = leading(&mut child)?;
    let outcome = async {
        tokio::time::timeout(timeout, rx)
            .await
            .map_err(|_| anyhow::anyhow!("`cronq producer` did not lead within {timeout:?}"))?
            .map_err(|_| anyhow::anyhow!("`cronq producer` exited before leading"))?;
        let ready = started.elapsed();
        // Let the take-over's writes settle, then watch it idle.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu0 = procfs::cpu_time(Some(pid))?;
        let t0 = Instant::now();
        tokio::time::sleep(idle).await;
        let cpu1 = procfs::cpu_time(Some(pid))?;
        let wall = t0.elapsed();
        let mem = procfs::memory(Some(pid))?;
        anyhow::Ok(ProcessFigures {
            ready,
            rss: mem.rss,
            peak: mem.peak,
            cpu: ratio((cpu1 - cpu0).as_secs_f64(), wall.as_secs_f64()),
        })
    }
    .await;
    stop(&mut child).await;
    let tail = reader.await.unwrap_or_default();
    if outcome.is_err() {
        eprintln!("scale: producer stderr (first lines):\n{}", tail.join("\n"));
    } else {
        // Where the start went: the load, the election, the take-over's plan.
        for line in tail.iter().filter(|l| {
            [
                "producer configured",
                "joining leader election",
                "taking over:",
            ]
            .iter()
            .any(|m| l.contains(m))
        }) {
            eprintln!("    {line}");
        }
    }
    outcome
}

/// Reads a `cronq producer`'s stderr (spawned by [`spawn_cronq`]): the receiver gets a
/// value when it leads; the task ends with its first 20 lines when the process exits.
pub fn leading(
    child: &mut tokio::process::Child,
) -> anyhow::Result<(oneshot::Receiver<()>, tokio::task::JoinHandle<Vec<String>>)> {
    let (tx, rx) = oneshot::channel();
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let reader = tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut lines = BufReader::new(stderr).lines();
        let mut tail = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            // The scheduler's take-over line (its wording changed once; accept both).
            if (line.contains("taking over:") || line.contains("leading: caught up"))
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
            if tail.len() < 20 {
                tail.push(line);
            }
        }
        tail
    });
    Ok((rx, reader))
}

/// Spawns the real `cronq` binary in the env's namespace: `args` then `config`.
pub fn spawn_cronq(
    env: &BenchEnv,
    cronq: &Path,
    args: &[&str],
    config: &Path,
    log: &str,
) -> anyhow::Result<tokio::process::Child> {
    tokio::process::Command::new(cronq)
        .args(args)
        .arg(config)
        .env("CRONQ_NAMESPACE", env.namespace())
        .env("CRONQ_AMQP_URL", &env.endpoints.amqp_url)
        .env("CRONQ_REDIS_URL", &env.endpoints.redis_url)
        .env("RUST_LOG", log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "while starting {} (build it with `cargo build --release`)",
                cronq.display()
            )
        })
}

/// SIGTERM, then SIGKILL after 10 s.
pub async fn stop(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// The default location of the release `cronq` binary, next to this bench's own.
pub fn default_cronq() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("cronq")))
        .unwrap_or_else(|| PathBuf::from("target/release/cronq"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_configs_load_and_every_job_gets_a_timer_entry() {
        let (text, pairs) = Mix::new(Utc::now()).unwrap().config_text(8);
        assert_eq!(pairs, 8);
        let config = Config::from_toml(&text, Path::new("scale.toml")).unwrap();
        assert_eq!(config.jobs.len(), 8);
        assert_eq!(build_timer(&config).len(), 8);
    }

    #[test]
    fn next_after_cost_times_both_sides_for_cron_only() {
        let (ours, theirs) = next_after_cost("0 0 1 1 *", "UTC", 10).unwrap();
        assert!(ours > 0.0 && theirs.is_some());
        let (_, none) = next_after_cost("@every 1d", "UTC", 10).unwrap();
        assert!(none.is_none());
    }
}
