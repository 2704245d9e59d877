//! `herd`: `--herd-jobs` jobs (default 100,000) due at the same instant, published by the
//! real `cronq producer` (the release binary), against the raw pipelined burst of the same
//! messages in the same run.
//!
//! - cronq: a config of the herd, each job `S M H * * *` (UTC) for one instant `--herd-lead`
//!   after the run starts, plus `--herd-ticks` jobs `@every 1s`, all in the queue
//!   `default`. The producer logs each fire at debug (`fired`, `cronq_producer::scheduler`):
//!   its instant, how many occurrences, how late the publishing started and how late the
//!   last confirm came, taken when that confirm arrived, as the baseline takes its own. The
//!   herd's figure is that line's; the ticks' lines in the `--herd-watch` seconds after the
//!   instant say whether the next seconds were delayed, against their lines before it.
//! - Baseline: the same messages ([`crate::precision::cronq_messages`]: same bytes,
//!   properties, `mandatory`, exchange and queue, declared as cronq declares it), built
//!   before a whole second and published pipelined at 1 ms past it on one confirm channel,
//!   the one channel cronq publishes on (`cronq_rabbitmq`'s link); its last confirm.
//! - Both: a no-ack observer drains the queue and timestamps each delivery; the last
//!   delivery of the herd is a cross-check taken the same way on both sides.
//! - Probes, every `--herd-probe-every` (start to start, one at a time): the producer's
//!   `/metrics` (its admin address), and a `cronq dashboard` on the same config, up for the
//!   whole run, asked for `/api/v1/fleet`. Their latency (to the last byte) while the herd
//!   is published (its instant to its last confirm) is set against the quiet seconds before
//!   the instant (`/metrics`) and against the same probe during the raw burst (dashboard).
//!
//! cronq and its baseline alternate: odd runs start with cronq, even runs with the burst.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::{DateTime, DurationRound as _, TimeDelta, Timelike as _, Utc};
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::Broker as _;
use cronq_shared::config::Config;
use cronq_shared::names::QueueName;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::env::BenchEnv;
use crate::report::Figure;
use crate::stats::{Distribution, Unit, ratio};

/// Sizes of the herd bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct HerdArgs {
    /// Jobs due at the same instant.
    #[arg(id = "herd_jobs", long = "herd-jobs", default_value_t = 100_000)]
    pub jobs: usize,
    /// Jobs `@every 1s` beside the herd, whose lateness says whether the next seconds wait.
    #[arg(id = "herd_ticks", long = "herd-ticks", default_value_t = 5)]
    pub ticks: usize,
    /// From the start of a run to the herd's instant (the producer and the dashboard load
    /// the jobs meanwhile).
    #[arg(id = "herd_lead", long = "herd-lead", default_value = "45s", value_parser = humantime::parse_duration)]
    #[serde(with = "crate::precision::humantime_secs")]
    pub lead: Duration,
    /// How long after the instant the ticks are watched.
    #[arg(id = "herd_watch", long = "herd-watch", default_value = "6s", value_parser = humantime::parse_duration)]
    #[serde(with = "crate::precision::humantime_secs")]
    pub watch: Duration,
    /// How often the probes ask.
    #[arg(id = "herd_probe_every", long = "herd-probe-every", default_value = "50ms", value_parser = humantime::parse_duration)]
    #[serde(with = "crate::precision::humantime_secs")]
    pub probe_every: Duration,
    /// The queue of the `@every 1s` jobs (default: the herd's): a queue of their own
    /// tells the producer's part of their lateness from the shared queue's.
    #[arg(id = "herd_ticks_queue", long = "herd-ticks-queue", default_value = QUEUE)]
    pub ticks_queue: String,
    /// Run no `cronq dashboard` (and no dashboard probe).
    #[arg(id = "herd_no_dashboard", long = "herd-no-dashboard")]
    pub no_dashboard: bool,
}

