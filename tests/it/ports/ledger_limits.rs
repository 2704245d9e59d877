//! The ledger's concurrency limits, one mechanism under `overlap`, `max_concurrent` and
//! pools: a job of `max_concurrent = N` runs N occurrences at once and the next one does
//! what its overlap says (`queue` waits, in scheduled order, woken one per freed slot;
//! `skip` is skipped; `replace` stops the oldest); a pool of N runs N of its jobs' runs at
//! once, the others wait in scheduled order across the jobs; a slot whose holder stopped
//! renewing frees after its lease and not before; what a gate's use reads as; on every
//! backend.

use std::time::Duration;

use cronq_shared::config::Overlap;
use cronq_shared::ledger::{
    Cancel, Claim, ClaimOutcome, Ended, ExecutionLease, GateUse, Heartbeat, Ledger, PoolSlot,
    Republish, Settle, State, pool_gate,
};
use cronq_shared::names::JobName;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::inspect::Inspect;
use crate::support::occurrences::{LONG, claim, claimed, end, occurrence};
use crate::support::ports;

fn key(job: &str, i: u32) -> String {
    occurrence(job, i).key.to_string()
}

/// The claim of occurrence `i` of `job` under `overlap` with `max_concurrent = n`.
fn limited(job: &str, i: u32, overlap: Overlap, n: u32) -> Claim {
    Claim {
        max_concurrent: n,
        ..claim(job, i, 1, overlap, LONG)
    }
}

/// The claim of occurrence `i` of `job` (overlap `allow`) in pool `pool` of `size`.
fn pooled(job: &str, i: u32, pool: &str, size: u32, lease: Duration) -> Claim {
    Claim {
        pool: Some(PoolSlot {
            name: pool.to_owned(),
            size,
        }),
        ..claim(job, i, 1, Overlap::Allow, lease)
    }
}

/// The waiter a recorded end gave its turn to, if any.
fn woken(ended: Ended) -> Option<String> {
    assert!(ended.recorded, "{ended:?}");
    ended.woken.map(|w| {
        assert_eq!(w.why, Republish::Turn);
        w.key
    })
}

/// (holder, woken) of a claim that must wait.
fn waiting(outcome: ClaimOutcome) -> (String, Option<String>) {
    match outcome {
        ClaimOutcome::Waiting { holder, woken } => (holder, woken.map(|w| w.key)),
        other => panic!("expected to wait, got {other:?}"),
    }
}

async fn state(ledger: &impl Inspect, job: &str, i: u32) -> State {
    ledger.inspect(&occurrence(job, i).key).await.unwrap().state
}

async fn succeed(ledger: &impl Ledger, lease: &ExecutionLease) -> Option<String> {
    woken(
        ledger
            .complete(lease, &end(State::Succeeded))
            .await
            .unwrap(),
    )
}

/// `max_concurrent = 3` with `queue`: three run, the fourth and fifth wait; each freed slot
/// wakes the next waiter in scheduled order, also when two slots free before either
/// waiter claims; a newcomer never overtakes a waiter whose turn is on its way.
async fn max_concurrent_queue_suite(ledger: impl Ledger + Inspect) {
    let q = |i| limited("mq", i, Overlap::Queue, 3);
    let q1 = claimed(&ledger, &q(1)).await;
    let q2 = claimed(&ledger, &q(2)).await;
    let q3 = claimed(&ledger, &q(3)).await;
    assert_eq!(waiting(ledger.claim(&q(5)).await.unwrap()).1, None);
    assert_eq!(waiting(ledger.claim(&q(4)).await.unwrap()).1, None);
    assert_eq!(state(&ledger, "mq", 4).await, State::Waiting);
    assert_eq!(
        succeed(&ledger, &q1).await,
        Some(key("mq", 4)),
        "first waiter"
    );
    assert_eq!(
        succeed(&ledger, &q2).await,
        Some(key("mq", 5)),
        "the second freed slot is the second waiter's"
    );
    // Two slots free, both turns on their way: a newcomer waits behind them.
    assert_eq!(waiting(ledger.claim(&q(6)).await.unwrap()).0, key("mq", 5));
    let q5 = claimed(&ledger, &q(5)).await;
    let q4 = claimed(&ledger, &q(4)).await;
    // Full again (q3, q4, q5): q6's copy waits.
    assert_eq!(waiting(ledger.claim(&q(6)).await.unwrap()).1, None);
    assert_eq!(succeed(&ledger, &q3).await, Some(key("mq", 6)));
    let q6 = claimed(&ledger, &q(6)).await;
    for lease in [q4, q5, q6] {
        assert_eq!(succeed(&ledger, &lease).await, None);
    }
    for i in 1..=6 {
        assert_eq!(state(&ledger, "mq", i).await, State::Succeeded, "mq{i}");
    }
}

