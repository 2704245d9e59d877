//! A claim answered late, through real processes: consumer a's link to Redis passes its
//! claim but holds back the answer (a proxy), as a stalled link or a process frozen
//! between its claim and its start would. Answered after its lease lapsed and the reaper
//! handed the occurrence to consumer b, which ran it, a does not start it: it renews the
//! lease before starting and finds the claim taken over. Answered late but within the
//! lease (longer than a heartbeat period), a renews it and runs it, once. The renewal made
//! before the start answered late in its turn: answered after the lease it renewed ran out
//! by a's clock (counted from when it was sent), a does not start; answered within it, a
//! runs the occurrence once.
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

/// What a's log says when it stops an attempt it started.
const STOPPING: &str = "stopping attempt";

/// What a's log says when a renewal gets no answer (its Redis client gave up waiting).
const UNANSWERED: &str = "cannot renew the execution lease";

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

/// Waits for a's run of `late`'s occurrence, then long enough for b's reaper (every half
/// lease, a second at most here) to hand it out again were its claim still listed as
/// running, and asserts that it ran once, on a, which started it (`log`: the starts).
async fn ran_once_on_a(env: &TestEnv, log: &Path) {
    eventually(WAIT, "a's run of the occurrence", || async {
        let r = runs_of_late(env).await;
        (!r.is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    routed::assert_ran_once_on_a(env, &runs_of_late(env).await, starts(log).len());
    assert!(!env.log("a").contains(NOT_STARTED), "{}", env.log("a"));
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
        ran_once_on_a(&env, &log).await;
    })
    .await;
}

/// [`routed::start`] with a lease of 1.5 s (a heartbeat every 500 ms); publishes `late`'s
/// occurrence with a's answers held, hands a its claim's answer 0.8 s later (past a
/// heartbeat period: a renews the claim before it starts) while holding back what a sends
/// next, lets that renewal through to Redis 0.2 s later, and hands a the renewal's answer
/// `answer_held` after that.
async fn renewal_answered_late(env: &TestEnv, config: &Path, answer_held: Duration) -> Proxy {
    let proxy = claimed_with_answer_held(env, config, "1500ms").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    // The claim's answer goes to a; the renewal it sends on it waits here.
    proxy.hold_requests();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The renewal reaches Redis, which renews the lease; its answer waits here.
    proxy.hold_replies();
    tokio::time::sleep(answer_held).await;
    proxy.restore();
    proxy
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_claim_whose_renewal_is_answered_past_its_lease_does_not_start() {
    scoped("late_claim_renewal_past", |env| async move {
        let (config, log) = routed::config(&env, "late", "true");
        // The renewal, sent as the claim's answer came (0.8 s in), is answered about 2.2 s
        // after it was sent: past the 1.5 s lease it renewed, within the 3 s a's Redis
        // client waits for an answer. The lease Redis granted runs out 1.5 s after the
        // renewal reached it, and b's reaper hands the occurrence to b.
        let _proxy = renewal_answered_late(&env, &config, Duration::from_secs(2)).await;
        let done = eventually(WAIT, "b's success and a's lost attempt", || async {
            let r = runs_of_late(&env).await;
            (r.len() == 2).then_some(r)
        })
        .await;
        let a_log = env.log("a");
        assert!(a_log.contains(NOT_STARTED), "{a_log}");
        // Answered, not given up on; and never started, so never stopped.
        assert!(!a_log.contains(UNANSWERED), "{a_log}");
        assert!(!a_log.contains(STOPPING), "{a_log}");
        assert_eq!(starts(&log).len(), 1, "{a_log}");
        assert_taken_over(&done, "a", "b", &a_log);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_claim_whose_renewal_is_answered_within_its_lease_runs_once() {
    scoped("late_claim_renewal_within", |env| async move {
        let (config, log) = routed::config(&env, "late", "true");
        // The renewal is answered about 0.8 s after it was sent, within the 1.5 s lease.
        let _proxy = renewal_answered_late(&env, &config, Duration::from_millis(600)).await;
        ran_once_on_a(&env, &log).await;
        assert!(!env.log("a").contains(UNANSWERED), "{}", env.log("a"));
    })
    .await;
}
