//! `[metrics] job_label_limit` through the real binary: `cronq standalone` with a limit of
//! 2 and 4 jobs firing every second shows, for each per-job metric, at most 2 jobs of their
//! own (the same 2 everywhere) plus `job="other"`, and no count is lost on the way: the
//! other jobs' runs are exactly the `other` series.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::standalone::{free_port, scrape};
use crate::support::{eventually, scoped};

const JOBS: [&str; 4] = ["a", "b", "c", "d"];

/// Per `job` label, the sum of the lines of `metric` (a name with its `{`).
fn by_job(metrics: &str, metric: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines().filter(|l| l.starts_with(metric)) {
        let Some(job) = line
            .split("job=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(job.to_owned()).or_insert(0.0) += value;
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_label_limit_of_two_aggregates_the_rest_under_other() {
    scoped("job_label_limit", |env| async move {
        let mut toml = String::from("[metrics]\njob_label_limit = 2\n");
        for job in JOBS {
            toml.push_str(&format!(
                "[[job]]\nname = \"{job}\"\nschedule = \"@every 1s\"\n\
                 command = [\"/bin/sh\", \"-c\", \"echo {job} >> runs.txt\"]\n"
            ));
        }
        let config = env.write_config("cronq.toml", &toml);
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let pid = {
            let mut cmd = env.cronq();
            cmd.args(["standalone", "--data", ":memory:", "--config"])
                .arg(&config)
                .args(["--grace", "5s", "--admin-addr", &addr]);
            env.spawn_command("standalone", cmd)
        };
        let runs = |env: &crate::support::TestEnv| -> BTreeMap<String, f64> {
            let mut out = BTreeMap::new();
            for line in std::fs::read_to_string(env.dir.join("runs.txt"))
                .unwrap_or_default()
                .lines()
            {
                *out.entry(line.to_owned()).or_insert(0.0) += 1.0;
            }
            out
        };

        // Between two seconds' firings nothing moves: a scrape, the runs file and a second
        // scrape then agree exactly. Wait for such a moment, with every job run twice.
        let (metrics, ran) = eventually(
            Duration::from_secs(30),
            "a quiet moment after every job ran twice",
            || async {
                let before = scrape(port).await?;
                let ran = runs(&env);
                let after = scrape(port).await?;
                let ok = "cronq_attempts_total{";
                let every_job_twice = JOBS.iter().all(|j| ran.get(*j).copied() >= Some(2.0));
                let counted: f64 = by_job(&after, ok).values().sum();
                let all_counted = counted == ran.values().sum::<f64>();
                (every_job_twice && all_counted && by_job(&before, ok) == by_job(&after, ok))
                    .then_some((after, ran))
            },
        )
        .await;

        let own: BTreeSet<String> = by_job(&metrics, "cronq_attempts_total{")
            .into_keys()
            .filter(|j| j != "other")
            .collect();
        assert_eq!(own.len(), 2, "two jobs keep their own label:\n{metrics}");
        let total: f64 = ran.values().sum();
        let others: f64 = ran
            .iter()
            .filter(|(j, _)| !own.contains(*j))
            .map(|(_, n)| n)
            .sum();
        for metric in [
            "cronq_attempts_total{",
            "cronq_attempt_duration_seconds_count{",
            "cronq_occurrences_published_total{",
            "cronq_occurrences_expected_total{",
        ] {
            let series = by_job(&metrics, metric);
            let labels: BTreeSet<String> = series.keys().cloned().collect();
            let mut expected = own.clone();
            expected.insert("other".to_owned());
            assert_eq!(
                labels, expected,
                "{metric}: the same 2 jobs, plus other:\n{metrics}"
            );
            if metric.starts_with("cronq_attempt") {
                // Every run was counted once: per own job, under other, and in all.
                for job in &own {
                    assert_eq!(series[job], ran[job], "{metric} of {job}:\n{metrics}");
                }
                assert_eq!(series["other"], others, "{metric} other:\n{metrics}");
                assert_eq!(series.values().sum::<f64>(), total, "{metric}:\n{metrics}");
            } else {
                // Published and expected run ahead of the runs; still, per label, at least.
                for (job, n) in &series {
                    let want = if job == "other" { others } else { ran[job] };
                    assert!(*n >= want, "{metric} of {job}: {n} < {want}:\n{metrics}");
                }
            }
        }

        env.signal(pid, Signal::SIGTERM);
        let code = env.wait(pid, Duration::from_secs(10));
        assert_eq!(code, Some(0), "standalone log:\n{}", env.log("standalone"));
    })
    .await;
}
