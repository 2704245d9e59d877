//! The leader's continuous reconciliation (`cronq_shared::accounting::Incremental`) when
//! the run history fails in the middle of a read, on every backend: a history longer than
//! one page, the store failing on the second page. The check reports the failure, and the
//! next one starts over from a full read: it reports what the full check reports, with no
//! run of the first page counted twice (a run read twice is a "succeeded twice" gap, a
//! false alarm).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, DurationRound as _, TimeDelta, Utc};
use cronq_shared::accounting::{self, Incremental, Sources, Window};
use cronq_shared::audit::AuditLog;
use cronq_shared::config::Config;
use cronq_shared::jobs::JobStore;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::lease::TermRecord;
use cronq_shared::names::JobName;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Outcome, Run, RunLog, RunOutput, Tail, TailFrom};
use cronq_shared::store::StoreError;

use crate::support::TestEnv;
use crate::support::backends::{Backend, on_every_backend};
use crate::support::ports::{self, Port};

/// Runs in the history: more than one page of the check's reads (1,000 runs a page).
const RUNS: i64 = 1_100;

/// A run history whose `tail` fails on its `fail_at`th call (counting from 1), and only
/// then.
struct FailsOnce {
    inner: Port<dyn RunLog>,
    tails: AtomicUsize,
    fail_at: usize,
}

impl FailsOnce {
    fn unreachable() -> StoreError {
        StoreError::Unreachable {
            store: "the run history",
            url: "test://".into(),
            hint: "a test made it fail in the middle of a read",
            source: None,
        }
    }
}

#[async_trait::async_trait]
impl RunLog for FailsOnce {
    async fn record(&self, run: &Run) -> Result<(), StoreError> {
        self.inner.record(run).await
    }

    async fn list(&self, job: Option<&JobName>, limit: usize) -> Result<Vec<Run>, StoreError> {
        self.inner.list(job, limit).await
    }

    async fn tail(&self, from: &TailFrom, limit: usize) -> Result<Tail, StoreError> {
        if self.tails.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at {
            return Err(Self::unreachable());
        }
        self.inner.tail(from, limit).await
    }

    async fn keep_output(
        &self,
        key: &OccurrenceKey,
        attempt: u32,
        output: &RunOutput,
    ) -> Result<(), StoreError> {
        self.inner.keep_output(key, attempt, output).await
    }

    async fn outputs(&self, key: &OccurrenceKey) -> Result<BTreeMap<u32, RunOutput>, StoreError> {
        self.inner.outputs(key).await
    }
}

/// What a check reads: `runlog`, `terms`, and no pause nor runtime job.
fn sources<'a>(
    runlog: &'a dyn RunLog,
    audit: &'a dyn AuditLog,
    jobs: &'a dyn JobStore,
    terms: &'a [TermRecord],
) -> Sources<'a> {
    Sources {
        runlog,
        audit,
        jobs,
        file_history: &[],
        terms,
    }
}

on_every_backend!(
    a_check_whose_history_failed_mid_read_starts_over,
    "reconcile_outage"
);

async fn a_check_whose_history_failed_mid_read_starts_over(backend: Backend, env: TestEnv) {
    let config = Arc::new(
        Config::from_toml(
            "[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\ntimeout = \"1s\"\n",
            Path::new("reconcile-outage.toml"),
        )
        .expect("the config loads"),
    );
    let tick = JobName::new("tick").expect("a name");
    let now = Utc::now()
        .duration_trunc(TimeDelta::seconds(1))
        .expect("a second");
    // One success of each second of the window but its last ten: ten gaps, never published.
    let window = Window {
        from: now - TimeDelta::seconds(RUNS + 130),
        to: now - TimeDelta::seconds(120),
        grace: Duration::from_secs(120),
        now,
        job: None,
        max_runs: DEFAULT_MAX_RUNS,
        only_gaps: true,
    };
    let log = ports::runlog(backend, &env).await;
    for i in 0..RUNS {
        let at: DateTime<Utc> = window.from + TimeDelta::seconds(i);
        let run = Run {
            key: OccurrenceKey::scheduled(tick.clone(), at),
            job: tick.clone(),
            attempt: 1,
            consumer: "c".into(),
            started_at: at + TimeDelta::milliseconds(200),
            duration: Duration::from_millis(100),
            outcome: Outcome::Succeeded,
            error: None,
            published_at: Some(at),
        };
        log.record(&run).await.expect("recorded");
    }
    let (audit, _) = ports::audit_logs(backend, &env, Duration::from_secs(86_400)).await;
    let (jobs, _) = ports::job_stores(backend, &env).await;
    let failing = FailsOnce {
        inner: log.clone(),
        tails: AtomicUsize::new(0),
        fail_at: 2,
    };
    // One leader held the whole window: every second of it is expected.
    let terms = [TermRecord {
        epoch: 1,
        instance: "p1".into(),
        start: window.from - TimeDelta::hours(1),
        alive: now,
    }];
    let paused = BTreeMap::new();
    let mut incremental = Incremental::new();
    let failed = incremental
        .check(
            sources(&failing, &*audit, &*jobs, &terms),
            &config,
            &paused,
            &window,
        )
        .await;
    assert!(
        failed.is_err(),
        "the check reports the store's failure: {failed:?}"
    );
    assert_eq!(
        failing.tails.load(Ordering::SeqCst),
        2,
        "the store failed on the second page, after a whole page was read"
    );
    let again = incremental
        .check(
            sources(&failing, &*audit, &*jobs, &terms),
            &config,
            &paused,
            &window,
        )
        .await
        .expect("the store answers again");
    let full = accounting::reconcile(
        sources(&log, &*audit, &*jobs, &terms),
        &config,
        &paused,
        &HashMap::new(),
        &window,
    )
    .await
    .expect("the full check reads");
    assert_eq!(
        again.accounts, full.accounts,
        "the check after the failure reports what the full check reports"
    );
    let gaps: Vec<&str> = full
        .accounts
        .iter()
        .flat_map(|a| a.gaps.iter().map(|(_, g)| g.kind()))
        .collect();
    assert_eq!(
        gaps, ["never_published"; 10],
        "the window's last ten seconds have no run; every other second one success, \
         counted once"
    );
}
