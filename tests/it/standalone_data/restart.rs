//! What an operator did and what ran are in the data file, not in the process: a pause,
//! the run history and the dead letters are there while the standalone is stopped (the
//! operations commands read the file) and after it started again.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::data_file::{DataFile, LEADER, WAIT, job, job_running};
use crate::support::{TestEnv, scoped, until};

/// `(key, attempt, outcome)` of every run `cronq runs --json` lists.
fn runs(file: &DataFile) -> BTreeSet<(String, u64, String)> {
    file.json(&["runs", "--json", "--limit", "1000"])["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_owned(),
                r["attempt"].as_u64().unwrap(),
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The `jobs --json` entry of `name`.
fn job_entry(file: &DataFile, name: &str) -> Value {
    let jobs = file.json(&["jobs", "--json"]);
    jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in cronq jobs: {jobs}"))
}

/// The keys `cronq dlq list --json` shows.
fn dead_letters(file: &DataFile) -> Vec<Value> {
    file.json(&["dlq", "list", "--json"])["letters"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn pauses_history_and_dead_letters_survive_a_restart() {
    scoped("sd-restart", |env: TestEnv| async move {
        let toml = [
            LEADER.to_owned(),
            job(&env, "tick", "@every 1s", ""),
            job(&env, "tock", "@every 1s", ""),
            job_running(
                "bad",
                "0 0 1 1 *",
                "max_attempts = 1",
                "echo broken >&2; exit 3",
            ),
        ]
        .concat();
        let file = DataFile::new(&env, &toml);
        let first = file.start("standalone-1", &["--lease", "2s"]);
        file.leading(&first).await;
        file.advance("tick", 2).await;
        let out = file.ok(&["pause", "tick", "--note", "db upgrade"]);
        assert!(out.contains("paused job \"tick\""), "{out}");
        let bad = file.ok(&["trigger", "bad"]).trim().to_owned();
        until(
            WAIT,
            "the failed trigger in the dead-letter queue",
            || async {
                let letters = dead_letters(&file);
                if letters.iter().any(|l| l["key"] == bad.as_str()) {
                    Ok(())
                } else {
                    Err(format!("{letters:?}{}", file.logs()))
                }
            },
        )
        .await;
        file.advance("tock", 2).await;
        file.stop(&first);

        // Stopped: the commands read it all from the file.
        let history = runs(&file);
        assert!(
            history
                .iter()
                .filter(|(k, _, o)| k.starts_with("tick@") && o == "succeeded")
                .count()
                >= 2,
            "{history:?}"
        );
        assert!(
            history.contains(&(bad.clone(), 1, "failed".to_owned())),
            "{history:?}"
        );
        assert_eq!(job_entry(&file, "tick")["paused"]["note"], "db upgrade");
        let letters = dead_letters(&file);
        assert_eq!(letters.len(), 1, "{letters:?}");
        assert_eq!(letters[0]["key"], bad.as_str());
        assert!(
            letters[0]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("broken")),
            "{letters:?}"
        );

        // Started again: still paused, nothing lost, nothing run twice.
        let second = file.start("standalone-2", &["--lease", "2s"]);
        file.leading(&second).await;
        file.scheduled_by(&second, "tock", 3).await;
        let ticked = file.published_by(&second, "tick");
        assert!(
            ticked.is_empty(),
            "tick is paused, yet published {ticked:?}{}",
            file.logs()
        );
        let now = runs(&file);
        let lost: Vec<_> = history.difference(&now).collect();
        assert!(lost.is_empty(), "runs gone after the restart: {lost:?}");
        assert_eq!(job_entry(&file, "tick")["paused"]["note"], "db upgrade");
        assert_eq!(job_entry(&file, "tick")["last"]["outcome"], "succeeded");
        let letters = dead_letters(&file);
        assert_eq!(letters.len(), 1, "{letters:?}");
        assert_eq!(letters[0]["key"], bad.as_str());
        let tocks = crate::support::data_file::keys(&file.published("tock"));
        file.once_each("tock", &tocks).await;
        file.stop(&second);
        file.assert_intact().await;
    })
    .await;
}
