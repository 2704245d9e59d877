//! A claim answered late, through real processes: consumer a's link to Redis passes its
//! claim but holds back the answer (a proxy), as a stalled link or a process frozen
//! between its claim and its start would. Answered after its lease lapsed and the reaper
//! handed the occurrence to consumer b, which ran it, a does not start it: it renews the
//! lease before starting and finds the claim taken over. Answered late but within the
//! lease (longer than a heartbeat period), a renews it and runs it, once.
//!
//! a serves the queue `default`, where the test publishes; b the job's own queue, where the
//! reaper republishes (`routed`).

use std::path::Path;
use std::time::Duration;

use cronq_shared::runlog::Run;
use redis::AsyncCommands;

use super::routed::{self, fences};
use crate::support::consumer_process::{WAIT, assert_taken_over, publish, runs};
use crate::support::occurrences::occurrence;
use crate::support::proxy::Proxy;
use crate::support::{TestEnv, eventually, scoped};

/// What the log of a consumer says when it does not start an attempt it was late to learn
/// it had claimed.
const NOT_STARTED: &str = "not starting an attempt whose claim was answered late";

/// The fences noted by the starts of `late`'s occurrence under test (after the first
/// one's, [`claimed_with_answer_held`]).
fn starts(path: &Path) -> Vec<u64> {
    fences(path).into_iter().skip(1).collect()
}

/// The runs of `late`'s occurrence under test.
async fn runs_of_late(env: &TestEnv) -> Vec<Run> {
    let key = occurrence("late", 1).key;
    let mut all = runs(env, "late").await;
    all.retain(|r| r.key == key);
    all
}

/// [`routed::start`] with `lease`; publishes `late`'s occurrence with a's answers held, and
/// returns once its claim is in Redis.
async fn claimed_with_answer_held(env: &TestEnv, config: &Path, lease: &str) -> Proxy {
    let proxy = routed::start(env, config, lease).await;
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
        let (config, log) = routed::config(&env, "late", "true");
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
        let (config, log) = routed::config(&env, "late", "true");
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
        routed::assert_ran_once_on_a(&env, &runs_of_late(&env).await, starts(&log).len());
        assert!(!env.log("a").contains(NOT_STARTED), "{}", env.log("a"));
    })
    .await;
}
