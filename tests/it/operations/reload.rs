//! SIGHUP reloads every process, consumers included (docs/runtime-jobs.md): a job added to
//! the config on a queue of its own, naming a `[handlers.NAME]` the reload also adds, runs
//! once per occurrence on a fleet (2 producers, 2 consumers) and on a standalone, and is
//! never dead-lettered.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, Running, argv};
use crate::support::{TestEnv, scoped};

const LEADER: &str = "[leader]\nlease = \"2s\"\nrenew_deadline = \"1500ms\"\nretry = \"300ms\"\n";

fn job(env: &TestEnv, name: &str) -> String {
    let script = format!("echo \"$CRONQ_KEY\" >> '{}/{name}.ran'", env.dir.display());
    format!(
        "\n[[job]]\nname = \"{name}\"\nschedule = \"@every 1s\"\ncommand = {}\n",
        argv(&["/bin/sh", "-c", &script])
    )
}

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
