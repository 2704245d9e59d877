//! SIGHUP reloads every process, consumers included (docs/runtime-jobs.md): a job added to
//! the config on a queue of its own, naming a `[handlers.NAME]` the reload also adds, runs
//! once per occurrence on a fleet (2 producers, 2 consumers) and on a standalone, and is
//! never dead-lettered. A reload that moves jobs to other places in the config keeps each
//! job at its own schedule, without a gap or a second run.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, Running, argv};
use crate::support::{TestEnv, scoped};

const LEADER: &str = "[leader]\nlease = \"2s\"\nrenew_deadline = \"1500ms\"\nretry = \"300ms\"\n";

fn job(env: &TestEnv, name: &str) -> String {
    on(env, name, "@every 1s")
}

/// `name` on `schedule`, appending each run's key to `NAME.ran`.
fn on(env: &TestEnv, name: &str, schedule: &str) -> String {
    let script = format!("echo \"$CRONQ_KEY\" >> '{}/{name}.ran'", env.dir.display());
    format!(
        "\n[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\ncommand = {}\n",
        argv(&["/bin/sh", "-c", &script])
    )
}

/// Jobs named `idle-N` that never fire (the 29th of February at midnight, next in years).
fn idle(range: std::ops::Range<usize>) -> String {
    range
        .map(|i| {
            format!(
                "\n[[job]]\nname = \"idle-{i}\"\nschedule = \"0 0 29 2 *\"\ncommand = {}\n",
                argv(&["/bin/true"])
            )
        })
        .collect()
}

/// Every odd second, and every even one: a job's timer given to a job of the other
/// schedule fires it off its own.
const ODD: &str = "1-59/2 * * * * *";
const EVEN: &str = "0-58/2 * * * * *";

