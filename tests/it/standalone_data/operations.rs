//! The operations commands on the data file of a running standalone (`--data`): a pause
//! stops publishing within about a second and a resume restarts it without catching up;
//! a trigger runs once under its own key, a backfill runs each time of its range once and
//! reruns none, a replay runs a dead-lettered occurrence again once it can succeed.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;
use cronq_shared::runlog::Outcome;

use crate::support::data_file::{DataFile, LEADER, WAIT, job, job_running, keys, ran, seconds};
use crate::support::history;
use crate::support::{TestEnv, scoped, until};

/// How long after the command returns a pause or resume may take to reach the leader's
/// planning (the contract says about a second; one more for the tick being published).
const TAKES_EFFECT: i64 = 2;

#[tokio::test(flavor = "multi_thread")]
async fn pause_and_resume_take_effect_in_a_running_standalone() {
    scoped("sd-ops-pause", |env: TestEnv| async move {
        let toml = [
            LEADER.to_owned(),
            job(&env, "tick", "@every 1s", ""),
            job(&env, "tock", "@every 1s", ""),
        ]
        .concat();
        let file = DataFile::new(&env, &toml);
        let s = file.start("standalone", &["--lease", "2s"]);
        file.leading(&s).await;
        file.advance("tick", 2).await;

        let out = file.ok(&["pause", "tick", "--note", "maintenance"]);
        assert!(out.contains("paused job \"tick\""), "{out}");
        let paused = Utc::now().timestamp();
        until(WAIT, "tock to go on 4 s past the pause", || async {
            let tock = seconds(&file.published("tock"));
            if tock.last().is_some_and(|s| *s >= paused + 4) {
                Ok(())
            } else {
                Err(file.logs())
            }
        })
        .await;
        let tick = seconds(&file.published("tick"));
        let late: Vec<i64> = tick
            .iter()
            .copied()
            .filter(|s| *s > paused + TAKES_EFFECT)
            .collect();
        assert!(
            late.is_empty(),
            "tick published {late:?} after the pause at {paused}{}",
            file.logs()
        );
        let jobs = file.json(&["jobs", "--json"]);
        assert_eq!(jobs["jobs"][0]["paused"]["note"], "maintenance", "{jobs}");

        let out = file.ok(&["resume", "tick"]);
        assert!(out.contains("resumed job \"tick\""), "{out}");
        let resumed = Utc::now().timestamp();
        let after = until(
            Duration::from_secs(10),
            "tick to be published again",
            || async {
                let tick = seconds(&file.published("tick"));
                match tick.iter().find(|s| **s > paused + TAKES_EFFECT) {
                    Some(first) => Ok(*first),
                    None => Err(file.logs()),
                }
            },
        )
        .await;
        assert!(
            after >= resumed - 1 && after <= resumed + TAKES_EFFECT,
            "tick resumed at {after}, the resume was at {resumed}: no catch-up, and within about a second{}",
            file.logs()
        );
        file.advance("tick", 2).await;
        file.once_each("tick", &keys(&file.published("tick")))
            .await;
        file.once_each("tock", &keys(&file.published("tock")))
            .await;
        file.stop(&s);
        file.assert_intact().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn trigger_backfill_and_replay_in_a_running_standalone() {
    scoped("sd-ops-requests", |env: TestEnv| async move {
        let fixed = env.dir.join("fixed");
        let toml = [
            LEADER.to_owned(),
            job(&env, "manual", "0 0 1 1 *", "overlap = \"allow\""),
            job_running(
                "flaky",
                "0 0 1 1 *",
                "max_attempts = 1",
                &format!(
                    "test -e '{}' || {{ echo not fixed >&2; exit 3; }}",
                    fixed.display()
                ),
            ),
        ]
        .concat();
        let file = DataFile::new(&env, &toml);
        let s = file.start("standalone", &["--lease", "2s"]);
        file.leading(&s).await;

        // trigger: two in a row, each under its own key, each run once.
        let k1 = file.ok(&["trigger", "manual"]).trim().to_owned();
        let k2 = file
            .ok(&["trigger", "manual", "--payload", "{\"i\": 2}"])
            .trim()
            .to_owned();
        for k in [&k1, &k2] {
            assert!(k.starts_with("manual@manual-"), "{k}");
        }
        assert_ne!(k1, k2);
        file.once_each("manual", &[k1.clone(), k2.clone()]).await;

        // backfill: each time of the range once; a second backfill of it reruns nothing.
        let range = [
            "--from",
            "2020-01-01T00:00:00Z",
            "--to",
            "2022-01-01T00:00:00Z",
        ];
        file.ok(&[&["backfill", "manual"][..], &range[..]].concat());
        let backfilled: Vec<String> = ["2020", "2021", "2022"]
            .iter()
            .map(|y| format!("manual@{y}-01-01T00:00:00Z"))
            .collect();
        let mut expected = vec![k1.clone(), k2.clone()];
        expected.extend(backfilled.iter().cloned());
        file.once_each("manual", &expected).await;
        file.ok(&[&["backfill", "manual"][..], &range[..]].concat());
        until(
            WAIT,
            "the second backfill to be acked as duplicates",
            || async {
                let log = env.log(&s.log);
                let acked: BTreeSet<&String> = backfilled
                    .iter()
                    .filter(|k| {
                        log.lines().any(|l| {
                            l.contains("duplicate delivery acked without running")
                                && l.contains(&format!("\"key\":\"{k}\""))
                        })
                    })
                    .collect();
                if acked.len() == backfilled.len() {
                    Ok(())
                } else {
                    Err(format!("acked {acked:?}{}", file.logs()))
                }
            },
        )
        .await;
        let runs = file.once_each("manual", &expected).await;
        let c = ran(&env, "manual");
        for k in &expected {
            assert_eq!(
                c.iter().filter(|r| *r == k).count(),
                1,
                "{k} ran {c:?}\nruns:\n{}",
                history::render_runs(&runs)
            );
        }

        // dlq replay: a dead-lettered occurrence, once it can succeed, runs and succeeds.
        let kf = file.ok(&["trigger", "flaky"]).trim().to_owned();
        until(
            WAIT,
            "the failed trigger in the dead-letter queue",
            || async {
                let list = file.json(&["dlq", "list", "--json"]);
                if list["count"] == 1 && list["letters"][0]["key"] == kf.as_str() {
                    Ok(())
                } else {
                    Err(format!("{list}{}", file.logs()))
                }
            },
        )
        .await;
        std::fs::write(&fixed, "").unwrap();
        let out = file.ok(&["dlq", "replay", "--job", "flaky"]);
        assert!(out.contains("replayed 1 of 1"), "{out}");
        let runs = file.once_each("flaky", std::slice::from_ref(&kf)).await;
        let outcomes: Vec<Outcome> = runs.iter().rev().map(|r| r.outcome).collect();
        assert_eq!(
            outcomes,
            [Outcome::Failed, Outcome::Succeeded],
            "runs:\n{}",
            history::render_runs(&runs)
        );
        let list = file.json(&["dlq", "list", "--json"]);
        assert_eq!(list["count"], 0, "{list}");
        file.stop(&s);
        file.assert_intact().await;
    })
    .await;
}
