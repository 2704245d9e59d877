//! Test occurrences and what is made of them: occurrence `i` of a job (scheduled `i`
//! seconds after a fixed instant), its publish, and its ledger claim, end and run.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use cronq_shared::broker::Outgoing;
use cronq_shared::config::Overlap;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{Claim, ClaimOutcome, End, ExecutionLease, Ledger, State};
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::{JobName, QueueName};
use cronq_shared::runlog::{Outcome, Run};

/// The logical queue `name`.
pub fn queue(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

/// Occurrence number `i` of job `job`: scheduled `i` seconds after a fixed instant.
pub fn occurrence(job: &str, i: u32) -> Occurrence {
    let at =
        Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).unwrap() + chrono::Duration::seconds(i.into());
    let job = JobName::new(job).unwrap();
    Occurrence {
        key: OccurrenceKey::scheduled(job.clone(), at),
        job,
        scheduled_at: at,
        scheduled_local: at.fixed_offset(),
        timezone: "UTC".into(),
        trigger: Trigger::Schedule,
        attempt: 1,
        payload: serde_json::json!({ "i": i }),
        epoch: 0,
        published_at: at,
        deadline: None,
        last_error: None,
        traceparent: None,
    }
}

/// Occurrence `i` of `job`, to be published at once on `q`.
pub fn outgoing(q: &QueueName, job: &str, i: u32) -> Outgoing {
    Outgoing {
        queue: q.clone(),
        occurrence: occurrence(job, i),
        delay: Duration::ZERO,
    }
}

/// Longer than any test: leases, retention and rechecks that must not lapse.
pub const LONG: Duration = Duration::from_secs(60);

/// The claim of occurrence `i` of `job` as attempt `attempt`, by consumer `test`.
pub fn claim(job: &str, i: u32, attempt: u32, overlap: Overlap, lease: Duration) -> Claim {
    let occ = occurrence(job, i);
    Claim {
        key: occ.key.clone(),
        job: occ.job.clone(),
        queue: QueueName::new("default").unwrap(),
        attempt,
        overlap,
        max_concurrent: 1,
        pool: None,
        lease,
        retention: LONG,
        body: occ.encode(),
        scheduled_at: occ.scheduled_at,
        recheck: LONG,
        consumer: "test".to_owned(),
        token: cronq_shared::ledger::claim_token(),
        held: false,
    }
}

/// An end in `state`, with no error, follow-up or run.
pub fn end(state: State) -> End {
    End {
        state: Some(state),
        error: None,
        retention: LONG,
        next: None,
        run: None,
    }
}

/// The run of `c`'s attempt as its consumer records a success, for the history.
pub fn run_of(c: &Claim) -> Run {
    Run {
        key: c.key.clone(),
        job: c.job.clone(),
        attempt: c.attempt,
        consumer: "test".to_owned(),
        started_at: Utc::now(),
        duration: Duration::from_millis(5),
        outcome: Outcome::Succeeded,
        error: None,
        published_at: Some(Utc::now()),
    }
}

/// Claims `c`, which must be granted, and returns its lease.
pub async fn claimed(ledger: &impl Ledger, c: &Claim) -> ExecutionLease {
    match ledger.claim(c).await.unwrap() {
        ClaimOutcome::Claimed { lease, .. } => lease,
        other => panic!("expected a claim of {}, got {other:?}", c.key),
    }
}
