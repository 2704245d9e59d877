//! `cronq cancel KEY` through real processes, on a fleet (RabbitMQ and Redis) and on a
//! standalone's data file: a running command (`sleep 30`) has its whole process group gone
//! within 1.5 s of the command's return and the history says `cancelled by WHO`; an
//! occurrence waiting behind it (overlap `queue`) ends `cancelled` without ever starting;
//! an unknown key exits 2, a finished one exits 1 naming its state; the audit log names
//! who asked. On Redis, a cancel that lands while a run's claim is still held (its record
//! the one string of `backends/redis/src/ledger/record.lua`) makes the record the hash it
//! stands for, with its expiry, and the run stops and ends once.

use std::time::{Duration, Instant};

use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::State;
use cronq_shared::runlog::Outcome;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, LEADER, Options, Running, argv};
use crate::support::inspect::Inspect;
use crate::support::{TestEnv, eventually, ports, rabbitmq, scoped};

const JOB: &str = "slow";

/// How long processes may take to start, publish and claim.
const WAIT: Duration = Duration::from_secs(30);

/// How soon after `cronq cancel` returns the cancelled command's process group must be gone.
const STOPPED_WITHIN: Duration = Duration::from_millis(1500);

/// Who the cancels are made as (`USER`, then the host).
const USER: &str = "ada";

/// The `slow` job: writes "KEY PID" (its process group: the command leads its own) to
/// `started`, then sleeps 30 s; overlap `queue`, so a second occurrence waits.
fn config(env: &TestEnv) -> String {
    let script = format!(
        "echo \"$CRONQ_KEY $$\" >> '{}'; exec sleep 30",
        env.dir.join("started").display()
    );
    format!(
        "{LEADER}\n[[job]]\nname = \"{JOB}\"\nschedule = \"0 0 1 1 *\"\noverlap = \"queue\"\n\
         max_attempts = 1\ntimeout = \"5m\"\ncommand = {}\n",
        argv(&["sh", "-c", &script])
    )
}

/// [`config`] with overlap `allow`: an occurrence's claim is held (its delivery unacked,
/// its record one string) until the claim is kept, a second into a lone run.
fn allow_config(env: &TestEnv) -> String {
    config(env).replace("overlap = \"queue\"", "overlap = \"allow\"")
}

/// The "KEY PID" lines the job wrote.
fn started(env: &TestEnv) -> Vec<(String, i32)> {
    std::fs::read_to_string(env.dir.join("started"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (key, pid) = l.split_once(' ')?;
            Some((key.to_owned(), pid.parse().ok()?))
        })
        .collect()
}

