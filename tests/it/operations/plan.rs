//! `cronq plan` against what runs: a running standalone's data file, a fleet's store (its
//! runtime jobs on both sides), or `--against OLD`; a real change lists exactly the
//! occurrences that move, and the exit status is 0 unchanged, 3 changed.

use std::process::Output;

use chrono::{DateTime, Duration, Timelike as _, Utc};
use serde_json::Value;

use crate::support::cli::{WAIT, config, job, start_consumer};
use crate::support::data_file::{DataFile, LEADER};
use crate::support::{TestEnv, eventually, scoped};

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The first `hour:00` UTC strictly after `now`.
fn next_at(hour: u32, now: DateTime<Utc>) -> DateTime<Utc> {
    let today = now.date_naive().and_hms_opt(hour, 0, 0).unwrap().and_utc();
    if today > now {
        today
    } else {
        today + Duration::days(1)
    }
}

/// The jobs: `daily` at 09:00 UTC and `tick` every second.
fn jobs(env: &TestEnv, daily: &str) -> String {
    format!(
        "{}{}",
        job(env, "daily", daily, ""),
        job(env, "tick", "@every 1s", "")
    )
}

/// Asserts `out` is `plan --json` with exit 3 and exactly one change: `daily` moved from
/// the next 09:00 to the next 10:00.
fn assert_daily_moved(out: &Output, before: DateTime<Utc>) {
    assert_eq!(out.status.code(), Some(3), "{}", text(out));
    let plan: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(out)));
    assert_eq!(plan["changed"], true, "{plan}");
    let jobs = plan["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "only daily changes: {plan}");
    let daily = &jobs[0];
    assert_eq!(daily["job"], "daily");
    assert_eq!(daily["change"], "changed");
    assert_eq!(daily["schedule"]["old"], "0 9 * * *");
    assert_eq!(daily["schedule"]["new"], "0 10 * * *");
    assert_eq!(daily["appear"], Value::Array(vec![]), "{plan}");
    assert_eq!(daily["disappear"], Value::Array(vec![]), "{plan}");
    let utc = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    // The plan's window starts when it runs, a moment after `before`.
    let after = before.with_nanosecond(0).unwrap() + Duration::seconds(1);
    assert_eq!(
        daily["move"],
        serde_json::json!([{
            "from": { "utc": utc(next_at(9, after)), "local": next_at(9, after).to_rfc3339_opts(chrono::SecondsFormat::Secs, false) },
            "to": { "utc": utc(next_at(10, after)), "local": next_at(10, after).to_rfc3339_opts(chrono::SecondsFormat::Secs, false) },
        }]),
        "{plan}"
    );
    assert_eq!(daily["catchup"], Value::Array(vec![]));
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_against_a_running_standalone_lists_exactly_the_moved_occurrences() {
    scoped("plan-standalone", |env: TestEnv| async move {
        let file = DataFile::new(&env, &format!("{LEADER}\n{}", jobs(&env, "0 9 * * *")));
        let new = env.write_config(
            "new.toml",
            &format!("{LEADER}\n{}", jobs(&env, "0 10 * * *")),
        );
        let new = new.to_string_lossy().into_owned();
        let data = file.arg();
        let run = |args: &[&str]| -> Output {
            env.cronq()
                .env_remove("CRONQ_DATA")
                .args(args)
                .args(["--data", &data])
                .output()
                .expect("run cronq")
        };
        // Nothing recorded: the file does not exist yet, then the standalone records.
        let s = file.start("standalone", &[]);
        file.leading(&s).await;
        eventually(WAIT, "the config to be recorded", || async {
            run(&["jobs"]).status.success().then_some(())
        })
        .await;

        let before = Utc::now();
        let out = run(&["plan", "--config", &new, "--json"]);
        assert_daily_moved(&out, before);

        let same = file.config.to_string_lossy().into_owned();
        let out = run(&["plan", "--config", &same]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with(&format!(
                "no job changes against the config recorded in data file {data}"
            )),
            "{}",
            text(&out)
        );

        // The table names the job and its move.
        let out = run(&["plan", "--config", &new, "--hours", "48"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(
            table.contains("daily") && table.contains("moves: "),
            "{table}"
        );
        assert!(!table.contains("tick"), "{table}");

        // Against a file, no state is read.
        let before = Utc::now();
        let out = env
            .cronq()
            .args(["plan", "--config", &new, "--against", &same, "--json"])
            .output()
            .unwrap();
        assert_daily_moved(&out, before);
        file.stop(&s);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_against_a_fleet_compares_with_its_recorded_and_runtime_jobs() {
    scoped("plan-fleet", |env: TestEnv| async move {
        let new = env.write_config(
            "new.toml",
            &format!(
                "{}\n{}",
                crate::support::producer_process::LEADER,
                jobs(&env, "0 10 * * *")
            ),
        );
        let new = new.to_string_lossy().into_owned();
        let out = env.run(&["plan", "--config", &new]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!(
                "no config recorded in the store of namespace {:?} yet to compare with: start `cronq producer --config FILE` once (its leader records its config), or compare with a file: --against OLD.toml",
                env.namespace
            )),
            "{}",
            text(&out)
        );
        let cfg = config(&env, &jobs(&env, "0 9 * * *"));
        env.spawn("p", &["producer", "--config", &cfg]);
        start_consumer(&env, &cfg, "c1");
        eventually(WAIT, "the config to be recorded", || async {
            env.run(&["jobs"]).status.success().then_some(())
        })
        .await;
        // A runtime job is on both sides: it does not change.
        env.write_config(
            "rt.toml",
            "[[job]]\nname = \"rt\"\nschedule = \"0 * * * *\"\nhandler = \"h\"\n",
        );
        let out = env.run(&["job", "apply", "-f", "rt.toml", "--allow-unknown-handler"]);
        assert!(out.status.success(), "{}", text(&out));
        let out = env.run(&["plan", "--config", &cfg, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(plan["changed"], false, "{plan}");
        assert_eq!(plan["jobs"], Value::Array(vec![]), "{plan}");

        let before = Utc::now();
        let out = env.run(&["plan", "--config", &new, "--json"]);
        assert_daily_moved(&out, before);

        // A file job of the same name shadows the runtime job: `rt` changes to it.
        let shadow = env.write_config(
            "shadow.toml",
            &format!(
                "{}\n{}{}",
                crate::support::producer_process::LEADER,
                jobs(&env, "0 9 * * *"),
                job(&env, "rt", "30 * * * *", "")
            ),
        );
        let out = env.run(&["plan", "--config", &shadow.to_string_lossy(), "--json", "--hours", "2"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        let rt = &plan["jobs"][0];
        assert_eq!(rt["job"], "rt", "{plan}");
        assert_eq!(rt["move"].as_array().unwrap().len(), 2, "{plan}");
    })
    .await;
}
