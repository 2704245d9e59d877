//! A job whose `cronq consumer` goes away mid-run runs again, once, elsewhere: after its
//! execution lease when the consumer is killed (SIGKILL), whether its claim was still held
//! (its message only in the broker) or kept, at once when it is stopped (SIGTERM) and
//! releases it.

use std::time::Duration;

use cronq_shared::runlog::Outcome;
use nix::sys::signal::Signal;

use crate::support::consumer_process::{WAIT, consumer_args, lines, publish, runs, started};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, eventually, scoped};

/// The `held` field of `record`, as Redis has it.
async fn held(env: &TestEnv, record: &str) -> Option<String> {
    let mut redis = env.redis().await;
    redis::cmd("HGET")
        .arg(record)
        .arg("held")
        .query_async(&mut redis)
        .await
        .unwrap()
}

/// A 3 s job of `overlap`, started by consumer a (execution lease `lease`), which is killed
/// at once (SIGKILL); consumer b, started then, runs it again once the lease lapsed, once,
/// as the same attempt. An `allow` job's claim is held when a is killed (its message only in
/// the broker: b meets the live lease and keeps the message for the reaper); another
/// job's claim stored its message from the start.
async fn sigkill_mid_job(env: TestEnv, overlap: &str, lease: &str) {
    env.track_queue("default");
    let starts = env.dir.join("starts");
    let config = env.write_config(
        "cronq.toml",
        &format!(
            r#"
[[job]]
name = "slow"
schedule = "@every 1s"
overlap = "{overlap}"
command = ["sh", "-c", "echo $CRONQ_ATTEMPT >> {}; sleep 3"]
"#,
            starts.display()
        ),
    );
    let config = config.to_str().unwrap();
    let a = env.spawn("a", &consumer_args(config, "a", lease));
    started(&env, "a").await;
    let occ = occurrence("slow", 1);
    let record = env.names().redis_key(&["occ", occ.key.as_str()]);
    publish(&env, occ).await;
    eventually(WAIT, "consumer a to start the job", || async {
        (lines(&starts) == 1).then_some(())
    })
    .await;
    let was_held = held(&env, &record).await;
    env.signal(a, Signal::SIGKILL);
    assert_eq!(
        was_held.as_deref(),
        (overlap == "allow").then_some("1"),
        "a's claim held when a was killed"
    );
    env.spawn("b", &consumer_args(config, "b", lease));
    started(&env, "b").await;
    let done = eventually(WAIT, "a completed run", || async {
        let r = runs(&env, "slow").await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].outcome, Outcome::Succeeded);
    assert_eq!(done[0].consumer, "b");
    assert_eq!(done[0].attempt, 1, "same attempt, run again");
    assert_eq!(lines(&starts), 2, "started by a, then once by b");
    assert_eq!(
        held(&env, &record).await,
        None,
        "the ended record is not held"
    );
}

#[tokio::test]
async fn consumer_sigkill_mid_job_runs_once_elsewhere_after_the_lease() {
    scoped("consumer_kill", |env| sigkill_mid_job(env, "skip", "2s")).await;
}

/// Killed within the first second of the run (a tenth of its 5 s lease: 500 ms), while its
/// claim is held.
#[tokio::test]
async fn consumer_sigkill_while_its_claim_is_held_runs_once_elsewhere_after_the_lease() {
    scoped("consumer_kill_held", |env| {
        sigkill_mid_job(env, "allow", "5s")
    })
    .await;
}

#[tokio::test]
async fn consumer_sigterm_releases_the_running_job_to_run_again_at_once() {
    scoped("consumer_term", |env| async move {
        env.track_queue("default");
        let starts = env.dir.join("starts");
        let config = env.write_config(
            "cronq.toml",
            &format!(
                r#"
[[job]]
name = "stubborn"
schedule = "@every 1s"
command = ["sh", "-c", "echo x >> {0}; [ $(wc -l < {0}) -ge 2 ] || sleep 60"]
"#,
                starts.display()
            ),
        );
        let config = config.to_str().unwrap();
        // Default 30 s lease: a rerun within the test's wait comes from the release, not
        // from the lease lapsing.
        let mut args = consumer_args(config, "a", "30s");
        args.extend(["--grace", "1s"]);
        let a = env.spawn("a", &args);
        started(&env, "a").await;
        publish(&env, occurrence("stubborn", 1)).await;
        eventually(WAIT, "consumer a to start the job", || async {
            (lines(&starts) == 1).then_some(())
        })
        .await;
        env.signal(a, Signal::SIGTERM);
        assert_eq!(
            env.wait(a, WAIT),
            Some(0),
            "graceful exit:\n{}",
            env.log("a")
        );
        env.spawn("b", &consumer_args(config, "b", "30s"));
        let done = eventually(
            Duration::from_secs(20),
            "b to run the released job",
            || async {
                let r = runs(&env, "stubborn").await;
                r.iter()
                    .any(|r| r.outcome == Outcome::Succeeded)
                    .then_some(r)
            },
        )
        .await;
        let outcomes: Vec<_> = done
            .iter()
            .rev()
            .map(|r| (r.consumer.as_str(), r.outcome))
            .collect();
        assert_eq!(
            outcomes,
            [("a", Outcome::Interrupted), ("b", Outcome::Succeeded)]
        );
    })
    .await;
}
