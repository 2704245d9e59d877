//! `precision`: how late the real producer publishes, from an occurrence's scheduled
//! instant to its publisher confirm, with N jobs `@every 1s`.
//!
//! The producer runs in-process (leader lease in Redis, `AmqpBroker`) and records
//! `cronq_publish_lateness_seconds` per occurrence, when that occurrence's own confirm
//! arrived; [`crate::recorder`] keeps the samples.
//! Baseline, same run and same seconds: a bare lapin publish-with-confirm of one message
//! at each whole second (waking 1 ms after it, as the producer's timer does). A no-ack
//! observer drains the job queue so the broker is not slowed by a growing backlog.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::{DurationRound as _, TimeDelta, Utc};
use cronq_producer::{Producer, instance_id};
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::Broker as _;
use cronq_shared::config::Config;

use cronq_redis::RedisLease;
use cronq_shared::control::Control;
use futures_util::future::join_all;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::env::BenchEnv;
use crate::lateness::Late;
use crate::recorder::Samples;
use crate::report::{Curves, Figure, Series};
use crate::stats::{Distribution, Unit};

/// Sizes of the precision bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct PrecisionArgs {
    /// Job counts to measure, each `@every 1s` (comma-separated).
    #[arg(long = "jobs", value_delimiter = ',', default_value = "1000,10000")]
    pub jobs: Vec<usize>,
    /// How long each measurement lasts, after the warm-up.
    #[arg(long = "duration", default_value = "30s", value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_secs")]
    pub duration: Duration,
    /// Seconds of publishing discarded first (take-over, connection warm-up).
    #[arg(long = "warmup", default_value = "3s", value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_secs")]
    pub warmup: Duration,
    /// How long each burst baseline (N publishes per second) runs, after the producer
    /// stopped. By default as long as the producer's measurement (`--duration`), so that
    /// both sides' slowest second is the slowest of as many seconds.
    #[arg(long = "burst", value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_secs_opt")]
    pub burst: Option<Duration>,
}

impl PrecisionArgs {
    /// How long each burst baseline runs.
    fn burst(&self) -> Duration {
        self.burst.unwrap_or(self.duration)
    }
}