/// The queue every job of the bench is in.
const QUEUE: &str = "default";
/// The ticks' job names start with this (the herd's with `h`).
const TICK: &str = "tick";
/// The quiet seconds before the instant the probes' and ticks' reference is taken from.
const QUIET: TimeDelta = TimeDelta::seconds(5);

/// Runs the bench `runs` times; returns its figures.
///
/// # Errors
/// When the services cannot be reached, a process does not start or lead in time, or a
/// side publishes nothing.
pub async fn run(args: &HerdArgs, runs: usize, cronq: &Path) -> anyhow::Result<Vec<Figure>> {
    let n = crate::stats::format(args.jobs as f64, Unit::Count);
    let burst = format!("raw pipelined burst of the same {n} messages, 1 confirm channel");
    let mut last = Figure::new(
        "herd",
        format!("{n} jobs due together: instant to last confirm"),
        Unit::Seconds,
    )
    .baseline(&burst);
    let mut times = Figure::new(
        "herd",
        format!("{n} jobs due together: cronq / raw burst, instant to last confirm"),
        Unit::Ratio,
    )
    .goal("<= 120%");
    let mut delivered = Figure::new(
        "herd",
        format!("{n} jobs due together: instant to last delivery to a no-ack observer"),
        Unit::Seconds,
    )
    .baseline(&burst);
    let mut delivered_times = Figure::new(
        "herd",
        format!("{n} jobs due together: cronq / raw burst, instant to last delivery"),
        Unit::Ratio,
    );
    let mut start = Figure::new(
        "herd",
        format!("{n} jobs due together: instant to the producer's first publish"),
        Unit::Seconds,
    );
    let mut ticks = Figure::new(
        "herd",
        format!(
            "`@every 1s` jobs: slowest delivery (scheduled instant to the observer) in the {} s after the herd",
            args.watch.as_secs()
        ),
        Unit::Seconds,
    )
    .baseline("same, in the 5 s before the herd")
    .goal("as before the herd");
    let mut tick_fires = Figure::new(
        "herd",
        format!(
            "`@every 1s` jobs: slowest publish (instant to last confirm, the producer's `fired` lines) in the {} s after the herd",
            args.watch.as_secs()
        ),
        Unit::Seconds,
    )
    .baseline("same, in the 5 s before the herd")
    .goal("as before the herd");
    let mut metrics_p99 = Figure::new(
        "herd",
        "producer `/metrics` latency p99 during the herd",
        Unit::Seconds,
    )
    .baseline("same, in the 5 s before the herd");
    let mut metrics_max = Figure::new(
        "herd",
        "producer `/metrics` latency max during the herd",
        Unit::Seconds,
    )
    .baseline("same, in the 5 s before the herd");
    let mut dash_p99 = Figure::new(
        "herd",
        "dashboard `/api/v1/fleet` latency p99 during cronq's herd",
        Unit::Seconds,
    )
    .baseline("same, during the raw burst");
    let mut dash_max = Figure::new(
        "herd",
        "dashboard `/api/v1/fleet` latency max during cronq's herd",
        Unit::Seconds,
    )
    .baseline("same, during the raw burst");
    for run in 1..=runs {
        let cronq_first = run % 2 == 1;
        eprintln!(
            "herd: {n} jobs, run {run}/{runs} ({} first)",
            if cronq_first { "cronq" } else { "raw burst" }
        );
        let env = BenchEnv::new()?;
        let outcome = once(&env, args, cronq, cronq_first).await;
        env.cleanup().await;
        let r = outcome?;
        let ms =
            |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{:.1} ms", v * 1e3));
        eprintln!(
            "  cronq: first publish {}, last confirm {}, last delivery {:.1} ms; raw burst: last confirm {:.1} ms, last delivery {:.1} ms",
            ms(r.cronq.start),
            ms(r.cronq.last_confirm),
            r.cronq.last_delivery * 1e3,
            r.burst.last_confirm * 1e3,
            r.burst.last_delivery * 1e3,
        );
        eprintln!(
            "  ticks: slowest delivery after the herd {:.1} ms, before {:.1} ms; slowest publish after the herd {:.1} ms, before {:.1} ms",
            r.cronq.ticks_after * 1e3,
            r.cronq.ticks_before * 1e3,
            r.cronq.tick_fires_after * 1e3,
            r.cronq.tick_fires_before * 1e3
        );
        for (what, d) in [
            ("/metrics before", r.cronq.metrics_before),
            ("/metrics during", r.cronq.metrics_during),
            ("dashboard during cronq", r.cronq.dashboard_during),
            ("dashboard during burst", r.burst.dashboard_during),
        ] {
            if let Some(d) = d {
                eprintln!("  {what}: {}", crate::lateness::summary(&d));
            }
        }
        if let Some(confirm) = r.cronq.last_confirm {
            last.runs.push(confirm);
            last.push_baseline(r.burst.last_confirm);
            times.runs.push(ratio(confirm, r.burst.last_confirm));
        }
        delivered.runs.push(r.cronq.last_delivery);
        delivered.push_baseline(r.burst.last_delivery);
        delivered_times
            .runs
            .push(ratio(r.cronq.last_delivery, r.burst.last_delivery));
        start.runs.extend(r.cronq.start);
        ticks.runs.push(r.cronq.ticks_after);
        ticks.push_baseline(r.cronq.ticks_before);
        tick_fires.runs.push(r.cronq.tick_fires_after);
        tick_fires.push_baseline(r.cronq.tick_fires_before);
        if let (Some(during), Some(before)) = (r.cronq.metrics_during, r.cronq.metrics_before) {
            metrics_p99.runs.push(during.p99);
            metrics_p99.push_baseline(before.p99);
            metrics_max.runs.push(during.max);
            metrics_max.push_baseline(before.max);
        }
        if let (Some(during), Some(burst)) = (r.cronq.dashboard_during, r.burst.dashboard_during) {
            dash_p99.runs.push(during.p99);
            dash_p99.push_baseline(burst.p99);
            dash_max.runs.push(during.max);
            dash_max.push_baseline(burst.max);
        }
    }
    let mut figures = vec![
        last,
        times,
        delivered,
        delivered_times,
        start,
        ticks,
        tick_fires,
        metrics_p99,
        metrics_max,
    ];
    if !args.no_dashboard {
        figures.extend([dash_p99, dash_max]);
    }
    Ok(figures)
}

