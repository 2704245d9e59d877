//! Signed messages (`CRONQ_SIGNING_KEY`, docs/security.md) through real processes: a
//! fleet (`cronq producer` ×2, `cronq consumer` ×2 on RabbitMQ and Redis) and `cronq
//! standalone` on a data file, every process with the key.
//!
//! - Forged messages put straight into the queue (valid occurrences of a configured job:
//!   unsigned, signed under the right id with another secret, signed with an unknown key,
//!   and signed with the real key then tampered with) never run: each is dead-lettered with
//!   reason `unauthenticated`, and `cronq dlq replay` refuses to turn them into signed ones;
//!   a genuinely signed one put there the same way runs (the injection path works).
//! - A captured signed message of an already succeeded key, put back into the queue, is
//!   acked as a duplicate and does not run again.
//! - A failed run's dead letter is signed by the consumer, so it can be replayed.
//! - Every scheduled tick meanwhile ran exactly once.
//! - Rotation (fleet): consumers take the new key beside the old one, producers move to the
//!   new one, consumers drop the old one, each step a rolling restart; nothing is refused
//!   and every tick runs exactly once.
//!
//! An in-memory standalone is left out: nothing outside its process can reach its queue.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_redis::RedisRunLog;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::message::Occurrence;
use cronq_shared::names::{JobName, Names, Namespace};
use cronq_shared::runlog::RunLog;
use cronq_shared::signing::{KeySource, Keyring};
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::deployment::{Data, Deployment, LEADER, Options, RUST_LOG, Running};
use crate::support::history::{self, Entry};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, data_file, eventually, ports, rabbitmq, redis_url, scoped};

/// The deployment's key.
const KEY1: &str = "k1:test-secret-k1-0123456789";
/// The key a rotation moves to.
const KEY2: &str = "k2:test-secret-k2-9876543210";

/// How long processes may take to do what is expected of them.
const WAIT: Duration = Duration::from_secs(30);

fn ring(keys: &str) -> Keyring {
    Keyring::parse(keys, KeySource::Variable).expect("a test key list")
}

/// `tick` runs every second; `forge` and `fails` never by schedule (only what the test
/// puts in the queue); `fails` fails at its one attempt.
fn config(env: &TestEnv) -> String {
    format!(
        "{LEADER}{}{}{}",
        data_file::job(env, "tick", "@every 1s", ""),
        data_file::job(env, "forge", "0 0 1 1 *", ""),
        data_file::job_running("fails", "0 0 1 1 *", "max_attempts = 1", "exit 3"),
    )
}

/// Where a deployment's queue and state are, for raw publishes and the commands.
struct Target {
    names: Names,
    /// A standalone's data file.
    data: Option<PathBuf>,
}

impl Target {
    fn of(kind: Deployment, env: &TestEnv) -> Self {
        Self {
            names: Names::new(&Namespace::new(&env.namespace).unwrap()),
            data: (kind == Deployment::Standalone(Data::File)).then(|| ports::data_file(env)),
        }
    }

    /// Puts `body` on the `default` queue as a foreign publisher could.
    async fn publish_raw(&self, body: &[u8]) {
        match &self.data {
            Some(file) => data_file::raw::publish(file, "default", body),
            None => rabbitmq::publish_raw(&self.names, "default", body).await,
        }
    }

    /// `cronq ARGS` on this target (`--data` for a standalone), with `CRONQ_SIGNING_KEY`.
    fn command(&self, env: &TestEnv, keys: &str, args: &[&str]) -> Command {
        let mut cmd = env.cronq();
        cmd.env("CRONQ_SIGNING_KEY", keys)
            .arg("--config")
            .arg(env.dir.join("cronq.toml"));
        if let Some(file) = &self.data {
            cmd.arg("--data").arg(file);
        }
        cmd.args(args);
        cmd
    }

