//! An occurrence delivered many times, or spread with a thousand others over three
//! consumers, runs once; a replay of a failed one runs it again once, and a succeeded one
//! never again. On every backend, with in-process consumers.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cronq_consumer::Handlers;
use cronq_shared::message::Occurrence;
use cronq_shared::names::JobName;
use cronq_shared::runlog::Outcome;

use crate::support::TestEnv;
use crate::support::backends::{Backend, on_every_backend};
use crate::support::fleet::{Fleet, WORK, recording};
use crate::support::occurrences::occurrence;

async fn same_occurrence_five_times_runs_once(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "allow")).await;
    let (handlers, seen) = recording(Duration::from_millis(200));
    let stop = fleet.start("c1", handlers, 4).await;
    fleet
        .publish(std::iter::repeat_n(occurrence("work", 1), 5))
        .await;
    let runs = fleet.settled("work", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Succeeded);
    // Stop the consumer; anything not acked would go back to the queue.
    stop.cancel();
    fleet.halt().await;
    assert_eq!(
        fleet.queued("default").await,
        0,
        "all five deliveries were acked"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "one run, four duplicates acked"
    );
    fleet.stop().await;
}

on_every_backend!(same_occurrence_five_times_runs_once, "consumer_dup");

async fn thousand_occurrences_three_consumers_none_twice(backend: Backend, env: TestEnv) {
    let mut fleet = Fleet::new(backend, &env, &WORK.replace("OVERLAP", "allow")).await;
    let counts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    for id in ["c1", "c2", "c3"] {
        let mut handlers = Handlers::new();
        let c = counts.clone();
        handlers.register(JobName::new("work").unwrap(), move |occ: Occurrence, _t| {
            let c = c.clone();
            async move {
                *c.lock().unwrap().entry(occ.key.to_string()).or_default() += 1;
                Ok::<(), String>(())
            }
        });
        fleet.start(id, handlers, 8).await;
    }
    fleet.subscribed(3).await;
    let occs: Vec<Occurrence> = (0..1000).map(|i| occurrence("work", i)).collect();
    for chunk in occs.chunks(100) {
        fleet.publish(chunk.to_vec()).await;
    }
    // Publish a second copy of the first 100: duplicates must not run again.
    fleet.publish(occs[..100].to_vec()).await;
    let runs = fleet.settled("work", 1000).await;
    let counts = counts.lock().unwrap().clone();
    assert_eq!(counts.len(), 1000);
    assert!(counts.values().all(|&n| n == 1), "an occurrence ran twice");
    assert_eq!(runs.len(), 1000);
    assert!(runs.iter().all(|r| r.outcome == Outcome::Succeeded));
    let consumers: BTreeSet<_> = runs.iter().map(|r| r.consumer.clone()).collect();
    assert!(consumers.len() >= 2, "work was shared: {consumers:?}");
    fleet.stop().await;
}

on_every_backend!(
    thousand_occurrences_three_consumers_none_twice,
    "consumer_1000"
);

async fn replay_of_a_failed_occurrence_runs_it_again_once(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "work"
schedule = "@every 1s"
max_attempts = 1
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let c = calls.clone();
    let mut handlers = Handlers::new();
    handlers.register(JobName::new("work").unwrap(), move |_occ, _token| {
        let n = c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            if n == 0 {
                Err("first try fails".to_owned())
            } else {
                Ok(())
            }
        }
    });
    fleet.start("c1", handlers, 1).await;
    fleet.publish([occurrence("work", 1)]).await;
    let runs = fleet.settled("work", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Failed);
    let mut replay = occurrence("work", 1);
    replay.trigger = cronq_shared::message::Trigger::Replay;
    // Not admitted: a failed occurrence is final, the replay is acked without running. One
    // consumer with concurrency 1 takes them in order, so once work@2 ran, the replay was
    // looked at.
    fleet.publish([replay.clone(), occurrence("work", 2)]).await;
    fleet.settled("work", 2).await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    // `cronq dlq replay` admits it first (one ledger operation), then publishes attempt 1.
    assert_eq!(
        fleet.ledger.admit_replay(&replay.key).await.unwrap(),
        Some(cronq_shared::ledger::State::Failed)
    );
    fleet.publish([replay.clone()]).await;
    let runs = fleet.settled("work", 3).await;
    assert_eq!(runs[0].key, replay.key, "{runs:?}");
    assert_eq!(runs[0].outcome, Outcome::Succeeded, "{runs:?}");
    assert_eq!(runs[0].attempt, 1);
    // Succeeded is final: neither a schedule duplicate nor another replay runs it again.
    fleet.publish([occurrence("work", 1), replay]).await;
    fleet.publish([occurrence("work", 3)]).await;
    fleet.settled("work", 4).await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 4);
    fleet.stop().await;
}

on_every_backend!(
    replay_of_a_failed_occurrence_runs_it_again_once,
    "consumer_replay"
);