/// One run's figures.
struct Run {
    cronq: CronqSide,
    burst: BurstSide,
}

/// The producer's side of a run, in seconds.
#[derive(Debug, Default)]
struct CronqSide {
    /// From the producer's `fired` line, when it logs one.
    start: Option<f64>,
    /// From the producer's `fired` line, when it logs one.
    last_confirm: Option<f64>,
    last_delivery: f64,
    ticks_after: f64,
    ticks_before: f64,
    /// The ticks' own fires' last confirms (the producer's `fired` lines).
    tick_fires_after: f64,
    tick_fires_before: f64,
    metrics_before: Option<Distribution>,
    metrics_during: Option<Distribution>,
    dashboard_during: Option<Distribution>,
}

/// The raw burst's side of a run, in seconds.
#[derive(Debug, Default)]
struct BurstSide {
    last_confirm: f64,
    last_delivery: f64,
    dashboard_during: Option<Distribution>,
}

/// The config text: `jobs` herd jobs `h{i}` due at `instant` only (once a day), in
/// [`QUEUE`], and `ticks` jobs `tick{i}` `@every 1s` in `ticks_queue`.
fn config_text(jobs: usize, ticks: usize, ticks_queue: &str, instant: DateTime<Utc>) -> String {
    use std::fmt::Write as _;
    let schedule = format!(
        "{} {} {} * * *",
        instant.second(),
        instant.minute(),
        instant.hour()
    );
    let mut text = String::with_capacity((jobs + ticks) * 64);
    for i in 0..jobs {
        let _ = writeln!(
            text,
            "[[job]]\nname = \"h{i}\"\nschedule = \"{schedule}\"\nqueue = \"{QUEUE}\""
        );
    }
    for i in 0..ticks {
        let _ = writeln!(
            text,
            "[[job]]\nname = \"{TICK}{i}\"\nschedule = \"@every 1s\"\nqueue = \"{ticks_queue}\""
        );
    }
    text
}

