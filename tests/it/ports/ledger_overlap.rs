//! The ledger's overlap locks: `skip` excludes a later occurrence and makes an earlier one
//! wait, `allow` does not lock, `queue` waiters take their turns in scheduled order,
//! `replace` stops the running one, a waiter whose turn never comes is handed back by the
//! reaper; on every backend.

use std::time::Duration;

use cronq_shared::config::Overlap;
use cronq_shared::ledger::{
    ClaimOutcome, End, Ended, FollowUp, Heartbeat, Ledger, Republish, Settle, State,
};
use cronq_shared::names::JobName;
use cronq_shared::runlog::{Outcome, RunLog};

use crate::support::backends::{Backend, on_every_backend};
use crate::support::inspect::Inspect;
use crate::support::occurrences::{LONG, claim, claimed, end, occurrence};
use crate::support::ports::{self};
use crate::support::{TestEnv, eventually};

const WAIT: Duration = Duration::from_secs(10);

/// Overlap locks: skip excludes, allow does not lock, a lapsed job lock stops its holder.
async fn overlap_suite(ledger: impl Ledger + Inspect) {
    let a = claimed(&ledger, &claim("ov", 1, 1, Overlap::Skip, LONG)).await;
    assert_eq!(
        ledger
            .claim(&claim("ov", 2, 1, Overlap::Skip, LONG))
            .await
            .unwrap(),
        ClaimOutcome::Busy {
            holder: a.key.to_string()
        }
    );
    assert!(
        ledger
            .complete(&a, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );
    let b = claimed(&ledger, &claim("ov", 2, 1, Overlap::Skip, LONG)).await;
    assert!(
        ledger
            .complete(&b, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );

    claimed(&ledger, &claim("all", 1, 1, Overlap::Allow, LONG)).await;
    claimed(&ledger, &claim("all", 2, 1, Overlap::Allow, LONG)).await;

    // A holder whose job lock lapsed and was taken stops at its next heartbeat.
    let short = Duration::from_millis(300);
    let x = claimed(&ledger, &claim("lapse", 1, 1, Overlap::Queue, short)).await;
    let y = eventually(WAIT, "the lapsed job lock to be taken", || async {
        match ledger
            .claim(&claim("lapse", 2, 1, Overlap::Queue, LONG))
            .await
            .unwrap()
        {
            ClaimOutcome::Claimed { lease, .. } => Some(lease),
            _ => None,
        }
    })
    .await;
    assert_eq!(ledger.heartbeat(&x, short).await.unwrap(), Heartbeat::Lost);
    assert_eq!(ledger.heartbeat(&y, LONG).await.unwrap(), Heartbeat::Held);
}

on_every_backend!(locks, "ledger_overlap");

async fn locks(backend: Backend, env: TestEnv) {
    overlap_suite(ports::ledger(backend, &env).await).await;
}

fn key(job: &str, i: u32) -> String {
    occurrence(job, i).key.to_string()
}

/// The waiter a recorded end gave its turn to, if any.
fn woken(ended: Ended) -> Option<String> {
    assert!(ended.recorded, "{ended:?}");
    ended.woken.map(|w| {
        assert_eq!(w.why, Republish::Turn);
        assert!(!w.body.is_empty());
        w.key
    })
}

fn waiting(outcome: ClaimOutcome) -> (String, Option<String>) {
    match outcome {
        ClaimOutcome::Waiting { holder, woken } => (holder, woken.map(|w| w.key)),
        other => panic!("expected to wait, got {other:?}"),
    }
}

/// `queue`: occurrences that arrive while one runs wait in the ledger (not on a broker
/// timer) and take their turns in scheduled order, whatever order they arrive in; a fresh
/// one arriving while the lock is free waits behind the earlier waiters.
async fn overlap_queue_suite(ledger: impl Ledger + Inspect) {
    let q = |i| claim("q", i, 1, Overlap::Queue, LONG);
    let q1 = claimed(&ledger, &q(1)).await;
    assert_eq!(
        waiting(ledger.claim(&q(3)).await.unwrap()),
        (key("q", 1), None)
    );
    assert_eq!(
        waiting(ledger.claim(&q(2)).await.unwrap()),
        (key("q", 1), None)
    );
    assert_eq!(
        ledger.inspect(&occurrence("q", 2).key).await.unwrap().state,
        State::Waiting
    );
    // A redelivered copy of a waiter waits again, nothing more.
    assert_eq!(
        waiting(ledger.claim(&q(3)).await.unwrap()),
        (key("q", 1), None)
    );
    let turn = woken(ledger.complete(&q1, &end(State::Succeeded)).await.unwrap());
    assert_eq!(turn, Some(key("q", 2)), "earliest scheduled first");
    // While q2's turn is on its way, q4 arrives and q3's copy comes round: both wait.
    assert_eq!(
        waiting(ledger.claim(&q(4)).await.unwrap()),
        (key("q", 2), Some(key("q", 2)))
    );
    assert_eq!(
        waiting(ledger.claim(&q(3)).await.unwrap()),
        (key("q", 2), Some(key("q", 2)))
    );
    for (i, next) in [(2, Some(3)), (3, Some(4)), (4, None)] {
        let lease = claimed(&ledger, &q(i)).await;
        let turn = woken(
            ledger
                .complete(&lease, &end(State::Succeeded))
                .await
                .unwrap(),
        );
        assert_eq!(turn, next.map(|n| key("q", n)), "after q{i}");
    }
    // A waiter settled `missed` at its turn hands the turn on.
    let q5 = claimed(&ledger, &q(5)).await;
    waiting(ledger.claim(&q(6)).await.unwrap());
    waiting(ledger.claim(&q(7)).await.unwrap());
    assert_eq!(
        woken(ledger.complete(&q5, &end(State::Succeeded)).await.unwrap()),
        Some(key("q", 6))
    );
    let missed = Settle {
        key: occurrence("q", 6).key,
        job: JobName::new("q").unwrap(),
        attempt: 1,
        state: State::Missed,
        error: Some("late".into()),
        retention: LONG,
        run: None,
    };
    assert_eq!(
        woken(ledger.settle(&missed).await.unwrap()),
        Some(key("q", 7))
    );
}

on_every_backend!(queue, "ledger_overlap_queue");

async fn queue(backend: Backend, env: TestEnv) {
    overlap_queue_suite(ports::ledger(backend, &env).await).await;
}

/// `replace`: a newer occurrence asks the running one to stop (its heartbeat says by
/// whom) and waits; a still newer one supersedes the waiter, which is recorded cancelled
/// with its history entry; an older one arriving late is superseded; the end of the
/// stopped one gives the newest its turn.
async fn overlap_replace_suite(ledger: impl Ledger + Inspect, log: &dyn RunLog) {
    let r = |i| claim("r", i, 1, Overlap::Replace, LONG);
    let r1 = claimed(&ledger, &r(1)).await;
    assert_eq!(
        waiting(ledger.claim(&r(2)).await.unwrap()),
        (key("r", 1), None)
    );
    assert_eq!(
        ledger.heartbeat(&r1, LONG).await.unwrap(),
        Heartbeat::CancelRequested { by: key("r", 2) }
    );
    assert_eq!(
        waiting(ledger.claim(&r(3)).await.unwrap()),
        (key("r", 1), None)
    );
    assert_eq!(
        ledger.heartbeat(&r1, LONG).await.unwrap(),
        Heartbeat::CancelRequested { by: key("r", 3) }
    );
    let r2 = ledger.inspect(&occurrence("r", 2).key).await.unwrap();
    assert_eq!(r2.state, State::Cancelled);
    assert_eq!(r2.error, Some(format!("replaced by {}", key("r", 3))));
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].key.to_string(), key("r", 2));
    assert_eq!(runs[0].outcome, Outcome::Cancelled);
    assert_eq!(runs[0].consumer, "test");
    assert_eq!(runs[0].error, r2.error);
    // A late copy of the superseded one is a duplicate; an older occurrence is superseded.
    assert!(matches!(
        ledger.claim(&r(2)).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Cancelled,
            ..
        }
    ));
    assert_eq!(
        ledger.claim(&r(0)).await.unwrap(),
        ClaimOutcome::Superseded { by: key("r", 1) }
    );
    let stopped = woken(ledger.complete(&r1, &end(State::Cancelled)).await.unwrap());
    assert_eq!(stopped, Some(key("r", 3)));
    // Lock free, r3's turn on its way: r0 again is older than the waiter.
    assert_eq!(
        ledger.claim(&r(0)).await.unwrap(),
        ClaimOutcome::Superseded { by: key("r", 3) }
    );
    let r3 = claimed(&ledger, &r(3)).await;
    assert_eq!(ledger.heartbeat(&r3, LONG).await.unwrap(), Heartbeat::Held);
    assert_eq!(
        woken(ledger.complete(&r3, &end(State::Succeeded)).await.unwrap()),
        None
    );
    // Lock free and no waiter: a newer one supersedes nothing and runs.
    claimed(&ledger, &r(4)).await;
}

