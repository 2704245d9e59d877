//! `failover`: SIGKILL the leading `cronq producer` (the real release binary) while a
//! standby runs, and measure how long until the standby publishes, what was lost and what
//! was published twice.
//!
//! One job `@every 1s` with `catchup = "all"`: every second from the first published one to
//! the last must be in the queue exactly once for a perfect failover. A no-ack observer
//! reads the job queue; each message's `epoch` says which leader term published it. The
//! leader's process id comes from the lease holder's instance id (`HOST-PID-RAND`).
//! Failover time: from the SIGKILL to the first message of a later epoch reaching the
//! observer. Every killed producer is replaced by a fresh standby before the next kill.
//!
//! A copy published twice is expected now and then: a leader killed after its publish was
//! confirmed but before it moved the job's cursor leaves the next leader to publish that
//! occurrence again, and the consumers' idempotency records run it once. So the bench also
//! passes every copy seen, in arrival order, through the real Redis ledger, as a consumer
//! does (claim; when claimed, complete as succeeded), and counts occurrences that would have
//! run twice: the figure that must be 0.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::Broker as _;
use cronq_shared::config::Overlap;

use cronq_redis::RedisLease;
use cronq_redis::RedisLedger;
use cronq_redis::RedisRunLog;
use cronq_shared::lease::Lease as _;
use cronq_shared::ledger::{Claim, ClaimOutcome, End, Ledger as _, State};
use cronq_shared::message::Occurrence;
use cronq_shared::names::QueueName;
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

use crate::env::BenchEnv;
use crate::report::Figure;
use crate::scale::{spawn_cronq, stop};
use crate::stats::{Distribution, Unit};

/// Sizes of the failover bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct FailoverArgs {
    /// Leader kills per lease setting.
    #[arg(long = "kills", default_value_t = 20)]
    pub kills: usize,
    /// Kills under the default lease (15 s; each takes about that long); default: --kills.
    #[arg(long = "kills-default-lease")]
    pub kills_default_lease: Option<usize>,
}

/// A lease setting under test: (label, `[leader]` TOML section).
/// The third field is the bound a failover should stay under: the killed leader's lease
/// runs out (at most `lease` after its last renewal), then a standby tries within `retry`.
const LEASES: &[(&str, &str, &str)] = &[
    ("default lease 15s/10s/2s", "", "<= lease + retry = 17 s"),
    (
        "short lease 2s/1.5s/500ms",
        "[leader]\nlease = \"2s\"\nrenew_deadline = \"1500ms\"\nretry = \"500ms\"\n",
        "<= lease + retry = 2.5 s",
    ),
];

/// How long a failover may take before the bench gives up on it.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// One received message.
#[derive(Debug, Clone)]
struct Seen {
    scheduled_at: DateTime<Utc>,
    epoch: u64,
    received_at: DateTime<Utc>,
    occurrence: Occurrence,
}

/// Runs the bench for both lease settings; returns its figures.
///
/// # Errors
/// When a producer cannot be started or a failover never completes.
pub async fn run(args: &FailoverArgs, cronq: &Path) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for (i, (label, leader, bound)) in LEASES.iter().enumerate() {
        let kills = if i == 0 {
            args.kills_default_lease.unwrap_or(args.kills)
        } else {
            args.kills
        };
        if kills == 0 {
            continue;
        }
        eprintln!("failover: {label}, {kills} kills");
        let env = BenchEnv::new()?;
        let measured = measure(&env, cronq, leader, kills).await;
        env.cleanup().await;
        let m = measured?;
        let d = Distribution::of(&m.times).context("no failover measured")?;
        eprintln!(
            "  failover p50 {:.2}s p99 {:.2}s max {:.2}s; lost {}, published twice {}, executed twice {}, {} messages",
            d.p50, d.p99, d.max, m.lost, m.duplicates, m.executed_twice, m.messages
        );
        let mut time = Figure::new(
            "failover",
            format!("SIGKILL to standby's first publish, {label} (each kill)"),
            Unit::Seconds,
        );
        time.runs = m.times.clone();
        time.goal = Some((*bound).to_owned());
        let mut lost = Figure::new(
            "failover",
            format!("occurrences lost over {kills} kills, {label}"),
            Unit::Count,
        )
        .goal("0");
        lost.runs.push(m.lost as f64);
        let mut dups = Figure::new(
            "failover",
            format!(
                "copies published twice over {kills} kills (deduplicated by the ledger), {label}"
            ),
            Unit::Count,
        );
        dups.runs.push(m.duplicates as f64);
        let mut twice = Figure::new(
            "failover",
            format!("occurrences executed twice over {kills} kills, {label}"),
            Unit::Count,
        )
        .goal("0");
        twice.runs.push(m.executed_twice as f64);
        figures.extend([time, lost, dups, twice]);
    }
    Ok(figures)
}