/// The scheduled instant of a delivered body if it is a tick's occurrence (sealed or
/// not); `None` for the herd's (told apart cheaply: the herd is 100,000 bodies).
fn tick(body: &[u8]) -> Option<DateTime<Utc>> {
    #[derive(serde::Deserialize)]
    struct Scheduled {
        scheduled_at: DateTime<Utc>,
    }
    let plain = cronq_shared::signing::unwrap(body);
    let needle = format!("\"job\":\"{TICK}");
    if !plain.windows(needle.len()).any(|w| w == needle.as_bytes()) {
        return None;
    }
    serde_json::from_slice::<Scheduled>(plain)
        .ok()
        .map(|s| s.scheduled_at)
}

/// One delivery seen by the observer: when, and for a tick's, its scheduled instant.
type Seen = (DateTime<Utc>, Option<DateTime<Utc>>);

/// One probe: when it was sent, and how long its answer took (seconds).
type Probe = (DateTime<Utc>, f64);

async fn once(
    env: &BenchEnv,
    args: &HerdArgs,
    cronq: &Path,
    cronq_first: bool,
) -> anyhow::Result<Run> {
    let dir = std::env::temp_dir().join(env.namespace());
    std::fs::create_dir_all(&dir).context("while creating the bench directory")?;
    let now = Utc::now();
    // When the burst goes first, the producer starts after it: give it the burst's time.
    let extra = if cronq_first { 0 } else { 20 };
    let instant = now.duration_trunc(TimeDelta::seconds(1))?
        + TimeDelta::from_std(args.lead)?
        + TimeDelta::seconds(extra);
    let path = dir.join("herd.toml");
    std::fs::write(
        &path,
        config_text(args.jobs, args.ticks, &args.ticks_queue, instant),
    )
    .context("while writing the herd config")?;
    let herd = Config::from_toml(
        &config_text(args.jobs, 0, QUEUE, instant),
        Path::new("herd.toml"),
    )
    .context("while building the herd config")?;
    let mut queues = herd.queues();
    queues.insert(QueueName::new(&args.ticks_queue)?);
    for queue in &queues {
        env.track_queue(queue);
    }
    let names = env.names();
    let broker = AmqpBroker::connect(&env.endpoints.amqp_url, names.clone()).await?;
    broker.declare(&queues).await?;
    broker.close().await;

    let token = CancellationToken::new();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let observer = env.amqp().await?;
    let mut observing = Vec::new();
    for queue in &queues {
        let (ch, q, t, out) = (
            observer.create_channel().await?,
            names.queue(queue),
            token.clone(),
            Arc::clone(&seen),
        );
        observing.push(tokio::spawn(async move {
            crate::raw::observe(ch, &q, t, |body| {
                let at = Utc::now();
                let tick = tick(body);
                out.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((at, tick));
            })
            .await
        }));
    }
    let dashboard_probes: Arc<Mutex<Vec<Probe>>> = Arc::default();
    let mut dashboard = None;
    let outcome = async {
        if !args.no_dashboard {
            let (child, base) = start_dashboard(env, cronq, &path, &dir).await?;
            dashboard = Some(child);
            tokio::spawn(probe(
                format!("{base}/api/v1/fleet"),
                args.probe_every,
                token.clone(),
                Arc::clone(&dashboard_probes),
            ));
        }
        let sides = Sides {
            env,
            args,
            cronq,
            path: &path,
            instant,
            herd: &herd,
            seen: &seen,
            dashboard: &dashboard_probes,
        };
        if cronq_first {
            let c = sides.cronq().await?;
            let b = sides.burst().await?;
            anyhow::Ok(Run { cronq: c, burst: b })
        } else {
            let b = sides.burst().await?;
            let c = sides.cronq().await?;
            anyhow::Ok(Run { cronq: c, burst: b })
        }
    }
    .await;
    token.cancel();
    if let Some(mut child) = dashboard {
        let _ = child.kill().await;
    }
    for observing in observing {
        let _ = observing.await;
    }
    let _ = observer.close(200, "observer done".into()).await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

/// What both sides of a run share.
struct Sides<'a> {
    env: &'a BenchEnv,
    args: &'a HerdArgs,
    cronq: &'a Path,
    path: &'a Path,
    instant: DateTime<Utc>,
    herd: &'a Config,
    seen: &'a Mutex<Vec<Seen>>,
    dashboard: &'a Mutex<Vec<Probe>>,
}

