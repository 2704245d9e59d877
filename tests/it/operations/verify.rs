//! `cronq verify` and the leader's continuous reconciliation through real processes, on
//! a fleet (RabbitMQ and Redis) and on a standalone's data file: a clean window is
//! accounted for to the occurrence, a paused stretch and the time before a runtime job's
//! creation are not expected, a failed run whose letter is in the dead-letter queue is
//! fine; a run removed from the history behind cronq's back is "never published", a dead
//! letter without a failed record is a gap, and the leader's
//! `cronq_occurrences_unaccounted{job}` rises for the removed run and falls back once it
//! leaves the trailing window.

use std::time::Duration;

use chrono::{DateTime, SubsecRound as _, TimeDelta, Utc};
use cronq_shared::broker::{Broker, DeadLetter};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::message::Occurrence;
use cronq_shared::names::{JobName, Names, Namespace, QueueName};
use serde_json::Value;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, LEADER, Options, Running, argv};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, amqp_url, eventually, ports, scoped};

/// The leader's trailing window in these tests.
const WINDOW: Duration = Duration::from_secs(20);

fn config(env: &TestEnv) -> String {
    let script = format!(
        "echo \"$CRONQ_KEY\" >> '{}'/\"$CRONQ_JOB\".ran",
        env.dir.display()
    );
    let job = |name: &str, every: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"@every {every}\"\nhandler = \"append\"\ntimeout = \"5s\"\n"
        )
    };
    format!(
        "{LEADER}\n[handlers.append]\ncommand = {}\n\n{}\n{}\n[[job]]\nname = \"boom\"\nschedule = \"@every 2s\"\ncommand = {}\nmax_attempts = 1\ntimeout = \"5s\"\n",
        argv(&["/bin/sh", "-c", &script]),
        job("tick", "1s"),
        job("held", "1s"),
        argv(&["/bin/sh", "-c", "exit 3"]),
    )
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn now_s() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(0)
}

/// `cronq verify ARGS`, asserting exit `code`; its stdout.
fn verify(running: &Running, code: i32, args: &[&str]) -> String {
    let mut all = vec!["verify"];
    all.extend(args);
    let out = running.cli(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "cronq {all:?}\nstdout: {stdout}\nstderr: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        running.logs()
    );
    stdout
}

fn job<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == name)
        .unwrap_or_else(|| panic!("no job {name} in {report}"))
}

/// Removes the run entries of `key` from the history, behind cronq's back.
pub(super) async fn remove_runs(backend: Backend, env: &TestEnv, key: &str) {
    match backend {
        Backend::Real => {
            let mut conn = env.redis().await;
            let names = Names::new(&Namespace::new(&env.namespace).unwrap());
            let stream = names.redis_key(&["runs"]);
            let page: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&stream)
                .arg("-")
                .arg("+")
                .query_async(&mut conn)
                .await
                .unwrap();
            let ids: Vec<String> = page
                .ids
                .iter()
                .filter(|e| e.get::<String>("key").as_deref() == Some(key))
                .map(|e| e.id.clone())
                .collect();
            assert!(!ids.is_empty(), "no run of {key} in {stream}");
            let _: i64 = redis::cmd("XDEL")
                .arg(&stream)
                .arg(&ids)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        _ => {
            let db = rusqlite::Connection::open(ports::data_file(env)).unwrap();
            let n = db
                .execute(
                    "DELETE FROM runs WHERE run LIKE '%\"key\":\"' || ?1 || '\"%'",
                    [key],
                )
                .unwrap();
            assert!(n > 0, "no run of {key} in the data file");
        }
    }
}