    /// The dead letters `cronq dlq list --json` shows.
    fn dead_letters(&self, env: &TestEnv) -> Vec<Value> {
        let out = self
            .command(env, KEY1, &["dlq", "list", "--json"])
            .output()
            .expect("run cronq dlq list");
        assert!(
            out.status.success(),
            "dlq list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).expect("dlq list --json");
        doc["letters"].as_array().cloned().unwrap_or_default()
    }
}

/// The occurrence of `key` (a key of `tick`), as its producer published it.
fn occurrence_of(key: &str) -> Occurrence {
    let at = DateTime::<Utc>::from_timestamp(history::scheduled(key), 0).unwrap();
    let job = JobName::new("tick").unwrap();
    Occurrence {
        key: OccurrenceKey::scheduled(job.clone(), at),
        job,
        scheduled_at: at,
        scheduled_local: at.fixed_offset(),
        ..occurrence("tick", 0)
    }
}

/// Every JSON log line of every process of the test that says `message` about `key`.
fn logged(env: &TestEnv, message: &str, key: &str) -> usize {
    let dir = std::fs::read_dir(&env.dir).expect("the test's directory");
    dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".log").map(str::to_owned))
        .map(|n| {
            env.log(&n)
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|l| l["message"] == message && l["key"] == key)
                .count()
        })
        .sum()
}

/// `entries`, once every key of `published` has a terminal one.
fn all_settled(published: &[String], entries: Vec<Entry>) -> Option<Vec<Entry>> {
    let settled = history::terminal(&entries);
    published
        .iter()
        .all(|k| settled.contains_key(k))
        .then_some(entries)
}

/// Every tick between the first and last published ran exactly once. Only that window is
/// judged (`history::window`): a producer stopped with an instant's publish in flight
/// gives it up unconfirmed, and the broker may have it all the same.
fn assert_ticks_once(published: &[String], entries: &[Entry], logs: &str) {
    let published = published.iter().cloned().collect();
    let problems = history::window("tick", &published, 1, entries).problems();
    assert!(problems.is_empty(), "{problems:#?}\n{logs}");
}