/// Serialises a duration as whole-ish seconds in the JSON report.
pub(crate) mod humantime_secs {
    pub(crate) fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

/// Serialises an optional duration as seconds, `null` when unset.
mod humantime_secs_opt {
    pub(crate) fn serialize<S: serde::Serializer>(
        d: &Option<std::time::Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}

/// How long a fresh producer may take to publish its first occurrence.
const FIRST_PUBLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// One measurement: the producer's lateness samples and the baseline's.
struct Measured {
    lateness: Vec<Late>,
    baseline: Vec<f64>,
}

/// Runs the bench `runs` times per job count; returns its figures, and per job count the
/// lateness distributions of cronq and its baselines over every run (for charts).
///
/// # Errors
/// When a service is unreachable or the producer never publishes.
pub async fn run(
    args: &PrecisionArgs,
    runs: usize,
    samples: &Samples,
) -> anyhow::Result<(Vec<Figure>, Vec<Curves>)> {
    let mut figures = Vec::new();
    let mut curves = Vec::new();
    for &jobs in &args.jobs {
        // Every run's samples of cronq, the bare burst, the burst of cronq's messages and
        // the single publish, in that order.
        let mut kept: [Vec<f64>; 4] = Default::default();
        let label = crate::stats::format(jobs as f64, Unit::Count);
        let mut lateness = crate::lateness::Figures::new(
            "precision",
            &format!("{label} jobs"),
            "bare lapin publish+confirm, 1 msg/s",
            "p99 < 5 ms",
        );
        let burst = format!("bare lapin burst of {label} pipelined publishes+confirms/s");
        let mut burst_p50 = Figure::new(
            "precision",
            format!("publish lateness p50, {label} jobs (vs burst)"),
            Unit::Seconds,
        )
        .baseline(burst.clone());
        let mut burst_p99 = Figure::new(
            "precision",
            format!("publish lateness p99, {label} jobs (vs burst)"),
            Unit::Seconds,
        )
        .baseline(burst);
        let mut burst_max = Figure::new(
            "precision",
            format!("publish lateness max, {label} jobs (vs burst)"),
            Unit::Seconds,
        )
        .baseline(format!(
            "bare lapin burst of {label} pipelined publishes+confirms/s"
        ));
        // The broker alone cannot confirm N persistent messages due at one instant in less
        // than its burst time; what cronq adds on top of that is its own part of the delay.
        // Both sides take each message's own confirm (the producer records each
        // occurrence's when its confirm arrives, as the burst does), on one confirm
        // channel each (cronq publishes on one), and like is set against like: cronq's p99
        // against the burst's p99, its max against the burst's max.
        let mut own_p99 = Figure::new(
            "precision",
            format!("cronq's own part of the lateness, {label} jobs: p99 minus the burst p99"),
            Unit::Seconds,
        )
        .goal("< 5 ms");
        let mut own_max = Figure::new(
            "precision",
            format!("cronq's own part of the lateness, {label} jobs: max minus the burst max"),
            Unit::Seconds,
        );
        // The same against a burst of cronq's own messages (body, properties, headers):
        // the broker storing and confirming the very bytes cronq's tick hands it.
        let shaped = format!("bare lapin burst of {label} of cronq's messages/s");
        let mut shaped_p99 = Figure::new(
            "precision",
            format!("publish lateness p99, {label} jobs (vs burst of cronq's messages)"),
            Unit::Seconds,
        )
        .baseline(shaped);
        let mut own_shaped_p99 = Figure::new(
            "precision",
            format!(
                "cronq's own part of the lateness, {label} jobs: p99 minus the p99 of a burst of cronq's messages"
            ),
            Unit::Seconds,
        )
        .goal("< 5 ms");
        for run in 1..=runs {
            eprintln!(
                "precision: {jobs} jobs, run {run}/{runs} ({}s)",
                args.duration.as_secs()
            );
            let env = BenchEnv::new()?;
            // Interleaved: odd runs measure the producer first, even runs the bursts, so
            // neither side always meets the broker fresh or after the other's backlog.
            let bursts_first = run % 2 == 0;
            let (measured, bursts, shaped) = if bursts_first {
                let bursts = burst_baseline(&env, jobs, args.burst(), BurstShape::Bare).await;
                let shaped = burst_baseline(&env, jobs, args.burst(), BurstShape::Cronq).await;
                (measure(&env, jobs, args, samples).await, bursts, shaped)
            } else {
                let measured = measure(&env, jobs, args, samples).await;
                let (bursts, shaped) = match &measured {
                    Ok(_) => (
                        burst_baseline(&env, jobs, args.burst(), BurstShape::Bare).await,
                        burst_baseline(&env, jobs, args.burst(), BurstShape::Cronq).await,
                    ),
                    Err(_) => (Ok(Vec::new()), Ok(Vec::new())),
                };
                (measured, bursts, shaped)
            };
            env.cleanup().await;
            let m = measured?;
            let (bursts, shaped) = (bursts?, shaped?);
            let seconds = [
                crate::lateness::per_second_summary(&bursts),
                crate::lateness::per_second_summary(&shaped),
            ];
            let (bursts_samples, shaped_samples) = (bursts, shaped);
            let bursts = Distribution::of(&crate::lateness::values(&bursts_samples))
                .context("the burst baseline recorded nothing")?;
            let shaped = Distribution::of(&crate::lateness::values(&shaped_samples))
                .context("the burst of cronq's messages recorded nothing")?;
            let values = crate::lateness::values(&m.lateness);
            kept[0].extend(&values);
            kept[1].extend(crate::lateness::values(&bursts_samples));
            kept[2].extend(crate::lateness::values(&shaped_samples));
            kept[3].extend(&m.baseline);
            let (Some(d), Some(b)) = (Distribution::of(&values), Distribution::of(&m.baseline))
            else {
                bail!("precision run with {jobs} jobs recorded no samples");
            };
            eprintln!(
                "  cronq: {}; baseline: {}",
                crate::lateness::summary(&d),
                crate::lateness::summary(&b)
            );
            eprintln!(
                "  cronq: {}",
                crate::lateness::per_second_summary(&m.lateness)
            );
            lateness.push(&d, &b);
            burst_p50.runs.push(d.p50);
            burst_p50.push_baseline(bursts.p50);
            burst_p99.runs.push(d.p99);
            burst_p99.push_baseline(bursts.p99);
            burst_max.runs.push(d.max);
            burst_max.push_baseline(bursts.max);
            own_p99.runs.push(d.p99 - bursts.p99);
            own_max.runs.push(d.max - bursts.max);
            shaped_p99.runs.push(d.p99);
            shaped_p99.push_baseline(shaped.p99);
            own_shaped_p99.runs.push(d.p99 - shaped.p99);
            for ((what, b), seconds) in [
                ("burst baseline", &bursts),
                ("burst of cronq's messages", &shaped),
            ]
            .into_iter()
            .zip(&seconds)
            {
                eprintln!(
                    "  {what}: p50 {:.2} ms p99 {:.2} ms max {:.2} ms; {seconds}",
                    b.p50 * 1e3,
                    b.p99 * 1e3,
                    b.max * 1e3
                );
            }
        }
        figures.extend(lateness.into_figures());
        figures.extend([
            burst_p50,
            burst_p99,
            burst_max,
            own_p99,
            own_max,
            shaped_p99,
            own_shaped_p99,
        ]);
        let names = [
            "cronq".to_owned(),
            format!("bare lapin burst of {label} pipelined publishes"),
            "the same burst of cronq's messages into its queue".to_owned(),
            "bare lapin publish+confirm, 1 msg/s".to_owned(),
        ];
        curves.push(Curves {
            bench: "precision".to_owned(),
            name: format!("publish lateness, {label} jobs"),
            unit: Unit::Seconds,
            series: names
                .into_iter()
                .zip(&kept)
                .map(|(name, values)| Series {
                    name,
                    samples: values.len(),
                    points: crate::stats::percentiles(values),
                })
                .collect(),
        });
    }
    Ok((figures, curves))
}

async fn measure(
    env: &BenchEnv,
    jobs: usize,
    args: &PrecisionArgs,
    samples: &Samples,
) -> anyhow::Result<Measured> {
    // No handler: the producer needs none.
    let text = crate::workload::every_second("p", jobs, crate::workload::Shape::default());
    let config = Config::from_toml(&text, Path::new("bench-precision.toml"))
        .context("while building the precision config")?;
    let names = env.names();
    let queues = config.queues();
    for q in &queues {
        env.track_queue(q);
    }
    let broker = AmqpBroker::connect(&env.endpoints.amqp_url, names.clone()).await?;
    broker.declare(&queues).await?;
    let redis = cronq_redis::connect(&env.endpoints.redis_url).await?;
    let lease = RedisLease::new(redis.clone(), &names);
    let control = Control::new(cronq_redis::RedisControl::new(redis, &names));
    let (_config_tx, config_rx) = watch::channel(Arc::new(config));

    let token = CancellationToken::new();
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
    let observer = env.amqp().await?;
    for q in &queues {
        let (queue, t, ch) = (
            names.queue(q),
            token.clone(),
            observer.create_channel().await?,
        );
        tasks.spawn(async move { crate::raw::observe(ch, &queue, t, |_| {}).await });
    }
    let baseline = Arc::new(Mutex::new(Vec::new()));
    {
        let conn = env.amqp().await?;
        let queue = env.raw_queue("precision");
        let ch = crate::raw::confirm_channel(&conn).await?;
        crate::raw::declare_quorum(&ch, &queue).await?;
        let (t, out) = (token.clone(), Arc::clone(&baseline));
        let drain_ch = conn.create_channel().await?;
        tasks.spawn(async move {
            let drain_queue = queue.clone();
            let drain_token = t.clone();
            let drain = tokio::spawn(async move {
                crate::raw::observe(drain_ch, &drain_queue, drain_token, |_| {}).await
            });
            let r = baseline_loop(&ch, &queue, &t, &out).await;
            t.cancel();
            let _ = drain.await;
            let _ = conn.close(200, "baseline done".into()).await;
            r
        });
    }
    samples.take(); // anything left from an earlier run
    let producer = Producer::new(
        Arc::new(broker.clone()),
        Arc::new(lease),
        control,
        config_rx,
        instance_id(),
    );
    let producer_token = token.child_token();
    tasks.spawn(async move {
        producer
            .run(producer_token)
            .await
            .context("the producer failed")
    });

    let outcome = async {
        let started = tokio::time::Instant::now();
        while samples.len() == 0 {
            if started.elapsed() > FIRST_PUBLISH_TIMEOUT {
                bail!("the producer published nothing within {FIRST_PUBLISH_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(args.warmup).await;
        samples.take();
        baseline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        tokio::time::sleep(args.duration).await;
        Ok(Measured {
            lateness: samples.take(),
            baseline: std::mem::take(&mut *baseline.lock().unwrap_or_else(PoisonError::into_inner)),
        })
    }
    .await;
    token.cancel();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Err(err)) => eprintln!("precision: a task ended with an error: {err:#}"),
            Err(err) => eprintln!("precision: a task panicked: {err}"),
            Ok(Ok(())) => {}
        }
    }
    broker.close().await;
    let _ = observer.close(200, "observer done".into()).await;
    outcome
}

/// Publishes one persistent message at each whole second (woken 1 ms after it, like the
/// producer's timer) and records how late its confirm came.
async fn baseline_loop(
    ch: &lapin::Channel,
    queue: &str,
    token: &CancellationToken,
    out: &Mutex<Vec<f64>>,
) -> anyhow::Result<()> {
    let body = br#"{"kind":"baseline"}"#.to_vec();
    loop {
        let now = Utc::now();
        let second = now.duration_trunc(TimeDelta::seconds(1))? + TimeDelta::seconds(1);
        let wait = (second - now).to_std().unwrap_or_default() + Duration::from_millis(1);
        if token
            .run_until_cancelled(tokio::time::sleep(wait))
            .await
            .is_none()
        {
            return Ok(());
        }
        crate::raw::publish_confirmed(ch, queue, std::slice::from_ref(&body)).await?;
        let late = (Utc::now() - second).to_std().unwrap_or_default();
        out.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(late.as_secs_f64());
    }
}

/// What a burst baseline publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BurstShape {
    /// A 25-byte body with only `delivery_mode`: the broker's floor for N messages.
    Bare,
    /// cronq's own messages: each job's occurrence of that second, encoded (sealed with
    /// `CRONQ_SIGNING_KEY` when it is set) and with the properties and headers the
    /// producer sends, `mandatory` as the producer publishes, through the namespace's
    /// exchange into the job queue as cronq declares it (quorum, delivery limit,
    /// at-least-once dead-lettering): the same bytes on the same path for the broker to
    /// route, store and confirm, with no cronq logic between the instant and the publish
    /// (the bodies are built before the second comes).
    Cronq,
}

/// The second baseline: at each whole second (woken 1 ms after it), `jobs` persistent
/// messages published pipelined on one confirm channel, each message's lateness taken when
/// its confirm arrives. What the broker alone allows for a burst of that size.
async fn burst_baseline(
    env: &BenchEnv,
    jobs: usize,
    duration: Duration,
    shape: BurstShape,
) -> anyhow::Result<Vec<Late>> {
    let conn = env.amqp().await?;
    let ch = crate::raw::confirm_channel(&conn).await?;
    let config = Config::from_toml(
        &crate::workload::every_second("p", jobs, crate::workload::Shape::default()),
        Path::new("bench-precision.toml"),
    )
    .context("while building the precision config")?;
    // Where the burst goes (exchange, routing key) and the queue drained behind it.
    let (exchange, routing_key, queue) = match shape {
        BurstShape::Bare => {
            let queue = env.raw_queue("burst");
            crate::raw::declare_quorum(&ch, &queue).await?;
            (String::new(), queue.clone(), queue)
        }
        // The queue `measure` declares, in the same namespace (whichever runs first
        // declares it; both track it for deletion, once).
        BurstShape::Cronq => {
            let names = env.names();
            let queues = config.queues();
            for q in &queues {
                env.track_queue(q);
            }
            let broker = AmqpBroker::connect(&env.endpoints.amqp_url, names.clone()).await?;
            broker.declare(&queues).await?;
            broker.close().await;
            let logical = queues
                .first()
                .context("the precision config has no queue")?
                .clone();
            (
                names.exchange(),
                logical.as_str().to_owned(),
                names.queue(&logical),
            )
        }
    };
    let token = CancellationToken::new();
    let drain = {
        let (ch, q, t) = (conn.create_channel().await?, queue.clone(), token.clone());
        tokio::spawn(async move { crate::raw::observe(ch, &q, t, |_| {}).await })
    };
    let keyring = env.endpoints.keyring.clone();
    let options = lapin::options::BasicPublishOptions {
        mandatory: shape == BurstShape::Cronq,
        ..lapin::options::BasicPublishOptions::default()
    };
    // The bare burst's messages are the same every second; cronq's are each second's own.
    let mut messages = vec![
        (
            br#"{"kind":"baseline-burst"}"#.to_vec(),
            lapin::BasicProperties::default().with_delivery_mode(2),
        );
        if shape == BurstShape::Bare { jobs } else { 0 }
    ];
    let mut out = Vec::new();
    let until = tokio::time::Instant::now() + duration;
    let outcome = async {
        while tokio::time::Instant::now() < until {
            let now = Utc::now();
            let second = now.duration_trunc(TimeDelta::seconds(1))? + TimeDelta::seconds(1);
            if shape == BurstShape::Cronq {
                messages = cronq_messages(&config, second, keyring.as_deref())?;
            }
            let route = Route {
                exchange: &exchange,
                routing_key: &routing_key,
                options,
            };
            out.extend(burst_at(&ch, &route, &messages, second).await?);
        }
        anyhow::Ok(())
    }
    .await;
    token.cancel();
    let _ = drain.await;
    let _ = conn.close(200, "burst done".into()).await;
    outcome.map(|()| out)
}

/// Where a burst goes: the exchange and routing key, and the publish options.
pub struct Route<'a> {
    /// The exchange ("" for the default exchange).
    pub exchange: &'a str,
    /// The routing key (the queue, on the default exchange).
    pub routing_key: &'a str,
    /// `mandatory` as the producer publishes, or not.
    pub options: lapin::options::BasicPublishOptions,
}

