//! The chaos soak (docs/reliability.md): 3 `cronq producer` and 3 `cronq consumer`
//! processes on the local RabbitMQ and Redis run 20 jobs (`@every 1s` and `@every 2s`:
//! fast, slow 3-10 s under each overlap policy, flaky ~30 % with `max_attempts = 3`, always
//! failing) while faults hit them at seeded random moments: SIGKILL and restart of
//! producers and consumers, SIGSTOP past the lease then SIGCONT, the AMQP connections and
//! Redis clients of these processes (only theirs: the broker is shared) closed, one link of
//! one process cut or stalled for 1-8 s (each process reaches the services through proxies
//! of its own), SIGHUP reloads with a changed config, a pause and resume, triggers and
//! backfills.
//!
//! Then [`check`] reads the handlers' log (`KEY ATTEMPT START END OUTCOME` per attempt),
//! `cronq runs --json` and `cronq dlq list --json`, and fails on any occurrence of the
//! window without exactly one terminal outcome, any key with two successes, an
//! always-failing occurrence not in the dead-letter queue exactly once, a re-run no fault
//! explains, or a process left running. It prints the table of docs/reliability.md.
//!
//! `CRONQ_CHAOS_SECONDS` (default 90) is how long faults are injected, `CRONQ_CHAOS_SEED`
//! the seed (default random; printed). `scripts/chaos` runs it for longer.
//!
//! `chaos_soak_ha` runs the same soak on the harness of `scripts/ha` (the RabbitMQ
//! cluster's three nodes, Redis through its sentinels with `CRONQ_REDIS_MIN_REPLICAS=1`),
//! adding node faults instead of the proxies' partitions: `stop_app` and `start_app`, a drain
//! and revive, and a partition (`pause_minority`) of a RabbitMQ node, a queue leader moved,
//! the Redis master killed, a plain `SENTINEL FAILOVER` (`scripts/chaos --ha`). Like the tests under `ha::`,
//! it needs the harness and runs in their test group. It is not part of `scripts/test`: it
//! takes 2 to 2.5 minutes for 90 s of faults, beside the focused `ha::` tests
//! (docs/reliability.md, "On the high-availability harness").

mod check;
mod faults;

use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use rand::{RngExt, SeedableRng};

use crate::support::deployment::argv;
use crate::support::ha::{Ha, delete_keys, ha};
use crate::support::{TestEnv, eventually, scoped};

use self::faults::{Fault, Fleet};

/// A consumer's execution lease: a frozen consumer is frozen for longer.
const LEASE: &str = "3s";
/// The jobs: name, interval in seconds, kind, and the TOML lines of their own.
const JOBS: &[(&str, i64, Kind, &str)] = &[
    ("fast-1", 1, Kind::Fast, ""),
    ("fast-2", 1, Kind::Fast, ""),
    ("fast-3", 1, Kind::Fast, ""),
    ("fast-4", 1, Kind::Fast, ""),
    ("fast-5", 2, Kind::Fast, ""),
    ("fast-6", 2, Kind::Fast, ""),
    ("fast-7", 2, Kind::Fast, "queue = \"second\""),
    ("fast-8", 1, Kind::Fast, "queue = \"second\""),
    ("slow-allow", 2, Kind::Slow, "overlap = \"allow\""),
    ("slow-skip", 2, Kind::Slow, "overlap = \"skip\""),
    (
        "slow-queue",
        2,
        Kind::Slow,
        "overlap = \"queue\"\ndeadline = \"6s\"",
    ),
    ("slow-replace", 2, Kind::Slow, "overlap = \"replace\""),
    ("flaky-1", 1, Kind::Flaky, ""),
    ("flaky-2", 1, Kind::Flaky, ""),
    ("flaky-3", 2, Kind::Flaky, "overlap = \"allow\""),
    ("flaky-4", 2, Kind::Flaky, "queue = \"second\""),
    ("fail-1", 2, Kind::Failing, "max_attempts = 2"),
    (
        "fail-2",
        2,
        Kind::Failing,
        "max_attempts = 2\nqueue = \"second\"",
    ),
    ("fast-skip", 1, Kind::Fast, "overlap = \"skip\""),
    ("fast-queue", 1, Kind::Fast, "overlap = \"queue\""),
];
/// The jobs a pause may stop.
const PAUSABLE: &[&str] = &["fast-3", "fast-6", "flaky-2"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Fast,
    Slow,
    Flaky,
    Failing,
}

