//! The run log port's contract (`RunLog`), and the ledger appending the run of each
//! recorded end or settlement in the same step, never for a fenced or refused one; on
//! every backend.

use std::time::Duration;

use chrono::Utc;
use cronq_shared::config::Overlap;
use cronq_shared::ledger::{Claim, End, ExecutionLease, Heartbeat, Ledger, Settle, State};
use cronq_shared::names::JobName;
use cronq_shared::runlog::{Outcome, Run, RunLog, RunOutput, TailFrom};

use crate::support::TestEnv;
use crate::support::backends::{Backend, on_every_backend};
use crate::support::inspect::Inspect;
use crate::support::occurrences::{LONG, claim, claimed, end, occurrence};
use crate::support::ports::{self};

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
        published_at: None,
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
    assert!(
        all.iter().all(|r| r.published_at.is_none()),
        "an entry written without a publish time (as before the field existed) reads as none: {all:?}"
    );

    // The publish time round-trips, to the nanosecond the message carried.
    let published_at = Utc::now() - chrono::TimeDelta::nanoseconds(1_234_567_891);
    let published = Run {
        published_at: Some(published_at),
        ..run("c", 1, Outcome::Succeeded)
    };
    log.record(&published).await.unwrap();
    let c = JobName::new("c").unwrap();
    let only_c = log.list(Some(&c), 10).await.unwrap();
    assert_eq!(only_c, vec![published], "the run as recorded");
    assert_eq!(only_c[0].published_at, Some(published_at));
    assert_eq!(
        log.list(Some(&a), 10).await.unwrap()[0].published_at,
        None,
        "older entries unchanged"
    );
}

on_every_backend!(list, "runlog");

/// Outputs are kept by key and attempt, each key's apart; a second output of an attempt
/// replaces the first; every field round-trips.
async fn outputs_suite(log: impl RunLog) {
    let (k1, k2) = (occurrence("o", 1).key, occurrence("o", 2).key);
    assert!(log.outputs(&k1).await.unwrap().is_empty(), "none kept yet");
    let first = RunOutput {
        stdout: "line one\nline two\n".into(),
        stderr: "warn: é ✓\n".into(),
        ..RunOutput::default()
    };
    let http = RunOutput {
        http_status: Some(503),
        http_body: "try later".into(),
        truncated: true,
        ..RunOutput::default()
    };
    log.keep_output(&k1, 1, &first).await.unwrap();
    log.keep_output(&k1, 2, &http).await.unwrap();
    log.keep_output(&k2, 1, &http).await.unwrap();
    let kept = log.outputs(&k1).await.unwrap();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[&1], first);
    assert_eq!(kept[&2], http);
    let replaced = RunOutput {
        stdout: "again".into(),
        ..RunOutput::default()
    };
    log.keep_output(&k1, 1, &replaced).await.unwrap();
    assert_eq!(log.outputs(&k1).await.unwrap()[&1], replaced);
    assert_eq!(
        log.outputs(&k2).await.unwrap().len(),
        1,
        "another key's apart"
    );
}

on_every_backend!(outputs, "runlog_outputs");

/// The history read as it grows: from an instant, then from each returned position on,
/// in the order appended, a page at a time; nothing read twice, nothing skipped.
async fn tail_suite(log: impl RunLog) {
    log.record(&run("old", 1, Outcome::Succeeded))
        .await
        .unwrap();
    // Store clocks count in milliseconds: the next runs are appended strictly later.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let since = Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let start = TailFrom::Since(since);
    let empty = log
        .tail(
            &TailFrom::Since(Utc::now() + chrono::TimeDelta::hours(1)),
            10,
        )
        .await
        .unwrap();
    assert!(
        empty.runs.is_empty(),
        "nothing appended after an hour from now: {empty:?}"
    );
    let appended: Vec<Run> = (1..=5).map(|i| run("t", i, Outcome::Failed)).collect();
    for r in &appended {
        log.record(r).await.unwrap();
    }
    let first = log.tail(&start, 2).await.unwrap();
    assert_eq!(
        first.runs,
        appended[..2],
        "oldest first, from the instant on, a page of 2"
    );
    let second = log.tail(&first.next, 10).await.unwrap();
    assert_eq!(second.runs, appended[2..], "the rest, after the first page");
    let idle = log.tail(&second.next, 10).await.unwrap();
    assert!(idle.runs.is_empty(), "nothing new: {idle:?}");
    assert_eq!(idle.next, second.next, "an empty read stays where it was");
    let later = run("t", 6, Outcome::Succeeded);
    log.record(&later).await.unwrap();
    assert_eq!(log.tail(&idle.next, 10).await.unwrap().runs, vec![later]);
}

