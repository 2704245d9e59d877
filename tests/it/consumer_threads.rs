//! The runtime `cronq consumer` runs on: one worker thread unless `--threads` (or, without
//! it, tokio's `TOKIO_WORKER_THREADS`) says otherwise (`cronq_consumer::DEFAULT_THREADS`).
//! On one thread, runs that outlast several heartbeats keep their claims beside runs that
//! end at once: each occurrence runs once.

use std::time::Duration;

use cronq_shared::runlog::Outcome;

use crate::support::consumer_process::{WAIT, consumer_args, lines, publish, runs, started};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, eventually, scoped};

/// Runs of 2 s under a 1 s lease (renewed every third of it) and runs that end at once,
/// eight at a time.
const NAPS: u32 = 8;
const BLINKS: u32 = 16;

/// A config of `nap` (appends its key to `starts`, sleeps 2 s) and `blink` (appends it,
/// ends), runs of each side by side, on the tracked queue `default`.
fn config(env: &TestEnv) -> (String, std::path::PathBuf) {
    env.track_queue("default");
    let starts = env.dir.join("starts");
    let config = env.write_config(
        "cronq.toml",
        &format!(
            r#"
[[job]]
name = "nap"
schedule = "@every 1s"
overlap = "allow"
command = ["sh", "-c", "echo $CRONQ_KEY >> {starts}; sleep 2"]

[[job]]
name = "blink"
schedule = "@every 1s"
overlap = "allow"
command = ["sh", "-c", "echo $CRONQ_KEY >> {starts}"]
"#,
            starts = starts.display()
        ),
    );
    (config.to_str().unwrap().to_owned(), starts)
}

/// Waits for the consumer logging to `log` to start, and asserts that its start line
/// names `threads` runtime threads.
async fn started_on(env: &TestEnv, log: &str, threads: usize) {
    started(env, log).await;
    let text = env.log(log);
    assert!(
        text.contains(&format!("threads={threads}")),
        "{log} is not on {threads} threads:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_its_one_thread_keeps_long_runs_claimed_beside_short_ones() {
    scoped("c-threads-one", |env| async move {
        let (config, starts) = config(&env);
        let mut args = consumer_args(&config, "c", "1s");
        args.extend(["--concurrency", "8"]);
        env.spawn("c", &args);
        started_on(&env, "c", 1).await;
        for i in 0..NAPS {
            publish(&env, occurrence("nap", i)).await;
        }
        for i in 0..BLINKS {
            publish(&env, occurrence("blink", i)).await;
        }
        for (job, count) in [("nap", NAPS), ("blink", BLINKS)] {
            let done = eventually(WAIT, &format!("every {job} to end"), || async {
                let r = runs(&env, job).await;
                (r.len() >= count as usize).then_some(r)
            })
            .await;
            assert!(
                done.iter()
                    .all(|r| r.outcome == Outcome::Succeeded && r.attempt == 1),
                "{done:#?}"
            );
            if job == "nap" {
                assert!(
                    done.iter().all(|r| r.duration >= Duration::from_secs(2)),
                    "{done:#?}"
                );
            }
        }
        // Past a lease more: a claim not renewed would have run again by now.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(lines(&starts), (NAPS + BLINKS) as usize, "each run once");
        assert_eq!(runs(&env, "nap").await.len(), NAPS as usize);
        let log = env.log("c");
        assert!(!log.contains("lost its claim"), "{log}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_runs_on_the_threads_it_is_given_and_refuses_none() {
    scoped("c-threads-three", |env| async move {
        let (config, starts) = config(&env);
        let mut args = consumer_args(&config, "c", "1s");
        args.extend(["--threads", "3"]);
        env.spawn("c", &args);
        started_on(&env, "c", 3).await;
        // Without the flag, tokio's own variable is still read.
        let mut tokio_set = env.cronq();
        tokio_set
            .args(consumer_args(&config, "d", "1s"))
            .env("TOKIO_WORKER_THREADS", "2");
        env.spawn_command("d", tokio_set);
        started_on(&env, "d", 2).await;
        publish(&env, occurrence("nap", 0)).await;
        let done = eventually(WAIT, "the nap to end", || async {
            let r = runs(&env, "nap").await;
            (!r.is_empty()).then_some(r)
        })
        .await;
        assert_eq!(done[0].outcome, Outcome::Succeeded, "{done:#?}");
        assert_eq!(lines(&starts), 1);

        let out = env
            .cronq()
            .args(["consumer", "--config", &config, "--threads", "0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--threads"), "{stderr}");
    })
    .await;
}
