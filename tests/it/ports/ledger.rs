//! The ledger port's contract (`Ledger`): a key claimed once, fencing of a lost lease,
//! retry attempts and replay admission, lapsed claims reaped, settling without running, on
//! every backend.

use std::time::Duration;

use cronq_shared::config::Overlap;
use cronq_shared::ledger::{
    Claim, ClaimOutcome, End, ExecutionLease, FollowUp, Heartbeat, Ledger, Settle, State,
    claim_token,
};
use cronq_shared::runlog::{Outcome, RunLog};

use crate::support::backends::{Backend, on_every_backend};
use crate::support::inspect::Inspect;
use crate::support::occurrences::{LONG, claim, claimed, end, occurrence, run_of};
use crate::support::ports::{self};
use crate::support::{TestEnv, eventually};

const WAIT: Duration = Duration::from_secs(10);

/// The end of `c`'s attempt as its consumer records a success: with its run.
fn success(c: &Claim) -> End {
    End {
        run: Some(run_of(c)),
        ..end(State::Succeeded)
    }
}

/// Claim, duplicate while running, complete, duplicate when terminal; fencing.
async fn idempotency_suite(ledger: impl Ledger + Inspect) {
    let c = claim("idem", 1, 1, Overlap::Allow, LONG);
    let lease = claimed(&ledger, &c).await;
    // Another delivery of the same message: a claim of its own.
    let again = Claim {
        token: claim_token(),
        ..c.clone()
    };
    assert_eq!(
        ledger.claim(&again).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Running,
            attempt: 1
        }
    );
    assert_eq!(
        ledger.heartbeat(&lease, LONG).await.unwrap(),
        Heartbeat::Held
    );
    let stranger = ExecutionLease {
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

on_every_backend!(idempotency, "ledger_idempotency");

async fn idempotency(backend: Backend, env: TestEnv) {
    idempotency_suite(ports::ledger(backend, &env).await).await;
}

/// A claim or an end tried again after it was recorded, unbeknown to its caller (the
/// answer lost, or the write short of replicas): the claim is granted again to its own
/// token (another delivery's is a duplicate), and the same end is reported recorded once
/// more, appending no second run; another end by that claim is not recorded.
async fn retried_suite(ledger: impl Ledger + Inspect, history: &dyn RunLog) {
    let c = claim("retried", 1, 1, Overlap::Skip, LONG);
    let lease = claimed(&ledger, &c).await;
    match ledger.claim(&c).await.unwrap() {
        ClaimOutcome::Claimed {
            lease: again,
            takeover,
        } => {
            assert_eq!(again, lease);
            assert!(!takeover, "its own claim is no takeover");
        }
        other => panic!("a claim tried again is granted again, got {other:?}"),
    }
    let other = Claim {
        token: claim_token(),
        ..c.clone()
    };
    assert!(matches!(
        ledger.claim(&other).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Running,
            ..
        }
    ));
    let done = success(&c);
    assert!(ledger.complete(&lease, &done).await.unwrap().recorded);
    assert!(
        ledger.complete(&lease, &done).await.unwrap().recorded,
        "the same end, tried again"
    );
    let runs = history.list(Some(&c.job), 10).await.unwrap();
    assert_eq!(
        runs.iter().map(|r| r.outcome).collect::<Vec<_>>(),
        [Outcome::Succeeded],
        "one run for the end recorded once"
    );
    assert!(
        !ledger
            .complete(&lease, &end(State::Failed))
            .await
            .unwrap()
            .recorded,
        "another end of an ended claim"
    );
    assert_eq!(
        ledger.inspect(&c.key).await.unwrap().state,
        State::Succeeded
    );
    assert!(matches!(
        ledger.claim(&c).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Succeeded,
            ..
        }
    ));
}

on_every_backend!(retried, "ledger_retried");