on_every_backend!(replace, "ledger_overlap_replace");

async fn replace(backend: Backend, env: TestEnv) {
    let (ledger, log) = ports::ledger_with_log(backend, &env).await;
    overlap_replace_suite(ledger, &*log).await;
}

/// A waiter whose turn never comes in time (its turn's message lost, or a long run ahead
/// of it) is handed back by the reaper, saying so, and keeps waiting.
async fn overlap_recheck_suite(ledger: impl Ledger + Inspect) {
    let holder = claimed(&ledger, &claim("rc", 1, 1, Overlap::Queue, LONG)).await;
    let mut c = claim("rc", 2, 1, Overlap::Queue, LONG);
    c.recheck = Duration::from_millis(200);
    waiting(ledger.claim(&c).await.unwrap());
    let orphans = eventually(WAIT, "the waiter to be handed back", || async {
        let o = ledger.reap(10, LONG).await.unwrap();
        (!o.is_empty()).then_some(o)
    })
    .await;
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(orphans[0].key, key("rc", 2));
    assert_eq!(orphans[0].why, Republish::Waiting);
    assert_eq!(orphans[0].body, c.body);
    assert_eq!(
        ledger
            .inspect(&occurrence("rc", 2).key)
            .await
            .unwrap()
            .state,
        State::Waiting
    );
    assert!(
        ledger.reap(10, LONG).await.unwrap().is_empty(),
        "once per hold"
    );
    assert_eq!(
        woken(
            ledger
                .complete(&holder, &end(State::Succeeded))
                .await
                .unwrap()
        ),
        Some(key("rc", 2))
    );
}

