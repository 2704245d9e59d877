//! The dashboard shows the config its target runs as it changes: a standalone's own
//! dashboard after each SIGHUP reload, and `cronq dashboard` each config its target
//! records (a standalone's data file, a fleet's leader on Redis), read every 5 s. Each
//! `cronq dashboard` here is given a copy of the first config with `--config`, which never
//! changes: what it shows after the reload comes from the record.

use nix::sys::signal::Signal;
use serde_json::Value;

use super::jobs;
use crate::support::cli;
use crate::support::dashboard::{self, Dashboard, WAIT};
use crate::support::data_file::DataFile;
use crate::support::producer_process::{LEADER, producer};
use crate::support::{TestEnv, eventually, scoped};

/// The names `GET /api/v1/jobs` lists, in name order.
async fn listed(d: &Dashboard) -> Vec<String> {
    let v = d.json("/api/v1/jobs?sort=name&per_page=100").await;
    v["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .filter_map(|j| j["job"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `d` lists exactly `names`.
async fn until_listed(d: &Dashboard, names: &[&str], who: &str) -> Vec<String> {
    eventually(WAIT, &format!("{who} listing {names:?}"), || async {
        let now = listed(d).await;
        (now == names).then_some(now)
    })
    .await
}

/// The first config's jobs without `broken`, and `nightly`, new.
fn second(env: &TestEnv) -> String {
    format!(
        "{LEADER}\n{}{}",
        cli::job(env, "report", "30 2 * * *", "timezone = \"Europe/Berlin\""),
        cli::job(env, "nightly", "15 3 * * *", "")
    )
}

/// After the reload both dashboards list the new jobs, and the new job's page has its
/// schedule.
async fn shows_the_second(inside: &Dashboard, outside: &Dashboard, outside_is: &str) {
    until_listed(
        inside,
        &["nightly", "report"],
        "the reloaded process's dashboard",
    )
    .await;
    until_listed(outside, &["nightly", "report"], outside_is).await;
    for d in [inside, outside] {
        let v: Value = d.json("/api/v1/jobs/nightly").await;
        assert_eq!(v["config"]["schedule"], "15 3 * * *", "{v}");
    }
}

#[tokio::test]
async fn a_standalone_s_dashboards_follow_its_reloads() {
    scoped("dash-follow-data", |env| async move {
        let first = format!("{LEADER}\n{}", jobs(&env));
        let file = DataFile::new(&env, &first);
        let copy = env.write_config("first.toml", &first);
        let (copy, data) = (copy.to_string_lossy().into_owned(), file.arg());
        let inside = dashboard::standalone(&file, &[], false).await;
        let outside = dashboard::start(
            &env,
            "dashboard",
            &["dashboard", "--config", &copy, "--data", &data],
            "--addr",
            false,
        )
        .await;
        until_listed(&inside, &["broken", "report"], "the standalone's dashboard").await;
        until_listed(&outside, &["broken", "report"], "cronq dashboard --data").await;

        file.rewrite_config(&second(&env));
        env.signal(inside.pid, Signal::SIGHUP);
        shows_the_second(&inside, &outside, "cronq dashboard --data").await;
    })
    .await;
}

#[tokio::test]
async fn cronq_dashboard_follows_the_config_a_fleet_s_leader_records() {
    scoped("dash-follow-fleet", |env| async move {
        let config = cli::config(&env, &jobs(&env));
        let first = std::fs::read_to_string(&config).unwrap();
        let copy = env.write_config("first.toml", &first);
        let copy = copy.to_string_lossy().into_owned();
        let leader = producer(&env, "producer", &config);
        // The standalone's own dashboard stands for a process that reloads; on a fleet
        // the producer reloads, and a `cronq dashboard` follows what it records.
        let outside = dashboard::start(
            &env,
            "dashboard",
            &["dashboard", "--config", &copy],
            "--addr",
            false,
        )
        .await;
        until_listed(&outside, &["broken", "report"], "cronq dashboard").await;

        std::fs::write(&config, second(&env)).unwrap();
        env.signal(leader, Signal::SIGHUP);
        until_listed(&outside, &["nightly", "report"], "cronq dashboard").await;
        let v: Value = outside.json("/api/v1/jobs/nightly").await;
        assert_eq!(v["config"]["schedule"], "15 3 * * *", "{v}");
    })
    .await;
}