async fn added_on_sighup(backend: Backend, test: &str) {
    scoped(test, move |env: TestEnv| async move {
        env.track_queue("live");
        let before = [LEADER.to_owned(), job(&env, "tick")].concat();
        let kind = Deployment::on(backend);
        let running = Running::start(kind, &env, &before).await;
        running
            .until_succeeded("tick", 1, Duration::from_secs(20), "tick to run")
            .await;

        let script = format!(
            "echo \"$CRONQ_KEY\" >> '{}'/\"$CRONQ_JOB\".ran",
            env.dir.display()
        );
        let after = format!(
            "{before}\n[handlers.append]\ncommand = {}\n\n[[job]]\nname = \"added-live\"\nschedule = \"@every 1s\"\nqueue = \"live\"\nhandler = \"append\"\n",
            argv(&["/bin/sh", "-c", &script])
        );
        std::fs::write(running.config_path(), after).unwrap();
        running.signal_all(Signal::SIGHUP);
        running
            .until_succeeded(
                "added-live",
                3,
                Duration::from_secs(20),
                "the added job to run through its named handler",
            )
            .await;
        let entries = running.entries("added-live").await;
        let bad: Vec<_> = entries
            .iter()
            .filter(|e| e.outcome != cronq_shared::runlog::Outcome::Succeeded)
            .collect();
        assert!(bad.is_empty(), "{bad:?}\n{}", running.logs());
        let ran = std::fs::read_to_string(env.dir.join("added-live.ran")).unwrap_or_default();
        assert!(ran.lines().count() >= 3, "{ran}\n{}", running.logs());
        let mut keys: Vec<&str> = ran.lines().collect();
        let all = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), all, "an occurrence ran twice: {ran}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_runs_a_job_added_on_sighup_on_a_new_queue() {
    added_on_sighup(Backend::Real, "reload-fleet-added").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_in_memory_runs_a_job_added_on_sighup() {
    added_on_sighup(Backend::Memory, "reload-memory-added").await;
}

/// The scheduled instants of `job`'s runs (from its `.ran` file), each checked to be there
/// once.
fn ran_once_each(env: &TestEnv, job: &str) -> Vec<chrono::DateTime<chrono::Utc>> {
    let ran = std::fs::read_to_string(env.dir.join(format!("{job}.ran"))).unwrap_or_default();
    let mut at: Vec<_> = ran
        .lines()
        .map(|key| {
            key.parse::<cronq_shared::key::OccurrenceKey>()
                .ok()
                .and_then(|k| k.scheduled_at())
                .unwrap_or_else(|| panic!("{key}: a scheduled key"))
        })
        .collect();
    let all = at.len();
    at.sort_unstable();
    at.dedup();
    assert_eq!(at.len(), all, "an occurrence of {job} ran twice: {ran}");
    at
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_reload_that_moves_jobs_keeps_each_at_its_own_schedule() {
    scoped("reload-fleet-moved", |env: TestEnv| async move {
        // After the reload `a` and `b` are one place further down (a job added first,
        // `gone` removed between them and `c`), next to jobs of the other schedule. Jobs
        // that never fire around them make the config larger than `Config::job` scans, so
        // each process finds the jobs of each config by its index.
        let before = [
            LEADER.to_owned(),
            idle(0..20),
            on(&env, "a", EVEN),
            on(&env, "b", ODD),
            on(&env, "gone", EVEN),
            on(&env, "c", EVEN),
            idle(20..40),
        ]
        .concat();
        let running = Running::start(Deployment::on(Backend::Real), &env, &before).await;
        running
            .until_succeeded("b", 2, Duration::from_secs(20), "b to run")
            .await;
        let after = [
            LEADER.to_owned(),
            on(&env, "inserted", ODD),
            idle(0..20),
            on(&env, "a", EVEN),
            on(&env, "b", ODD),
            on(&env, "c", EVEN),
            idle(20..40),
        ]
        .concat();
        std::fs::write(running.config_path(), after).unwrap();
        let reloaded = chrono::Utc::now();
        running.signal_all(Signal::SIGHUP);
        let settled = reloaded + chrono::TimeDelta::seconds(3);
        running
            .until_succeeded(
                "inserted",
                3,
                Duration::from_secs(20),
                "the added job to run",
            )
            .await;
        // A manual trigger of a job behind the moved ones: the leader finds it by name in
        // the reloaded config (its index), and it runs once.
        let key = running.ok(&["trigger", "idle-35"]).trim().to_owned();
        running
            .until_succeeded(
                "idle-35",
                1,
                Duration::from_secs(20),
                "the triggered job to run",
            )
            .await;
        let logs = running.logs();
        let triggered: Vec<String> = running
            .entries("idle-35")
            .await
            .into_iter()
            .map(|e| e.key.to_string())
            .collect();
        assert_eq!(triggered, [key], "the trigger ran once\n{logs}");
        for job in ["a", "b", "c", "inserted"] {
            let bad: Vec<_> = running
                .entries(job)
                .await
                .into_iter()
                .filter(|e| e.outcome != cronq_shared::runlog::Outcome::Succeeded)
                .collect();
            assert!(bad.is_empty(), "{job}: {bad:?}\n{logs}");
        }
        for (job, odd) in [("inserted", true), ("a", false), ("b", true), ("c", false)] {
            let at = ran_once_each(&env, job);
            assert!(
                at.iter().all(|at| (at.timestamp() % 2 == 1) == odd),
                "{job} ran off its schedule: {at:?}\n{logs}"
            );
            if job != "inserted" {
                // Kept through the reload: every occurrence, no gap.
                assert!(
                    at.windows(2).all(|w| (w[1] - w[0]).num_seconds() == 2),
                    "{job} has a gap across the reload: {at:?}\n{logs}"
                );
                assert!(
                    at.first() < Some(&reloaded) && at.last() > Some(&settled),
                    "{job}'s runs span the reload: {at:?}"
                );
            }
        }
        let gone = ran_once_each(&env, "gone");
        assert!(
            gone.iter().all(|at| *at < settled),
            "the removed job ran after the reload: {gone:?}\n{logs}"
        );
    })
    .await;
}
