//! Runtime jobs through real processes (docs/runtime-jobs.md): `cronq job apply` while a
//! fleet (2 producers, 2 consumers on RabbitMQ and Redis) or a standalone on its data file
//! runs: the job's first run comes within seconds, an update changes its schedule from the
//! change on, a delete stops it; `get` and `history` show the revisions.

use std::time::{Duration, Instant};

use chrono::{Timelike, Utc};
use cronq_shared::jobs::CHANGE_LOG;
use nix::sys::signal::Signal;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, Running, appending_config};
use crate::support::history::scheduled_at;
use crate::support::{TestEnv, eventually, scoped};

const LEADER: &str = "[leader]\nlease = \"2s\"\nrenew_deadline = \"1500ms\"\nretry = \"300ms\"\n";

/// How long after an apply or delete returns it may take to reach the leader's planning
/// (the poll, 500 ms) plus the tick being published: the contract says 2 s.
const TAKES_EFFECT: Duration = Duration::from_secs(2);

async fn apply_update_delete(backend: Backend, test: &str) {
    scoped(test, move |env: TestEnv| async move {
        let running = Running::start_ticking(Deployment::on(backend), &env, &appending_config(&env, LEADER, "")).await;

        // Create.
        let file = env.write_config(
            "live.toml",
            "[[job]]\nname = \"live\"\nschedule = \"@every 1s\"\nhandler = \"append\"\npayload = { n = 1 }\n",
        );
        let file = file.to_string_lossy().into_owned();
        let applied = Instant::now();
        let created = Utc::now();
        let out = running.ok(&["job", "apply", "-f", &file]);
        assert_eq!(out, "created job \"live\" (revision 1)\n");
        running
            .until_succeeded("live", 1, Duration::from_secs(10), "the applied job to run")
            .await;
        let first_run = applied.elapsed();
        eprintln!("apply to first success: {} ms", first_run.as_millis());
        assert!(
            first_run <= Duration::from_secs(4),
            "first run {first_run:?} after the apply\n{}",
            running.logs()
        );
        let first = running
            .published("live")
            .iter()
            .map(|k| scheduled_at(k))
            .min()
            .expect("published");
        assert!(
            first >= created - chrono::Duration::seconds(1),
            "catch-up starts at the creation: first {first}, created {created}"
        );
        assert_eq!(running.ok(&["job", "apply", "-f", &file]), "job \"live\" unchanged (revision 1)\n");

        // Update: every third second.
        std::fs::write(
            &file,
            "[[job]]\nname = \"live\"\nschedule = \"*/3 * * * * *\"\nhandler = \"append\"\n",
        )
        .unwrap();
        let out = running.ok(&["job", "apply", "-f", &file]);
        assert_eq!(out, "updated job \"live\" (revision 2)\n");
        let updated = Utc::now();
        let effect = updated + chrono::Duration::from_std(TAKES_EFFECT).unwrap();
        eventually(Duration::from_secs(15), "two ticks of the new schedule", || async {
            let after = running
                .published("live")
                .iter()
                .filter(|k| scheduled_at(k) > effect)
                .count();
            (after >= 2).then_some(())
        })
        .await;
        let off: Vec<String> = running
            .published("live")
            .into_iter()
            .filter(|k| scheduled_at(k) > effect && !scheduled_at(k).second().is_multiple_of(3))
            .collect();
        assert!(off.is_empty(), "old schedule after the update: {off:?}\n{}", running.logs());

        let got = running.ok(&["job", "get", "live", "--json"]);
        let got: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(got["revision"], 2, "{got}");
        assert!(got["spec"].as_str().unwrap().contains("*/3 * * * * *"), "{got}");

        // Delete.
        let out = running.ok(&["job", "delete", "live"]);
        assert!(out.starts_with("deleted job \"live\" (revision 3)"), "{out}");
        let deleted = Utc::now() + chrono::Duration::from_std(TAKES_EFFECT).unwrap();
        running
            .until_succeeded("tick", 4, Duration::from_secs(20), "tick to go on")
            .await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let late = running.published_after("live", deleted);
        assert!(late.is_empty(), "published after the delete: {late:?}\n{}", running.logs());

        let history = running.ok(&["job", "history", "live"]);
        let heads: Vec<&str> = history
            .lines()
            .filter(|l| l.starts_with("revision"))
            .map(|l| l.split(" by ").next().unwrap())
            .collect();
        assert_eq!(
            heads,
            ["revision 1 created", "revision 2 updated", "revision 3 deleted"],
            "{history}"
        );
        assert!(history.contains("+ schedule = \"*/3 * * * * *\""), "{history}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_takes_runtime_jobs_applied_updated_and_deleted() {
    apply_update_delete(Backend::Real, "rt-jobs-fleet").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_on_its_data_file_takes_runtime_jobs() {
    apply_update_delete(Backend::Sqlite, "rt-jobs-data").await;
}

/// A deleted job's occurrences already queued (waiting behind a running one, overlap
/// `queue`) end `cancelled` with "job deleted": never run, never dead-lettered.
async fn queued_occurrences_of_a_deleted_job_are_cancelled(backend: Backend, test: &str) {
    scoped(test, move |env: TestEnv| async move {
        let toml = format!(
            "{}\n[handlers.slow]\ncommand = [\"/bin/sh\", \"-c\", \"sleep 2\"]\n",
            appending_config(&env, LEADER, "")
        );
        let running = Running::start_ticking(Deployment::on(backend), &env, &toml).await;
        let file = env.write_config(
            "slow.toml",
            "[[job]]\nname = \"slow\"\nschedule = \"@every 1s\"\nhandler = \"slow\"\noverlap = \"queue\"\n",
        );
        running.ok(&["job", "apply", "-f", &file.to_string_lossy()]);
        running
            .until_succeeded("slow", 1, Duration::from_secs(15), "slow to run once")
            .await;
        running.ok(&["job", "delete", "slow"]);
        let published = running.published("slow");
        eventually(
            Duration::from_secs(30),
            "every published occurrence of slow to end",
            || async {
                let entries = running.entries("slow").await;
                let ended: std::collections::BTreeSet<&str> = entries
                    .iter()
                    .filter(|e| {
                        matches!(
                            e.outcome,
                            cronq_shared::runlog::Outcome::Succeeded
                                | cronq_shared::runlog::Outcome::Cancelled
                        )
                    })
                    .map(|e| e.key.as_str())
                    .collect();
                published
                    .iter()
                    .all(|k| ended.contains(k.as_str()))
                    .then_some(())
            },
        )
        .await;
        let entries = running.entries("slow").await;
        let cancelled: Vec<_> = entries
            .iter()
            .filter(|e| e.outcome == cronq_shared::runlog::Outcome::Cancelled)
            .collect();
        assert!(
            !cancelled.is_empty(),
            "queued occurrences were cancelled: {entries:?}\n{}",
            running.logs()
        );
        for e in &cancelled {
            assert_eq!(e.error.as_deref(), Some("job deleted"), "{e:?}");
        }
        let letters = running.ok(&["dlq", "list", "--json"]);
        let letters: serde_json::Value = serde_json::from_str(&letters).unwrap();
        let slow = letters["letters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["job"] == "slow")
            .count();
        assert_eq!(slow, 0, "nothing dead-lettered: {letters}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_cancels_the_queued_occurrences_of_a_deleted_job() {
    queued_occurrences_of_a_deleted_job_are_cancelled(Backend::Real, "rt-jobs-deleted-fleet").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_cancels_the_queued_occurrences_of_a_deleted_job() {
    queued_occurrences_of_a_deleted_job_are_cancelled(Backend::Sqlite, "rt-jobs-deleted-data")
        .await;
}

/// More writes than the job store's change log keeps ([`CHANGE_LOG`]) while every process
/// of a fleet is stopped: each reads the whole list when it wakes, runs the job applied
/// meanwhile and publishes no more of the one deleted meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_that_missed_more_writes_than_the_change_log_reads_every_job() {
    scoped("rt-log-gap", |env: TestEnv| async move {
        let running =
            Running::start_ticking(Deployment::Fleet, &env, &appending_config(&env, LEADER, ""))
                .await;
        let job = |name: &str, schedule: &str| {
            format!("[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\nhandler = \"append\"\n")
        };
        let apply = |file: &str, toml: &str| {
            let file = env.write_config(file, toml);
            running.ok(&["job", "apply", "-f", &file.to_string_lossy()]);
        };
        apply("before.toml", &job("before", "@every 1s"));
        running
            .until_succeeded(
                "before",
                1,
                Duration::from_secs(10),
                "the job applied first to run",
            )
            .await;
        running.signal_all(Signal::SIGSTOP);
        // Jobs that never come due in this test, one write each, then the two that count.
        let idle: String = (0..=CHANGE_LOG)
            .map(|i| job(&format!("idle{i}"), "0 0 1 1 *"))
            .collect();
        apply("idle.toml", &idle);
        apply("after.toml", &job("after", "@every 1s"));
        running.ok(&["job", "delete", "before"]);
        let resumed = Utc::now();
        running.signal_all(Signal::SIGCONT);
        running
            .until_succeeded(
                "after",
                1,
                Duration::from_secs(30),
                "the job applied while every process was stopped to run",
            )
            .await;
        // tick, the idle jobs and `after`: every job, not only the writes the log kept.
        // Each process in its own time: `after` ran once the leader took it in, and a
        // standby may still be reading the whole list then.
        let every = 1 + CHANGE_LOG + 1 + 1;
        for name in ["producer-1", "producer-2", "consumer-1", "consumer-2"] {
            let last_count = || {
                crate::support::json_log::lines(&env.log(name))
                    .rev()
                    .find(|l| l["message"] == "jobs changed")
                    .and_then(|l| l["jobs"].as_u64())
            };
            eventually(
                Duration::from_secs(30),
                &format!("{name} to take every job in ({every} jobs)"),
                || async { (last_count() == Some(every)).then_some(()) },
            )
            .await;
            let log = env.log(name);
            assert!(
                log.contains("change log does not reach back"),
                "{name} read the whole list:\n{log}"
            );
        }
        let deleted = resumed + chrono::Duration::from_std(TAKES_EFFECT).unwrap();
        running
            .until_succeeded(
                "after",
                3,
                Duration::from_secs(20),
                "the job applied meanwhile to go on",
            )
            .await;
        let late = running.published_after("before", deleted);
        assert!(
            late.is_empty(),
            "published after the delete: {late:?}\n{}",
            running.logs()
        );
    })
    .await;
}
