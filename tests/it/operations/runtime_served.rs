//! Which jobs a live consumer serves (docs/runtime-jobs.md, "Unserved jobs"), through real
//! processes on RabbitMQ + Redis (2 producers, 2 consumers) and on a standalone's data
//! file: a runtime job naming a handler no consumer offers is refused unless
//! `--allow-unknown-handler`; once applied it is shown unserved by `cronq jobs`, warned
//! about once in the leader's log and flagged on `/metrics`; a consumer's SIGHUP that adds
//! the handler serves it again. And an occurrence of a runtime job deleted before a
//! consumer started ends `cancelled` ("job deleted"), never dead-lettered as unknown.

use std::collections::BTreeSet;
use std::time::Duration;

use cronq_shared::runlog::Outcome;
use nix::sys::signal::Signal;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, LEADER, Options, Running, appending_config};
use crate::support::{TestEnv, eventually, scoped};

fn cli(running: &Running, args: &[&str]) -> (bool, String, String) {
    let out = running.cli(args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cronq jobs --json`'s `served` and `unserved_reason` of `job`.
fn served(running: &Running, job: &str) -> (String, String) {
    let doc: serde_json::Value = serde_json::from_str(&running.ok(&["jobs", "--json"])).unwrap();
    let row = doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == job)
        .unwrap_or_else(|| panic!("{job} in cronq jobs: {doc}"))
        .clone();
    (
        row["served"].as_str().unwrap_or("null").to_owned(),
        row["unserved_reason"].as_str().unwrap_or("").to_owned(),
    )
}

/// The log of the producer that leads (or the standalone).
fn leader_log(running: &Running, env: &TestEnv) -> String {
    match running.leader() {
        Some((name, _)) => env.log(&name),
        None => env.log("standalone"),
    }
}

fn gauge(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

async fn unserved_until_a_consumer_offers_it(backend: Backend, test: &str) {
    scoped(test, move |env: TestEnv| async move {
        let running = Running::start_ticking(
            Deployment::on(backend),
            &env,
            &appending_config(&env, LEADER, ""),
        )
        .await;
        let file = env.write_config(
            "ghost.toml",
            "[[job]]\nname = \"ghost\"\nschedule = \"@every 1s\"\nhandler = \"ghost\"\n",
        );
        let file = file.to_string_lossy().into_owned();

        // Refused: no live consumer offers "ghost".
        let (success, _, stderr) = cli(&running, &["job", "apply", "-f", &file]);
        assert!(!success, "applied a job no consumer serves: {stderr}");
        assert!(
            stderr.contains("served by no live consumer")
                && stderr.contains("offers handler \"ghost\"")
                && stderr.contains("--allow-unknown-handler"),
            "{stderr}"
        );
        let out = running.ok(&["job", "apply", "-f", &file, "--allow-unknown-handler"]);
        assert_eq!(out, "created job \"ghost\" (revision 1)\n");

        // Shown as such.
        eventually(
            Duration::from_secs(10),
            "cronq jobs to show ghost unserved",
            || async {
                let (state, why) = served(&running, "ghost");
                (state == "unserved").then_some(why)
            },
        )
        .await;
        let (state, why) = served(&running, "ghost");
        assert!(why.contains("offers handler \"ghost\""), "{state}: {why}");
        assert_eq!(served(&running, "tick").0, "served");
        let table = running.ok(&["jobs"]);
        assert!(
            table.lines().next().unwrap().contains(" SERVED "),
            "{table}"
        );
        let ghost = table.lines().find(|l| l.starts_with("ghost")).unwrap();
        assert!(ghost.contains("NO: no consumer of queue"), "{table}");

        // Warned about once by the leader, however many checks pass.
        let warned = |log: &str| {
            log.lines()
                .filter(|l| l.contains("job unserved") && l.contains("\"job\":\"ghost\""))
                .count()
        };
        eventually(Duration::from_secs(15), "the leader to warn", || async {
            (warned(&leader_log(&running, &env)) >= 1).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            warned(&leader_log(&running, &env)),
            1,
            "one warning\n{}",
            running.logs()
        );
        if let Some(metrics) = running.metrics().await {
            assert_eq!(
                gauge(&metrics, "cronq_job_unserved{job=\"ghost\"}"),
                Some(1.0),
                "{metrics}"
            );
            assert_eq!(
                gauge(&metrics, "cronq_jobs_unserved"),
                Some(1.0),
                "{metrics}"
            );
        }

        // The consumers define it and reload: served again, and it runs.
        std::fs::write(
            running.config_path(),
            appending_config(
                &env,
                LEADER,
                "\n[handlers.ghost]\ncommand = [\"/bin/true\"]\n",
            ),
        )
        .unwrap();
        let reloaded: Vec<u32> = match running.consumers() {
            [] => running.pids(),
            consumers => consumers.to_vec(),
        };
        for pid in reloaded {
            env.signal(pid, Signal::SIGHUP);
        }
        eventually(Duration::from_secs(15), "ghost to be served", || async {
            (served(&running, "ghost").0 == "served").then_some(())
        })
        .await;
        running
            .until_succeeded("ghost", 1, Duration::from_secs(15), "ghost to run")
            .await;
        eventually(
            Duration::from_secs(15),
            "the leader to say it is served again",
            || async {
                leader_log(&running, &env)
                    .lines()
                    .any(|l| l.contains("job served again") && l.contains("\"job\":\"ghost\""))
                    .then_some(())
            },
        )
        .await;
        if let Some(metrics) = running.metrics().await {
            assert_eq!(
                gauge(&metrics, "cronq_job_unserved{job=\"ghost\"}"),
                Some(0.0),
                "{metrics}"
            );
            assert_eq!(
                gauge(&metrics, "cronq_jobs_unserved"),
                Some(0.0),
                "{metrics}"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_shows_a_runtime_job_no_consumer_serves() {
    unserved_until_a_consumer_offers_it(Backend::Real, "served-fleet").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_shows_a_runtime_job_its_consumer_half_does_not_serve() {
    unserved_until_a_consumer_offers_it(Backend::Sqlite, "served-data").await;
}

/// Dead letters of `job` in `cronq dlq list --json`.
fn letters_of(running: &Running, job: &str) -> usize {
    let letters: serde_json::Value =
        serde_json::from_str(&running.ok(&["dlq", "list", "--json"])).unwrap();
    letters["letters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["job"] == job)
        .count()
}

/// Waits until every key of `published` has a terminal entry, then checks each one ended
/// `cancelled` with "job deleted", none ran, and none is in the dead-letter queue.
async fn all_cancelled_as_deleted(running: &Running, job: &str, published: &BTreeSet<String>) {
    assert!(
        !published.is_empty(),
        "something was published\n{}",
        running.logs()
    );
    eventually(
        Duration::from_secs(30),
        "every queued occurrence to end",
        || async {
            let entries = running.entries(job).await;
            let ended: BTreeSet<&str> = entries
                .iter()
                .filter(|e| e.is_terminal())
                .map(|e| e.key.as_str())
                .collect();
            published
                .iter()
                .all(|k| ended.contains(k.as_str()))
                .then_some(())
        },
    )
    .await;
    let entries = running.entries(job).await;
    for key in published {
        let of: Vec<_> = entries.iter().filter(|e| &e.key == key).collect();
        assert!(
            of.iter()
                .all(|e| e.outcome == Outcome::Cancelled
                    && e.error.as_deref() == Some("job deleted")),
            "{key}: {of:?}\n{}",
            running.logs()
        );
    }
    assert_eq!(letters_of(running, job), 0, "nothing dead-lettered");
}

/// A fleet without consumers: the applied job's occurrences queue up; it is deleted; a
/// consumer that starts then has never seen it.
#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_started_after_a_delete_cancels_the_queued_occurrences() {
    scoped("served-deleted-fleet", |env: TestEnv| async move {
        let options = Options {
            consumers: 0,
            ..Options::default()
        };
        let running = Running::start_with(
            Deployment::Fleet,
            &env,
            &appending_config(&env, LEADER, ""),
            options,
        )
        .await;
        eventually(Duration::from_secs(20), "a leader", || async {
            running.leader().map(|_| ())
        })
        .await;
        let file = env.write_config(
            "gone.toml",
            "[[job]]\nname = \"gone\"\nschedule = \"@every 1s\"\nhandler = \"append\"\n",
        );
        running.ok(&["job", "apply", "-f", &file.to_string_lossy()]);
        eventually(
            Duration::from_secs(15),
            "three occurrences queued",
            || async { (running.published("gone").len() >= 3).then_some(()) },
        )
        .await;
        eventually(
            Duration::from_secs(10),
            "cronq jobs to say no consumer",
            || async { (served(&running, "gone").0 == "no consumer").then_some(()) },
        )
        .await;
        running.ok(&["job", "delete", "gone"]);
        // Past the delete's effect: nothing more is published for it.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let published = running.published("gone");
        let config = running.config_path().to_string_lossy().into_owned();
        env.spawn(
            "consumer-late",
            &[
                "--log-format",
                "json",
                "--config",
                &config,
                "consumer",
                "--consumer-id",
                "late",
            ],
        );
        all_cancelled_as_deleted(&running, "gone", &published).await;
        assert_eq!(
            running.published("gone"),
            published,
            "nothing published after the delete"
        );
    })
    .await;
}

/// A standalone on its data file: occurrences wait behind a slow one (overlap `queue`), the
/// standalone stops, the job is deleted meanwhile, and the standalone that starts again
/// has never seen it.
#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_restarted_after_a_delete_cancels_the_queued_occurrences() {
    scoped("served-deleted-data", |env: TestEnv| async move {
        let toml = appending_config(&env, LEADER, "\n[handlers.slow]\ncommand = [\"/bin/sh\", \"-c\", \"sleep 3\"]\n");
        let running = Running::start_ticking(Deployment::on(Backend::Sqlite), &env, &toml).await;
        let file = env.write_config(
            "slow.toml",
            "[[job]]\nname = \"slow\"\nschedule = \"@every 1s\"\nhandler = \"slow\"\noverlap = \"queue\"\n",
        );
        running.ok(&["job", "apply", "-f", &file.to_string_lossy()]);
        running
            .until_succeeded("slow", 1, Duration::from_secs(15), "slow to run once")
            .await;
        let [pid] = running.pids()[..] else {
            panic!("one standalone")
        };
        env.signal(pid, Signal::SIGTERM);
        assert!(env.wait(pid, Duration::from_secs(40)).is_some(), "the standalone to stop");
        running.ok(&["job", "delete", "slow"]);
        let succeeded: BTreeSet<String> = running
            .entries("slow")
            .await
            .into_iter()
            .filter(|e| e.outcome == Outcome::Succeeded)
            .map(|e| e.key)
            .collect();
        let waiting: BTreeSet<String> = running
            .published("slow")
            .into_iter()
            .filter(|k| !succeeded.contains(k))
            .collect();
        let config = running.config_path().to_string_lossy().into_owned();
        let data = crate::support::ports::data_file(&env);
        env.spawn(
            "standalone-again",
            &[
                "--log-format",
                "json",
                "--config",
                &config,
                "standalone",
                "--data",
                &data.to_string_lossy(),
            ],
        );
        all_cancelled_as_deleted(&running, "slow", &waiting).await;
    })
    .await;
}

/// The dashboard's jobs page and `GET /api/v1/jobs` on a standalone's data file: a file
/// job naming a handler nobody defines is unserved, with why; the others are served.
#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_which_jobs_are_unserved() {
    scoped("served-dashboard", |env: TestEnv| async move {
        let toml = format!(
            "{}\n[[job]]\nname = \"orphan\"\nschedule = \"@every 1s\"\nhandler = \"nobody\"\n",
            appending_config(&env, LEADER, "")
        );
        let running = Running::start_ticking(Deployment::on(Backend::Sqlite), &env, &toml).await;
        let cfg = running.config_path().to_string_lossy().into_owned();
        let data = crate::support::ports::data_file(&env);
        let d = crate::support::dashboard::start(
            &env,
            "dashboard",
            &[
                "dashboard",
                "--config",
                &cfg,
                "--data",
                &data.to_string_lossy(),
            ],
            "--addr",
            false,
        )
        .await;
        let jobs = eventually(
            Duration::from_secs(15),
            "the API to say who is served",
            || async {
                let v = d.json("/api/v1/jobs").await;
                let state = |job: &str| {
                    v["jobs"]
                        .as_array()?
                        .iter()
                        .find(|j| j["job"] == job)
                        .map(|j| j["served"].clone())
                };
                (state("orphan")? == "unserved" && state("tick")? == "served").then_some(v)
            },
        )
        .await;
        let orphan = jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job"] == "orphan")
            .unwrap();
        assert_eq!(
            orphan["unserved_reason"], "no consumer of queue \"default\" offers handler \"nobody\"",
            "{jobs}"
        );
        let html = crate::support::dashboard::text(&d.url("/jobs")).await;
        assert!(html.contains("<th>served</th>"), "{html}");
        assert!(html.contains("class=\"badge unserved\""), "{html}");
        assert!(
            html.contains("offers handler &quot;nobody&quot;"),
            "the reason beside the badge:\n{html}"
        );
    })
    .await;
}
