//! The ledger port's operator cancel (`Ledger::cancel`), on every backend: an unknown key,
//! a running claim asked to stop through its heartbeat, a waiting, a retrying and a lapsed
//! one recorded `cancelled` at once with their run, a finished one left alone, a request
//! kept when the running claim is tried again under its own token, and the cancel count
//! moving with every request that concerns a running attempt, and with no other.

use std::time::Duration;

use cronq_shared::config::Overlap;
use cronq_shared::ledger::{
    Cancel, Cancelled, Claim, ClaimOutcome, End, FollowUp, Heartbeat, Ledger, State, claim_token,
};
use cronq_shared::runlog::{Outcome, RunLog};

use crate::support::backends::{Backend, on_every_backend};
use crate::support::inspect::Inspect;
use crate::support::occurrences::{LONG, claim, claimed, end, occurrence};
use crate::support::ports;
use crate::support::{TestEnv, eventually};

const WAIT: Duration = Duration::from_secs(10);

fn by_ada(job: &str, i: u32) -> Cancel {
    Cancel {
        key: occurrence(job, i).key,
        who: "ada".into(),
    }
}

async fn cancel_suite(ledger: impl Ledger + Inspect, history: &dyn RunLog) {
    let before = ledger.cancels().await.unwrap();
    assert_eq!(
        ledger.cancel(&by_ada("cx", 9)).await.unwrap(),
        Cancelled::Unknown
    );
    assert_eq!(
        ledger.cancels().await.unwrap(),
        before,
        "no running attempt to tell"
    );

    // Running: asked to stop through its heartbeat, as a replacing occurrence asks.
    let first = claim("cx", 1, 1, Overlap::Queue, LONG);
    let running = claimed(&ledger, &first).await;
    let counted = ledger.cancels().await.unwrap();
    // Waiting behind it.
    let waiter = claim("cx", 2, 1, Overlap::Queue, LONG);
    assert!(matches!(
        ledger.claim(&waiter).await.unwrap(),
        ClaimOutcome::Waiting { .. }
    ));
    assert_eq!(
        ledger.cancel(&by_ada("cx", 2)).await.unwrap(),
        Cancelled::Ended(State::Waiting)
    );
    assert_eq!(
        ledger.cancels().await.unwrap(),
        counted,
        "a waiter runs nowhere"
    );
    let record = ledger.inspect(&waiter.key).await.unwrap();
    assert_eq!(record.state, State::Cancelled);
    assert_eq!(record.error.as_deref(), Some("cancelled by ada"));
    assert!(matches!(
        ledger.claim(&waiter).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Cancelled,
            ..
        }
    ));
    assert_eq!(
        ledger.cancel(&by_ada("cx", 1)).await.unwrap(),
        Cancelled::Stopping
    );
    assert!(ledger.cancels().await.unwrap() > counted);
    assert_eq!(
        ledger.heartbeat(&running, LONG).await.unwrap(),
        Heartbeat::CancelRequested {
            by: "cancelled by ada".into()
        }
    );
    // The same claim tried again (its first answer lost) is granted again and keeps the
    // request: its owner still learns of it.
    assert!(matches!(
        ledger.claim(&first).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    assert_eq!(
        ledger.heartbeat(&running, LONG).await.unwrap(),
        Heartbeat::CancelRequested {
            by: "cancelled by ada".into()
        }
    );
    assert_eq!(
        ledger.inspect(&running.key).await.unwrap().state,
        State::Running
    );
    assert!(
        ledger
            .complete(&running, &end(State::Cancelled))
            .await
            .unwrap()
            .recorded
    );
    let counted = ledger.cancels().await.unwrap();
    assert_eq!(
        ledger.cancel(&by_ada("cx", 1)).await.unwrap(),
        Cancelled::Finished(State::Cancelled)
    );
    assert_eq!(ledger.cancels().await.unwrap(), counted, "it ended already");

    // Retrying: its retry message finds it cancelled.
    let retried = claim("cx", 3, 1, Overlap::Allow, LONG);
    let lease = claimed(&ledger, &retried).await;
    let retry = End {
        next: Some(FollowUp {
            attempt: 2,
            body: retried.body.clone(),
            within: LONG,
        }),
        ..end(State::Retrying)
    };
    assert!(ledger.complete(&lease, &retry).await.unwrap().recorded);
    assert_eq!(
        ledger.cancel(&by_ada("cx", 3)).await.unwrap(),
        Cancelled::Ended(State::Retrying)
    );
    assert_eq!(
        ledger.cancels().await.unwrap(),
        counted,
        "no attempt of it runs"
    );
    assert!(matches!(
        ledger
            .claim(&Claim {
                attempt: 2,
                token: claim_token(),
                ..retried.clone()
            })
            .await
            .unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Cancelled,
            ..
        }
    ));

    // Running under a lapsed lease (its owner is gone): cancelled at once, its late end
    // fenced.
    let short = claim("cx", 4, 1, Overlap::Allow, Duration::from_millis(200));
    let gone = claimed(&ledger, &short).await;
    let (cancelled, counted) = eventually(WAIT, "the lease to lapse", || async {
        let counted = ledger.cancels().await.unwrap();
        match ledger.cancel(&by_ada("cx", 4)).await.unwrap() {
            Cancelled::Stopping => None,
            other => Some((other, counted)),
        }
    })
    .await;
    assert_eq!(cancelled, Cancelled::Ended(State::Running));
    assert!(
        ledger.cancels().await.unwrap() > counted,
        "its owner may still run it"
    );
    assert_eq!(
        ledger.heartbeat(&gone, LONG).await.unwrap(),
        Heartbeat::Lost
    );
    assert!(
        !ledger
            .complete(&gone, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );
    assert_eq!(
        ledger.inspect(&short.key).await.unwrap().state,
        State::Cancelled
    );

    // Running when asked, then its owner went away before it stopped: the next claim of
    // the reaped occurrence is superseded by the mark, and settling it records it.
    let short = claim("cx", 6, 1, Overlap::Allow, Duration::from_millis(300));
    claimed(&ledger, &short).await;
    assert_eq!(
        ledger.cancel(&by_ada("cx", 6)).await.unwrap(),
        Cancelled::Stopping
    );
    eventually(WAIT, "the abandoned claim to be reaped", || async {
        let orphans = ledger.reap(100, LONG).await.unwrap();
        orphans
            .iter()
            .any(|o| o.key == short.key.as_str())
            .then_some(())
    })
    .await;
    let next = Claim {
        token: claim_token(),
        ..short.clone()
    };
    assert_eq!(
        ledger.claim(&next).await.unwrap(),
        ClaimOutcome::Superseded {
            by: "cancelled by ada".into()
        }
    );

    // Finished.
    let done = claimed(&ledger, &claim("cx", 5, 1, Overlap::Allow, LONG)).await;
    assert!(
        ledger
            .complete(&done, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );
    assert_eq!(
        ledger.cancel(&by_ada("cx", 5)).await.unwrap(),
        Cancelled::Finished(State::Succeeded)
    );

    // The history shows who cancelled the ones that did not run.
    let runs = history
        .list(Some(&occurrence("cx", 1).job), 100)
        .await
        .unwrap();
    for i in [2, 3, 4] {
        let key = occurrence("cx", i).key;
        let run = runs
            .iter()
            .find(|r| r.key == key)
            .unwrap_or_else(|| panic!("a run of {key} in {runs:?}"));
        assert_eq!(run.outcome, Outcome::Cancelled, "{run:?}");
        assert_eq!(run.error.as_deref(), Some("cancelled by ada"), "{run:?}");
        assert_eq!(run.consumer, "ada");
    }
}

on_every_backend!(cancel, "ledger_cancel");

async fn cancel(backend: Backend, env: TestEnv) {
    let (ledger, history) = ports::ledger_with_log(backend, &env).await;
    cancel_suite(ledger, &*history).await;
}
