//! One-shot time controls through real processes: a job's `at = T` runs exactly once at
//! `T` (on a fleet across a `kill -9` of the leader, and on a standalone data file);
//! `cronq trigger --at T` runs once at about `T`, not before (across a leader kill too);
//! a past `--at` is a usage error; `cronq check` warns about a same-second herd.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use nix::sys::signal::Signal;

use crate::support::producer_process::{LEADER, cursor, producer, wait_leader};
use crate::support::{TestEnv, eventually, scoped};

/// The command every job here runs: it appends `KEY UNIX_SECONDS.NANOS` to `runs.txt`.
const RECORD: &str =
    r#"command = ["/bin/sh", "-c", "echo \"$CRONQ_KEY $(date +%s.%N)\" >> runs.txt"]"#;

/// The runs the command recorded: key and start time.
fn runs(env: &TestEnv) -> Vec<(String, f64)> {
    std::fs::read_to_string(env.dir.join("runs.txt"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (key, at) = l.split_once(' ').expect("KEY TIME");
            (key.to_owned(), at.parse().expect("unix seconds"))
        })
        .collect()
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A whole second `secs` from now.
fn ahead(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(Utc::now().timestamp() + secs, 0).expect("in range")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Waits until `n` runs were recorded, then a few seconds more in which no other may come.
async fn exactly(env: &TestEnv, n: usize, logs: &[&str]) -> Vec<(String, f64)> {
    let dump = || {
        logs.iter()
            .map(|l| format!("--- {l}\n{}", env.log(l)))
            .collect::<String>()
    };
    eventually(Duration::from_secs(40), "the runs", || async {
        (runs(env).len() >= n).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let ran = runs(env);
    assert_eq!(ran.len(), n, "runs {ran:?}\n{}", dump());
    ran
}

/// A one-shot a few seconds ahead, loaded by a fleet of two producers and a consumer; the
/// leader is killed just before the instant, so the standby takes over after it and
/// publishes it by catch-up (`latest`, the default): it runs once, under `JOB@<T UTC>`.
#[tokio::test(flavor = "multi_thread")]
async fn a_one_shot_runs_once_on_a_fleet_across_a_leader_kill() {
    scoped("oneshot-fleet", |env| async move {
        env.track_queue("default");
        let at = ahead(6);
        let config = env.write_config(
            "cronq.toml",
            &format!(
                "{LEADER}\n[[job]]\nname = \"once\"\nat = \"{}\"\n{RECORD}\n",
                rfc3339(at)
            ),
        );
        let config = path(&config).to_owned();
        let a = producer(&env, "a", &config);
        let (epoch, leader) = wait_leader(&env, 0).await;
        let b = producer(&env, "b", &config);
        env.spawn("c", &["consumer", "--config", &config]);
        // The leader has seen the job (its cursor is written) before the instant.
        eventually(Duration::from_secs(20), "the job's cursor", || {
            cursor(&env, "once")
        })
        .await;
        assert!(
            Utc::now() < at - chrono::Duration::seconds(1),
            "too slow to kill before T"
        );
        while Utc::now() < at - chrono::Duration::milliseconds(1500) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        env.signal(leader, Signal::SIGKILL);
        wait_leader(&env, epoch).await;
        let ran = exactly(&env, 1, &["a", "b", "c"]).await;
        assert_eq!(ran[0].0, format!("once@{}", rfc3339(at)));
        assert!(
            ran[0].1 >= at.timestamp() as f64,
            "not before its instant: {ran:?}"
        );
        for pid in [a, b] {
            env.signal(pid, Signal::SIGTERM);
        }
    })
    .await;
}

/// A one-shot on a standalone with a data file: `cronq next` lists its one time, it runs
/// once at it, and after it `cronq next` lists nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_one_shot_runs_once_on_a_standalone_data_file() {
    scoped("oneshot-standalone", |env| async move {
        let at = ahead(4);
        let config = env.write_config(
            "cronq.toml",
            &format!(
                "[[job]]\nname = \"once\"\nat = \"{}\"\n{RECORD}\n",
                rfc3339(at)
            ),
        );
        let next = |env: &TestEnv| {
            let out = env.run(&["next", "--config", path(&config), "--json"]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            doc["jobs"][0]["next"]
                .as_array()
                .expect("next")
                .iter()
                .map(|t| t["utc"].as_str().expect("utc").to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(next(&env), [rfc3339(at)]);
        let data = env.dir.join("cronq.db");
        let pid = env.spawn(
            "standalone",
            &[
                "standalone",
                "--config",
                path(&config),
                "--data",
                path(&data),
                "--grace",
                "5s",
            ],
        );
        let ran = exactly(&env, 1, &["standalone"]).await;
        assert_eq!(ran[0].0, format!("once@{}", rfc3339(at)));
        assert!(
            ran[0].1 >= at.timestamp() as f64,
            "not before its instant: {ran:?}"
        );
        assert!(next(&env).is_empty(), "no further fire time once past");
        env.signal(pid, Signal::SIGTERM);
        assert_eq!(env.wait(pid, Duration::from_secs(10)), Some(0));
    })
    .await;
}

/// `cronq trigger --at` 3 s ahead on a standalone data file: it runs once, at about T
/// (not before), under a manual key.
#[tokio::test(flavor = "multi_thread")]
async fn trigger_at_runs_once_at_its_instant_on_a_standalone() {
    scoped("trigger-at-standalone", |env| async move {
        let config = env.write_config(
            "cronq.toml",
            &format!("[[job]]\nname = \"yearly\"\nschedule = \"0 0 1 1 *\"\n{RECORD}\n"),
        );
        let data = env.dir.join("cronq.db");
        let pid = env.spawn(
            "standalone",
            &[
                "standalone",
                "--config",
                path(&config),
                "--data",
                path(&data),
                "--grace",
                "5s",
            ],
        );
        eventually(Duration::from_secs(20), "the data file", || async {
            data.exists().then_some(())
        })
        .await;
        let at = Utc::now() + chrono::Duration::seconds(3);
        let out = env.run(&[
            "trigger",
            "yearly",
            "--at",
            &at.to_rfc3339(),
            "--config",
            path(&config),
            "--data",
            path(&data),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(key.starts_with("yearly@manual-"), "{key}");
        let ran = exactly(&env, 1, &["standalone"]).await;
        assert_eq!(ran[0].0, key);
        let at = at.timestamp_micros() as f64 / 1e6;
        assert!(
            ran[0].1 >= at && ran[0].1 < at + 2.0,
            "runs at about T, not before: T = {at}, ran {ran:?}"
        );
        let audit = env.run(&["audit", "--config", path(&config), "--data", path(&data)]);
        assert!(
            String::from_utf8_lossy(&audit.stdout).contains(&key),
            "the trigger is audited"
        );
        env.signal(pid, Signal::SIGTERM);
        assert_eq!(env.wait(pid, Duration::from_secs(10)), Some(0));
    })
    .await;
}

/// `cronq trigger --at` 3 s ahead on a fleet whose leader is killed right after the
/// request: the standby carries it out, once, not before T.
#[tokio::test(flavor = "multi_thread")]
async fn trigger_at_runs_once_across_a_leader_kill() {
    scoped("trigger-at-fleet", |env| async move {
        env.track_queue("default");
        let config = env.write_config(
            "cronq.toml",
            &format!("{LEADER}\n[[job]]\nname = \"yearly\"\nschedule = \"0 0 1 1 *\"\n{RECORD}\n"),
        );
        let config = path(&config).to_owned();
        let a = producer(&env, "a", &config);
        let (epoch, leader) = wait_leader(&env, 0).await;
        let b = producer(&env, "b", &config);
        env.spawn("c", &["consumer", "--config", &config]);
        let at = Utc::now() + chrono::Duration::seconds(3);
        let out = env.run(&[
            "trigger",
            "yearly",
            "--at",
            &at.to_rfc3339(),
            "--config",
            &config,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        env.signal(leader, Signal::SIGKILL);
        wait_leader(&env, epoch).await;
        let ran = exactly(&env, 1, &["a", "b", "c"]).await;
        assert_eq!(ran[0].0, key);
        let at = at.timestamp_micros() as f64 / 1e6;
        assert!(ran[0].1 >= at, "not before T = {at}: {ran:?}");
        for pid in [a, b] {
            env.signal(pid, Signal::SIGTERM);
        }
    })
    .await;
}

/// A past `--at` is a usage error (exit 2) that says so, before any store is touched.
#[tokio::test(flavor = "multi_thread")]
async fn trigger_at_in_the_past_is_a_usage_error() {
    scoped("trigger-at-past", |env| async move {
        let config = env.write_config(
            "cronq.toml",
            &format!("[[job]]\nname = \"yearly\"\nschedule = \"0 0 1 1 *\"\n{RECORD}\n"),
        );
        let data = env.dir.join("cronq.db");
        let out = env.run(&[
            "trigger",
            "yearly",
            "--at",
            "2020-01-01T00:00:00Z",
            "--config",
            path(&config),
            "--data",
            path(&data),
        ]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--at") && err.contains("is in the past"),
            "{err}"
        );
    })
    .await;
}

/// `cronq check` warns about 200 jobs at `0 * * * *` (one second), not about 200 at
/// `H * * * *`.
#[tokio::test(flavor = "multi_thread")]
async fn check_warns_about_a_same_second_herd() {
    scoped("herd-check", |env| async move {
        let jobs = |schedule: &str| -> String {
            (0..200)
                .map(|i| format!("[[job]]\nname = \"j{i}\"\nschedule = \"{schedule}\"\n{RECORD}\n"))
                .collect()
        };
        let check = |name: &str, schedule: &str| {
            let config = env.write_config(name, &jobs(schedule));
            let out = env.run(&["check", "--config", path(&config)]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        let herd = check("herd.toml", "0 * * * *");
        assert!(
            herd.contains("200 of 200 jobs (100%) fire in the same second")
                && herd.contains("H * * * *")
                && herd.contains("jitter"),
            "{herd}"
        );
        let hashed = check("hashed.toml", "H * * * *");
        assert!(!hashed.contains("same second"), "{hashed}");
    })
    .await;
}

/// A one-shot applied as a runtime job (`cronq job apply`) to a running standalone runs
/// once at its instant.
#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_one_shot_runs_once() {
    scoped("oneshot-runtime", |env| async move {
        let config = env.write_config("cronq.toml", &format!("[handlers.record]\n{RECORD}\n"));
        let data = env.dir.join("cronq.db");
        let pid = env.spawn(
            "standalone",
            &[
                "standalone",
                "--config",
                path(&config),
                "--data",
                path(&data),
                "--grace",
                "5s",
            ],
        );
        eventually(Duration::from_secs(20), "the data file", || async {
            data.exists().then_some(())
        })
        .await;
        let at = ahead(5);
        let job = env.write_config(
            "later.toml",
            &format!(
                "[[job]]\nname = \"later\"\nat = \"{}\"\nhandler = \"record\"\n",
                rfc3339(at)
            ),
        );
        let out = env.run(&[
            "job",
            "apply",
            "-f",
            path(&job),
            "--config",
            path(&config),
            "--data",
            path(&data),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ran = exactly(&env, 1, &["standalone"]).await;
        assert_eq!(ran[0].0, format!("later@{}", rfc3339(at)));
        assert!(
            ran[0].1 >= at.timestamp() as f64,
            "not before its instant: {ran:?}"
        );
        env.signal(pid, Signal::SIGTERM);
        assert_eq!(env.wait(pid, Duration::from_secs(10)), Some(0));
    })
    .await;
}