impl Kind {
    /// The shell the job's command runs between its start and end stamps.
    fn body(self) -> &'static str {
        match self {
            Kind::Fast => "true",
            Kind::Slow => {
                "sleep $((3 + $(printf %s \"$CRONQ_KEY$CRONQ_ATTEMPT\" | cksum | cut -d' ' -f1) % 8))"
            }
            // 77 of 256: fails about 30 % of its attempts.
            Kind::Flaky => "[ $(od -An -N1 -tu1 /dev/urandom) -ge 77 ]",
            Kind::Failing => "false",
        }
    }
}

fn kind_of(job: &str) -> Kind {
    JOBS.iter().find(|j| j.0 == job).map_or(Kind::Fast, |j| j.2)
}

/// The config; `generation` changes every payload (a SIGHUP reload applies it).
fn config(env: &TestEnv, generation: u32) -> String {
    let log = env.dir.join("handlers.log");
    let mut toml = String::from(
        "[defaults]\ncatchup = \"all\"\nmax_attempts = 3\nbackoff = \"1s\"\nbackoff_max = \"2s\"\ntimeout = \"30s\"\n\n[leader]\nlease = \"2s\"\nrenew_deadline = \"1500ms\"\nretry = \"500ms\"\n",
    );
    for (name, every, kind, extra) in JOBS {
        let script = format!(
            "s=$(date +%s%3N); {}; rc=$?; e=$(date +%s%3N); if [ $rc = 0 ]; then o=ok; else o=fail; fi; echo \"$CRONQ_KEY $CRONQ_ATTEMPT $s $e $o\" >> '{}'; exit $rc",
            kind.body(),
            log.display()
        );
        toml.push_str(&format!(
            "\n[[job]]\nname = \"{name}\"\nschedule = \"@every {every}s\"\npayload = {{ generation = {generation} }}\n{extra}\ncommand = {}\n",
            argv(&["/bin/sh", "-c", &script])
        ));
    }
    toml
}