on_every_backend!(recheck, "ledger_overlap_recheck");

async fn recheck(backend: Backend, env: TestEnv) {
    overlap_recheck_suite(ports::ledger(backend, &env).await).await;
}

/// `skip`: an earlier holder makes a later occurrence busy (skipped), but a retry or a
/// republished attempt of an occurrence that a later one overtook is not skipped for it: it
/// waits for its turn, as under `queue`, is woken when the later one ends and runs; the job
/// never runs two at once.
async fn overlap_skip_suite(ledger: impl Ledger + Inspect) {
    let s = |i, attempt| claim("sk", i, attempt, Overlap::Skip, LONG);
    let busy = |i| ClaimOutcome::Busy {
        holder: key("sk", i),
    };
    let t1 = claimed(&ledger, &s(1, 1)).await;
    assert_eq!(
        ledger.claim(&s(2, 1)).await.unwrap(),
        busy(1),
        "earlier holder"
    );
    // Attempt 1 of sk1 fails; its retry (attempt 2) follows after a backoff.
    let retry = End {
        next: Some(FollowUp {
            attempt: 2,
            body: s(1, 2).body,
            within: LONG,
        }),
        ..end(State::Retrying)
    };
    assert_eq!(woken(ledger.complete(&t1, &retry).await.unwrap()), None);
    // Meanwhile the next occurrence takes the free lock.
    let t3 = claimed(&ledger, &s(3, 1)).await;
    // The retry comes back while sk3 runs: it waits for sk3, it is not skipped.
    assert_eq!(
        waiting(ledger.claim(&s(1, 2)).await.unwrap()),
        (key("sk", 3), None)
    );
    assert_eq!(
        waiting(ledger.claim(&s(1, 2)).await.unwrap()),
        (key("sk", 3), None),
        "a redelivered copy waits again"
    );
    let rec = ledger.inspect(&occurrence("sk", 1).key).await.unwrap();
    assert_eq!((rec.state, rec.attempt), (State::Waiting, 2));
    assert_eq!(ledger.heartbeat(&t3, LONG).await.unwrap(), Heartbeat::Held);
    assert_eq!(
        ledger.claim(&s(4, 1)).await.unwrap(),
        busy(3),
        "earlier holder"
    );
    // sk3 ends: sk1's turn; its attempt 2 runs, and excludes the later ones.
    assert_eq!(
        woken(ledger.complete(&t3, &end(State::Succeeded)).await.unwrap()),
        Some(key("sk", 1))
    );
    let t1 = claimed(&ledger, &s(1, 2)).await;
    assert_eq!(
        ledger.claim(&s(5, 1)).await.unwrap(),
        busy(1),
        "earlier holder"
    );
    assert_eq!(
        woken(ledger.complete(&t1, &end(State::Succeeded)).await.unwrap()),
        None
    );
    let rec = ledger.inspect(&occurrence("sk", 1).key).await.unwrap();
    assert_eq!((rec.state, rec.attempt), (State::Succeeded, 2));

    // The soak's case: the owner of sk6 stops, the reaper hands sk6 back, and the later
    // sk7 has taken the lapsed lock by the time the republished attempt arrives.
    let short = Duration::from_millis(300);
    let t6 = claimed(&ledger, &claim("sk", 6, 1, Overlap::Skip, short)).await;
    let t7 = eventually(WAIT, "the lapsed job lock to be taken", || async {
        match ledger.claim(&s(7, 1)).await.unwrap() {
            ClaimOutcome::Claimed { lease, .. } => Some(lease),
            _ => None,
        }
    })
    .await;
    let orphans = eventually(WAIT, "sk6 to be handed back", || async {
        let o = ledger.reap(10, LONG).await.unwrap();
        (!o.is_empty()).then_some(o)
    })
    .await;
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(
        (orphans[0].key.clone(), orphans[0].why),
        (key("sk", 6), Republish::Lapsed)
    );
    assert_eq!(ledger.heartbeat(&t6, LONG).await.unwrap(), Heartbeat::Lost);
    assert_eq!(
        waiting(ledger.claim(&s(6, 1)).await.unwrap()),
        (key("sk", 7), None)
    );
    assert_eq!(
        woken(ledger.complete(&t7, &end(State::Succeeded)).await.unwrap()),
        Some(key("sk", 6))
    );
    let t6 = claimed(&ledger, &s(6, 1)).await;
    assert_eq!(ledger.heartbeat(&t6, LONG).await.unwrap(), Heartbeat::Held);
}

on_every_backend!(skip, "ledger_overlap_skip");

async fn skip(backend: Backend, env: TestEnv) {
    overlap_skip_suite(ports::ledger(backend, &env).await).await;
}