impl Sides<'_> {
    /// The seconds from `instant` to the last herd delivery seen, waiting (up to 60 s) until
    /// the observer saw the whole herd; what it saw is cleared, and returned.
    async fn last_delivery(&self, instant: DateTime<Utc>) -> anyhow::Result<(f64, Vec<Seen>)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let herd = self
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|(at, tick)| tick.is_none() && *at >= instant)
                .count();
            if herd >= self.args.jobs {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the observer saw {herd} of the herd's {} messages within 60 s",
                    self.args.jobs
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let seen = std::mem::take(&mut *self.seen.lock().unwrap_or_else(PoisonError::into_inner));
        let last = seen
            .iter()
            .filter(|(_, tick)| tick.is_none())
            .map(|(at, _)| *at)
            .max()
            .context("no delivery")?;
        Ok((seconds(last - instant), seen))
    }

    /// The dashboard probes sent in `[from, to]`.
    fn dashboard_in(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<Distribution> {
        window(
            &self
                .dashboard
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            from,
            to,
        )
    }

    async fn burst(&self) -> anyhow::Result<BurstSide> {
        let names = self.env.names();
        let conn = self.env.amqp().await?;
        let ch = crate::raw::confirm_channel(&conn).await?;
        let second = Utc::now().duration_trunc(TimeDelta::seconds(1))? + TimeDelta::seconds(2);
        let messages = crate::precision::cronq_messages(
            self.herd,
            second,
            self.env.endpoints.keyring.as_deref(),
        )?;
        let exchange = names.exchange();
        let route = crate::precision::Route {
            exchange: &exchange,
            routing_key: QUEUE,
            options: lapin::options::BasicPublishOptions {
                mandatory: true,
                ..lapin::options::BasicPublishOptions::default()
            },
        };
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let lates = crate::precision::burst_at(&ch, &route, &messages, second).await;
        let _ = conn.close(200, "burst done".into()).await;
        let last_confirm = lates?.iter().map(|l| l.seconds).fold(0.0, f64::max);
        let (last_delivery, _) = self.last_delivery(second).await?;
        let during_to = second + TimeDelta::microseconds((last_confirm * 1e6) as i64);
        Ok(BurstSide {
            last_confirm,
            last_delivery,
            dashboard_during: self.dashboard_in(second, during_to),
        })
    }

    async fn cronq(&self) -> anyhow::Result<CronqSide> {
        let admin = free_addr()?;
        let mut child = crate::scale::spawn_cronq(
            self.env,
            self.cronq,
            &[
                "--log-format",
                "json",
                "producer",
                "--admin-addr",
                admin.as_str(),
                "--config",
            ],
            self.path,
            "info,cronq_producer::scheduler=debug",
        )?;
        let (leading, lines) = read_producer(&mut child)?;
        let token = CancellationToken::new();
        let metrics: Arc<Mutex<Vec<Probe>>> = Arc::default();
        let outcome = async {
            let before = self.instant - Utc::now();
            let lead_by = (before - TimeDelta::seconds(3)).to_std().unwrap_or_default();
            tokio::time::timeout(lead_by, leading)
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "`cronq producer` did not lead 3 s before the herd's instant: raise --herd-lead"
                    )
                })?
                .map_err(|_| anyhow::anyhow!("`cronq producer` exited before leading"))?;
            tokio::spawn(probe(
                format!("http://{admin}/metrics"),
                self.args.probe_every,
                token.clone(),
                Arc::clone(&metrics),
            ));
            // The whole herd delivered, and the watched seconds after the instant.
            let watch_until = self.instant + TimeDelta::from_std(self.args.watch)?;
            let wait = (watch_until - Utc::now()).to_std().unwrap_or_default();
            tokio::time::sleep(wait).await;
            let delivered = self.last_delivery(self.instant).await?;
            // The producer logs a fire once its confirms are in: a moment for its line.
            tokio::time::sleep(Duration::from_millis(500)).await;
            anyhow::Ok(delivered)
        }
        .await;
        token.cancel();
        crate::scale::stop(&mut child).await;
        let (last_delivery, seen) = outcome?;
        let fires = std::mem::take(&mut *lines.lock().unwrap_or_else(PoisonError::into_inner));
        // Without the producer's `fired` lines (a build before them) the herd's time is the
        // observer's alone.
        let herd = fires.iter().find(|f| f.instant == self.instant);
        if let Some(h) = herd
            && h.occurrences < self.args.jobs
        {
            bail!(
                "the herd's fire published {} occurrences, not {}",
                h.occurrences,
                self.args.jobs
            );
        }
        let last_confirm = herd.and_then(|h| h.last_confirm_ms).map(|ms| ms / 1e3);
        let watch = TimeDelta::from_std(self.args.watch)?;
        let after = self.instant + TimeDelta::seconds(1);
        let herd_end = last_confirm.unwrap_or(last_delivery);
        let during_to = self.instant + TimeDelta::microseconds((herd_end * 1e6) as i64);
        let ticks = ticks_late(&seen);
        // The ticks' fires: every fire but the herd's (whose instant holds ticks too).
        let tick_fires: Vec<(DateTime<Utc>, f64)> = fires
            .iter()
            .filter(|f| f.instant != self.instant)
            .map(|f| (f.instant, f.last_confirm_ms.unwrap_or(f64::NAN) / 1e3))
            .collect();
        let metrics = metrics.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(CronqSide {
            start: herd.map(Fired::start),
            last_confirm,
            last_delivery,
            ticks_after: slowest(&ticks, after, after + watch),
            ticks_before: slowest(&ticks, self.instant - QUIET, self.instant),
            tick_fires_after: slowest(&tick_fires, after, after + watch),
            tick_fires_before: slowest(&tick_fires, self.instant - QUIET, self.instant),
            metrics_before: window(&metrics, self.instant - QUIET, self.instant),
            metrics_during: window(&metrics, self.instant, during_to),
            dashboard_during: self.dashboard_in(self.instant, during_to),
        })
    }
}