fn seconds() -> u64 {
    std::env::var("CRONQ_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(90)
}

/// A `cronq` command of the soak: the test's namespace, on the harness `ha` if given.
pub fn cronq(env: &TestEnv, ha: Option<&Ha>) -> Command {
    let mut cmd = env.cronq();
    if let Some(ha) = ha {
        cmd.env("CRONQ_AMQP_URL", &ha.amqp_urls)
            .env("CRONQ_REDIS_URL", &ha.sentinel_url)
            .env("CRONQ_REDIS_MIN_REPLICAS", "1");
    }
    cmd
}

/// Runs the soak for `CRONQ_CHAOS_SECONDS` with `CRONQ_CHAOS_SEED` (on the harness `ha`
/// if given), then checks it.
async fn soak(env: TestEnv, ha: Option<Ha>) {
    let seed = std::env::var("CRONQ_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let secs = seconds();
    eprintln!(
        "chaos: seed {seed}, {secs} s of faults, namespace {}{}",
        env.namespace,
        if ha.is_some() {
            ", on the HA harness"
        } else {
            ""
        }
    );
    let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(seed);
    env.track_queue("default");
    env.track_queue("second");
    let config_path = env.write_config("cronq.toml", &config(&env, 0));
    if let Some(ha) = &ha {
        ha.heal();
        let first = ha.amqp_urls.split(',').next().expect("a node URL");
        env.clean_broker_too(first, None);
    }
    let mut fleet = Fleet::start(&env, &config_path, ha.clone()).await;
    eventually(Duration::from_secs(60), "the first runs", || async {
        (check::handler_lines(&env).len() >= 10).then_some(())
    })
    .await;
    // A job with no history starts when a leader first sees it: the window starts once
    // every job has run.
    let started_at: DateTime<Utc> = Utc::now();

    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let mut generation = 0;
    while Instant::now() < until {
        let wait = Duration::from_millis(rng.random_range(1500..6000));
        fleet.tick(wait).await;
        if Instant::now() >= until {
            break;
        }
        let fault = Fault::pick(&mut rng, ha.is_some());
        if fault == Fault::Reload {
            generation += 1;
            std::fs::write(&config_path, config(&env, generation)).expect("rewrite the config");
        }
        fleet.inject(fault, &mut rng, start.elapsed()).await;
    }
    // Heal: every process up and running, nothing paused, then stop publishing.
    fleet.heal().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stopped_at: DateTime<Utc> = Utc::now();
    fleet.stop(Signal::SIGTERM, "producer");
    // Let every published occurrence settle (slow ones take up to 10 s, retries 2 s more).
    let window = check::Window {
        from: started_at + chrono::Duration::seconds(5),
        to: stopped_at - chrono::Duration::seconds(3),
        paused: fleet.paused.clone(),
    };
    let settled_by = Instant::now() + Duration::from_secs(120);
    loop {
        let report = check::check(&env, ha.as_ref(), &window, &fleet.events);
        if (report.lost == 0 && report.open == 0) || Instant::now() > settled_by {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Settled (or out of time): the consumers may go; then the final check.
    fleet.stop(Signal::SIGTERM, "consumer");
    let report = check::check(&env, ha.as_ref(), &window, &fleet.events);
    let left = fleet.left_running(&env);
    eprintln!("{}", report.table(seed, secs, ha.is_some(), &fleet.faults));
    if !report.problems.is_empty() {
        diagnose(&env, ha.as_ref(), &report).await;
    }
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert!(left.is_empty(), "processes left running: {left:#?}");
}

/// Prints what the processes' logs, the handlers' log and the ledger say about each key a
/// problem names: enough to tell a lost claim from a lost message or a late retry.
async fn diagnose(env: &TestEnv, ha: Option<&Ha>, report: &check::Report) {
    let keys: std::collections::BTreeSet<&str> = report
        .problems
        .iter()
        .filter_map(|p| p.split([' ', ',']).next())
        .map(|k| k.trim_end_matches(':'))
        .filter(|k| k.contains('@'))
        .take(10)
        .collect();
    let mut logs: Vec<_> = std::fs::read_dir(&env.dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    logs.sort();
    let names = cronq_shared::names::Names::new(
        &cronq_shared::names::Namespace::new(&env.namespace).expect("the test's namespace"),
    );
    let mut redis = match ha {
        Some(ha) => ha.node(ha.master_port()).await,
        None => env.redis().await,
    };
    eprintln!("chaos: the Redis masters the processes followed:");
    for path in logs
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
    {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("master changed")) {
            eprintln!(
                "  {}: {line}",
                path.file_name().unwrap_or_default().display()
            );
        }
    }
    for key in keys {
        eprintln!("chaos: what is known of {key}:");
        for path in logs
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
        {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains(key)) {
                eprintln!(
                    "  {}: {line}",
                    path.file_name().unwrap_or_default().display()
                );
            }
        }
        let job = key.split('@').next().unwrap_or(key);
        for redis_key in [
            names.redis_key(&["occ", key]),
            names.redis_key(&["slots", job]),
        ] {
            let kind: String = redis::cmd("TYPE")
                .arg(&redis_key)
                .query_async(&mut redis)
                .await
                .unwrap_or_default();
            let value: redis::Value = match kind.as_str() {
                "hash" => {
                    redis::cmd("HGETALL")
                        .arg(&redis_key)
                        .query_async(&mut redis)
                        .await
                }
                _ => {
                    redis::cmd("GET")
                        .arg(&redis_key)
                        .query_async(&mut redis)
                        .await
                }
            }
            .unwrap_or(redis::Value::Nil);
            eprintln!("  ledger {redis_key}: {value:?}");
        }
        let due: Option<f64> = redis::cmd("ZSCORE")
            .arg(names.redis_key(&["leases"]))
            .arg(key)
            .query_async(&mut redis)
            .await
            .unwrap_or(None);
        eprintln!("  ledger due time: {due:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_soak() {
    scoped("chaos", |env| soak(env, None)).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "opt-in (scripts/chaos --ha): 2 to 2.5 min for 90 s of faults, too long for scripts/test beside the focused ha:: tests, see docs/reliability.md"]
async fn chaos_soak_ha() {
    let ha = ha();
    scoped("chaos-ha", |env| async move {
        let namespace = env.namespace.clone();
        let outcome = tokio::spawn(soak(env, Some(ha.clone()))).await;
        // Every node back (start_app of a stopped one), then the namespace's keys go.
        let healer = ha.clone();
        let _ = tokio::task::spawn_blocking(move || healer.heal()).await;
        delete_keys(&ha, &namespace).await;
        if let Err(err) = outcome {
            std::panic::resume_unwind(err.into_panic());
        }
    })
    .await;
}

/// The kind of the job of `key`.
pub fn kind_of_key(key: &str) -> Kind {
    kind_of(key.split('@').next().unwrap_or(key))
}

/// The interval of `job`, in seconds.
pub fn every(job: &str) -> Option<i64> {
    JOBS.iter().find(|j| j.0 == job).map(|j| j.1)
}

/// Every job name.
pub fn jobs() -> impl Iterator<Item = &'static str> {
    JOBS.iter().map(|j| j.0)
}
