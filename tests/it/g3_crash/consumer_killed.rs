//! A job whose `cronq consumer` goes away mid-run runs again, once, elsewhere: after its
//! execution lease when the consumer is killed (SIGKILL), whether its claim was still held
//! (its message only in the broker) or kept (its message in the ledger, its delivery
//! acked), at once when it is stopped (SIGTERM) and releases it. When a held claim is kept:
//! after its first second while it runs alone on its consumer (the window the kills of a
//! held claim land in), within its first tenth of a second while others run beside it; a
//! kill after either keep leaves the occurrence to the reaper.

use std::path::PathBuf;
use std::time::Duration;

use cronq_redis::RedisLedger;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::runlog::Outcome;
use nix::sys::signal::Signal;

use crate::support::consumer_process::{
    WAIT, consumer_args, first_runs, lines, publish, runs, slow_job, started,
};
use crate::support::occurrences::occurrence;
use crate::support::ports::redis_ledger;
use crate::support::{TestEnv, eventually, rabbitmq, scoped};

/// The `held` field of the record of `key`, as Redis has it.
async fn held(ledger: &RedisLedger, key: &OccurrenceKey) -> Option<String> {
    ledger.fields(key).await.unwrap().remove("held")
}

/// What a killed consumer's kept claims leave (checked once it is gone): RabbitMQ holds
/// none of their deliveries (once it has seen the consumer go, it would have put an
/// unacked one back), and the ledger holds each message with its lease listed for the
/// reaper.
async fn assert_acked_and_kept(env: &TestEnv, keys: &[&str]) {
    let (ready, _) = eventually(WAIT, "the killed consumer gone from the queue", || async {
        let counts = rabbitmq::queue_counts(&env.names(), "default").await;
        (counts.1 == 0).then_some(counts)
    })
    .await;
    assert_eq!(
        ready, 0,
        "the deliveries were acked once their claims were kept"
    );
    let mut redis = env.redis().await;
    for key in keys {
        let body: bool = redis::cmd("EXISTS")
            .arg(env.names().redis_key(&["occbody", *key]))
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(body, "the kept claim's message is in the ledger: {key}");
        let listed: Option<f64> = redis::cmd("ZSCORE")
            .arg(env.names().redis_key(&["leases"]))
            .arg(*key)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(
            listed.is_some(),
            "the kept claim's lease is listed for the reaper: {key}"
        );
    }
}

/// When consumer a is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// As soon as the job started.
    AtStart,
    /// Once its held claim was kept: its message stored in the ledger, its lease listed
    /// for the reaper, its delivery acked (an `allow` job's run past a tenth of the lease).
    AfterKeep,
}

/// A 3 s job of `overlap`, started by consumer a (execution lease `lease`), which is killed
/// (SIGKILL) as `kill` says; consumer b, started then, runs it again once the lease
/// lapsed, once, as the same attempt. An `allow` job's claim is held when a is killed at
/// the start (its message only in the broker: b meets the live lease and keeps the message
/// for the reaper), and kept when a is killed after the keep (the broker has nothing to
/// redeliver: the reaper republishes it); another job's claim stored its message from the
/// start.
async fn sigkill_mid_job(env: TestEnv, overlap: &str, lease: &str, kill: Kill) {
    let (config, starts) = slow_job(&env, overlap, 3);
    let config = config.to_str().unwrap();
    let a = env.spawn("a", &consumer_args(config, "a", lease));
    started(&env, "a").await;
    let occ = occurrence("slow", 1);
    let occ_key = occ.key.clone();
    let ledger = redis_ledger(&env).await;
    publish(&env, occ).await;
    eventually(WAIT, "consumer a to start the job", || async {
        (lines(&starts) == 1).then_some(())
    })
    .await;
    if kill == Kill::AfterKeep {
        eventually(WAIT, "a's held claim kept", || async {
            held(&ledger, &occ_key).await.is_none().then_some(())
        })
        .await;
        // The ack follows the keep's reply (its frame within a few ms: the settler's
        // linger). Still before a's first heartbeat (a third of the lease), so the lease
        // the reaper reads is the one the keep listed.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let was_held = held(&ledger, &occ_key).await;
    env.signal(a, Signal::SIGKILL);
    assert_eq!(
        was_held.as_deref(),
        (overlap == "allow" && kill == Kill::AtStart).then_some("1"),
        "a's claim held when a was killed"
    );
    assert_eq!(lines(&starts), 1, "a was killed mid-run");
    if kill == Kill::AfterKeep {
        assert_acked_and_kept(&env, &[occ_key.as_str()]).await;
    }
    env.spawn("b", &consumer_args(config, "b", lease));
    started(&env, "b").await;
    let done = first_runs(&env, "slow", "a completed run").await;
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].outcome, Outcome::Succeeded);
    assert_eq!(done[0].consumer, "b");
    assert_eq!(done[0].attempt, 1, "same attempt, run again");
    assert_eq!(lines(&starts), 2, "started by a, then once by b");
    assert_eq!(
        held(&ledger, &occ_key).await,
        None,
        "the ended record is not held"
    );
}

#[tokio::test]
async fn consumer_sigkill_mid_job_runs_once_elsewhere_after_the_lease() {
    scoped("consumer_kill", |env| {
        sigkill_mid_job(env, "skip", "2s", Kill::AtStart)
    })
    .await;
}