/// Each tick delivery's lateness: its scheduled instant, and the seconds from it to its
/// delivery to the observer.
fn ticks_late(seen: &[Seen]) -> Vec<(DateTime<Utc>, f64)> {
    seen.iter()
        .filter_map(|(at, tick)| tick.map(|due| (due, seconds(*at - due))))
        .collect()
}

/// The largest lateness of the ticks scheduled in `[from, to)` (NaN when none).
fn slowest(ticks: &[(DateTime<Utc>, f64)], from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ticks
        .iter()
        .filter(|(due, _)| *due >= from && *due < to)
        .map(|(_, late)| *late)
        .reduce(f64::max)
        .unwrap_or(f64::NAN)
}

/// The seconds of `d` (0 when negative).
fn seconds(d: TimeDelta) -> f64 {
    d.to_std().unwrap_or_default().as_secs_f64()
}

/// The latencies of the probes sent in `[from, to]`.
fn window(probes: &[Probe], from: DateTime<Utc>, to: DateTime<Utc>) -> Option<Distribution> {
    let took: Vec<f64> = probes
        .iter()
        .filter(|(at, _)| *at >= from && *at <= to)
        .map(|(_, took)| *took)
        .collect();
    Distribution::of(&took)
}

/// A free loopback address (bound, then released).
fn free_addr() -> anyhow::Result<String> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .to_string())
}