on_every_backend!(max_concurrent_queue, "ledger_limits_queue");

async fn max_concurrent_queue(backend: Backend, env: crate::support::TestEnv) {
    max_concurrent_queue_suite(ports::ledger(backend, &env).await).await;
}

/// `max_concurrent = 2` with `skip` and with `replace`.
async fn max_concurrent_skip_replace_suite(ledger: impl Ledger + Inspect) {
    let s = |i| limited("ms", i, Overlap::Skip, 2);
    let s1 = claimed(&ledger, &s(1)).await;
    claimed(&ledger, &s(2)).await;
    assert_eq!(
        ledger.claim(&s(3)).await.unwrap(),
        ClaimOutcome::Busy {
            holder: key("ms", 1)
        }
    );
    assert_eq!(succeed(&ledger, &s1).await, None);
    claimed(&ledger, &s(4)).await;

    // replace: the third asks the oldest to stop, the fourth the next oldest; the fifth,
    // every holder asked already, takes the oldest waiter's place.
    let r = |i| limited("mr", i, Overlap::Replace, 2);
    let r1 = claimed(&ledger, &r(1)).await;
    let r2 = claimed(&ledger, &r(2)).await;
    assert_eq!(
        waiting(ledger.claim(&r(3)).await.unwrap()),
        (key("mr", 1), None)
    );
    assert_eq!(
        ledger.heartbeat(&r1, LONG).await.unwrap(),
        Heartbeat::CancelRequested { by: key("mr", 3) }
    );
    assert_eq!(ledger.heartbeat(&r2, LONG).await.unwrap(), Heartbeat::Held);
    assert_eq!(
        waiting(ledger.claim(&r(4)).await.unwrap()),
        (key("mr", 2), None)
    );
    assert_eq!(
        ledger.heartbeat(&r2, LONG).await.unwrap(),
        Heartbeat::CancelRequested { by: key("mr", 4) }
    );
    waiting(ledger.claim(&r(5)).await.unwrap());
    assert_eq!(state(&ledger, "mr", 3).await, State::Cancelled);
    assert_eq!(state(&ledger, "mr", 4).await, State::Waiting);
    // An older one than every holder is superseded.
    assert!(matches!(
        ledger.claim(&r(0)).await.unwrap(),
        ClaimOutcome::Superseded { .. }
    ));
    let stopped = woken(ledger.complete(&r1, &end(State::Cancelled)).await.unwrap());
    assert_eq!(stopped, Some(key("mr", 4)));
    let stopped = woken(ledger.complete(&r2, &end(State::Cancelled)).await.unwrap());
    assert_eq!(stopped, Some(key("mr", 5)));
    claimed(&ledger, &r(4)).await;
    claimed(&ledger, &r(5)).await;
}

on_every_backend!(max_concurrent_skip_replace, "ledger_limits_skip");

async fn max_concurrent_skip_replace(backend: Backend, env: crate::support::TestEnv) {
    max_concurrent_skip_replace_suite(ports::ledger(backend, &env).await).await;
}