/// Killed within the first second of the run (a tenth of its 5 s lease: 500 ms), while its
/// claim is held.
#[tokio::test]
async fn consumer_sigkill_while_its_claim_is_held_runs_once_elsewhere_after_the_lease() {
    scoped("consumer_kill_held", |env| {
        sigkill_mid_job(env, "allow", "5s", Kill::AtStart)
    })
    .await;
}

/// Killed after its held claim was kept (a tenth of its 6 s lease: 600 ms into the 3 s
/// run) and before its first heartbeat (2 s): the broker has nothing to redeliver, the
/// reaper republishes the kept message once the lease lapsed.
#[tokio::test]
async fn consumer_sigkill_after_its_held_claim_was_kept_runs_once_elsewhere_after_the_lease() {
    scoped("consumer_kill_kept", |env| {
        sigkill_mid_job(env, "allow", "6s", Kill::AfterKeep)
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

/// Two 3 s runs of an `allow` job started side by side by consumer a (execution lease
/// `lease`, 10 s or more, so that a lone run would be held for a whole second): waits until
/// both held claims were kept, and asserts that it took under 700 ms from the later start
/// (this poll sees a start within 50 ms), not the second a lone run is held for. Returns
/// a's pid, the starts file, the config and the two occurrence keys.
async fn kept_side_by_side(env: &TestEnv, lease: &str) -> (u32, PathBuf, PathBuf, [String; 2]) {
    let (config, starts) = slow_job(env, "allow", 3);
    let mut args = consumer_args(config.to_str().unwrap(), "a", lease);
    args.extend(["--concurrency", "4"]);
    let a = env.spawn("a", &args);
    started(env, "a").await;
    let occs = [occurrence("slow", 1), occurrence("slow", 2)];
    let keys = occs.clone().map(|o| o.key.to_string());
    let occ_keys = occs.clone().map(|o| o.key);
    let ledger = redis_ledger(env).await;
    for occ in occs {
        publish(env, occ).await;
    }
    eventually(WAIT, "both runs started", || async {
        (lines(&starts) == 2).then_some(())
    })
    .await;
    let seen = std::time::Instant::now();
    let kept_by = Duration::from_millis(700);
    loop {
        let mut still = Vec::new();
        for key in &occ_keys {
            if let Some(h) = held(&ledger, key).await {
                still.push((key, h));
            }
        }
        if still.is_empty() {
            break;
        }
        assert!(
            seen.elapsed() < kept_by,
            "still held {kept_by:?} after both runs started: {still:?}\n{}",
            env.log("a")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (a, starts, config, keys)
}

/// Two 3 s runs of an `allow` job side by side on one consumer: each claim is granted held,
/// and kept (its message stored, its delivery acked) within a tenth of a second of its
/// start, not after the second a lone run is held for: the acks of the deliveries behind
/// it must not wait for it. Both end once.
#[tokio::test]
async fn held_claims_running_side_by_side_are_kept_within_a_tenth_of_a_second() {
    scoped("held_side_by_side", |env| async move {
        let (_, starts, _, _) = kept_side_by_side(&env, "30s").await;
        let done = eventually(WAIT, "both runs ended", || async {
            let r = runs(&env, "slow").await;
            (r.len() == 2).then_some(r)
        })
        .await;
        assert!(
            done.iter()
                .all(|r| r.outcome == Outcome::Succeeded && r.attempt == 1),
            "{done:?}"
        );
        assert_eq!(lines(&starts), 2, "each started once");
    })
    .await;
}

/// The same two runs, kept because they ran side by side (within a tenth of a second of
/// their start, where a lone run's claim is held for its first second: a tenth of the
/// 10 s lease), then consumer a killed (SIGKILL) before its first heartbeat (a third of
/// the lease): the broker has nothing to redeliver, and consumer b runs each once,
/// through the reaper, once their leases lapsed, as the same attempt.
#[tokio::test]
async fn consumer_sigkill_after_claims_kept_side_by_side_runs_each_once_elsewhere() {
    scoped("consumer_kill_kept_busy", |env| async move {
        let (a, starts, config, keys) = kept_side_by_side(&env, "10s").await;
        // The acks follow the keeps' replies (their frame within a few ms: the settler's
        // linger); still far from a's first heartbeat (3.3 s), so the leases the reaper
        // reads are those the keeps listed.
        tokio::time::sleep(Duration::from_millis(300)).await;
        env.signal(a, Signal::SIGKILL);
        assert_eq!(lines(&starts), 2, "a was killed mid-run");
        assert_acked_and_kept(&env, &[keys[0].as_str(), keys[1].as_str()]).await;
        env.spawn("b", &consumer_args(config.to_str().unwrap(), "b", "10s"));
        started(&env, "b").await;
        let done = eventually(Duration::from_secs(40), "b to run both again", || async {
            let r = runs(&env, "slow").await;
            (r.len() >= 2).then_some(r)
        })
        .await;
        assert_eq!(done.len(), 2, "{done:?}");
        for run in &done {
            assert_eq!(run.outcome, Outcome::Succeeded, "{done:?}");
            assert_eq!(run.consumer, "b", "{done:?}");
            assert_eq!(run.attempt, 1, "same attempt, run again: {done:?}");
        }
        let mut ran: Vec<&str> = done.iter().map(|r| r.key.as_str()).collect();
        ran.sort_unstable();
        let mut expected: Vec<&str> = keys.iter().map(String::as_str).collect();
        expected.sort_unstable();
        assert_eq!(ran, expected, "each occurrence ran once");
        assert_eq!(lines(&starts), 4, "each started by a, then once by b");
    })
    .await;
}
