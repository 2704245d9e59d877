//! `standalone`: the real `cronq standalone` binary on one SQLite file (`--data FILE`)
//! next to the same binary in memory (`--data :memory:`), the baseline, in the same run.
//! No RabbitMQ or Redis: the standalone needs neither.
//!
//! - Throughput: N jobs `@every 1s` with the no-op command `/bin/true` and
//!   `overlap = "allow"` offer N occurrences a second; the figure is how many the
//!   standalone executed per second over a window after a warm-up (the rise of
//!   `cronq_attempts_total{outcome="succeeded"}` on its `/metrics`). When it executes
//!   fewer than are offered, the backlog grows and the figure is its capacity under that
//!   overload; when it keeps up, its capacity is at least the figure. A steady offered
//!   load is the one method that is the same on both sides: catch-up needs a cursor, which
//!   a fresh in-memory standalone never has, and `cronq backfill` reaches a standalone
//!   only through its file.
//! - Precision: M jobs `@every 1s` (with the same command and the default overlap, so
//!   execution shares the cores as it would), publish lateness from the producer's
//!   `published occurrence` log lines ([`crate::lateness`]).
//!
//! Each side gets a fresh data file (no cursor, no backlog from an earlier run); the two
//! sides alternate which goes first from run to run. Also the standalone process's own CPU
//! time (not its commands'): per occurrence executed under the throughput load, and under
//! the precision load, which both sides keep up with, as a share of one core and per
//! occurrence: the figure that other work on the machine moves least. And the CPU of the
//! commands (the reaped `/bin/true` children) per occurrence executed: on a small machine
//! they, not the standalone, take most of the cores.

mod process;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DurationRound as _, TimeDelta, Utc};

pub use self::process::Data;
use self::process::{Launch, Standalone};
use crate::report::Figure;
use crate::stats::{Distribution, Spread, Unit, format, ratio};
use crate::workload::{Shape, every_second};

/// Sizes of the standalone bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct StandaloneArgs {
    /// Job counts of the throughput measurement, each `@every 1s` running `/bin/true`
    /// (comma-separated): the occurrences offered per second.
    #[arg(
        id = "standalone_jobs",
        long = "standalone-jobs",
        value_delimiter = ',',
        default_value = "3000"
    )]
    pub jobs: Vec<usize>,
    /// Jobs of the lateness measurement, `@every 1s`.
    #[arg(
        id = "standalone_lateness_jobs",
        long = "standalone-lateness-jobs",
        default_value_t = 1_000
    )]
    pub lateness_jobs: usize,
    /// How long each measurement lasts, after the warm-up.
    #[arg(id = "standalone_duration", long = "standalone-duration", default_value = "20s", value_parser = humantime::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// How long each standalone runs before it is measured (start, first ticks, backlog).
    #[arg(id = "standalone_warmup", long = "standalone-warmup", default_value = "5s", value_parser = humantime::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub warmup: Duration,
    /// `--concurrency` of the standalone: attempts at once.
    #[arg(
        id = "standalone_concurrency",
        long = "standalone-concurrency",
        default_value_t = 64
    )]
    pub concurrency: u16,
    /// `--data-sync` of the SQLite side (normal or full); default: cronq's own.
    #[arg(id = "standalone_sync", long = "standalone-sync")]
    pub sync: Option<String>,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The throughput goal on SQLite, occurrences executed per second.
const THROUGHPUT_GOAL: f64 = 2_000.0;
/// The lateness goal on SQLite: p99 below this, in seconds.
const LATENESS_GOAL: f64 = 0.020;
/// How long a fresh standalone may take to execute (or publish) its first occurrence.
const FIRST_TIMEOUT: Duration = Duration::from_secs(60);
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(250);
/// The no-op handler of every job.
const COMMAND: &str = "command = [\"/bin/true\"]\n";