/// A pool of 2 shared by three jobs: two run, the others wait across the jobs in scheduled
/// order; a waiter settled `missed` or cancelled hands its turn on; a job both exclusive and
/// pooled takes a slot of each.
async fn pool_suite(ledger: impl Ledger + Inspect) {
    let p = |job, i| pooled(job, i, "two", 2, LONG);
    let a1 = claimed(&ledger, &p("pa", 1)).await;
    let b2 = claimed(&ledger, &p("pb", 2)).await;
    // Full: c3 and a4 wait, whichever job they belong to; c5 too.
    assert_eq!(waiting(ledger.claim(&p("pa", 4)).await.unwrap()).1, None);
    assert_eq!(waiting(ledger.claim(&p("pc", 3)).await.unwrap()).1, None);
    assert_eq!(waiting(ledger.claim(&p("pc", 5)).await.unwrap()).1, None);
    // What `cronq jobs`, the dashboard and /metrics show of it.
    let used = ledger.gates(&[pool_gate("two")]).await.unwrap();
    assert_eq!(
        used,
        [GateUse {
            gate: "pool:two".into(),
            running: vec![key("pa", 1), key("pb", 2)],
            waiting: 3,
            next: vec![key("pc", 3), key("pa", 4), key("pc", 5)],
        }]
    );
    // Another pool is not held back.
    claimed(&ledger, &pooled("pa", 9, "other", 1, LONG)).await;
    assert_eq!(
        succeed(&ledger, &b2).await,
        Some(key("pc", 3)),
        "earliest first"
    );
    let c3 = claimed(&ledger, &p("pc", 3)).await;
    assert_eq!(
        waiting(ledger.claim(&p("pb", 6)).await.unwrap()).1,
        None,
        "full again"
    );
    // a4's turn comes; it misses its deadline and hands the turn to c5.
    assert_eq!(succeed(&ledger, &a1).await, Some(key("pa", 4)));
    let missed = Settle {
        key: occurrence("pa", 4).key,
        job: JobName::new("pa").unwrap(),
        attempt: 1,
        state: State::Missed,
        error: Some("late".into()),
        retention: LONG,
        run: None,
    };
    assert_eq!(
        woken(ledger.settle(&missed).await.unwrap()),
        Some(key("pc", 5))
    );
    let c5 = claimed(&ledger, &p("pc", 5)).await;
    // b6 waits; cancelled by an operator, it never runs.
    ledger
        .cancel(&Cancel {
            key: occurrence("pb", 6).key,
            who: "test".into(),
        })
        .await
        .unwrap();
    assert_eq!(state(&ledger, "pb", 6).await, State::Cancelled);
    assert_eq!(succeed(&ledger, &c3).await, None, "no one waits");
    assert_eq!(succeed(&ledger, &c5).await, None);

    // Exclusive (one at a time) and pooled: x1 holds the job's slot and one of the pool's.
    let xp = |i| Claim {
        pool: Some(PoolSlot {
            name: "two".into(),
            size: 2,
        }),
        ..limited("px", i, Overlap::Queue, 1)
    };
    let x1 = claimed(&ledger, &xp(1)).await;
    assert_eq!(
        waiting(ledger.claim(&xp(2)).await.unwrap()),
        (key("px", 1), None),
        "the job's own slot is taken"
    );
    let y3 = claimed(&ledger, &p("py", 3)).await;
    assert_eq!(
        waiting(ledger.claim(&p("py", 4)).await.unwrap()).1,
        None,
        "the pool is full"
    );
    assert_eq!(succeed(&ledger, &x1).await, Some(key("px", 2)));
    // x2 finds its job's slot free, and is scheduled before the pool's waiter py4: it takes
    // the pool slot x1 freed.
    let x2 = claimed(&ledger, &xp(2)).await;
    assert_eq!(
        waiting(ledger.claim(&p("py", 4)).await.unwrap()).1,
        None,
        "the pool is full again"
    );
    assert_eq!(succeed(&ledger, &y3).await, Some(key("py", 4)));
    claimed(&ledger, &p("py", 4)).await;
    assert_eq!(succeed(&ledger, &x2).await, None);
}

on_every_backend!(pool, "ledger_limits_pool");

async fn pool(backend: Backend, env: crate::support::TestEnv) {
    pool_suite(ports::ledger(backend, &env).await).await;
}

/// A pool slot whose holder stopped renewing (a killed consumer) stays taken until its
/// lease ends, and is free after it; the holder, should it come back, is told it lost it.
async fn pool_lapse_suite(ledger: impl Ledger + Inspect) {
    let lease = Duration::from_millis(1500);
    let held = claimed(&ledger, &pooled("pl", 1, "one", 1, lease)).await;
    let started = std::time::Instant::now();
    assert_eq!(
        waiting(
            ledger
                .claim(&pooled("pm", 2, "one", 1, LONG))
                .await
                .unwrap()
        )
        .0,
        key("pl", 1)
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        matches!(
            ledger
                .claim(&pooled("pm", 2, "one", 1, LONG))
                .await
                .unwrap(),
            ClaimOutcome::Waiting { .. }
        ),
        "before its lease ends, the slot is still held"
    );
    assert!(
        started.elapsed() < lease,
        "the check above ran inside the lease"
    );
    tokio::time::sleep(lease).await;
    let next = claimed(&ledger, &pooled("pm", 2, "one", 1, LONG)).await;
    assert_eq!(
        ledger.heartbeat(&held, lease).await.unwrap(),
        Heartbeat::Lost
    );
    assert_eq!(
        ledger.heartbeat(&next, LONG).await.unwrap(),
        Heartbeat::Held
    );
}

on_every_backend!(pool_lapse, "ledger_limits_lapse");

async fn pool_lapse(backend: Backend, env: crate::support::TestEnv) {
    pool_lapse_suite(ports::ledger(backend, &env).await).await;
}
