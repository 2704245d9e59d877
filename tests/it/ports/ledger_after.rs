//! What the leader's chains (`after`) ask of the ledger, on every backend: a record read
//! back (`Ledger::record`), and a child's occurrence `skipped` for a parent admitted again
//! once the parent succeeded (`Ledger::admit_replay`), while an ordinary `skipped` one (an
//! overlap skip) stays terminal.

use cronq_shared::config::Overlap;
use cronq_shared::ledger::{ClaimOutcome, Ledger, Settle, State, parent_ended};

use crate::support::TestEnv;
use crate::support::backends::{Backend, on_every_backend};
use crate::support::inspect::Inspect;
use crate::support::occurrences::{LONG, claim, claimed, end, occurrence};
use crate::support::ports;

fn skipped(job: &str, i: u32, why: String) -> Settle {
    let occ = occurrence(job, i);
    Settle {
        key: occ.key.clone(),
        job: occ.job.clone(),
        attempt: 1,
        state: State::Skipped,
        error: Some(why),
        retention: LONG,
        run: None,
    }
}

async fn chain_suite(ledger: impl Ledger + Inspect) {
    let parent = occurrence("parent", 1).key;
    let child = occurrence("child", 1).key;
    assert_eq!(ledger.record(&child).await.unwrap(), None);

    // The child skipped for its failed parent: terminal, its reason read back.
    let why = parent_ended(&parent, State::Failed);
    assert!(
        ledger
            .settle(&skipped("child", 1, why.clone()))
            .await
            .unwrap()
            .recorded
    );
    let record = ledger.record(&child).await.unwrap().expect("a record");
    assert_eq!(
        (record.state, record.error.as_deref()),
        (State::Skipped, Some(why.as_str()))
    );
    assert!(
        !ledger
            .settle(&skipped("child", 1, why.clone()))
            .await
            .unwrap()
            .recorded
    );
    assert!(matches!(
        ledger
            .claim(&claim("child", 1, 1, Overlap::Allow, LONG))
            .await
            .unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Skipped,
            ..
        }
    ));

    // The parent replayed and succeeded: the child is admitted again and runs once.
    assert_eq!(
        ledger.admit_replay(&child).await.unwrap(),
        Some(State::Skipped)
    );
    assert_eq!(ledger.inspect(&child).await.unwrap().state, State::Retrying);
    let lease = claimed(&ledger, &claim("child", 1, 1, Overlap::Allow, LONG)).await;
    assert!(
        ledger
            .complete(&lease, &end(State::Succeeded))
            .await
            .unwrap()
            .recorded
    );
    assert_eq!(
        ledger.admit_replay(&child).await.unwrap(),
        Some(State::Succeeded)
    );
    assert_eq!(
        ledger.record(&child).await.unwrap().map(|r| r.state),
        Some(State::Succeeded)
    );
    assert!(matches!(
        ledger
            .claim(&claim("child", 1, 1, Overlap::Allow, LONG))
            .await
            .unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Succeeded,
            ..
        }
    ));

    // An overlap skip is not a parent's: never admitted again.
    let other = occurrence("child", 2).key;
    assert!(
        ledger
            .settle(&skipped("child", 2, "child@x was still running".into()))
            .await
            .unwrap()
            .recorded
    );
    assert_eq!(
        ledger.admit_replay(&other).await.unwrap(),
        Some(State::Skipped)
    );
    assert_eq!(ledger.inspect(&other).await.unwrap().state, State::Skipped);
}

on_every_backend!(chain, "ledger_after");

async fn chain(backend: Backend, env: TestEnv) {
    chain_suite(ports::ledger(backend, &env).await).await;
}