/// Runs the bench `runs` times; returns its figures and notes (whether the goals were met).
///
/// # Errors
/// When a standalone cannot be started or never executes anything.
pub async fn run(
    args: &StandaloneArgs,
    runs: usize,
    cronq: &Path,
) -> anyhow::Result<(Vec<Figure>, Vec<String>)> {
    let dir = std::env::temp_dir().join(format!("cronq-bench-standalone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("while creating {}", dir.display()))?;
    let outcome = run_in(args, runs, cronq, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn run_in(
    args: &StandaloneArgs,
    runs: usize,
    cronq: &Path,
    dir: &Path,
) -> anyhow::Result<(Vec<Figure>, Vec<String>)> {
    let sides = [Data::File(dir.join("bench.db")), Data::Memory];
    let mut figures = Vec::new();
    let mut notes = Vec::new();
    for &jobs in &args.jobs {
        let (f, note) = throughput_figures(args, runs, cronq, dir, &sides, jobs).await?;
        figures.extend(f);
        notes.push(note);
    }
    let (f, note) = lateness_figures(args, runs, cronq, dir, &sides).await?;
    figures.extend(f);
    notes.push(note);
    Ok((figures, notes))
}

/// The baseline of every figure.
const MEMORY: &str = "same, --data :memory:";

/// The throughput figures at `jobs` jobs, and the note on the goal.
async fn throughput_figures(
    args: &StandaloneArgs,
    runs: usize,
    cronq: &Path,
    dir: &Path,
    sides: &[Data; 2],
    jobs: usize,
) -> anyhow::Result<(Vec<Figure>, String)> {
    let n = format(jobs as f64, Unit::Count);
    let config = dir.join(format!("throughput-{jobs}.toml"));
    let shape = Shape {
        defaults: "overlap = \"allow\"\n",
        job: COMMAND,
    };
    std::fs::write(&config, every_second("s", jobs, shape))?;
    let mut executed = Figure::new(
        "standalone",
        format!(
            "executed/s on SQLite, {n} jobs @every 1s (/bin/true), concurrency {}",
            args.concurrency
        ),
        Unit::PerSecond,
    )
    .baseline(MEMORY)
    .goal(">= 2,000/s");
    let mut share = Figure::new("standalone", "SQLite / memory executed rate", Unit::Ratio);
    let mut kept_up = Figure::new(
        "standalone",
        format!("executed / published on SQLite, {n} jobs (100% = keeps up)"),
        Unit::Ratio,
    )
    .baseline(MEMORY);
    let mut cpu = Figure::new(
        "standalone",
        format!(
            "standalone CPU per occurrence executed on SQLite, {n} jobs (with publishing \
             what it could not execute)"
        ),
        Unit::Seconds,
    )
    .baseline(MEMORY);
    let mut commands = Figure::new(
        "standalone",
        format!("CPU of the /bin/true processes per occurrence executed on SQLite, {n} jobs"),
        Unit::Seconds,
    )
    .baseline(MEMORY);
    for run in 1..=runs {
        let mut got = [None, None];
        for i in order(run) {
            eprintln!(
                "standalone: throughput, {n} jobs, {}, run {run}/{runs}",
                sides[i].label()
            );
            let rate = throughput(args, cronq, &config, &sides[i]).await?;
            eprintln!(
                "  executed {:.0}/s, published {:.0}/s, CPU per occurrence {:.0} µs (its commands {:.0} µs)",
                rate.executed,
                rate.published,
                rate.cpu * 1e6,
                rate.commands * 1e6
            );
            got[i] = Some(rate);
        }
        let [Some(file), Some(mem)] = got else {
            bail!("a side of the throughput run was not measured");
        };
        executed.runs.push(file.executed);
        executed.push_baseline(mem.executed);
        share.runs.push(ratio(file.executed, mem.executed));
        kept_up.runs.push(ratio(file.executed, file.published));
        kept_up.push_baseline(ratio(mem.executed, mem.published));
        cpu.runs.push(file.cpu);
        cpu.push_baseline(mem.cpu);
        commands.runs.push(file.commands);
        commands.push_baseline(mem.commands);
    }
    let note = format!(
        "{}; {}",
        verdict(
            &format!("executed/s on SQLite at {n} jobs"),
            &executed,
            |v| v >= THROUGHPUT_GOAL,
            ">= 2,000/s",
        ),
        offered_load(jobs, &kept_up)
    );
    Ok((vec![executed, share, kept_up, cpu, commands], note))
}

/// The lateness and steady-state CPU figures, and the note on the goal.
async fn lateness_figures(
    args: &StandaloneArgs,
    runs: usize,
    cronq: &Path,
    dir: &Path,
    sides: &[Data; 2],
) -> anyhow::Result<(Vec<Figure>, String)> {
    let m = format(args.lateness_jobs as f64, Unit::Count);
    let config = dir.join("lateness.toml");
    let shape = Shape {
        defaults: "",
        job: COMMAND,
    };
    std::fs::write(&config, every_second("p", args.lateness_jobs, shape))?;
    let what = format!("{m} jobs @every 1s, SQLite");
    let mut lateness = crate::lateness::Figures::new("standalone", &what, MEMORY, "p99 < 20 ms");
    let mut busy = Figure::new(
        "standalone",
        format!("standalone CPU (share of one core), {what}"),
        Unit::CoreShare,
    )
    .baseline(MEMORY);
    let mut cpu = Figure::new(
        "standalone",
        format!("standalone CPU per occurrence published and executed, {what}"),
        Unit::Seconds,
    )
    .baseline(MEMORY);
    let mut cpu_share = Figure::new(
        "standalone",
        format!("SQLite / memory CPU per occurrence, {m} jobs"),
        Unit::Ratio,
    );
    for run in 1..=runs {
        let mut got = [None, None];
        for i in order(run) {
            let label = sides[i].label();
            eprintln!("standalone: lateness, {m} jobs, {label}, run {run}/{runs}");
            let steady = late(args, cronq, &config, &sides[i]).await?;
            let d = Distribution::of(&steady.samples)
                .with_context(|| format!("no occurrence published in the window ({label})"))?;
            eprintln!(
                "  {}; executed {:.0}/s; CPU {:.1}% of a core, {:.0} µs per occurrence",
                crate::lateness::summary(&d),
                steady.executed,
                steady.core * 100.0,
                steady.per_occurrence * 1e6
            );
            got[i] = Some((d, steady));
        }
        let [Some((file_d, file)), Some((mem_d, mem))] = got else {
            bail!("a side of the lateness run was not measured");
        };
        lateness.push(&file_d, &mem_d);
        busy.runs.push(file.core);
        busy.push_baseline(mem.core);
        cpu.runs.push(file.per_occurrence);
        cpu.push_baseline(mem.per_occurrence);
        cpu_share
            .runs
            .push(ratio(file.per_occurrence, mem.per_occurrence));
    }
    let note = verdict(
        &format!("publish lateness p99 on SQLite at {m} jobs"),
        lateness.p99(),
        |v| v < LATENESS_GOAL,
        "< 20 ms",
    );
    let mut figures = Vec::from(lateness.into_figures());
    figures.extend([busy, cpu, cpu_share]);
    Ok((figures, note))
}

/// Which side goes first: SQLite in odd runs, memory in even ones.
fn order(run: usize) -> [usize; 2] {
    if run % 2 == 1 { [0, 1] } else { [1, 0] }
}

/// "goal met" or "not met", judged on the median run, with the spread beside it.
fn verdict(what: &str, figure: &Figure, met: impl Fn(f64) -> bool, goal: &str) -> String {
    match Spread::of(&figure.runs) {
        Some(s) => format!(
            "standalone goal {what} {goal}: {} (median {}; min {}, max {})",
            if met(s.median) { "met" } else { "not met" },
            format(s.median, figure.unit),
            format(s.min, figure.unit),
            format(s.max, figure.unit)
        ),
        None => format!("standalone goal {what} {goal}: not measured"),
    }
}

/// What the offered load says about an executed rate: no test of the goal when it is
/// below the goal, a lower bound of the capacity when the standalone kept up, its capacity
/// under overload when it fell behind.
fn offered_load(jobs: usize, kept_up: &Figure) -> String {
    let offered = format(jobs as f64, Unit::PerSecond);
    if (jobs as f64) < THROUGHPUT_GOAL {
        return format!("offered only {offered}, below the goal, so this is no test of it");
    }
    match Spread::of(&kept_up.runs) {
        Some(s) if s.median >= KEPT_UP => {
            format!("it kept up with the {offered} offered, so its capacity is at least that rate")
        }
        Some(_) => format!(
            "it fell behind the {offered} offered: the rate is its capacity under that overload"
        ),
        None => String::new(),
    }
}

/// Executed over published at or above this counts as keeping up (the counters are read
/// at two instants, so a few in flight make the ratio noisy by a percent or so).
const KEPT_UP: f64 = 0.97;

/// One throughput measurement's rates.
#[derive(Debug, Clone, Copy)]
struct Rate {
    executed: f64,
    published: f64,
    /// Standalone CPU seconds per occurrence executed.
    cpu: f64,
    /// CPU seconds of the commands (`/bin/true` processes) per occurrence executed.
    commands: f64,
}

/// Starts a standalone of the bench on a fresh `data` (`--data-sync` on the SQLite side
/// only), logging `log` and keeping the lines that contain `keep`.
fn start(
    args: &StandaloneArgs,
    cronq: &Path,
    config: &Path,
    data: &Data,
    log: &str,
    keep: Option<&'static str>,
) -> anyhow::Result<Standalone> {
    data.remove();
    Standalone::start(&Launch {
        cronq,
        config,
        data,
        concurrency: args.concurrency,
        sync: args
            .sync
            .as_deref()
            .filter(|_| matches!(data, Data::File(_))),
        log,
        keep,
    })
}

async fn throughput(
    args: &StandaloneArgs,
    cronq: &Path,
    config: &Path,
    data: &Data,
) -> anyhow::Result<Rate> {
    let mut child = start(args, cronq, config, data, "info", None)?;
    let outcome = async {
        let started = Instant::now();
        loop {
            child.check_alive()?;
            if child.counters().await.is_ok_and(|c| c.succeeded > 0.0) {
                break;
            }
            if started.elapsed() > FIRST_TIMEOUT {
                bail!("`cronq standalone` executed nothing within {FIRST_TIMEOUT:?}");
            }
            tokio::time::sleep(POLL).await;
        }
        check_data(&child, data)?;
        tokio::time::sleep(args.warmup).await;
        let before = (
            child.counters().await?,
            child.cpu_time()?,
            child.children_cpu_time()?,
        );
        let t0 = Instant::now();
        tokio::time::sleep(args.duration).await;
        let after = (
            child.counters().await?,
            child.cpu_time()?,
            child.children_cpu_time()?,
        );
        let wall = t0.elapsed().as_secs_f64();
        child.check_alive()?;
        let done = after.0.succeeded - before.0.succeeded;
        anyhow::Ok(Rate {
            executed: done / wall,
            published: (after.0.published - before.0.published) / wall,
            cpu: ratio((after.1 - before.1).as_secs_f64(), done),
            commands: ratio((after.2 - before.2).as_secs_f64(), done),
        })
    }
    .await;
    child.stop().await;
    data.remove();
    outcome
}

/// One lateness measurement: a load the standalone keeps up with.
#[derive(Debug)]
struct Steady {
    /// Publish lateness of the occurrences scheduled in the window, seconds.
    samples: Vec<f64>,
    /// Occurrences executed per second over the window.
    executed: f64,
    /// The standalone's CPU over the window, as a share of one core.
    core: f64,
    /// The standalone's CPU seconds per occurrence executed.
    per_occurrence: f64,
}

async fn late(
    args: &StandaloneArgs,
    cronq: &Path,
    config: &Path,
    data: &Data,
) -> anyhow::Result<Steady> {
    let mut child = start(
        args,
        cronq,
        config,
        data,
        "info,cronq_producer::publisher=debug",
        Some(crate::lateness::PUBLISHED),
    )?;
    let outcome = async {
        let started = Instant::now();
        while child.kept_len() == 0 {
            child.check_alive()?;
            if started.elapsed() > FIRST_TIMEOUT {
                bail!("`cronq standalone` published nothing within {FIRST_TIMEOUT:?}");
            }
            tokio::time::sleep(POLL).await;
        }
        check_data(&child, data)?;
        // The window: whole seconds from the first after the warm-up.
        let from = (Utc::now() + TimeDelta::from_std(args.warmup)?)
            .duration_trunc(TimeDelta::seconds(1))?
            + TimeDelta::seconds(1);
        let to = from + TimeDelta::from_std(args.duration)?;
        sleep_until(from).await;
        let (before, cpu0, t0) = (child.counters().await?, child.cpu_time()?, Instant::now());
        sleep_until(to).await;
        let (after, cpu1, t1) = (child.counters().await?, child.cpu_time()?, Instant::now());
        // The last second's publishes: lateness beyond this is a failure anyway.
        tokio::time::sleep(Duration::from_secs(1)).await;
        child.check_alive()?;
        let (cpu, wall) = ((cpu1 - cpu0).as_secs_f64(), (t1 - t0).as_secs_f64());
        let done = after.succeeded - before.succeeded;
        anyhow::Ok(Steady {
            samples: crate::lateness::in_window(&child.take_kept(), from, to),
            executed: done / wall,
            core: cpu / wall,
            per_occurrence: ratio(cpu, done),
        })
    }
    .await;
    child.stop().await;
    data.remove();
    outcome
}

async fn sleep_until(at: chrono::DateTime<Utc>) {
    tokio::time::sleep((at - Utc::now()).to_std().unwrap_or_default()).await;
}

/// The SQLite side must really run on its file: it exists once the standalone runs.
fn check_data(child: &Standalone, data: &Data) -> anyhow::Result<()> {
    if let Data::File(path) = data
        && !path.exists()
    {
        bail!(
            "`cronq standalone --data {}` runs but created no file (first log line: {})",
            path.display(),
            child.first_line().unwrap_or_default()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_judges_the_median() {
        let mut f = Figure::new("standalone", "rate", Unit::PerSecond);
        f.runs = vec![1_900.0, 2_100.0, 2_200.0];
        let v = verdict("rate", &f, |v| v >= THROUGHPUT_GOAL, ">= 2,000/s");
        assert_eq!(
            v,
            "standalone goal rate >= 2,000/s: met (median 2,100/s; min 1,900/s, max 2,200/s)"
        );
        f.runs.clear();
        assert!(verdict("rate", &f, |_| true, "x").ends_with("not measured"));
        let mut kept = Figure::new("standalone", "kept up", Unit::Ratio);
        assert!(offered_load(1_000, &kept).starts_with("offered only 1,000/s"));
        kept.runs = vec![0.99];
        assert!(offered_load(3_000, &kept).starts_with("it kept up"));
        kept.runs = vec![0.8];
        assert!(offered_load(3_000, &kept).starts_with("it fell behind"));
        assert_eq!(order(1), [0, 1]);
        assert_eq!(order(2), [1, 0]);
    }

    #[test]
    fn configs_load() {
        let text = every_second(
            "s",
            3,
            Shape {
                defaults: "overlap = \"allow\"\n",
                job: COMMAND,
            },
        );
        let config = cronq_shared::config::Config::from_toml(&text, Path::new("s.toml")).unwrap();
        assert_eq!(config.jobs.len(), 3);
    }
}