async fn forged_messages_never_run(kind: Deployment, env: TestEnv) {
    let options = Options {
        env: vec![("CRONQ_SIGNING_KEY", KEY1.to_owned())],
        ..Options::default()
    };
    let running = Running::start_with(kind, &env, &config(&env), options).await;
    let target = Target::of(kind, &env);
    eventually(WAIT, "signed ticks to run", || async {
        (data_file::ran(&env, "tick").len() >= 2).then_some(())
    })
    .await;

    let plain = |i: u32| occurrence("forge", i).encode();
    let tampered = String::from_utf8(ring(KEY1).seal(&plain(4)))
        .unwrap()
        .replace(r#""i":4"#, r#""i":40"#);
    assert_ne!(tampered.as_bytes(), ring(KEY1).seal(&plain(4)));
    let forged: Vec<(u32, Vec<u8>, &str)> = vec![
        (1, plain(1), "unauthenticated: the message is not signed"),
        (
            2,
            ring("k1:a-guessed-secret-000000").seal(&plain(2)),
            "unauthenticated: the signature of key \"k1\" does not match",
        ),
        (
            3,
            ring("k9:test-secret-k1-0123456789").seal(&plain(3)),
            "unauthenticated: signed with key \"k9\"",
        ),
        (
            4,
            tampered.into_bytes(),
            "unauthenticated: the signature of key \"k1\" does not match",
        ),
    ];
    for (_, body, _) in &forged {
        target.publish_raw(body).await;
    }
    // The same path with the real key: it runs.
    let genuine = occurrence("forge", 5);
    target
        .publish_raw(&ring(KEY1).seal(&genuine.encode()))
        .await;
    let letters = eventually(WAIT, "four unauthenticated dead letters", || async {
        Some(target.dead_letters(&env)).filter(|l| l.len() == 4)
    })
    .await;
    eventually(WAIT, "the genuine message to run", || async {
        (data_file::ran(&env, "forge") == [genuine.key.to_string()]).then_some(())
    })
    .await;
    let reasons: BTreeMap<String, String> = letters
        .iter()
        .map(|l| {
            (
                l["key"].as_str().unwrap().to_owned(),
                l["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (i, _, reason) in &forged {
        let key = occurrence("forge", *i).key.to_string();
        let got = reasons
            .get(&key)
            .unwrap_or_else(|| panic!("{key}: {reasons:#?}"));
        assert!(got.starts_with(reason), "{key}: {got}");
    }

    // A replay does not launder them into signed messages.
    let out = target
        .command(&env, KEY1, &["dlq", "replay", "--job", "forge"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("not replayed: unauthenticated").count(),
        4,
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(target.dead_letters(&env).len(), 4);
    if let Some(metrics) = running.metrics().await {
        assert!(
            metrics.contains("cronq_messages_refused_total{reason=\"unauthenticated\"} 4"),
            "{metrics}"
        );
    }

    // A captured signed message of a key that already succeeded runs no second time.
    let done = data_file::ran(&env, "tick")[0].clone();
    target
        .publish_raw(&ring(KEY1).seal(&occurrence_of(&done).encode()))
        .await;
    eventually(
        WAIT,
        "the captured copy to be acked as a duplicate",
        || async {
            (logged(&env, "duplicate delivery acked without running", &done) >= 1).then_some(())
        },
    )
    .await;

    // A failed run's dead letter is the consumer's, signed: it can be replayed.
    let failing = occurrence("fails", 6);
    target
        .publish_raw(&ring(KEY1).seal(&failing.encode()))
        .await;
    eventually(WAIT, "the failed run's dead letter", || async {
        Some(()).filter(|()| target.dead_letters(&env).len() == 5)
    })
    .await;
    let out = target
        .command(&env, KEY1, &["dlq", "replay", "--job", "fails"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("replayed") && !text.contains("not replayed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    running.stop_producing().await;
    let published: Vec<String> = running.published("tick").into_iter().collect();
    let entries = eventually(WAIT, "every published tick settled", || async {
        all_settled(&published, running.entries("tick").await)
    })
    .await;
    assert_ticks_once(&published, &entries, &running.logs());
    let ran = data_file::ran(&env, "tick");
    assert_eq!(
        ran.iter().filter(|k| **k == done).count(),
        1,
        "{done} ran again: {ran:?}"
    );
    assert_eq!(data_file::ran(&env, "forge"), [genuine.key.to_string()]);
}

/// A body sealed twice with the real key (no cronq process writes one): the outer seal
/// opens, the inside is not a message, so it is dead-lettered `malformed` and never runs;
/// a genuine message beside it runs.
async fn a_body_sealed_twice_is_malformed(kind: Deployment, env: TestEnv) {
    let options = Options {
        env: vec![("CRONQ_SIGNING_KEY", KEY1.to_owned())],
        ..Options::default()
    };
    let _running = Running::start_with(kind, &env, &config(&env), options).await;
    let target = Target::of(kind, &env);
    eventually(WAIT, "signed ticks to run", || async {
        (data_file::ran(&env, "tick").len() >= 2).then_some(())
    })
    .await;
    let twice = ring(KEY1).seal(&ring(KEY1).seal(&occurrence("forge", 1).encode()));
    target.publish_raw(&twice).await;
    let genuine = occurrence("forge", 2);
    target
        .publish_raw(&ring(KEY1).seal(&genuine.encode()))
        .await;
    let letters = eventually(WAIT, "one dead letter", || async {
        Some(target.dead_letters(&env)).filter(|l| l.len() == 1)
    })
    .await;
    let reason = letters[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("malformed"), "{letters:#?}");
    eventually(WAIT, "the genuine message to run", || async {
        (data_file::ran(&env, "forge") == [genuine.key.to_string()]).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_sealed_twice_is_malformed_on_a_fleet() {
    scoped("sign-twice-fleet", |env| async move {
        a_body_sealed_twice_is_malformed(Deployment::Fleet, env).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_sealed_twice_is_malformed_on_a_standalone() {
    scoped("sign-twice-standalone", |env| async move {
        a_body_sealed_twice_is_malformed(Deployment::Standalone(Data::File), env).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_messages_never_run_on_a_fleet() {
    scoped("sign-forged-fleet", |env| async move {
        forged_messages_never_run(Deployment::Fleet, env).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_messages_never_run_on_a_standalone() {
    scoped("sign-forged-standalone", |env| async move {
        forged_messages_never_run(Deployment::Standalone(Data::File), env).await;
    })
    .await;
}

/// One fleet process: its role, its key list, and its pid.
struct Member {
    role: &'static str,
    name: String,
    pid: u32,
}

/// Starts `cronq ROLE` named `name` with the keys `keys`.
fn start(env: &TestEnv, config: &Path, role: &'static str, name: &str, keys: &str) -> Member {
    let mut cmd = env.cronq();
    cmd.env("RUST_LOG", RUST_LOG)
        .env("CRONQ_SIGNING_KEY", keys)
        .args(["--log-format", "json", "--config"])
        .arg(config)
        .arg(role);
    if role == "consumer" {
        cmd.args(["--consumer-id", name, "--lease", "3s"]);
    }
    Member {
        role,
        name: name.to_owned(),
        pid: env.spawn_command(name, cmd),
    }
}

/// Replaces `member` by one with `keys` (SIGTERM, wait, start), as a rolling restart does;
/// the new process logs to `<name>-<step>.log`.
fn restart(env: &TestEnv, config: &Path, member: &mut Member, keys: &str, step: usize) {
    env.signal(member.pid, Signal::SIGTERM);
    assert!(
        env.wait(member.pid, WAIT).is_some(),
        "{} did not stop",
        member.name
    );
    let base = member.name.split('-').take(2).collect::<Vec<_>>().join("-");
    *member = start(env, config, member.role, &format!("{base}-{step}"), keys);
}

/// Waits until `tick` ran two more times than `before`; returns how many times it ran.
async fn two_more_ticks(env: &TestEnv, before: usize, what: &str) -> usize {
    let ran = || data_file::ran(env, "tick").len();
    eventually(WAIT, what, || async { (ran() >= before + 2).then_some(()) }).await;
    ran()
}

#[tokio::test(flavor = "multi_thread")]
async fn key_rotation_loses_and_refuses_nothing() {
    scoped("sign-rotation", |env| async move {
        env.track_queue("default");
        let config = env.write_config("cronq.toml", &config(&env));
        let mut producers: Vec<Member> = (1..=2)
            .map(|i| start(&env, &config, "producer", &format!("producer-{i}"), KEY1))
            .collect();
        let mut consumers: Vec<Member> = (1..=2)
            .map(|i| start(&env, &config, "consumer", &format!("consumer-{i}"), KEY1))
            .collect();
        // After each step, two more ticks run: the fleet works with the keys it has.
        let mut ran = two_more_ticks(&env, 0, "ticks under k1").await;
        // 1. Every consumer accepts k2 as well (still signing its own messages with k1).
        let both_old_first = format!("{KEY1},{KEY2}");
        for c in &mut consumers {
            restart(&env, &config, c, &both_old_first, 1);
        }
        ran = two_more_ticks(&env, ran, "ticks after the consumers took k2").await;
        // 2. Producers, then consumers, sign with k2 (still accepting k1).
        let both_new_first = format!("{KEY2},{KEY1}");
        for m in producers.iter_mut().chain(consumers.iter_mut()) {
            restart(&env, &config, m, &both_new_first, 2);
        }
        ran = two_more_ticks(&env, ran, "ticks signed with k2").await;
        // 3. Once nothing signed with k1 is left, consumers drop it.
        for c in &mut consumers {
            restart(&env, &config, c, KEY2, 3);
        }
        two_more_ticks(&env, ran, "ticks after k1 was dropped").await;
        for p in &producers {
            env.signal(p.pid, Signal::SIGTERM);
        }
        for p in &producers {
            assert!(env.wait(p.pid, WAIT).is_some(), "{} did not stop", p.name);
        }

        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let published: Vec<String> = std::fs::read_dir(&env.dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("producer-"))
            .filter_map(|n| n.strip_suffix(".log").map(str::to_owned))
            .flat_map(|n| history::published(&env.log(&n), "tick"))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let conn = cronq_redis::connect(&redis_url()).await.unwrap();
        let runlog = RedisRunLog::new(conn, &names, Duration::from_secs(3600));
        let tick = JobName::new("tick").unwrap();
        let entries = eventually(WAIT, "every published tick settled", || async {
            let runs = runlog.list(Some(&tick), 10_000).await.ok()?;
            all_settled(&published, history::from_runs(&runs))
        })
        .await;
        let target = Target { names, data: None };
        let letters = target.dead_letters(&env);
        assert!(
            letters.is_empty(),
            "refused during the rotation: {letters:#?}"
        );
        assert_ticks_once(&published, &entries, "");
    })
    .await;
}