async fn retried(backend: Backend, env: TestEnv) {
    let (ledger, history) = ports::ledger_with_log(backend, &env).await;
    retried_suite(ledger, &*history).await;
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

on_every_backend!(attempts, "ledger_attempts");

async fn attempts(backend: Backend, env: TestEnv) {
    attempts_suite(ports::ledger(backend, &env).await).await;
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
    // The republished message: another delivery, a claim of its own.
    let redelivered = Claim {
        token: claim_token(),
        ..c.clone()
    };
    let new = match ledger.claim(&redelivered).await.unwrap() {
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

on_every_backend!(lease, "ledger_lease");

async fn lease(backend: Backend, env: TestEnv) {
    lease_suite(ports::ledger(backend, &env).await).await;
}

/// A held claim (its caller holds the delivery unacked): where the store grants it held
/// (Redis), it keeps no message for a reaper until the message is kept: a lapsed held claim
/// is not reaped (the broker redelivers its message, and the redelivery takes it over,
/// not held); a
/// redelivery while its lease lives keeps the message, and the reaper hands it out once
/// the lease lapses; `keep` keeps it; its end leaves nothing to reap; a try of the same
/// claim is granted held again. Where the store keeps every message, no claim is held and
/// each is reaped as any other. Only an `allow` claim outside any pool is held.
async fn held_suite(ledger: impl Ledger + Inspect) {
    let short = Duration::from_millis(300);
    let held = |i: u32, overlap: Overlap| Claim {
        held: true,
        ..claim("held", i, 1, overlap, short)
    };
    let lapse = || tokio::time::sleep(short * 2);
    let reaped = || async { ledger.reap(10, LONG).await.unwrap() };

    // Lapsed, nothing kept.
    let c1 = held(1, Overlap::Allow);
    let l1 = claimed(&ledger, &c1).await;
    let holds = l1.held;
    let again = claimed(&ledger, &c1).await;
    assert_eq!(
        (again.held, again.fence),
        (holds, l1.fence),
        "a try of the same claim is granted as it was"
    );
    lapse().await;
    let orphans = reaped().await;
    if holds {
        assert!(
            orphans.is_empty(),
            "a held claim has no message to reap: {orphans:?}"
        );
        let redelivered = Claim {
            token: claim_token(),
            ..c1.clone()
        };
        match ledger.claim(&redelivered).await.unwrap() {
            ClaimOutcome::Claimed { takeover, lease } => {
                assert!(takeover);
                assert!(
                    !lease.held,
                    "a takeover keeps its message, as any claim of a record"
                );
                // Its fence too is greater, though the tries before it took fences they
                // never used (claim.lua's most common claim takes one before it looks).
                assert!(lease.fence > l1.fence, "{lease:?} after {l1:?}");
                let ended = ledger.complete(&lease, &end(State::Succeeded)).await;
                assert!(ended.unwrap().recorded);
            }
            other => panic!("a lapsed held claim redelivered: {other:?}"),
        }
    } else {
        assert_eq!(orphans.len(), 1, "{orphans:?}");
        assert_eq!(orphans[0].body, c1.body);
    }

    // Delivered again while its lease lives: the message is kept, and reaped once lapsed.
    let c2 = held(2, Overlap::Allow);
    let l2 = claimed(&ledger, &c2).await;
    let redelivered = Claim {
        token: claim_token(),
        ..c2.clone()
    };
    assert!(matches!(
        ledger.claim(&redelivered).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Running,
            attempt: 1
        }
    ));
    assert!(reaped().await.is_empty(), "its lease lives");
    lapse().await;
    let orphans = reaped().await;
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(
        (orphans[0].key.as_str(), &orphans[0].body),
        (c2.key.as_str(), &c2.body)
    );
    assert_eq!(ledger.heartbeat(&l2, short).await.unwrap(), Heartbeat::Lost);

    // Kept by its owner, then lapsed: reaped.
    let c3 = held(3, Overlap::Allow);
    let l3 = claimed(&ledger, &c3).await;
    assert_eq!(
        ledger.keep(&l3, short, &c3.body, LONG).await.unwrap(),
        Heartbeat::Held
    );
    lapse().await;
    let orphans = reaped().await;
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(orphans[0].body, c3.body);

    // Ended, held or kept (its success with its run, the end Redis makes from fewer
    // arguments while the claim is held, and as any other once kept): nothing to reap, and
    // terminal.
    let c4 = held(4, Overlap::Allow);
    let l4 = claimed(&ledger, &c4).await;
    assert_eq!(ledger.heartbeat(&l4, short).await.unwrap(), Heartbeat::Held);
    let c7 = held(7, Overlap::Allow);
    let l7 = claimed(&ledger, &c7).await;
    assert_eq!(
        ledger.keep(&l7, short, &c7.body, LONG).await.unwrap(),
        Heartbeat::Held
    );
    for (c, l) in [(&c4, &l4), (&c7, &l7)] {
        assert!(ledger.complete(l, &success(c)).await.unwrap().recorded);
    }
    lapse().await;
    assert!(reaped().await.is_empty());
    for c in [&c4, &c7] {
        assert_eq!(
            ledger.inspect(&c.key).await.unwrap().state,
            State::Succeeded
        );
    }

    // Retried: the follow-up message is kept whatever the claim was.
    let c5 = held(5, Overlap::Allow);
    let l5 = claimed(&ledger, &c5).await;
    let follow = FollowUp {
        attempt: 2,
        body: b"attempt 2".to_vec(),
        within: Duration::from_millis(100),
    };
    let retrying = End {
        state: Some(State::Retrying),
        error: Some("boom".into()),
        retention: LONG,
        next: Some(follow),
        run: None,
    };
    assert!(ledger.complete(&l5, &retrying).await.unwrap().recorded);
    lapse().await;
    let orphans = reaped().await;
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(orphans[0].body, b"attempt 2");

    // Never held: a gated claim.
    let c6 = held(6, Overlap::Skip);
    assert!(!claimed(&ledger, &c6).await.held);
}

on_every_backend!(held, "ledger_held");

async fn held(backend: Backend, env: TestEnv) {
    held_suite(ports::ledger(backend, &env).await).await;
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

on_every_backend!(settle, "ledger_settle");

async fn settle(backend: Backend, env: TestEnv) {
    settle_suite(ports::ledger(backend, &env).await).await;
}

/// Fencing tokens: every claim granted gets a fence greater than every earlier one of its
/// job (across keys, a takeover after a lapsed lease, and the expiry of the records that
/// had them); a claim granted again under its own token keeps its fence.
async fn fence_suite(ledger: impl Ledger + Inspect) {
    let c1 = claim("fence", 1, 1, Overlap::Allow, LONG);
    let first = claimed(&ledger, &c1).await;
    assert!(first.fence >= 1, "{first:?}");
    let again = claimed(&ledger, &c1).await;
    assert_eq!(again.fence, first.fence, "the same claim, tried again");
    // An exclusive job's claim, for the other branch of the claim step.
    let second = claimed(&ledger, &claim("fence", 2, 1, Overlap::Skip, LONG)).await;
    assert!(second.fence > first.fence, "{second:?} after {first:?}");
    // A takeover of a lapsed claim: a new attempt, a greater fence.
    let short = claim("fence", 3, 1, Overlap::Allow, Duration::from_millis(300));
    let lapsed = claimed(&ledger, &short).await;
    assert!(lapsed.fence > second.fence);
    eventually(WAIT, "the lapsed claim to be reaped", || async {
        let orphans = ledger.reap(100, LONG).await.unwrap();
        orphans
            .iter()
            .any(|o| o.key == short.key.as_str())
            .then_some(())
    })
    .await;
    let taken = claimed(
        &ledger,
        &Claim {
            token: claim_token(),
            ..short.clone()
        },
    )
    .await;
    assert!(taken.fence > lapsed.fence, "{taken:?} after {lapsed:?}");
    assert_eq!(
        ledger.heartbeat(&lapsed, LONG).await.unwrap(),
        Heartbeat::Lost
    );
    // The records go (retention), the job's counter stays.
    let brief = End {
        retention: Duration::from_millis(300),
        ..end(State::Succeeded)
    };
    for lease in [&first, &second, &taken] {
        assert!(ledger.complete(lease, &brief).await.unwrap().recorded);
    }
    eventually(WAIT, "the records to expire", || async {
        ledger.inspect(&c1.key).await.is_none().then_some(())
    })
    .await;
    let after = claimed(&ledger, &claim("fence", 1, 1, Overlap::Allow, LONG)).await;
    assert!(
        after.fence > taken.fence,
        "{after:?} after the records expired, {taken:?} before"
    );
}

on_every_backend!(fence, "ledger_fence");

async fn fence(backend: Backend, env: TestEnv) {
    fence_suite(ports::ledger(backend, &env).await).await;
}
