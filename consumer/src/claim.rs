//! What one delivery's claim asks of the ledger, and the start deadline checked before it.
//!
//! Owns: the claim of an admitted occurrence ([`of`]): its key and attempt, the overlap
//! policy as it applies to this occurrence ([`effective_overlap`]), its job's gate and
//! pool, the lease, the body stored for the reaper, and when a waiting occurrence is looked
//! at again; and the start deadline ([`missed`]). Invariant: no I/O; the clock is read for
//! the deadline only.

use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::config::{Job, Overlap};
use cronq_shared::ledger::{Claim, PoolSlot, claim_token};
use cronq_shared::message::{Occurrence, Trigger};

use crate::outcome::Verdict;

/// The claim of one attempt of `occ`, an occurrence of `job`, by `consumer`: carrying the
/// delivery's `body` for the reaper, under a token of its own that every try of this claim
/// reuses; a waiting occurrence is looked at again after `hold` at the latest.
pub(crate) fn of(
    occ: &Occurrence,
    job: &Job,
    body: &[u8],
    lease: Duration,
    hold: Duration,
    consumer: &str,
) -> Claim {
    Claim {
        key: occ.key.clone(),
        job: occ.job.clone(),
        queue: job.queue.clone(),
        attempt: occ.attempt,
        // The worker holds the delivery of a claim the store granted held (crate::worker).
        held: true,
        overlap: effective_overlap(job.overlap, occ.trigger),
        max_concurrent: job.max_concurrent.unwrap_or(1),
        pool: pool_of(job),
        lease,
        retention: job.retention,
        body: body.to_vec(),
        scheduled_at: occ.scheduled_at,
        recheck: recheck(occ, job, hold),
        consumer: consumer.to_owned(),
        token: claim_token(),
    }
}

/// The pool `job` runs in, with its size as the job was resolved with.
fn pool_of(job: &Job) -> Option<PoolSlot> {
    let pool = job.pool.as_ref()?;
    Some(PoolSlot {
        name: pool.name.to_string(),
        size: pool.size,
    })
}

/// How long a waiting occurrence is left alone before the reaper republishes it to look
/// again: the hold period, or less so that it is found `missed` soon after its deadline.
fn recheck(occ: &Occurrence, job: &Job, hold: Duration) -> Duration {
    let until_deadline = start_deadline(occ, job)
        .filter(|_| occ.attempt <= 1)
        .and_then(|d| (d - Utc::now()).to_std().ok());
    until_deadline.map_or(hold, |d| d.min(hold))
}

/// `Missed` when `occ` is a first attempt that is past its start deadline.
pub(crate) fn missed(occ: &Occurrence, job: &Job) -> Option<Verdict> {
    let deadline = start_deadline(occ, job).filter(|_| occ.attempt <= 1)?;
    (Utc::now() > deadline).then(|| Verdict::Missed {
        why: format!(
            "could not start before its deadline {}",
            deadline.to_rfc3339()
        ),
    })
}

/// The instant after which `occ` must not start: the message's, else the job's `deadline`
/// after the scheduled time.
fn start_deadline(occ: &Occurrence, job: &Job) -> Option<DateTime<Utc>> {
    occ.deadline.or_else(|| {
        job.deadline
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .map(|d| occ.scheduled_at + d)
    })
}

/// The overlap policy that applies to one occurrence.
///
/// The configured policy governs scheduled ticks. Occurrences an operator asked for
/// explicitly (`cronq trigger`, `backfill`, `dlq replay`) are never dropped by `skip`:
/// they wait their turn (`queue`); and backfilled or replayed ones, which are for past
/// times, never cancel a running occurrence (`replace` also becomes `queue`). Otherwise a
/// backfill of a `skip` job would record all but one of its occurrences as skipped.
pub(crate) fn effective_overlap(configured: Overlap, trigger: Trigger) -> Overlap {
    match (configured, trigger) {
        (Overlap::Skip, Trigger::Manual | Trigger::Backfill | Trigger::Replay) => Overlap::Queue,
        (Overlap::Replace, Trigger::Backfill | Trigger::Replay) => Overlap::Queue,
        (policy, _) => policy,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn operator_requested_occurrences_wait_instead_of_being_skipped() {
        use cronq_shared::config::Overlap::{Allow, Queue, Replace, Skip};
        use cronq_shared::message::Trigger::{Backfill, Catchup, Manual, Replay, Schedule};
        for trigger in [Schedule, Catchup] {
            for policy in [Allow, Skip, Queue, Replace] {
                assert_eq!(super::effective_overlap(policy, trigger), policy);
            }
        }
        for trigger in [Manual, Backfill, Replay] {
            assert_eq!(super::effective_overlap(Skip, trigger), Queue);
            assert_eq!(super::effective_overlap(Allow, trigger), Allow);
            assert_eq!(super::effective_overlap(Queue, trigger), Queue);
        }
        assert_eq!(super::effective_overlap(Replace, Manual), Replace);
        assert_eq!(super::effective_overlap(Replace, Backfill), Queue);
        assert_eq!(super::effective_overlap(Replace, Replay), Queue);
    }
}
