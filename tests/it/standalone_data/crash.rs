//! `kill -9` of a standalone on a data file (G3): the attempt it was running runs again
//! once its execution lease lapsed, and not before; occurrences published but not run yet,
//! and a retry waiting out its backoff, are in the file and run after the restart; no key
//! succeeds twice, and the file stays intact.

use std::time::{Duration, Instant};

use chrono::Utc;
use cronq_shared::runlog::Outcome;

use crate::support::data_file::{DataFile, LEADER, job_running, keys};
use crate::support::history::{self, Mark, Trace, traced_script};
use crate::support::{TestEnv, eventually, scoped, until};

/// The execution lease of the kill test's standalones (`--lease`): long enough to tell a
/// rerun that waited for it from one that did not, with the restart in between, and longer
/// than the 5 s after which the killed process's delivery goes back to its queue, so that
/// the lease, not the queue, is what holds the rerun back.
const LEASE: Duration = Duration::from_secs(10);

/// How long after the kill the restarted standalone is watched not to rerun the attempt:
/// the lease lapses 10 s after the claim, that is about 9 s after the kill.
const HELD: Duration = Duration::from_secs(7);

#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_killed_mid_run_runs_again_once_its_lease_lapsed() {
    scoped("sd-kill-mid-job", |env: TestEnv| async move {
        let trace = env.dir.join("trace");
        let toml = format!(
            "{LEADER}{}",
            job_running("slow", "0 0 1 1 *", "", &traced_script(&trace, "3"))
        );
        let file = DataFile::new(&env, &toml);
        let lease = format!("{}s", LEASE.as_secs());
        let first = file.start("standalone-1", &["--lease", &lease]);
        file.leading(&first).await;
        let key = file.ok(&["trigger", "slow"]).trim().to_owned();
        let started = eventually(Duration::from_secs(10), "the attempt to start", || async {
            Trace::read(&trace).first(Mark::Start, &key)
        })
        .await;
        // Mid-run, before its first heartbeat (a third of the lease after the claim).
        tokio::time::sleep(Duration::from_secs(1)).await;
        file.kill(&first);
        let killed = Instant::now();
        assert_eq!(
            Trace::read(&trace).count(Mark::End, &key),
            0,
            "the attempt ended before the kill{}",
            file.logs()
        );

        let second = file.start("standalone-2", &["--lease", &lease]);
        file.leading(&second).await;
        assert!(
            killed.elapsed() + Duration::from_secs(2) < HELD,
            "the restarted standalone led only {:?} after the kill: too late to watch it{}",
            killed.elapsed(),
            file.logs()
        );
        // Not again while the killed attempt's lease holds, though the restarted standalone
        // runs and the delivery is back in the queue after 5 s.
        while killed.elapsed() < HELD {
            let t = Trace::read(&trace);
            assert_eq!(
                t.count(Mark::Start, &key),
                1,
                "{key} ran again {:?} after the kill, within its lease:\n{}{}",
                killed.elapsed(),
                t.render(),
                file.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let rerun = until(
            LEASE + Duration::from_secs(15),
            "the attempt to run again",
            || async {
                let t = Trace::read(&trace);
                let starts: Vec<i64> = t
                    .events
                    .iter()
                    .filter(|e| e.mark == Mark::Start && e.key == key)
                    .map(|e| e.ms)
                    .collect();
                match starts.as_slice() {
                    [_, again] => Ok(*again),
                    _ => Err(format!("{}{}", t.render(), file.logs())),
                }
            },
        )
        .await;
        let lease_ms = i64::try_from(LEASE.as_millis()).unwrap();
        assert!(
            rerun - started >= lease_ms - 1000,
            "{key} ran again {} ms after it started, before its {LEASE:?} lease lapsed{}",
            rerun - started,
            file.logs()
        );
        let runs = file.once_each("slow", std::slice::from_ref(&key)).await;
        assert_eq!(
            Trace::read(&trace).count(Mark::Start, &key),
            2,
            "runs:\n{}",
            history::render_runs(&runs)
        );
        file.stop(&second);
        file.assert_intact().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn occurrences_published_but_not_run_survive_kill_9() {
    scoped("sd-kill-backlog", |env: TestEnv| async move {
        let trace = env.dir.join("trace");
        let toml = format!(
            "{LEADER}{}",
            job_running(
                "backlog",
                "@every 1s",
                "overlap = \"allow\"\ncatchup = \"all\"\nmax_attempts = 1",
                &traced_script(&trace, "1.5"),
            )
        );
        let file = DataFile::new(&env, &toml);
        // One at a time, 1.5 s each, one a second: a backlog builds up in the file.
        // Every commit synced to disk (`--data-sync full`) in the first, the default after.
        let first = file.start(
            "standalone-1",
            &["--lease", "2s", "--concurrency", "1", "--data-sync", "full"],
        );
        file.leading(&first).await;
        until(
            Duration::from_secs(20),
            "a backlog of 3 occurrences",
            || async {
                let published = keys(&file.published("backlog"));
                let t = Trace::read(&trace);
                let waiting = published
                    .iter()
                    .filter(|k| t.count(Mark::Start, k) == 0)
                    .count();
                if waiting >= 3 {
                    Ok(())
                } else {
                    Err(format!("published {published:?}\n{}", t.render()))
                }
            },
        )
        .await;
        file.kill(&first);
        let before = keys(&file.published("backlog"));
        let t = Trace::read(&trace);
        let waiting: Vec<String> = before
            .iter()
            .filter(|k| t.count(Mark::Start, k) == 0)
            .cloned()
            .collect();
        // Recorded as succeeded in the file before the kill: never again.
        let done: Vec<String> = history::successes(&file.runs(Some("backlog")).await)
            .into_keys()
            .collect();
        assert!(
            !done.is_empty(),
            "nothing ran before the kill{}",
            file.logs()
        );

        let second = file.start("standalone-2", &["--lease", "2s", "--concurrency", "4"]);
        file.leading(&second).await;
        let runs = file.once_each("backlog", &before).await;
        let t = Trace::read(&trace);
        for k in &waiting {
            assert_eq!(
                t.count(Mark::Start, k),
                1,
                "{k} was waiting at the kill: it runs once after the restart\n{}",
                t.render()
            );
        }
        for k in &done {
            assert_eq!(
                t.count(Mark::Start, k),
                1,
                "{k} had run before the kill: it does not run again\n{}runs:\n{}",
                t.render(),
                history::render_runs(&runs)
            );
        }
        file.stop(&second);
        file.assert_intact().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_waiting_out_its_backoff_survives_kill_9() {
    scoped("sd-kill-backoff", |env: TestEnv| async move {
        let attempts = env.dir.join("attempts");
        let script = format!(
            "echo \"$CRONQ_ATTEMPT $(date +%s%3N)\" >> '{}'; \
             [ \"$CRONQ_ATTEMPT\" -ge 2 ] || {{ echo first attempt fails >&2; exit 3; }}",
            attempts.display()
        );
        let toml = format!(
            "{LEADER}{}",
            job_running(
                "flaky",
                "0 0 1 1 *",
                "max_attempts = 3\nbackoff = \"3s\"",
                &script
            )
        );
        let file = DataFile::new(&env, &toml);
        let first = file.start("standalone-1", &["--lease", "2s"]);
        file.leading(&first).await;
        let key = file.ok(&["trigger", "flaky"]).trim().to_owned();
        let failed = eventually(Duration::from_secs(10), "attempt 1 to fail", || async {
            file.runs(Some("flaky"))
                .await
                .into_iter()
                .find(|r| r.key.to_string() == key && r.outcome == Outcome::Retrying)
        })
        .await;
        file.kill(&first);
        let ended = failed.started_at + chrono::TimeDelta::from_std(failed.duration).unwrap();
        assert!(
            Utc::now() < ended + chrono::TimeDelta::seconds(3),
            "the kill came after the 3 s backoff: the test proves nothing{}",
            file.logs()
        );

        let second = file.start("standalone-2", &["--lease", "2s"]);
        file.leading(&second).await;
        let runs = file.once_each("flaky", std::slice::from_ref(&key)).await;
        let retry = runs
            .iter()
            .find(|r| r.outcome == Outcome::Succeeded)
            .unwrap();
        assert_eq!(retry.attempt, 2, "runs:\n{}", history::render_runs(&runs));
        assert!(
            retry.started_at >= ended + chrono::TimeDelta::milliseconds(2700),
            "the retry started at {}, before its backoff of 3 s after {ended}:\n{}",
            retry.started_at,
            history::render_runs(&runs)
        );
        let lines = std::fs::read_to_string(&attempts).unwrap();
        let tried: Vec<&str> = lines
            .lines()
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        assert_eq!(tried, ["1", "2"], "attempts run: {lines}");
        file.stop(&second);
        file.assert_intact().await;
    })
    .await;
}
