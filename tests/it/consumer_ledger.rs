//! The ledger and run-log ports' behaviour, written once as generic suites and run against
//! both the in-memory implementations and Redis (one namespace per test).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use cronq_memory::MemoryLedger;
use cronq_memory::MemoryRunLog;
use cronq_redis::RedisLedger;
use cronq_redis::RedisRunLog;
use cronq_shared::config::Overlap;
use cronq_shared::ledger::{
    Claim, ClaimOutcome, End, Ended, FollowUp, Heartbeat, Lease, Ledger, Republish, Settle, State,
};
use cronq_shared::names::{JobName, Names, Namespace, QueueName};
use cronq_shared::runlog::{Outcome, Run, RunLog};

use crate::broker::occurrence;
use crate::support::inspect::Inspect;
use crate::support::{TestEnv, eventually, redis_url, scoped};

const WAIT: Duration = Duration::from_secs(10);
const LONG: Duration = Duration::from_secs(60);

fn claim(job: &str, i: u32, attempt: u32, overlap: Overlap, lease: Duration) -> Claim {
    let occ = occurrence(job, i);
    Claim {
        key: occ.key.clone(),
        job: occ.job.clone(),
        queue: QueueName::new("default").unwrap(),
        attempt,
        overlap,
        lease,
        retention: LONG,
        body: occ.encode(),
        scheduled_at: occ.scheduled_at,
        recheck: LONG,
        consumer: "test".to_owned(),
    }
}

fn end(state: State) -> End {
    End {
        state: Some(state),
        error: None,
        retention: LONG,
        next: None,
        run: None,
    }
}

async fn claimed(ledger: &impl Ledger, c: &Claim) -> Lease {
    match ledger.claim(c).await.unwrap() {
        ClaimOutcome::Claimed { lease, .. } => lease,
        other => panic!("expected a claim of {}, got {other:?}", c.key),
    }
}

/// Claim, duplicate while running, complete, duplicate when terminal; fencing.
async fn idempotency_suite(ledger: impl Ledger + Inspect) {
    let c = claim("idem", 1, 1, Overlap::Allow, LONG);
    let lease = claimed(&ledger, &c).await;
    assert_eq!(
        ledger.claim(&c).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Running,
            attempt: 1
        }
    );
    assert_eq!(
        ledger.heartbeat(&lease, LONG).await.unwrap(),
        Heartbeat::Held
    );
    let stranger = Lease {
        token: "not-mine".into(),
        ..lease.clone()
    };
    assert!(
        !ledger
            .complete(&stranger, &end(State::Failed))
            .await
            .unwrap()
            .recorded
    );
    assert_eq!(
        ledger.heartbeat(&stranger, LONG).await.unwrap(),
        Heartbeat::Lost
    );
    assert!(
        ledger
            .complete(&lease, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );
    assert_eq!(
        ledger.claim(&c).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Succeeded,
            attempt: 1
        }
    );
    assert!(
        !ledger
            .complete(&lease, &end(State::Failed))
            .await
            .unwrap()
            .recorded
    );
    let record = ledger.inspect(&c.key).await.unwrap();
    assert_eq!(record.state, State::Succeeded);
    assert!(ledger.inspect(&occurrence("idem", 2).key).await.is_none());
}

