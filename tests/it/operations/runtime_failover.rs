//! A leader `kill -9` between a runtime job's apply and its first run loses nothing
//! (docs/runtime-jobs.md, "Effect"): 2 producers and 2 consumers on RabbitMQ + Redis; the
//! leader is killed right after `cronq job apply` returns, before or around its first
//! publish of the job; the standby takes over, and every occurrence from the job's
//! creation on runs exactly once (`catchup = "all"`: each missed one is published;
//! `overlap = "allow"`: a catch-up burst runs side by side instead of skipping).

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::deployment::{Deployment, LEADER, Running, appending_config};
use crate::support::history::{self, key_at};
use crate::support::{TestEnv, eventually, scoped};

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_killed_right_after_an_apply_loses_no_occurrence_of_the_new_job() {
    scoped("rt-jobs-kill-leader", |env: TestEnv| async move {
        let toml = appending_config(&env, LEADER, "");
        let running = Running::start(Deployment::Fleet, &env, &toml).await;
        running
            .until_succeeded("tick", 2, Duration::from_secs(20), "tick to run")
            .await;
        let (leader, pid) = running.leader().expect("a leader");
        let file = env.write_config(
            "born.toml",
            "[[job]]\nname = \"born\"\nschedule = \"@every 1s\"\nhandler = \"append\"\ncatchup = \"all\"\noverlap = \"allow\"\n",
        );
        let out = running.cli(&["job", "apply", "-f", &file.to_string_lossy()]);
        env.signal(pid, Signal::SIGKILL);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        eprintln!(
            "killed {leader} right after the apply; it had published {} of born",
            history::published(&env.log(&leader), "born").len()
        );
        let got = running.cli(&["job", "get", "born", "--json"]);
        let got: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
        let created = history::scheduled(&format!("born@{}", got["at"].as_str().unwrap()));

        let standby = if leader == "producer-1" { "producer-2" } else { "producer-1" };
        eventually(Duration::from_secs(30), "the standby to publish born", || async {
            (!history::published(&env.log(standby), "born").is_empty()).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Stop publishing (the killed leader has exited already).
        let standby_pid = running.pids()[usize::from(standby == "producer-2")];
        env.signal(standby_pid, Signal::SIGTERM);
        env.wait(standby_pid, Duration::from_secs(10));
        let published = running.published("born");
        let last = published.iter().map(|k| history::scheduled(k)).max().unwrap();
        // Every tick strictly after the creation, through the last one published.
        let expected: Vec<String> = (created + 1..=last).map(|s| key_at("born", s)).collect();
        assert!(expected.len() >= 5, "{expected:?}");
        let missing: Vec<&String> = expected.iter().filter(|k| !published.contains(*k)).collect();
        assert!(missing.is_empty(), "never published: {missing:?}\n{}", running.logs());
        let early: Vec<&String> = published
            .iter()
            .filter(|k| history::scheduled(k) <= created)
            .collect();
        assert!(early.is_empty(), "published before its creation: {early:?}");
        let window = eventually(Duration::from_secs(30), "every tick to end", || async {
            let window = history::window("born", &published, 1, &running.entries("born").await);
            window.problems().is_empty().then_some(window)
        })
        .await;
        assert_eq!(window.expected, expected);
        assert!(
            window.not_exactly_once().is_empty(),
            "{:?}\n{:?}\n{}",
            window.not_exactly_once(),
            window.entries,
            running.logs()
        );
    })
    .await;
}