/// Puts a dead letter for `key` in the dead-letter queue, as a consumer would have.
async fn dead_letter(backend: Backend, env: &TestEnv, key: &OccurrenceKey) {
    let at = key.scheduled_at().unwrap();
    let occ = Occurrence {
        key: key.clone(),
        job: key.job().clone(),
        scheduled_at: at,
        scheduled_local: at.fixed_offset(),
        ..occurrence(key.job().as_str(), 0)
    };
    let letter = DeadLetter {
        key: Some(key.to_string()),
        job: Some(key.job().to_string()),
        queue: Some(QueueName::new("default").unwrap()),
        attempts: 1,
        reason: "unknown job".into(),
        last_error: None,
        dead_lettered_at: Utc::now(),
        body: occ.encode(),
    };
    match backend {
        Backend::Real => {
            let names = Names::new(&Namespace::new(&env.namespace).unwrap());
            let broker = cronq_rabbitmq::AmqpBroker::connect(&amqp_url(), names)
                .await
                .unwrap();
            broker.dead_letter(&letter).await.unwrap();
            broker.close().await;
        }
        _ => {
            let broker = cronq_sqlite::SqliteBroker::new(ports::open(env));
            broker.dead_letter(&letter).await.unwrap();
        }
    }
}

/// The leader's `cronq_occurrences_unaccounted{job="tick"}` (the highest of the
/// processes', a standby's being 0), once exported.
async fn unaccounted(running: &Running) -> Option<f64> {
    let text = running.metrics().await?;
    text.lines()
        .filter(|l| l.starts_with("cronq_occurrences_unaccounted{job=\"tick\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .reduce(f64::max)
}

async fn suite(backend: Backend, env: TestEnv) {
    let options = Options {
        env: vec![
            ("CRONQ_RECONCILE_EVERY", "1s".into()),
            ("CRONQ_RECONCILE_WINDOW", format!("{}s", WINDOW.as_secs())),
            ("CRONQ_RECONCILE_LAG", "1s".into()),
            // A run removed behind cronq's back shows at the leader's next full read.
            ("CRONQ_RECONCILE_RESYNC", "5s".into()),
        ],
        producer_admin: true,
        ..Options::default()
    };
    let running = Running::start_with(Deployment::on(backend), &env, &config(&env), options).await;
    running
        .until_succeeded("tick", 2, Duration::from_secs(30), "tick to run")
        .await;
    running
        .until_succeeded("held", 1, Duration::from_secs(30), "held to run")
        .await;
    let from = now_s() + TimeDelta::seconds(1);

    // A paused stretch of `held`.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(running.cli(&["pause", "held"]).status.success());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(running.cli(&["resume", "held"]).status.success());

    // A runtime job created mid-range.
    let live = env.write_config(
        "live.toml",
        "[[job]]\nname = \"live\"\nschedule = \"@every 1s\"\nhandler = \"append\"\ntimeout = \"5s\"\n",
    );
    let created = Utc::now();
    let out = running.cli(&["job", "apply", "-f", &live.to_string_lossy()]);
    assert!(out.status.success(), "{out:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let to = now_s();
    // Every occurrence of the range has had its 5 s timeout.
    tokio::time::sleep(Duration::from_secs(6)).await;

    let (from_arg, to_arg) = (rfc(from), rfc(to));
    let range = [
        "--from",
        from_arg.as_str(),
        "--to",
        to_arg.as_str(),
        "--grace",
        "0s",
    ];
    let mut args = range.to_vec();
    args.push("--json");
    let report: Value = serde_json::from_str(&verify(&running, 0, &args)).unwrap();
    assert_eq!(report["gaps"], 0, "{report}");
    let seconds = (to - from).num_seconds() + 1;
    let tick = job(&report, "tick");
    assert_eq!(tick["expected"], seconds, "{report}");
    // (An attempt slower than a second would make the next one skipped.)
    assert_eq!(
        tick["succeeded"].as_i64().unwrap() + tick["skipped"].as_i64().unwrap(),
        seconds,
        "{report}"
    );
    assert_eq!(tick["gaps"], Value::Array(vec![]), "{report}");
    let held = job(&report, "held");
    let paused = held["paused"].as_i64().unwrap();
    assert!(paused >= 2, "the pause of 4 s: {report}");
    assert!(
        held["expected"].as_i64().unwrap() <= seconds - paused,
        "{report}"
    );
    let live = job(&report, "live");
    let since = (to - created).num_seconds();
    let expected = live["expected"].as_i64().unwrap();
    assert!(
        expected <= since + 1 && expected >= since - 4 && expected < seconds - 5,
        "live expected only from its creation ({since} s before the end): {report}"
    );
    let boom = job(&report, "boom");
    assert!(boom["failed"].as_i64().unwrap() >= 3, "{report}");
    assert_eq!(boom["failed"], boom["expected"], "{report}");

    // A run removed behind cronq's back.
    let name = JobName::new("tick").unwrap();
    let removed = OccurrenceKey::scheduled(name.clone(), from + TimeDelta::seconds(3));
    remove_runs(backend, &env, removed.as_str()).await;
    let mut tick_only = range.to_vec();
    tick_only.extend(["--job", "tick"]);
    let text = verify(&running, 1, &tick_only);
    assert!(
        text.contains(&format!("{removed}: expected but never published")),
        "{text}"
    );
    assert_eq!(text.matches("tick@").count(), 1, "exactly that gap: {text}");

    // A dead letter of an occurrence that succeeded.
    let lettered = OccurrenceKey::scheduled(name, from + TimeDelta::seconds(5));
    dead_letter(backend, &env, &lettered).await;
    tick_only.push("--json");
    let report: Value = serde_json::from_str(&verify(&running, 1, &tick_only)).unwrap();
    let gaps = job(&report, "tick")["gaps"].as_array().unwrap().clone();
    assert_eq!(report["gaps"], 2, "{report}");
    let kinds: Vec<(&str, &str)> = gaps
        .iter()
        .map(|g| (g["key"].as_str().unwrap(), g["kind"].as_str().unwrap()))
        .collect();
    assert!(
        kinds.contains(&(removed.as_str(), "never_published"))
            && kinds.contains(&(lettered.as_str(), "dead_letter_without_failed")),
        "{report}"
    );
    assert!(
        gaps.iter().all(|g| g["what"].is_string()),
        "each gap says what: {report}"
    );

    // The leader's gauge: up for the removed run, and back to 0 once it left the trailing
    // window.
    eventually(
        Duration::from_secs(15),
        "the gauge to show the gap",
        || async { unaccounted(&running).await.filter(|v| *v >= 1.0) },
    )
    .await;
    eventually(
        WINDOW + Duration::from_secs(20),
        "the gauge back to 0",
        || async { unaccounted(&running).await.filter(|v| *v == 0.0) },
    )
    .await;

    // A fleet whose producers stop: nothing more is published, and that shows. (A
    // standalone stops producing by dropping its jobs from the config, which `verify`
    // reads too.)
    if backend == Backend::Real {
        running.stop_producing().await;
        let stopped = now_s() + TimeDelta::seconds(1);
        // Past the last one's 5 s timeout.
        tokio::time::sleep(Duration::from_secs(9)).await;
        let (from_arg, to_arg) = (rfc(stopped), rfc(stopped + TimeDelta::seconds(2)));
        let text = verify(
            &running,
            1,
            &[
                "--from", &from_arg, "--to", &to_arg, "--grace", "0s", "--job", "tick",
            ],
        );
        let never = text.matches(": expected but never published").count();
        assert_eq!(never, 3, "{text}");
    }
}

#[tokio::test]
async fn verify_accounts_for_a_fleet_window() {
    scoped("verify-real", |env| suite(Backend::Real, env)).await;
}

#[tokio::test]
async fn verify_accounts_for_a_data_file_window() {
    scoped("verify-sqlite", |env| suite(Backend::Sqlite, env)).await;
}

#[tokio::test]
async fn verify_usage_errors_name_the_flag() {
    scoped("verify-usage", |env| async move {
        let cfg = env.write_config(
            "cronq.toml",
            "[[job]]\nname = \"a\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\n",
        );
        let cfg = cfg.to_string_lossy().into_owned();
        let run = |args: &[&str]| {
            let mut all = vec!["verify", "--config", &cfg];
            all.extend(args);
            env.run(&all)
        };
        let out = run(&["--from", "yesterday", "--to", "2026-01-01T00:00:00Z"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("--from \"yesterday\" is not an RFC 3339 instant"),
            "{out:?}"
        );
        let out = run(&[
            "--from",
            "2026-01-02T00:00:00Z",
            "--to",
            "2026-01-01T00:00:00Z",
        ]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("--to 2026-01-01T00:00:00Z is before --from"),
            "{out:?}"
        );
        let out = run(&[
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-02T00:00:00Z",
            "--job",
            "b",
        ]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no job \"b\""),
            "{out:?}"
        );
    })
    .await;
}