/// Retry attempts: only a higher attempt may claim a retrying key; stale ones are dups.
async fn attempts_suite(ledger: impl Ledger + Inspect) {
    let first = claim("att", 1, 1, Overlap::Allow, LONG);
    let lease = claimed(&ledger, &first).await;
    let retry = claim("att", 1, 2, Overlap::Allow, LONG);
    let follow = FollowUp {
        attempt: 2,
        body: retry.body.clone(),
        within: LONG,
    };
    let retrying = End {
        state: Some(State::Retrying),
        error: Some("boom".into()),
        retention: LONG,
        next: Some(follow),
        run: None,
    };
    assert!(ledger.complete(&lease, &retrying).await.unwrap().recorded);
    assert!(matches!(
        ledger.claim(&first).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Retrying,
            ..
        }
    ));
    match ledger.claim(&retry).await.unwrap() {
        ClaimOutcome::Claimed { takeover, lease } => {
            assert!(!takeover);
            assert!(
                ledger
                    .complete(&lease, &end(State::Failed))
                    .await
                    .unwrap()
                    .recorded
            );
        }
        other => panic!("retry not claimed: {other:?}"),
    }
    let record = ledger.inspect(&first.key).await.unwrap();
    assert_eq!((record.state, record.attempt), (State::Failed, 2));
    // Failed is terminal, whatever attempt comes; a dead-letter replay is admitted first,
    // and then its attempt 1 runs the occurrence again, once.
    for attempt in [2, 3] {
        assert!(matches!(
            ledger
                .claim(&claim("att", 1, attempt, Overlap::Allow, LONG))
                .await
                .unwrap(),
            ClaimOutcome::Duplicate {
                state: State::Failed,
                attempt: 2
            }
        ));
    }
    let missing = occurrence("att", 9).key;
    assert_eq!(ledger.admit_replay(&missing).await.unwrap(), None);
    assert_eq!(
        ledger.admit_replay(&first.key).await.unwrap(),
        Some(State::Failed)
    );
    assert_eq!(
        ledger.inspect(&first.key).await.unwrap().state,
        State::Retrying
    );
    let replay = claim("att", 1, 1, Overlap::Allow, LONG);
    match ledger.claim(&replay).await.unwrap() {
        ClaimOutcome::Claimed { lease, takeover } => {
            assert!(!takeover);
            assert!(
                ledger
                    .complete(&lease, &end(State::Succeeded))
                    .await
                    .unwrap()
                    .recorded
            );
        }
        other => panic!("replay not claimed: {other:?}"),
    }
    // Succeeded is never admitted again.
    assert_eq!(
        ledger.admit_replay(&first.key).await.unwrap(),
        Some(State::Succeeded)
    );
    let replay_again = claim("att", 1, 4, Overlap::Allow, LONG);
    assert!(matches!(
        ledger.claim(&replay_again).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Succeeded,
            ..
        }
    ));
}

/// A lapsed lease: reaped once per hold, then claimable again; the old owner is fenced.
async fn lease_suite(ledger: impl Ledger + Inspect) {
    let short = Duration::from_millis(300);
    let c = claim("lease", 1, 1, Overlap::Skip, short);
    let old = claimed(&ledger, &c).await;
    let orphans = eventually(WAIT, "the lapsed claim to be reaped", || async {
        Some(ledger.reap(10, LONG).await.unwrap()).filter(|o| !o.is_empty())
    })
    .await;
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].key, c.key.to_string());
    assert_eq!(orphans[0].queue, "default");
    assert_eq!(orphans[0].body, c.body);
    assert!(
        ledger.reap(10, LONG).await.unwrap().is_empty(),
        "a reaped claim is handed out once per hold"
    );
    assert_eq!(
        ledger.heartbeat(&old, short).await.unwrap(),
        Heartbeat::Lost
    );
    let new = match ledger.claim(&c).await.unwrap() {
        ClaimOutcome::Claimed { lease, takeover } => {
            assert!(takeover);
            lease
        }
        other => panic!("reaped key not claimable: {other:?}"),
    };
    assert!(
        !ledger
            .complete(&old, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );
    assert!(
        ledger
            .complete(&new, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );
    assert!(ledger.reap(10, LONG).await.unwrap().is_empty());
}

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

/// Settling without running; retention expiry.
async fn settle_suite(ledger: impl Ledger + Inspect) {
    let occ = occurrence("set", 1);
    let settle = Settle {
        key: occ.key.clone(),
        job: occ.job.clone(),
        attempt: 1,
        state: State::Missed,
        error: Some("late".into()),
        retention: Duration::from_millis(500),
        run: None,
    };
    assert!(ledger.settle(&settle).await.unwrap().recorded);
    assert!(!ledger.settle(&settle).await.unwrap().recorded);
    assert_eq!(
        ledger
            .claim(&claim("set", 1, 1, Overlap::Allow, LONG))
            .await
            .unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Missed,
            attempt: 1
        }
    );
    claimed(&ledger, &claim("set", 2, 1, Overlap::Allow, LONG)).await;
    let running = Settle {
        key: occurrence("set", 2).key,
        state: State::Skipped,
        ..settle.clone()
    };
    assert!(!ledger.settle(&running).await.unwrap().recorded);
    eventually(WAIT, "the record to expire after its retention", || async {
        ledger.inspect(&occ.key).await.is_none().then_some(())
    })
    .await;
}

