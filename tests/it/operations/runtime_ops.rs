//! The operations commands on a runtime job (one `cronq job apply` created), as on a file
//! job: `next`, `pause`, `resume`, `trigger`, `backfill`, `runs` and `jobs`, on RabbitMQ +
//! Redis (2 producers, 2 consumers) and on a standalone's data file.

use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::runlog::Outcome;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, LEADER, Running, argv};
use crate::support::history;
use crate::support::{TestEnv, eventually, scoped};

fn config(env: &TestEnv) -> String {
    let script = format!(
        "echo \"$CRONQ_KEY\" >> '{}'/\"$CRONQ_JOB\".ran",
        env.dir.display()
    );
    format!(
        "{LEADER}\n[handlers.append]\ncommand = {}\n\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\nhandler = \"append\"\n",
        argv(&["/bin/sh", "-c", &script])
    )
}

fn ok(running: &Running, args: &[&str]) -> String {
    let out = running.cli(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "cronq {args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn scheduled(key: &str) -> DateTime<Utc> {
    let (_, at) = key.split_once('@').expect("JOB@TIME");
    at.parse().unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// Every publish of `job` by any producer (or the standalone), with why.
fn publishes(running: &Running, env: &TestEnv, job: &str) -> Vec<history::Published> {
    let mut logs: Vec<String> = std::fs::read_dir(&env.dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".log").map(str::to_owned))
        .filter(|n| n.starts_with("producer") || n == "standalone")
        .collect();
    logs.sort();
    let _ = running;
    logs.iter()
        .flat_map(|n| history::published_lines(&env.log(n), job))
        .collect()
}

async fn operations_on_a_runtime_job(backend: Backend, test: &str) {
    scoped(test, move |env: TestEnv| async move {
        let running = Running::start(Deployment::on(backend), &env, &config(&env)).await;
        running
            .until_succeeded("tick", 1, Duration::from_secs(20), "tick to run")
            .await;
        let file = env.write_config(
            "rt.toml",
            "[[job]]\nname = \"rt\"\nschedule = \"@every 1s\"\nhandler = \"append\"\n",
        );
        ok(&running, &["job", "apply", "-f", &file.to_string_lossy()]);
        running
            .until_succeeded("rt", 2, Duration::from_secs(10), "rt to run")
            .await;

        // next
        let next: serde_json::Value = serde_json::from_str(&ok(
            &running,
            &["next", "--job", "rt", "--count", "2", "--json"],
        ))
        .unwrap();
        assert_eq!(next["jobs"][0]["job"], "rt", "{next}");
        assert_eq!(
            next["jobs"][0]["next"].as_array().unwrap().len(),
            2,
            "{next}"
        );

        // jobs
        let jobs = ok(&running, &["jobs"]);
        assert!(jobs.lines().any(|l| l.starts_with("rt ")), "{jobs}");

        // pause: nothing published for it past the pause's effect; resume: published again.
        let out = ok(&running, &["pause", "rt", "--note", "maintenance"]);
        assert!(out.starts_with("paused job \"rt\""), "{out}");
        let paused = Utc::now() + chrono::Duration::seconds(2);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let during: Vec<String> = running
            .published("rt")
            .into_iter()
            .filter(|k| scheduled(k) > paused)
            .collect();
        assert!(
            during.is_empty(),
            "published while paused: {during:?}\n{}",
            running.logs()
        );
        let out = ok(&running, &["resume", "rt"]);
        assert!(out.starts_with("resumed job \"rt\""), "{out}");
        let resumed = Utc::now();
        eventually(
            Duration::from_secs(10),
            "rt published after the resume",
            || async {
                running
                    .published("rt")
                    .iter()
                    .any(|k| scheduled(k) > resumed)
                    .then_some(())
            },
        )
        .await;

        // trigger: its own key, which runs.
        let key = ok(&running, &["trigger", "rt"]).trim().to_owned();
        assert!(key.starts_with("rt@manual-"), "{key}");
        eventually(
            Duration::from_secs(15),
            "the triggered occurrence to run",
            || async {
                running
                    .entries("rt")
                    .await
                    .iter()
                    .any(|e| e.key == key && e.outcome == Outcome::Succeeded)
                    .then_some(())
            },
        )
        .await;

        // backfill of a second that already ran: published again, not run again.
        let done = running
            .entries("rt")
            .await
            .into_iter()
            .find(|e| e.outcome == Outcome::Succeeded && !e.key.contains("manual"))
            .expect("a scheduled success")
            .key;
        let at = done.split_once('@').unwrap().1.to_owned();
        let out = ok(&running, &["backfill", "rt", "--from", &at, "--to", &at]);
        assert!(out.starts_with("requested backfill"), "{out}");
        eventually(
            Duration::from_secs(15),
            "the backfill to be published",
            || async {
                publishes(&running, &env, "rt")
                    .iter()
                    .any(|p| p.key == done && p.trigger == "Backfill")
                    .then_some(())
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let runs_of = running
            .entries("rt")
            .await
            .iter()
            .filter(|e| e.key == done && e.outcome == Outcome::Succeeded)
            .count();
        assert_eq!(runs_of, 1, "a backfilled success does not run again");

        // runs
        let runs: serde_json::Value =
            serde_json::from_str(&ok(&running, &["runs", "--job", "rt", "--json"])).unwrap();
        let listed = runs["runs"].as_array().unwrap();
        assert!(
            !listed.is_empty() && listed.iter().all(|r| r["job"] == "rt"),
            "{runs}"
        );

        // After a delete its history stays readable.
        ok(&running, &["job", "delete", "rt"]);
        ok(&running, &["runs", "--job", "rt"]);
        let out = running.cli(&["pause", "rt"]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "pausing a deleted job is a usage error"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_runs_the_operations_commands_on_a_runtime_job() {
    operations_on_a_runtime_job(Backend::Real, "rt-ops-fleet").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_runs_the_operations_commands_on_a_runtime_job() {
    operations_on_a_runtime_job(Backend::Sqlite, "rt-ops-data").await;
}
