//! The operations commands need no `--config` once the standalone or the fleet's leader
//! has recorded its config: every one of them works from the record, against a running
//! standalone's data file and against a fleet; a `--config` that differs gets a warning
//! naming the jobs that differ (and the record is used); nothing recorded and no
//! `--config` is an error that says what to do; a reload records the new config.

use std::process::Output;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::cli::{WAIT, config, job, ran, start_consumer};
use crate::support::data_file::{self, DataFile, LEADER};
use crate::support::{TestEnv, eventually, scoped};

/// A runtime job, naming a handler as runtime jobs do.
const RUNTIME: &str = "[[job]]\nname = \"rt\"\nschedule = \"0 0 1 1 *\"\nhandler = \"h\"\n";

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn parse(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(out)))
}

fn names(jobs: &Value) -> Vec<String> {
    jobs["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("{jobs}"))
        .iter()
        .map(|j| j["job"].as_str().unwrap().to_owned())
        .collect()
}

/// Runs every operations command through `run` (which adds the target's flags, and no
/// `--config`), asserting each works from the record: `tick` runs every second, `flaky`
/// fails (dead-lettered on its first attempt), `rt.toml` in the test's directory holds a
/// runtime job.
async fn every_command_without_config(run: &(dyn Fn(&[&str]) -> Output + Sync)) {
    let ok = |args: &[&str]| {
        let out = run(args);
        assert_eq!(code(&out), Some(0), "cronq {args:?}: {}", text(&out));
        assert!(
            !stderr(&out).contains("config"),
            "cronq {args:?} says something of a config: {}",
            text(&out)
        );
        out
    };
    let jobs = parse(&ok(&["jobs", "--json"]));
    assert_eq!(names(&jobs), ["tick", "flaky"], "{jobs}");
    let next = parse(&ok(&["next", "--json", "--count", "2"]));
    assert_eq!(next["jobs"].as_array().unwrap().len(), 2, "{next}");
    let next = parse(&ok(&["next", "--job", "tick", "--json"]));
    assert_eq!(next["jobs"][0]["job"], "tick", "{next}");
    let runs = parse(&ok(&["runs", "--job", "tick", "--json"]));
    assert!(!runs["runs"].as_array().unwrap().is_empty(), "{runs}");
    // A misspelt job is checked against the recorded jobs.
    let out = run(&["runs", "--job", "tikc"]);
    assert_eq!(code(&out), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("did you mean \"tick\"?"),
        "{}",
        text(&out)
    );
    let out = ok(&["pause", "flaky", "--note", "checking"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("paused job \"flaky\""));
    let out = ok(&["resume", "flaky"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("resumed job \"flaky\""));
    let out = ok(&["trigger", "flaky"]);
    let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(key.starts_with("flaky@manual-"), "{}", text(&out));
    eventually(
        WAIT,
        "the triggered flaky occurrence to be dead-lettered",
        || async {
            let out = run(&["dlq", "list", "--json"]);
            let list: Value = serde_json::from_slice(&out.stdout).ok()?;
            list.to_string().contains(&key).then_some(())
        },
    )
    .await;
    let out = ok(&["dlq", "replay", "--job", "flaky", "--dry-run"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&key),
        "{}",
        text(&out)
    );
    let out = ok(&[
        "backfill",
        "tick",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T00:00:01Z",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 occurrences"),
        "{}",
        text(&out)
    );
    // No such occurrence: exit 2 for the key, not for a missing config.
    let out = run(&["cancel", "tick@2020-01-01T00:00:00Z"]);
    assert_eq!(code(&out), Some(2), "{}", text(&out));
    assert!(!stderr(&out).contains("config"), "{}", text(&out));
    let now = chrono::Utc::now();
    let from = (now - chrono::TimeDelta::minutes(5)).to_rfc3339();
    let to = now.to_rfc3339();
    let out = run(&[
        "verify", "--job", "tick", "--from", &from, "--to", &to, "--json",
    ]);
    assert!(
        matches!(code(&out), Some(0 | 1)),
        "verify works from the record: {}",
        text(&out)
    );
    assert!(parse(&out).is_object(), "{}", text(&out));
    // No consumer offers the handler `h`: written anyway, as for one registered in Rust.
    ok(&["job", "apply", "-f", "rt.toml", "--allow-unknown-handler"]);
    let rt = parse(&ok(&["job", "get", "rt", "--json"]));
    assert_eq!(rt["job"], "rt", "{rt}");
    ok(&["job", "history", "rt"]);
    let jobs = parse(&ok(&["jobs", "--json"]));
    assert_eq!(names(&jobs), ["tick", "flaky", "rt"], "{jobs}");
    ok(&["job", "delete", "rt"]);
    let audit = parse(&ok(&["audit", "--json"]));
    assert!(audit["count"].as_u64().unwrap() >= 4, "{audit}");
}

/// `--config other.toml` that changes `tick`, drops `flaky` and adds `extra`: a warning
/// names them, and the recorded jobs are listed.
fn differing_config_warns(env: &TestEnv, run: &dyn Fn(&[&str]) -> Output, place: &str) {
    let other = env.write_config(
        "other.toml",
        &format!(
            "{LEADER}\n{}{}",
            job(env, "tick", "@every 2s", ""),
            job(env, "extra", "@every 1s", "")
        ),
    );
    let other = other.to_string_lossy().into_owned();
    let out = run(&["jobs", "--json", "--config", &other]);
    assert_eq!(code(&out), Some(0), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "warning: --config {other} differs from the config recorded {place}"
        )),
        "{err}"
    );
    assert!(
        err.contains("jobs added: extra; removed: flaky; changed: tick;"),
        "{err}"
    );
    assert!(
        err.contains("this command uses the recorded config, which is what runs"),
        "{err}"
    );
    assert_eq!(names(&parse(&out)), ["tick", "flaky"]);
}

/// `--config` the file that runs: no warning, the same jobs.
fn same_config_is_quiet(run: &dyn Fn(&[&str]) -> Output, config: &str) {
    let out = run(&["jobs", "--json", "--config", config]);
    assert_eq!(code(&out), Some(0), "{}", text(&out));
    assert!(stderr(&out).is_empty(), "{}", text(&out));
    assert_eq!(names(&parse(&out)), ["tick", "flaky"]);
}

fn jobs_toml(env: &TestEnv) -> String {
    format!(
        "{}{}",
        job(env, "tick", "@every 1s", ""),
        "[[job]]\nname = \"flaky\"\nschedule = \"0 0 1 1 *\"\nmax_attempts = 1\ncommand = [\"false\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_records_its_config_for_every_operations_command() {
    scoped("recorded-standalone", |env: TestEnv| async move {
        env.write_config("rt.toml", RUNTIME);
        let toml = format!("{LEADER}\n{}", jobs_toml(&env));
        let file = DataFile::new(&env, &toml);
        let s = file.start("standalone", &[]);
        file.leading(&s).await;
        file.advance("tick", 2).await;
        let data = file.arg();
        let run = |args: &[&str]| -> Output {
            env.cronq()
                .env_remove("CRONQ_DATA")
                .args(args)
                .args(["--data", &data])
                .output()
                .expect("run cronq")
        };
        every_command_without_config(&run).await;
        differing_config_warns(&env, &run, &format!("in data file {data}"));
        same_config_is_quiet(&run, &file.config.to_string_lossy());

        // A reload records the new config: its new job is listed without --config.
        file.rewrite_config(&format!(
            "{toml}{}",
            job(&env, "added", "0 0 1 1 *", "")
        ));
        env.signal(s.pid, Signal::SIGHUP);
        eventually(WAIT, "the reloaded config to be recorded", || async {
            let out = run(&["jobs", "--json"]);
            let jobs: Value = serde_json::from_slice(&out.stdout).ok()?;
            (names(&jobs) == ["tick", "flaky", "added"]).then_some(())
        })
        .await;

        // A data file with nothing recorded (as one of an older version): --config, or
        // an error that says what to do.
        data_file::raw::execute(&file.path, "DELETE FROM config_loads");
        let out = run(&["jobs"]);
        assert_eq!(code(&out), Some(2), "{}", text(&out));
        assert_eq!(
            stderr(&out),
            format!(
                "cronq: no config recorded in data file {data} yet, and no --config: pass --config FILE (or set CRONQ_CONFIG), or start `cronq standalone --config FILE --data {data}` once (it records its config)\n"
            )
        );
        let config = file.config.to_string_lossy().into_owned();
        let out = run(&["jobs", "--json", "--config", &config]);
        assert_eq!(code(&out), Some(0), "{}", text(&out));
        assert!(stderr(&out).is_empty(), "{}", text(&out));
        assert_eq!(names(&parse(&out)), ["tick", "flaky", "added"]);
        file.stop(&s);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_leader_records_its_config_for_every_operations_command() {
    scoped("recorded-fleet", |env: TestEnv| async move {
        env.write_config("rt.toml", RUNTIME);
        let place = format!("in the store of namespace {:?}", env.namespace);
        // Nothing recorded yet in this namespace.
        let out = env.run(&["jobs"]);
        assert_eq!(code(&out), Some(2), "{}", text(&out));
        assert_eq!(
            stderr(&out),
            format!(
                "cronq: no config recorded {place} yet, and no --config: pass --config FILE (or set CRONQ_CONFIG), or start `cronq producer --config FILE` once (its leader records its config)\n"
            )
        );
        let cfg = config(&env, &jobs_toml(&env));
        let producer = env.spawn("p", &["producer", "--config", &cfg]);
        start_consumer(&env, &cfg, "c1");
        eventually(WAIT, "two runs of tick", || async {
            (ran(&env, "tick").len() >= 2).then_some(())
        })
        .await;
        let run = |args: &[&str]| env.run(args);
        every_command_without_config(&run).await;
        differing_config_warns(&env, &run, &place);
        same_config_is_quiet(&run, &cfg);

        // A reload while leading records the new config.
        std::fs::write(
            &cfg,
            format!(
                "{}\n{}{}",
                crate::support::producer_process::LEADER,
                jobs_toml(&env),
                job(&env, "added", "0 0 1 1 *", "")
            ),
        )
        .unwrap();
        env.signal(producer, Signal::SIGHUP);
        eventually(WAIT, "the reloaded config to be recorded", || async {
            let out = env.run(&["jobs", "--json"]);
            let jobs: Value = serde_json::from_slice(&out.stdout).ok()?;
            (names(&jobs) == ["tick", "flaky", "added"]).then_some(())
        })
        .await;
    })
    .await;
}

/// `cronq verify` expects each file job's occurrences of the schedule that ran when they
/// were due: `tick` every 2 s, then every second after a reload, accounts with no gap (the
/// schedule of now alone would expect the odd seconds before the reload, never published).
#[tokio::test(flavor = "multi_thread")]
async fn verify_models_a_file_job_before_its_last_reload() {
    scoped("recorded-verify", |env: TestEnv| async move {
        let tick = |every: &str| job(&env, "tick", every, "timeout = \"2s\"");
        let file = DataFile::new(&env, &format!("{LEADER}\n{}", tick("@every 2s")));
        let s = file.start("standalone", &[]);
        file.leading(&s).await;
        eventually(WAIT, "three runs every 2 s", || async {
            (ran(&env, "tick").len() >= 3).then_some(())
        })
        .await;
        file.rewrite_config(&format!("{LEADER}\n{}", tick("@every 1s")));
        env.signal(s.pid, Signal::SIGHUP);
        let data = file.arg();
        let run = |args: &[&str]| -> Output {
            env.cronq()
                .env_remove("CRONQ_DATA")
                .args(args)
                .args(["--data", &data])
                .output()
                .expect("run cronq")
        };
        eventually(WAIT, "the reload to be recorded", || async {
            let jobs: Value = serde_json::from_slice(&run(&["jobs", "--json"]).stdout).ok()?;
            (jobs["jobs"][0]["schedule"] == "@every 1s").then_some(())
        })
        .await;
        let before = ran(&env, "tick").len();
        eventually(WAIT, "six runs every second", || async {
            (ran(&env, "tick").len() >= before + 6).then_some(())
        })
        .await;
        let keys = ran(&env, "tick");
        let first = &keys[0]["tick@".len()..];
        let last = &keys[keys.len() - 1]["tick@".len()..];
        let out = run(&[
            "verify", "--job", "tick", "--from", first, "--to", last, "--grace", "1s", "--json",
        ]);
        assert_eq!(out.status.code(), Some(0), "no gap: {}", text(&out));
        let report = parse(&out);
        let tick = &report["jobs"][0];
        assert_eq!(tick["job"], "tick", "{report}");
        assert_eq!(tick["gaps"], Value::Array(vec![]), "{report}");
        // The runs before the reload were 2 s apart: the seconds between them, which the
        // schedule of now would expect, were never due.
        let at = |k: &String| {
            k["tick@".len()..]
                .parse::<chrono::DateTime<chrono::Utc>>()
                .unwrap()
        };
        assert_eq!((at(&keys[1]) - at(&keys[0])).num_seconds(), 2, "{keys:?}");
        assert!(
            tick["expected"].as_u64().unwrap() < keys.len() as u64 + 3,
            "only what each schedule expected: {report}"
        );
        file.stop(&s);
    })
    .await;
}
