//! Overlap policies across in-process consumers: `skip` records the skipped ones and never
//! skips what an operator asked for, `queue` runs all in turn, `replace` stops the running
//! one within seconds. On every backend.

use std::time::{Duration, Instant};

use cronq_consumer::Handlers;
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::JobName;
use cronq_shared::runlog::Outcome;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::fleet::{Fleet, WAIT, WORK, assert_no_overlap, recording};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, eventually};

async fn overlap_skip_two_consumers(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "skip")).await;
    let (h1, seen) = recording(Duration::from_millis(1500));
    let mut h2 = Handlers::new();
    // Both consumers share one recorder.
    let s = seen.clone();
    h2.register(JobName::new("work").unwrap(), move |occ: Occurrence, _t| {
        let s = s.clone();
        async move {
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            s.lock()
                .unwrap()
                .push((occ.key.to_string(), start, Instant::now()));
            Ok::<(), String>(())
        }
    });
    fleet.start("c1", h1, 2).await;
    fleet.start("c2", h2, 2).await;
    fleet.subscribed(2).await;
    for i in 0..4 {
        fleet.publish([occurrence("work", i)]).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let runs = fleet.settled("work", 4).await;
    let skipped = runs
        .iter()
        .filter(|r| r.outcome == Outcome::Skipped)
        .count();
    let succeeded = runs
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded)
        .count();
    assert!(skipped >= 1, "{runs:?}");
    assert_eq!(skipped + succeeded, 4, "{runs:?}");
    assert_no_overlap(&seen.lock().unwrap());
    fleet.stop().await;
}

on_every_backend!(overlap_skip_two_consumers, "consumer_skip");

/// A backfill or replay of a `skip` job asks for every occurrence to run: each waits its
/// turn instead of being recorded as skipped, and they still never overlap.
async fn operator_requested_occurrences_of_a_skip_job_all_run(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "skip")).await;
    let (handlers, seen) = recording(Duration::from_millis(400));
    fleet.start("c1", handlers, 4).await;
    fleet.subscribed(1).await;
    let requested = [Trigger::Backfill, Trigger::Backfill, Trigger::Replay];
    fleet
        .publish(requested.iter().enumerate().map(|(i, trigger)| {
            let mut occ = occurrence("work", i as u32);
            occ.trigger = *trigger;
            occ
        }))
        .await;
    let runs = fleet.settled("work", 3).await;
    assert!(
        runs.iter().all(|r| r.outcome == Outcome::Succeeded),
        "every requested occurrence must run: {runs:?}"
    );
    assert_no_overlap(&seen.lock().unwrap());
    fleet.stop().await;
}

on_every_backend!(
    operator_requested_occurrences_of_a_skip_job_all_run,
    "consumer_req_skip"
);

async fn overlap_queue_runs_all_in_turn(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "queue")).await;
    let (h1, seen) = recording(Duration::from_millis(500));
    fleet.start("c1", h1.clone(), 2).await;
    fleet.start("c2", h1, 2).await;
    fleet.subscribed(2).await;
    fleet.publish((0..3).map(|i| occurrence("work", i))).await;
    let runs = fleet.settled("work", 3).await;
    assert!(
        runs.iter().all(|r| r.outcome == Outcome::Succeeded),
        "{runs:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_no_overlap(&seen.lock().unwrap());
    fleet.stop().await;
}

on_every_backend!(overlap_queue_runs_all_in_turn, "consumer_queue");

/// How soon a replace must stop the running occurrence in tests: a generous bound on the
/// 250 ms heartbeat of a replace job plus the handler's stop, well below a lease's heartbeat.
const REPLACE_WITHIN: Duration = Duration::from_secs(5);

async fn overlap_replace_cancels_the_running_one(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "replace")).await;
    let (h1, seen) = recording(Duration::from_secs(20));
    fleet.start("c1", h1.clone(), 2).await;
    fleet.start("c2", h1, 2).await;
    fleet.subscribed(2).await;
    fleet.publish([occurrence("work", 0)]).await;
    let key0 = occurrence("work", 0).key;
    eventually(WAIT, "the first occurrence to run", || async {
        let rec = fleet.records.inspect(&key0).await;
        rec.filter(|r| r.state == cronq_shared::ledger::State::Running)
    })
    .await;
    fleet.publish([occurrence("work", 1)]).await;
    // Within about a second (the heartbeat of a replace job), far below the 20 s run and
    // the lease's heartbeat period.
    let runs = eventually(
        REPLACE_WITHIN,
        "the first occurrence to be cancelled",
        || async {
            let runs = fleet.runs("work").await;
            runs.iter()
                .any(|r| r.outcome == Outcome::Cancelled)
                .then_some(runs)
        },
    )
    .await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].key, key0);
    let key1 = occurrence("work", 1).key;
    assert_eq!(runs[0].error, Some(format!("replaced by {key1}")));
    eventually(WAIT, "the second occurrence to run", || async {
        let rec = fleet.records.inspect(&key1).await;
        rec.filter(|r| r.state == cronq_shared::ledger::State::Running)
    })
    .await;
    fleet.stop().await;
    assert_no_overlap(&seen.lock().unwrap());
}

on_every_backend!(overlap_replace_cancels_the_running_one, "consumer_replace");
