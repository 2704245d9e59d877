//! A claim answered late, through real processes: consumer a's link to Redis passes its
//! claim but holds back the answer (a proxy), as a stalled link or a process frozen
//! between its claim and its start would. Answered after its lease lapsed and the reaper
//! handed the occurrence to consumer b, which ran it, a does not start it: it renews the
//! lease before starting and finds the claim taken over. Answered late but within the
//! lease (longer than a heartbeat period), a renews it and runs it, once.
//!
//! a serves the queue `default`, where the test publishes; the job's own queue is `slow`,
//! which only b serves, and where the reaper republishes what it takes over: so the first
//! delivery goes to a and the second to b, whatever the broker's round robin.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cronq_shared::runlog::{Outcome, Run};
use redis::AsyncCommands;

use crate::support::consumer_process::{
    WAIT, assert_taken_over, consumer_args, publish, runs, started,
};
use crate::support::occurrences::occurrence;
use crate::support::proxy::{Link, Proxy};
use crate::support::{TestEnv, eventually, scoped};

/// What the log of a consumer says when it does not start an attempt it was late to learn
/// it had claimed.
const NOT_STARTED: &str = "not starting an attempt whose claim was answered late";

/// The config: `late` (on `slow`, overlap `skip`: its claim keeps the message for the
/// reaper) notes `FENCE` at each start; `other` only gives a its queue `default`.
fn config(env: &TestEnv) -> (PathBuf, PathBuf) {
    env.track_queue("default");
    env.track_queue("slow");
    let starts = env.dir.join("starts");
    let config = env.write_config(
        "cronq.toml",
        &format!(
            r#"
[[job]]
name = "late"
schedule = "0 0 1 1 *"
queue = "slow"
overlap = "skip"
max_attempts = 1
command = ["sh", "-c", "echo $CRONQ_FENCE >> {}"]

[[job]]
name = "other"
schedule = "0 0 1 1 *"
command = ["true"]
"#,
            starts.display()
        ),
    );
    (config, starts)
}

/// The fences noted by the starts of `late`'s occurrence under test (after the first
/// one's, [`claimed_with_answer_held`]).
fn starts(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The runs of `late`'s occurrence under test.
async fn runs_of_late(env: &TestEnv) -> Vec<Run> {
    let key = occurrence("late", 1).key;
    let mut all = runs(env, "late").await;
    all.retain(|r| r.key == key);
    all
}

/// Starts a (serving `default`, its Redis link through a proxy it returns) and b (serving
/// `slow`), each with `lease`; publishes `late`'s occurrence with a's answers held, and
/// returns once its claim is in Redis.
async fn claimed_with_answer_held(env: &TestEnv, config: &Path, lease: &str) -> Proxy {
    let config = config.to_str().unwrap();
    let (proxy, through) = Proxy::before(Link::Redis).await;
    let mut a = env.cronq();
    a.env(Link::Redis.var(), &through)
        .args(consumer_args(config, "a", lease))
        .args(["--queues", "default"]);
    env.spawn_command("a", a);
    let mut b_args = consumer_args(config, "b", lease);
    b_args.extend(["--queues", "slow"]);
    env.spawn("b", &b_args);
    started(env, "a").await;
    started(env, "b").await;
    // A first occurrence run through a loads the ledger's scripts into Redis: a script
    // call that has to load its script first would wait for an answer before it runs.
    publish(env, occurrence("late", 0)).await;
    eventually(WAIT, "a to run a first occurrence", || async {
        let r = runs(env, "late").await;
        r.iter().any(|r| r.consumer == "a").then_some(())
    })
    .await;
    proxy.hold_replies();
    let occ = occurrence("late", 1);
    let record = env.names().redis_key(&["occ", &occ.key.to_string()]);
    publish(env, occ).await;
    let redis = env.redis().await;
    eventually(WAIT, "a's claim to reach Redis", || {
        let (mut redis, record) = (redis.clone(), &record);
        async move {
            let exists: bool = redis.exists(record).await.unwrap();
            exists.then_some(())
        }
    })
    .await;
    proxy
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_answered_after_its_lease_was_taken_over_does_not_start() {
    scoped("late_claim_lapsed", |env| async move {
        let (config, log) = config(&env);
        // Lease 600 ms: b's reaper (every 300 ms) takes the claim over within 900 ms of it,
        // well before a's Redis client gives up waiting for the answer (3 s).
        let proxy = claimed_with_answer_held(&env, &config, "600ms").await;
        let by_b = eventually(WAIT, "b to run the occurrence the reaper took over", || {
            let log = &log;
            async move { starts(log).first().copied() }
        })
        .await;
        proxy.restore();
        let done = eventually(WAIT, "a's attempt recorded as lost", || async {
            let r = runs_of_late(&env).await;
            r.iter().any(|r| r.consumer == "a").then_some(r)
        })
        .await;
        // A late start of a would have noted its own, smaller fence before its end.
        assert_eq!(starts(&log), vec![by_b], "{}", env.log("a"));
        assert!(env.log("a").contains(NOT_STARTED), "{}", env.log("a"));
        assert_taken_over(&done, "a", "b", &env.log("a"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_answered_late_within_its_lease_is_renewed_and_runs_once() {
    scoped("late_claim_held", |env| async move {
        let (config, log) = config(&env);
        // Lease 2 s, heartbeats every 667 ms: an answer 1 s late is past a heartbeat period,
        // so it is renewed before the start, and within the lease, so nothing took it over.
        let proxy = claimed_with_answer_held(&env, &config, "2s").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        proxy.restore();
        eventually(WAIT, "a's run of the occurrence", || async {
            let r = runs_of_late(&env).await;
            (!r.is_empty()).then_some(())
        })
        .await;
        // Time for b's reaper (every second) to hand the occurrence out again, were its
        // claim still listed as running.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let outcomes: Vec<_> = runs_of_late(&env)
            .await
            .iter()
            .map(|r| (r.consumer.clone(), r.outcome))
            .collect();
        assert_eq!(
            outcomes,
            vec![("a".to_owned(), Outcome::Succeeded)],
            "{}",
            env.log("a")
        );
        assert_eq!(starts(&log).len(), 1, "{}", env.log("b"));
        assert!(!env.log("a").contains(NOT_STARTED), "{}", env.log("a"));
    })
    .await;
}