async fn redis_ports(env: &TestEnv) -> (RedisLedger, RedisRunLog) {
    let conn = cronq_redis::connect(&redis_url()).await.unwrap();
    let names = Names::new(&Namespace::new(&env.namespace).unwrap());
    let history = RedisRunLog::new(conn.clone(), &names, LONG);
    (RedisLedger::new(conn, names, history.clone()), history)
}

async fn redis_ledger(env: &TestEnv) -> RedisLedger {
    redis_ports(env).await.0
}

macro_rules! both {
    ($suite:ident, $memory:ident, $redis:ident) => {
        #[tokio::test]
        async fn $memory() {
            $suite(MemoryLedger::default()).await;
        }

        #[tokio::test]
        async fn $redis() {
            scoped(stringify!($redis), |env| async move {
                $suite(redis_ledger(&env).await).await;
            })
            .await;
        }
    };
}

both!(
    idempotency_suite,
    ledger_idempotency_memory,
    ledger_idempotency_redis
);
both!(
    attempts_suite,
    ledger_attempts_memory,
    ledger_attempts_redis
);
both!(lease_suite, ledger_lease_memory, ledger_lease_redis);
both!(overlap_suite, ledger_overlap_memory, ledger_overlap_redis);
both!(
    overlap_queue_suite,
    ledger_overlap_queue_memory,
    ledger_overlap_queue_redis
);
both!(
    overlap_recheck_suite,
    ledger_overlap_recheck_memory,
    ledger_overlap_recheck_redis
);
both!(settle_suite, ledger_settle_memory, ledger_settle_redis);

fn run(job: &str, i: u32, outcome: Outcome) -> Run {
    let occ = occurrence(job, i);
    Run {
        key: occ.key,
        job: occ.job,
        attempt: 1,
        consumer: "c1".into(),
        started_at: Utc::now(),
        duration: Duration::from_millis(1500),
        outcome,
        error: (outcome != Outcome::Succeeded).then(|| "boom".to_owned()),
    }
}

async fn runlog_suite(log: impl RunLog) {
    let runs = [
        run("a", 1, Outcome::Succeeded),
        run("b", 1, Outcome::Failed),
        run("a", 2, Outcome::Skipped),
    ];
    for r in &runs {
        log.record(r).await.unwrap();
    }
    let all = log.list(None, 10).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].key, runs[2].key, "newest first");
    assert_eq!(all[2].key, runs[0].key);
    let a = JobName::new("a").unwrap();
    let only_a = log.list(Some(&a), 10).await.unwrap();
    assert_eq!(only_a.len(), 2);
    assert!(only_a.iter().all(|r| r.job == a));
    assert_eq!(only_a[0].outcome, Outcome::Skipped);
    assert_eq!(only_a[1].duration, Duration::from_millis(1500));
    assert_eq!(only_a[0].error.as_deref(), Some("boom"));
    assert_eq!(only_a[1].error, None);
    assert_eq!(log.list(None, 1).await.unwrap().len(), 1);
}

