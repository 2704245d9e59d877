//! A failing job is retried with a growing backoff, then dead-lettered with its attempts
//! and last error; an occurrence past its deadline is recorded `missed`, not run. On every
//! backend, with in-process consumers.

use std::time::Duration;

use cronq_consumer::Handlers;
use cronq_shared::runlog::Outcome;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::fleet::{Fleet, WAIT, recording};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, eventually};

async fn failing_job_retries_with_backoff_then_dead_letters(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "flaky"
schedule = "@every 1s"
command = ["sh", "-c", "echo boom-$CRONQ_ATTEMPT >&2; exit 3"]
max_attempts = 3
backoff = "200ms"
backoff_max = "10s"
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    fleet.publish([occurrence("flaky", 1)]).await;
    let mut runs = fleet.settled("flaky", 1).await;
    runs.reverse(); // oldest first
    let summary: Vec<_> = runs.iter().map(|r| (r.attempt, r.outcome)).collect();
    assert_eq!(
        summary,
        [
            (1, Outcome::Retrying),
            (2, Outcome::Retrying),
            (3, Outcome::Failed)
        ]
    );
    assert!(
        runs[2].error.as_deref().unwrap().contains("boom-3"),
        "{runs:?}"
    );
    // Retry delays grow: at least backoff, then at least twice that.
    let gap = |a: usize| {
        (runs[a + 1].started_at - runs[a].started_at)
            .to_std()
            .unwrap()
    };
    assert!(gap(0) >= Duration::from_millis(200), "{:?}", gap(0));
    assert!(gap(1) >= Duration::from_millis(400), "{:?}", gap(1));
    let letters = eventually(WAIT, "the dead letter", || async {
        Some(fleet.broker.dead_letters().await.unwrap()).filter(|l| !l.is_empty())
    })
    .await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason, "failed");
    assert_eq!(letters[0].attempts, 3);
    assert_eq!(
        letters[0].key.as_deref(),
        Some(occurrence("flaky", 1).key.to_string().as_str())
    );
    assert!(letters[0].last_error.as_deref().unwrap().contains("boom-3"));
    fleet.stop().await;
}

on_every_backend!(
    failing_job_retries_with_backoff_then_dead_letters,
    "consumer_retry"
);

async fn records_missed_past_the_deadline(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "work"
schedule = "@every 1s"
deadline = "1m"
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let (handlers, seen) = recording(Duration::from_millis(10));
    fleet.start("c1", handlers, 2).await;
    // Scheduled in 2026-11-29 00:00, long before now + 1 minute.
    fleet.publish([occurrence("work", 1)]).await;
    let runs = fleet.settled("work", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Missed, "{runs:?}");
    assert!(seen.lock().unwrap().is_empty());
    fleet.stop().await;
}

on_every_backend!(records_missed_past_the_deadline, "consumer_missed");