struct Measured {
    times: Vec<f64>,
    lost: usize,
    duplicates: usize,
    executed_twice: usize,
    messages: usize,
}

async fn measure(
    env: &BenchEnv,
    cronq: &Path,
    leader: &str,
    kills: usize,
) -> anyhow::Result<Measured> {
    let dir = std::env::temp_dir().join(format!("cronq-bench-failover-{}", env.namespace()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("failover.toml");
    std::fs::write(
        &config,
        format!(
            "{leader}[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncatchup = \"all\"\ncatchup_window = \"1h\"\n"
        ),
    )?;
    let queue = QueueName::new("default")?;
    env.track_queue(&queue);
    let names = env.names();
    let broker = AmqpBroker::connect(&env.endpoints.amqp_url, names.clone()).await?;
    broker
        .declare(&[queue.clone()].into_iter().collect())
        .await?;
    broker.close().await;
    let lease = RedisLease::new(
        cronq_redis::connect(&env.endpoints.redis_url).await?,
        &names,
    );

    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let token = CancellationToken::new();
    let observer_conn = env.amqp().await?;
    let observer = {
        let (seen, token, q, conn) = (
            Arc::clone(&seen),
            token.clone(),
            names.queue(&queue),
            observer_conn.create_channel().await?,
        );
        tokio::spawn(async move {
            crate::raw::observe(conn, &q, token, |body| {
                if let Ok(occ) = Occurrence::decode(body) {
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Seen {
                            scheduled_at: occ.scheduled_at,
                            epoch: occ.epoch,
                            received_at: Utc::now(),
                            occurrence: occ,
                        });
                }
            })
            .await
        })
    };
    let mut children: HashMap<u32, Child> = HashMap::new();
    let outcome = async {
        for _ in 0..2 {
            let child = spawn_cronq(env, cronq, &["producer", "--config"], &config, "warn")?;
            children.insert(child.id().context("producer exited at once")?, child);
        }
        let mut times = Vec::new();
        for kill in 1..=kills {
            // Wait for a steady leader: one that has published twice in its term.
            let (epoch, pid) = steady_leader(&lease, &seen).await?;
            let Some(mut child) = children.remove(&pid) else {
                bail!("the lease holder (pid {pid}) is not one of the bench's producers");
            };
            let killed_at = Utc::now();
            child.start_kill().context("while sending SIGKILL")?;
            let _ = child.wait().await;
            let first = wait_for_epoch_after(&seen, epoch).await?;
            let took = (first - killed_at)
                .to_std()
                .unwrap_or_default()
                .as_secs_f64();
            eprintln!("  kill {kill}/{kills}: standby published after {took:.2}s");
            times.push(took);
            let replacement = spawn_cronq(env, cronq, &["producer", "--config"], &config, "warn")?;
            children.insert(
                replacement.id().context("producer exited at once")?,
                replacement,
            );
        }
        // A last steady second, so the final catch-up is in.
        steady_leader(&lease, &seen).await?;
        anyhow::Ok(times)
    }
    .await;
    for (_, mut child) in children.drain() {
        stop(&mut child).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    token.cancel();
    let _ = observer.await;
    let _ = observer_conn.close(200, "observer done".into()).await;
    let _ = std::fs::remove_dir_all(&dir);
    let times = outcome?;
    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
    let (lost, duplicates) = gaps_and_duplicates(seen.iter().map(|s| s.scheduled_at.timestamp()));
    let executed_twice = run_through_ledger(env, &queue, &seen).await?;
    Ok(Measured {
        times,
        lost,
        duplicates,
        executed_twice,
        messages: seen.len(),
    })
}

/// Passes every copy seen, in arrival order, through the real Redis ledger as a consumer
/// does; returns how many extra runs that would have made (0 when each occurrence ran once).
async fn run_through_ledger(
    env: &BenchEnv,
    queue: &QueueName,
    seen: &[Seen],
) -> anyhow::Result<usize> {
    let conn = cronq_redis::connect(&env.endpoints.redis_url).await?;
    let names = env.names();
    let history = RedisRunLog::new(conn.clone(), &names, Duration::from_secs(3600));
    let ledger = RedisLedger::new(conn, names, history);
    let mut runs: HashMap<String, usize> = HashMap::new();
    for s in seen {
        let occ = &s.occurrence;
        let claim = Claim {
            key: occ.key.clone(),
            job: occ.job.clone(),
            queue: queue.clone(),
            attempt: occ.attempt,
            overlap: Overlap::Allow,
            max_concurrent: 1,
            pool: None,
            lease: Duration::from_secs(30),
            retention: Duration::from_secs(3600),
            body: occ.encode(),
            scheduled_at: occ.scheduled_at,
            recheck: Duration::from_secs(60),
            consumer: "bench".to_owned(),
            token: cronq_shared::ledger::claim_token(),
            held: false,
        };
        if let ClaimOutcome::Claimed { lease, .. } = ledger.claim(&claim).await? {
            *runs.entry(occ.key.to_string()).or_default() += 1;
            let end = End {
                state: Some(State::Succeeded),
                error: None,
                retention: Duration::from_secs(3600),
                next: None,
                run: None,
            };
            ledger.complete(&lease, &end).await?;
        }
    }
    Ok(runs.values().map(|n| n - 1).sum())
}

/// The current leader's epoch and pid, once it has published two occurrences in its term.
async fn steady_leader(lease: &RedisLease, seen: &Mutex<Vec<Seen>>) -> anyhow::Result<(u64, u32)> {
    let started = tokio::time::Instant::now();
    loop {
        if let Some(holder) = lease.holder().await? {
            let published = seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|s| s.epoch == holder.epoch)
                .count();
            if published >= 2 {
                let pid = holder
                    .instance
                    .rsplit('-')
                    .nth(1)
                    .and_then(|p| p.parse().ok())
                    .with_context(|| format!("no pid in instance id {:?}", holder.instance))?;
                return Ok((holder.epoch, pid));
            }
        }
        if started.elapsed() > FAILOVER_TIMEOUT {
            bail!("no leader published steadily within {FAILOVER_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When the first message of an epoch after `epoch` arrived.
async fn wait_for_epoch_after(
    seen: &Mutex<Vec<Seen>>,
    epoch: u64,
) -> anyhow::Result<DateTime<Utc>> {
    let started = tokio::time::Instant::now();
    loop {
        let first = seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|s| s.epoch > epoch)
            .map(|s| s.received_at)
            .min();
        if let Some(at) = first {
            return Ok(at);
        }
        if started.elapsed() > FAILOVER_TIMEOUT {
            bail!("no standby published within {FAILOVER_TIMEOUT:?} of the kill");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Over the whole seconds seen: how many in `[first, last]` are missing, and how many
/// extra copies were seen.
fn gaps_and_duplicates(seconds: impl Iterator<Item = i64>) -> (usize, usize) {
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for s in seconds {
        *counts.entry(s).or_default() += 1;
    }
    let (Some(first), Some(last)) = (counts.keys().min().copied(), counts.keys().max().copied())
    else {
        return (0, 0);
    };
    let lost = (first..=last).filter(|s| !counts.contains_key(s)).count();
    let duplicates = counts.values().map(|c| c - 1).sum();
    (lost, duplicates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_gaps_and_extra_copies() {
        assert_eq!(
            gaps_and_duplicates([10, 11, 11, 13, 14, 14, 14].into_iter()),
            (1, 3)
        );
        assert_eq!(gaps_and_duplicates(std::iter::empty()), (0, 0));
    }
}