/// GETs `url` every `every` (start to start; one at a time) until `token` is cancelled,
/// recording when each was sent and how long its answer took to its last byte. A failed or
/// refused request counts as taking until its failure (timeout 10 s).
async fn probe(
    url: String,
    every: Duration,
    token: CancellationToken,
    out: Arc<Mutex<Vec<Probe>>>,
) {
    let Ok(http) = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    else {
        return;
    };
    while !token.is_cancelled() {
        let (sent, t) = (Utc::now(), tokio::time::Instant::now());
        let answered = async {
            let resp = http.get(&url).send().await?;
            resp.bytes().await
        };
        let Some(result) = token.run_until_cancelled(answered).await else {
            return;
        };
        let took = t.elapsed().as_secs_f64();
        if let Err(err) = result {
            eprintln!("herd: probe {url} failed after {took:.3}s: {err}");
        }
        out.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((sent, took));
        let next = t + every;
        if token
            .run_until_cancelled(tokio::time::sleep_until(next))
            .await
            .is_none()
        {
            return;
        }
    }
}

/// Starts `cronq dashboard` on `config` and waits until it answers with a snapshot; returns
/// it and its base URL.
async fn start_dashboard(
    env: &BenchEnv,
    cronq: &Path,
    config: &Path,
    dir: &Path,
) -> anyhow::Result<(tokio::process::Child, String)> {
    let addr = free_addr()?;
    let log = std::fs::File::create(dir.join("dashboard.log"))?;
    let child = tokio::process::Command::new(cronq)
        .args(["dashboard", "--config"])
        .arg(config)
        .args(["--addr", &addr])
        .env("CRONQ_NAMESPACE", env.namespace())
        .env("CRONQ_AMQP_URL", &env.endpoints.amqp_url)
        .env("CRONQ_REDIS_URL", &env.endpoints.redis_url)
        .env_remove("CRONQ_DASHBOARD_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("while starting {}", cronq.display()))?;
    let base = format!("http://{addr}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    crate::dashboard::wait_ready(&http, &base, Duration::from_secs(120)).await?;
    Ok((child, base))
}

/// One `fired` line of the producer (`cronq_producer::scheduler`).
#[derive(Debug, Clone, PartialEq)]
struct Fired {
    instant: DateTime<Utc>,
    occurrences: usize,
    start_ms: f64,
    last_confirm_ms: Option<f64>,
}

impl Fired {
    /// Its instant to its first publish, in seconds.
    fn start(&self) -> f64 {
        self.start_ms / 1e3
    }

    /// The fire a `--log-format json` line tells of, if it is a `fired` line.
    fn parse(line: &str) -> Option<Self> {
        if !line.contains("\"fired\"") {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        if v.get("message")?.as_str()? != "fired" {
            return None;
        }
        Some(Self {
            instant: v.get("instant")?.as_str()?.parse().ok()?,
            occurrences: usize::try_from(v.get("occurrences")?.as_u64()?).ok()?,
            start_ms: v.get("start_ms")?.as_f64()?,
            last_confirm_ms: v.get("last_confirm_ms").and_then(serde_json::Value::as_f64),
        })
    }
}

/// The `fired` lines a producer logged so far.
type FiredLog = Arc<Mutex<Vec<Fired>>>;

/// Reads a producer's stderr: the receiver gets a value when it leads; the list gets its
/// `fired` lines as they come.
fn read_producer(
    child: &mut tokio::process::Child,
) -> anyhow::Result<(oneshot::Receiver<()>, FiredLog)> {
    let (tx, rx) = oneshot::channel();
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let fired: FiredLog = Arc::default();
    let out = Arc::clone(&fired);
    tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("taking over:")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
            if let Some(f) = Fired::parse(&line) {
                out.lock().unwrap_or_else(PoisonError::into_inner).push(f);
            }
        }
    });
    Ok((rx, fired))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_has_the_herd_at_its_instant_and_the_ticks_every_second() {
        let instant: DateTime<Utc> = "2026-12-05T04:30:17Z".parse().unwrap();
        let config =
            Config::from_toml(&config_text(3, 2, QUEUE, instant), Path::new("herd.toml")).unwrap();
        assert_eq!(config.jobs.len(), 5);
        let before = instant - TimeDelta::seconds(1);
        for job in &config.jobs[..3] {
            assert_eq!(job.schedule.next_after(before), Some(instant));
            assert_eq!(
                job.schedule.next_after(instant),
                Some(instant + TimeDelta::days(1))
            );
        }
        assert_eq!(
            config.jobs[4].schedule.next_after(instant),
            Some(instant + TimeDelta::seconds(1))
        );
    }

    #[test]
    fn tells_ticks_from_the_herd_by_their_bodies() {
        let instant: DateTime<Utc> = "2026-12-05T04:30:17Z".parse().unwrap();
        let config =
            Config::from_toml(&config_text(1, 1, QUEUE, instant), Path::new("herd.toml")).unwrap();
        let messages = crate::precision::cronq_messages(&config, instant, None).unwrap();
        let ticks: Vec<_> = messages.iter().map(|(body, _)| tick(body)).collect();
        assert_eq!(ticks, [None, Some(instant)]);
    }

    #[test]
    fn reads_the_producer_s_fire_lines() {
        let line = r#"{"timestamp":"2026-12-05T04:30:18.250Z","level":"DEBUG","message":"fired","instant":"2026-12-05T04:30:17.000Z","occurrences":100005,"start_ms":1.25,"last_confirm_ms":1234.5,"target":"cronq_producer::scheduler"}"#;
        let f = Fired::parse(line).unwrap();
        assert_eq!(
            f.instant,
            "2026-12-05T04:30:17Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!((f.occurrences, f.start_ms), (100_005, 1.25));
        assert_eq!(f.last_confirm_ms, Some(1234.5));
        assert_eq!(Fired::parse(&line.replace("\"fired\"", "\"other\"")), None);
    }

    #[test]
    fn the_ticks_slowest_delivery_is_taken_per_window() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let seen = [
            (
                at("2026-12-05T04:30:16.010Z"),
                Some(at("2026-12-05T04:30:16Z")),
            ),
            (at("2026-12-05T04:30:17.900Z"), None),
            (
                at("2026-12-05T04:30:18.700Z"),
                Some(at("2026-12-05T04:30:18Z")),
            ),
            (
                at("2026-12-05T04:30:19.020Z"),
                Some(at("2026-12-05T04:30:19Z")),
            ),
        ];
        let ticks = ticks_late(&seen);
        assert_eq!(ticks.len(), 3);
        let late = slowest(
            &ticks,
            at("2026-12-05T04:30:18Z"),
            at("2026-12-05T04:30:20Z"),
        );
        assert!((late - 0.7).abs() < 1e-9, "{late}");
        let before = slowest(
            &ticks,
            at("2026-12-05T04:30:12Z"),
            at("2026-12-05T04:30:17Z"),
        );
        assert!((before - 0.01).abs() < 1e-9, "{before}");
        assert!(
            slowest(
                &ticks,
                at("2026-12-05T05:00:00Z"),
                at("2026-12-05T05:00:01Z")
            )
            .is_nan()
        );
    }

    #[test]
    fn probes_are_cut_to_their_window() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let probes = [
            (at("2026-12-05T04:30:16.9Z"), 0.5),
            (at("2026-12-05T04:30:17.0Z"), 0.002),
            (at("2026-12-05T04:30:17.5Z"), 0.004),
        ];
        let d = window(
            &probes,
            at("2026-12-05T04:30:17Z"),
            at("2026-12-05T04:30:18Z"),
        )
        .unwrap();
        assert_eq!((d.count, d.max), (2, 0.004));
        assert!(
            window(
                &probes,
                at("2026-12-05T05:00:00Z"),
                at("2026-12-05T05:00:01Z")
            )
            .is_none()
        );
    }
}