/// The ledger is the one writer of the history: the run of an ended or settled record
/// reaches it in the same step; a fenced or given-up completion changes no record but
/// appends its run as `lost`; a refused settle appends nothing.
async fn history_suite(ledger: impl Ledger + Inspect, log: &dyn RunLog) {
    let c = claim("hist", 1, 1, Overlap::Allow, LONG);
    let lease = claimed(&ledger, &c).await;
    let stranger = Lease {
        token: "not-the-owner".into(),
        ..lease.clone()
    };
    let fenced = End {
        run: Some(run("hist", 1, Outcome::Failed)),
        ..end(State::Failed)
    };
    assert!(!ledger.complete(&stranger, &fenced).await.unwrap().recorded);
    let record = ledger.inspect(&c.key).await.unwrap();
    assert_eq!(
        record.state,
        State::Running,
        "fenced: the record is unchanged"
    );
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(
        runs.len(),
        1,
        "fenced: the attempt's run, as lost: {runs:?}"
    );
    assert_eq!(runs[0].outcome, Outcome::Lost);
    assert_eq!(runs[0].error.as_deref(), Some("lost the claim after: boom"));
    assert_eq!(runs[0].consumer, "c1");
    let succeeded = run("hist", 1, Outcome::Succeeded);
    let done = End {
        run: Some(succeeded.clone()),
        ..end(State::Succeeded)
    };
    assert!(ledger.complete(&lease, &done).await.unwrap().recorded);
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(runs.len(), 2, "one run per end: {runs:?}");
    assert_eq!(runs[0].key, succeeded.key, "newest first");
    assert_eq!(runs[0].outcome, Outcome::Succeeded);
    assert_eq!(runs[0].consumer, "c1");
    assert_eq!(runs[0].duration, Duration::from_millis(1500));
    assert_eq!(runs[0].error, None);
    assert!(
        !ledger.complete(&lease, &done).await.unwrap().recorded,
        "already ended"
    );
    let record = ledger.inspect(&c.key).await.unwrap();
    assert_eq!(
        record.state,
        State::Succeeded,
        "an ended claim is fenced too"
    );
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(runs[0].outcome, Outcome::Lost);
    assert_eq!(
        runs[0].error.as_deref(),
        Some("lost the claim: the lease lapsed and another consumer took over")
    );

    // Given up by its owner (no state): the record stays running, its lease lapses.
    let kept = claim("hist", 3, 1, Overlap::Allow, LONG);
    let kept_lease = claimed(&ledger, &kept).await;
    let given_up = End {
        state: None,
        run: Some(run("hist", 3, Outcome::Failed)),
        ..end(State::Failed)
    };
    assert!(
        !ledger
            .complete(&kept_lease, &given_up)
            .await
            .unwrap()
            .recorded
    );
    let record = ledger.inspect(&kept.key).await.unwrap();
    assert_eq!(
        record.state,
        State::Running,
        "given up: the record is unchanged"
    );
    assert_eq!(
        ledger.heartbeat(&kept_lease, LONG).await.unwrap(),
        Heartbeat::Held,
        "given up: the claim is still the owner's until its lease lapses"
    );
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert_eq!(runs[0].key, kept.key);
    assert_eq!(runs[0].outcome, Outcome::Lost);
    assert_eq!(runs[0].error.as_deref(), Some("lost the claim after: boom"));

    let missed = run("hist", 2, Outcome::Missed);
    let settle = Settle {
        key: missed.key.clone(),
        job: missed.job.clone(),
        attempt: 1,
        state: State::Missed,
        error: Some("boom".into()),
        retention: LONG,
        run: Some(missed.clone()),
    };
    assert!(ledger.settle(&settle).await.unwrap().recorded);
    assert!(
        !ledger.settle(&settle).await.unwrap().recorded,
        "already settled"
    );
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(runs.len(), 5, "a refused settle adds no run: {runs:?}");
    assert_eq!(runs[0].key, missed.key, "newest first");
    assert_eq!(runs[0].outcome, Outcome::Missed);
    assert_eq!(runs[0].error.as_deref(), Some("boom"));
}

#[tokio::test]
async fn ledger_history_memory() {
    let history = Arc::new(MemoryRunLog::default());
    history_suite(MemoryLedger::new(Arc::clone(&history)), &*history).await;
}

#[tokio::test]
async fn ledger_history_redis() {
    scoped("ledger_history_redis", |env| async move {
        let (ledger, history) = redis_ports(&env).await;
        history_suite(ledger, &history).await;
    })
    .await;
}

#[tokio::test]
async fn ledger_overlap_replace_memory() {
    let history = Arc::new(MemoryRunLog::default());
    overlap_replace_suite(MemoryLedger::new(Arc::clone(&history)), &*history).await;
}

#[tokio::test]
async fn ledger_overlap_replace_redis() {
    scoped("ledger_overlap_replace_redis", |env| async move {
        let (ledger, history) = redis_ports(&env).await;
        overlap_replace_suite(ledger, &history).await;
    })
    .await;
}

#[tokio::test]
async fn runlog_memory() {
    runlog_suite(MemoryRunLog::default()).await;
}

#[tokio::test]
async fn runlog_redis() {
    scoped("runlog_redis", |env| async move {
        let conn = cronq_redis::connect(&redis_url()).await.unwrap();
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        runlog_suite(RedisRunLog::new(conn, &names, LONG)).await;
    })
    .await;
}