/// One burst: waits until 1 ms past `second` (as the producer's timer does), then
/// publishes `messages` pipelined on the confirm channel `ch` and waits for every confirm;
/// each message's lateness is taken when its confirm arrives.
///
/// # Errors
/// When a publish fails or is not confirmed with a plain ack.
pub async fn burst_at(
    ch: &lapin::Channel,
    route: &Route<'_>,
    messages: &[(Vec<u8>, lapin::BasicProperties)],
    second: chrono::DateTime<Utc>,
) -> anyhow::Result<Vec<Late>> {
    tokio::time::sleep(
        (second - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(1),
    )
    .await;
    let mut confirms = Vec::with_capacity(messages.len());
    for (body, properties) in messages {
        confirms.push(
            ch.basic_publish(
                route.exchange.into(),
                route.routing_key.into(),
                route.options,
                body,
                properties.clone(),
            )
            .await?,
        );
    }
    let confirmed = join_all(confirms.into_iter().map(|c| async move {
        let r = c.await;
        (r, Utc::now())
    }))
    .await;
    let mut out = Vec::with_capacity(messages.len());
    for (r, at) in confirmed {
        match r? {
            lapin::Confirmation::Ack(None) => {}
            other => bail!("burst baseline publish not confirmed: {other:?}"),
        }
        out.push(Late {
            seconds: (at - second).to_std().unwrap_or_default().as_secs_f64(),
            due: second.timestamp(),
        });
    }
    Ok(out)
}

/// Every job's occurrence due at `second`, as the producer puts it on the wire.
pub fn cronq_messages(
    config: &Config,
    second: chrono::DateTime<Utc>,
    keyring: Option<&cronq_shared::signing::Keyring>,
) -> anyhow::Result<Vec<(Vec<u8>, lapin::BasicProperties)>> {
    let now = Utc::now();
    config
        .jobs
        .iter()
        .map(|job| {
            let occ = cronq_producer::planner::occurrence(
                job,
                second,
                cronq_shared::message::Trigger::Schedule,
                1,
                now,
            );
            let properties = cronq_rabbitmq::headers::occurrence_properties(&occ, None)?;
            let body = cronq_shared::signing::seal_with(keyring, occ.encode());
            Ok((body, properties))
        })
        .collect()
}