/// `cronq ARGS` against the deployment as user [`USER`].
fn cronq(running: &Running, env: &TestEnv, args: &[&str]) -> std::process::Output {
    let mut cmd = env.cronq();
    cmd.env("USER", USER)
        .arg("--config")
        .arg(running.config_path());
    if let Some(file) = running.data_file() {
        cmd.arg("--data").arg(file);
    }
    cmd.args(args).output().expect("run cronq")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `cronq trigger slow`: the manual key it printed.
fn trigger(running: &Running, env: &TestEnv) -> String {
    let out = cronq(running, env, &["trigger", JOB]);
    assert!(out.status.success(), "trigger: {}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

/// Whether any process of group `pgid` is left.
fn group_alive(pgid: i32) -> bool {
    kill(Pid::from_raw(-pgid), None).is_ok()
}

async fn cancels_running_and_waiting(kind: Deployment, backend: Backend, env: TestEnv) {
    let running = Running::start(kind, &env, &config(&env)).await;
    let ledger = ports::ledger(backend, &env).await;

    let first = trigger(&running, &env);
    let pgid = eventually(WAIT, "the first occurrence to start", || async {
        started(&env)
            .into_iter()
            .find(|(k, _)| *k == first)
            .map(|(_, pid)| pid)
    })
    .await;
    let second = trigger(&running, &env);
    let second_key: OccurrenceKey = second.parse().unwrap();
    eventually(WAIT, "the second occurrence to wait its turn", || async {
        let state = ledger.inspect(&second_key).await.map(|r| r.state);
        (state == Some(State::Waiting)).then_some(())
    })
    .await;

    // The waiting one: cancelled at once, never run.
    let out = cronq(&running, &env, &["cancel", &second, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["result"], "cancelled", "{answer}");
    assert_eq!(answer["state"], "waiting", "{answer}");

    // The running one: its process group is gone soon after the command returns.
    let out = cronq(&running, &env, &["cancel", &first]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("stops within about a second"),
        "{}",
        text(&out.stdout)
    );
    let took = gone(pgid, &running).await;
    eprintln!(
        "{}: process group gone {} ms after `cronq cancel` returned",
        kind.label(),
        took.as_millis()
    );
    assert!(took <= STOPPED_WITHIN, "took {took:?}:\n{}", running.logs());

    let entries = eventually(WAIT, "both occurrences recorded cancelled", || async {
        let entries = running.entries(JOB).await;
        let cancelled = |key: &str| {
            entries
                .iter()
                .any(|e| e.key == key && e.outcome == Outcome::Cancelled)
        };
        (cancelled(&first) && cancelled(&second)).then_some(entries)
    })
    .await;
    for e in entries.iter().filter(|e| e.key == first || e.key == second) {
        let error = e.error.as_deref().unwrap_or_default();
        assert!(error.starts_with(&format!("cancelled by {USER}@")), "{e:?}");
    }
    assert_eq!(
        started(&env)
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>(),
        [first.as_str()],
        "the waiting occurrence never started"
    );

    // Ended: exit 1 naming its state; unknown: exit 2.
    let out = cronq(&running, &env, &["cancel", &first]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("occurrence {first} already ended cancelled")),
        "{}",
        text(&out.stderr)
    );
    let unknown = format!("{JOB}@2020-01-01T00:00:00Z");
    let out = cronq(&running, &env, &["cancel", &unknown]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("no occurrence {unknown} is known")),
        "{}",
        text(&out.stderr)
    );
    let out = cronq(&running, &env, &["cancel", "not a key"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // The audit log: who asked, done or refused.
    let out = cronq(&running, &env, &["audit", "--job", JOB, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let audit: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cancels: Vec<(String, String)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "cancel")
        .map(|e| {
            assert!(
                e["who"].as_str().unwrap().starts_with(&format!("{USER}@")),
                "{e}"
            );
            (
                e["detail"].as_str().unwrap_or_default().to_owned(),
                e["outcome"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expected = [
        (unknown.clone(), "refused"),
        (first.clone(), "refused"),
        (first.clone(), "done"),
        (second.clone(), "done"),
    ];
    assert_eq!(
        cancels,
        expected.map(|(k, o)| (k, o.to_owned())),
        "newest first"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_on_a_fleet_stops_running_and_waiting_occurrences() {
    scoped("cancel_fleet", |env| async move {
        cancels_running_and_waiting(Deployment::Fleet, Backend::Real, env).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_on_a_data_file_stops_running_and_waiting_occurrences() {
    scoped("cancel_sqlite", |env| async move {
        cancels_running_and_waiting(
            Deployment::Standalone(crate::support::deployment::Data::File),
            Backend::Sqlite,
            env,
        )
        .await;
    })
    .await;
}

/// The first start of `key` the job wrote: its process group. Looked for every 5 ms, so
/// that the caller acts within a few ms of it.
async fn start_of(env: &TestEnv, key: &str) -> i32 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some((_, pgid)) = started(env).into_iter().find(|(k, _)| k == key) {
            return pgid;
        }
        assert!(Instant::now() < deadline, "{key} never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the process group `pgid` is gone, for at most 10 s; how long it took.
async fn gone(pgid: i32, running: &Running) -> Duration {
    let from = Instant::now();
    while group_alive(pgid) {
        assert!(
            from.elapsed() < Duration::from_secs(10),
            "process group {pgid} still alive:\n{}",
            running.logs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    from.elapsed()
}

/// The record of a held claim is one string (`backends/redis/src/ledger/record.lua`) until
/// the claim is kept, a second into a lone run; a `cronq cancel` that meets it makes it the
/// hash it stands for. Caught there deterministically: the one consumer is stopped
/// (SIGSTOP) as soon as the command starts, so nothing keeps the claim meanwhile (a start
/// seen past the window, on a slow machine, is cancelled as any run and tried again). The
/// cancel answers `stopping`; the record is then a hash with every field the string held,
/// its expiry and the cancel mark; the consumer, let go on (SIGCONT), stops the command
/// and records it `cancelled` once: it never starts again, and nothing waits in the
/// queue.
#[tokio::test(flavor = "multi_thread")]
async fn cancel_on_redis_of_a_held_claim_makes_its_string_record_a_hash_and_stops_it_once() {
    scoped("cancel_held", |env| async move {
        let options = Options {
            consumers: 1,
            lease: "30s",
            ..Options::default()
        };
        let running =
            Running::start_with(Deployment::Fleet, &env, &allow_config(&env), options).await;
        let ledger = ports::redis_ledger(&env).await;
        let consumer = Pid::from_raw(i32::try_from(running.consumers()[0]).unwrap());
        let mut redis = env.redis().await;
        let mut missed = Vec::new();
        let (key, pgid) = loop {
            let key = trigger(&running, &env);
            let pgid = start_of(&env, &key).await;
            kill(consumer, Signal::SIGSTOP).unwrap();
            if ports::record_type(&env, &key).await == "string" {
                break (key, pgid);
            }
            // Kept already: let it go, cancel it as any run, and try again.
            kill(consumer, Signal::SIGCONT).unwrap();
            eprintln!("{key}: its claim was kept before the consumer was stopped; again");
            let out = cronq(&running, &env, &["cancel", &key]);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            gone(pgid, &running).await;
            missed.push(key);
            assert!(
                missed.len() < 3,
                "three starts seen past the held window: {missed:?}"
            );
        };
        let occ: OccurrenceKey = key.parse().unwrap();
        let held = ledger.fields(&occ).await.unwrap();
        assert_eq!(
            held.get("state").map(String::as_str),
            Some("running"),
            "{held:?}"
        );
        assert_eq!(held.get("held").map(String::as_str), Some("1"), "{held:?}");
        assert_eq!(
            ports::record_type(&env, &key).await,
            "string",
            "reading it changes nothing"
        );

        let out = cronq(&running, &env, &["cancel", &key, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["result"], "stopping", "{answer}");
        assert_eq!(answer["state"], "running", "{answer}");

        assert_eq!(ports::record_type(&env, &key).await, "hash");
        let mut converted = ledger.fields(&occ).await.unwrap();
        let mark = converted.remove("cancel").unwrap_or_default();
        assert!(
            mark.starts_with(&format!("cancelled by {USER}@")),
            "{mark:?}"
        );
        assert_eq!(
            converted, held,
            "the hash holds every field the string held"
        );
        let ttl: i64 = redis::cmd("PTTL")
            .arg(env.names().redis_key(&["occ", &key]))
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(ttl > 0, "the record keeps its expiry: {ttl}");

        kill(consumer, Signal::SIGCONT).unwrap();
        let took = gone(pgid, &running).await;
        eprintln!(
            "process group gone {} ms after the consumer was let go on",
            took.as_millis()
        );
        let entries = eventually(WAIT, "the occurrence recorded cancelled", || async {
            let entries: Vec<_> = running
                .entries(JOB)
                .await
                .into_iter()
                .filter(|e| e.key == key)
                .collect();
            entries
                .iter()
                .any(|e| e.outcome == Outcome::Cancelled)
                .then_some(entries)
        })
        .await;
        assert_eq!(entries.len(), 1, "one run recorded: {entries:?}");
        let error = entries[0].error.as_deref().unwrap_or_default();
        assert!(
            error.starts_with(&format!("cancelled by {USER}@")),
            "{entries:?}"
        );
        let record = ledger.inspect(&occ).await.unwrap();
        assert_eq!(record.state, State::Cancelled, "{record:?}");

        // Once: a delivery put back would be run or found ended within these 2 s.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (ready, _) = rabbitmq::queue_counts(&env.names(), "default").await;
        assert_eq!(ready, 0, "nothing waits in the queue");
        let starts = started(&env).into_iter().filter(|(k, _)| *k == key).count();
        assert_eq!(starts, 1, "started once:\n{}", running.logs());
        assert_eq!(
            running
                .entries(JOB)
                .await
                .iter()
                .filter(|e| e.key == key)
                .count(),
            1,
            "still one run recorded"
        );
    })
    .await;
}
