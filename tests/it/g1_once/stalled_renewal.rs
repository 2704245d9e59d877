//! A link to Redis that stalls (its packets dropped, not refused) while a handler runs,
//! through real processes: consumer a reaches Redis through a proxy the test stalls.
//! Stalled past the lease, a stops its handler when the lease runs out by its own clock,
//! not when the stalled renewal's call gives up, seconds later, while consumer b, to which
//! the reaper hands the occurrence, runs it. Stalled for less than the lease, a renews it
//! once the link is back and runs it once; b never does. A renewal answered late, then the
//! link stalled: the lease counts from when that renewal was sent, not from its answer
//! nor from the renewal before it.
//!
//! a serves the queue `default`, where the test publishes; b the job's own queue, where the
//! reaper republishes (`routed`).

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::routed::{self, fences};
use crate::support::consumer_process::{WAIT, assert_taken_over, publish, runs};
use crate::support::json_log;
use crate::support::occurrences::occurrence;
use crate::support::proxy::Proxy;
use crate::support::{TestEnv, eventually, scoped};

/// Both consumers' execution lease: a heartbeat every 667 ms.
const LEASE: &str = "2s";
/// [`LEASE`] in milliseconds.
const LEASE_MS: i64 = 2000;
/// The lease of the late answer's test: a heartbeat every second.
const LONG_LEASE: &str = "3s";
/// What a's log says when its lease runs out with a renewal unanswered.
const RAN_OUT: &str = "the execution lease ran out before a renewal was answered";

/// [`routed::config`] of `long`: its first start runs `secs`, a later one (b's, after the
/// reaper handed it out) ends at once.
fn config(env: &TestEnv, secs: u32) -> (PathBuf, PathBuf) {
    let then = format!("[ $(wc -l < {{starts}}) -gt 1 ] || sleep {secs}");
    routed::config(env, "long", &then)
}

/// When a's JSON log says it stopped `long`'s attempt as lost.
fn stopped_as_lost(log: &str) -> Option<DateTime<Utc>> {
    json_log::lines_of(log, "stopping attempt")
        .iter()
        .find(|l| l["reason"] == "Lost")
        .map(json_log::timestamp)
}

/// Waits until a stops its attempt as lost, which it must have done `within` these many
/// milliseconds `since` the fault, its lease run out with a renewal unanswered; then, the
/// proxy restored, that b's run was the one success and a's attempt is listed as lost.
async fn stopped_when_the_lease_ran_out(
    env: &TestEnv,
    proxy: &Proxy,
    since: DateTime<Utc>,
    within: RangeInclusive<i64>,
) {
    let stopped = eventually(WAIT, "a to stop its attempt as lost", || async {
        stopped_as_lost(&env.log("a"))
    })
    .await;
    proxy.restore();
    let after = (stopped - since).num_milliseconds();
    assert!(
        within.contains(&after),
        "a stopped its handler {after} ms after the fault, not within {within:?} ms\n{}",
        env.log("a")
    );
    assert!(env.log("a").contains(RAN_OUT), "{}", env.log("a"));
    eprintln!("a stopped its handler {after} ms after the fault");
    let done = eventually(WAIT, "b's success and a's lost attempt", || async {
        let r = runs(env, "long").await;
        (r.len() == 2).then_some(r)
    })
    .await;
    assert_taken_over(&done, "a", "b", &env.log("a"));
}

/// [`routed::start`] with `lease`; publishes `long`'s occurrence; returns once a's handler
/// has noted its start in `log`.
async fn running_on_a(env: &TestEnv, config: &Path, log: &Path, lease: &str) -> Proxy {
    let proxy = routed::start(env, config, lease).await;
    publish(env, occurrence("long", 1)).await;
    eventually(WAIT, "a to start the occurrence", || async {
        (!fences(log).is_empty()).then_some(())
    })
    .await;
    proxy
}

/// [`running_on_a`] with [`LEASE`], then a's link stalled once its handler has run a
/// second (past its first heartbeat): the proxy, and when it stalled.
async fn stalled_while_running(env: &TestEnv, config: &Path, log: &Path) -> (Proxy, DateTime<Utc>) {
    let proxy = running_on_a(env, config, log, LEASE).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.stall();
    (proxy, Utc::now())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_stalled_past_the_lease_stops_the_handler_when_the_lease_runs_out() {
    scoped("stalled_renewal_long", |env| async move {
        let (config, log) = config(&env, 4);
        let (proxy, stalled) = stalled_while_running(&env, &config, &log).await;
        // The last renewal answered was sent at most a heartbeat before the stall, so the
        // lease ran out 1.33 to 2 s after it. Stalled, the renewal's call gives up after
        // the client's 3 s response timeout: a stop counted from there is 3 s or more.
        stopped_when_the_lease_ran_out(&env, &proxy, stalled, 1000..=LEASE_MS + 600).await;
        let fences = fences(&log);
        assert!(
            fences.len() == 2 && fences[0] < fences[1],
            "a's start, then b's with a greater fence: {fences:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_stalled_for_less_than_the_lease_keeps_the_attempt() {
    scoped("stalled_renewal_short", |env| async move {
        let (config, log) = config(&env, 4);
        let (proxy, _) = stalled_while_running(&env, &config, &log).await;
        // 800 ms: the renewal sent meanwhile fails as the link comes back (its connection
        // dropped), and the one tried a sixth of a second later renews the lease, which ran
        // until 1.33 to 2 s after the stall.
        tokio::time::sleep(Duration::from_millis(800)).await;
        proxy.restore();
        eventually(WAIT, "a's run of the occurrence", || async {
            let r = runs(&env, "long").await;
            (!r.is_empty()).then_some(())
        })
        .await;
        // Time for b's reaper (every second) to hand the occurrence out again, were its
        // lease left to lapse.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        routed::assert_ran_once_on_a(&env, &runs(&env, "long").await, fences(&log).len());
        assert!(stopped_as_lost(&env.log("a")).is_none(), "{}", env.log("a"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_answered_late_counts_from_when_it_was_sent() {
    scoped("stalled_renewal_late", |env| async move {
        let (config, log) = config(&env, 9);
        let proxy = running_on_a(&env, &config, &log, LONG_LEASE).await;
        // Past a's first heartbeat (1 s after its claim), before its second (2 s): that one
        // reaches Redis, and its answer is held 1.8 s. Then it is handed over, and nothing a
        // sends reaches Redis any more.
        tokio::time::sleep(Duration::from_millis(1300)).await;
        proxy.hold_replies();
        let held = Utc::now();
        tokio::time::sleep(Duration::from_millis(1800)).await;
        proxy.hold_requests();
        // The renewal answered late was sent 0 to 1 s after the hold (0.7 s: a's
        // heartbeats fall 1 and 2 s after its claim), so its lease ran out 3 to 4 s after
        // it. Counted from its answer (1.8 s after the hold), the lease would have run out
        // 4.8 s after it; counted from the renewal before, 2 to 3 s.
        stopped_when_the_lease_ran_out(&env, &proxy, held, 3000..=4250).await;
    })
    .await;
}