/// The stored message lives apart from the record, so a record stays a small
/// listpack-encoded hash for its whole retention (one long field would turn it into a
/// hashtable, about 3x the memory, even after the field is deleted), and the message is
/// kept exactly while a reaper may need it.
#[tokio::test]
async fn ledger_redis_records_stay_compact() {
    scoped("ledger_redis_records_stay_compact", |env| async move {
        let ledger = redis_ledger(&env).await;
        let mut conn = cronq_redis::connect(&redis_url()).await.unwrap();
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let c = claim("compact", 1, 1, Overlap::Allow, LONG);
        let key = c.key.to_string();
        let (record, body) = (
            names.redis_key(&["occ", &key]),
            names.redis_key(&["occbody", &key]),
        );
        let encoding = |conn: &mut redis::aio::ConnectionManager| {
            let mut conn = conn.clone();
            let record = record.clone();
            async move {
                redis::cmd("OBJECT")
                    .arg("ENCODING")
                    .arg(&record)
                    .query_async::<String>(&mut conn)
                    .await
                    .unwrap()
            }
        };
        let stored = |conn: &mut redis::aio::ConnectionManager| {
            let mut conn = conn.clone();
            let body = body.clone();
            async move {
                redis::cmd("GET")
                    .arg(&body)
                    .query_async::<Option<Vec<u8>>>(&mut conn)
                    .await
                    .unwrap()
            }
        };

        let lease = claimed(&ledger, &c).await;
        assert_eq!(encoding(&mut conn).await, "listpack");
        assert_eq!(
            stored(&mut conn).await,
            Some(c.body.clone()),
            "kept while running"
        );

        let retry = claim("compact", 1, 2, Overlap::Allow, LONG);
        let retrying = End {
            next: Some(FollowUp {
                attempt: 2,
                body: retry.body.clone(),
                within: LONG,
            }),
            error: Some("boom".into()),
            ..end(State::Retrying)
        };
        assert!(ledger.complete(&lease, &retrying).await.unwrap().recorded);
        assert_eq!(
            stored(&mut conn).await,
            Some(retry.body.clone()),
            "the follow-up"
        );

        let lease = claimed(&ledger, &retry).await;
        assert!(
            ledger
                .complete(&lease, &end(State::Succeeded))
                .await
                .unwrap()
                .recorded
        );
        assert_eq!(stored(&mut conn).await, None, "dropped once terminal");
        assert_eq!(encoding(&mut conn).await, "listpack");
    })
    .await;
}

/// A rolling upgrade: a claim written by a consumer from before the body moved to its own
/// key (the body a field of the record) whose owner died is still handed back, body and
/// all, by today's reaper.
#[tokio::test]
async fn ledger_redis_reaps_a_claim_stored_by_an_older_consumer() {
    scoped("ledger_redis_reaps_old_claim", |env| async move {
        let ledger = redis_ledger(&env).await;
        let mut conn = cronq_redis::connect(&redis_url()).await.unwrap();
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let c = claim("upgrade", 1, 1, Overlap::Allow, LONG);
        let key = c.key.to_string();
        // The old layout, with a lease that ran out a second ago.
        let () = redis::pipe()
            .cmd("HSET")
            .arg(names.redis_key(&["occ", &key]))
            .arg(&[
                ("state", "running"),
                ("attempt", "1"),
                ("next", "1"),
                ("token", "old-owner"),
                ("job", c.job.as_str()),
                ("queue", c.queue.as_str()),
                ("lease_until", "1"),
                ("cancel", "0"),
                ("exclusive", "0"),
            ])
            .ignore()
            .cmd("HSET")
            .arg(names.redis_key(&["occ", &key]))
            .arg("body")
            .arg(&c.body[..])
            .ignore()
            .cmd("ZADD")
            .arg(names.redis_key(&["leases"]))
            .arg(1)
            .arg(&key)
            .ignore()
            .query_async(&mut conn)
            .await
            .unwrap();
        let orphans = ledger.reap(10, LONG).await.unwrap();
        assert_eq!(orphans.len(), 1, "{orphans:?}");
        assert_eq!(orphans[0].key, key);
        assert_eq!(orphans[0].queue, c.queue.as_str());
        assert_eq!(orphans[0].body, c.body, "the body from the record itself");
    })
    .await;
}
