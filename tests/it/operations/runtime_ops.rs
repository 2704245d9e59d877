//! The operations commands on a runtime job (one `cronq job apply` created), as on a file
//! job: `next`, `pause`, `resume`, `trigger`, `backfill`, `runs` and `jobs`, on RabbitMQ +
//! Redis (2 producers, 2 consumers) and on a standalone's data file.

use std::time::Duration;

use chrono::Utc;
use cronq_shared::runlog::Outcome;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, LEADER, Running, appending_config};
use crate::support::history::{self, scheduled_at};
use crate::support::{TestEnv, eventually, scoped};

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
        let running = Running::start_ticking(
            Deployment::on(backend),
            &env,
            &appending_config(&env, LEADER, ""),
        )
        .await;
        let file = env.write_config(
            "rt.toml",
            "[[job]]\nname = \"rt\"\nschedule = \"@every 1s\"\nhandler = \"append\"\n",
        );
        running.ok(&["job", "apply", "-f", &file.to_string_lossy()]);
        running
            .until_succeeded("rt", 2, Duration::from_secs(10), "rt to run")
            .await;

        // next
        let next: serde_json::Value =
            serde_json::from_str(&running.ok(&["next", "--job", "rt", "--count", "2", "--json"]))
                .unwrap();
        assert_eq!(next["jobs"][0]["job"], "rt", "{next}");
        assert_eq!(
            next["jobs"][0]["next"].as_array().unwrap().len(),
            2,
            "{next}"
        );

        // jobs
        let jobs = running.ok(&["jobs"]);
        assert!(jobs.lines().any(|l| l.starts_with("rt ")), "{jobs}");

        // pause: nothing published for it past the pause's effect; resume: published again.
        let out = running.ok(&["pause", "rt", "--note", "maintenance"]);
        assert!(out.starts_with("paused job \"rt\""), "{out}");
        let paused = Utc::now() + chrono::Duration::seconds(2);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let during = running.published_after("rt", paused);
        assert!(
            during.is_empty(),
            "published while paused: {during:?}\n{}",
            running.logs()
        );
        let out = running.ok(&["resume", "rt"]);
        assert!(out.starts_with("resumed job \"rt\""), "{out}");
        let resumed = Utc::now();
        eventually(
            Duration::from_secs(10),
            "rt published after the resume",
            || async {
                running
                    .published("rt")
                    .iter()
                    .any(|k| scheduled_at(k) > resumed)
                    .then_some(())
            },
        )
        .await;

        // trigger: its own key, which runs.
        let key = running.ok(&["trigger", "rt"]).trim().to_owned();
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
        let out = running.ok(&["backfill", "rt", "--from", &at, "--to", &at]);
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
            serde_json::from_str(&running.ok(&["runs", "--job", "rt", "--json"])).unwrap();
        let listed = runs["runs"].as_array().unwrap();
        assert!(
            !listed.is_empty() && listed.iter().all(|r| r["job"] == "rt"),
            "{runs}"
        );

        // After a delete its history stays readable.
        running.ok(&["job", "delete", "rt"]);
        running.ok(&["runs", "--job", "rt"]);
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