on_every_backend!(tail, "runlog_tail");

async fn tail(backend: Backend, env: TestEnv) {
    tail_suite(ports::runlog(backend, &env).await).await;
}

async fn outputs(backend: Backend, env: TestEnv) {
    outputs_suite(ports::runlog(backend, &env).await).await;
}

async fn list(backend: Backend, env: TestEnv) {
    runlog_suite(ports::runlog(backend, &env).await).await;
}

/// The ledger is the one writer of the history: the run of an ended or settled record
/// reaches it in the same step; a fenced or given-up completion changes no record but
/// appends its run as `lost`; a refused settle appends nothing. With `held`, the claims
/// ask to be held (granted so on Redis, whose script ends a held claim's success from
/// fewer arguments: `complete.lua`), and the history reads the same.
async fn history_suite(ledger: impl Ledger + Inspect, log: &dyn RunLog, held: bool) {
    let claim = |i: u32| Claim {
        held,
        ..claim("hist", i, 1, Overlap::Allow, LONG)
    };
    let c = claim(1);
    let lease = claimed(&ledger, &c).await;
    let stranger = ExecutionLease {
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
    let succeeded = Run {
        published_at: Some(Utc::now()),
        ..run("hist", 1, Outcome::Succeeded)
    };
    let done = End {
        run: Some(succeeded.clone()),
        ..end(State::Succeeded)
    };
    assert!(!ledger.complete(&stranger, &done).await.unwrap().recorded);
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(runs.len(), 2, "a fenced success, as lost: {runs:?}");
    assert_eq!(runs[0].outcome, Outcome::Lost);
    assert_eq!(
        runs[0].error.as_deref(),
        Some("lost the claim: the lease lapsed and another consumer took over")
    );
    assert_eq!(
        ledger.inspect(&c.key).await.unwrap().state,
        State::Running,
        "fenced: the record is unchanged"
    );
    assert!(ledger.complete(&lease, &done).await.unwrap().recorded);
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(runs.len(), 3, "one run per end: {runs:?}");
    let listed = &runs[0];
    assert_eq!(listed.key, succeeded.key, "newest first");
    assert_eq!(
        (
            listed.outcome,
            &listed.consumer,
            listed.duration,
            &listed.error
        ),
        (
            Outcome::Succeeded,
            &succeeded.consumer,
            succeeded.duration,
            &None
        )
    );
    let ms = |at: Option<chrono::DateTime<Utc>>| at.map(|at| at.timestamp_millis());
    assert_eq!(ms(Some(listed.started_at)), ms(Some(succeeded.started_at)));
    assert_eq!(ms(listed.published_at), ms(succeeded.published_at));
    assert!(
        ledger.complete(&lease, &done).await.unwrap().recorded,
        "the same end tried again (its answer was lost): recorded already"
    );
    assert_eq!(
        log.list(None, 10).await.unwrap().len(),
        3,
        "and not appended twice"
    );
    assert!(
        !ledger.complete(&lease, &fenced).await.unwrap().recorded,
        "another end of an ended claim"
    );
    let record = ledger.inspect(&c.key).await.unwrap();
    assert_eq!(
        record.state,
        State::Succeeded,
        "an ended claim is fenced too"
    );
    let runs = log.list(None, 10).await.unwrap();
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert_eq!(runs[0].outcome, Outcome::Lost);
    assert_eq!(runs[0].error.as_deref(), Some("lost the claim after: boom"));

    // Given up by its owner (no state): the record stays running, its lease lapses.
    let kept = claim(3);
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
    assert_eq!(runs.len(), 5, "{runs:?}");
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
    assert_eq!(runs.len(), 6, "a refused settle adds no run: {runs:?}");
    assert_eq!(runs[0].key, missed.key, "newest first");
    assert_eq!(runs[0].outcome, Outcome::Missed);
    assert_eq!(runs[0].error.as_deref(), Some("boom"));
}

on_every_backend!(history, "ledger_history");

async fn history(backend: Backend, env: TestEnv) {
    let (ledger, log) = ports::ledger_with_log(backend, &env).await;
    history_suite(ledger, &*log, false).await;
}

on_every_backend!(history_held, "ledger_history_held");

async fn history_held(backend: Backend, env: TestEnv) {
    let (ledger, log) = ports::ledger_with_log(backend, &env).await;
    history_suite(ledger, &*log, true).await;
}
