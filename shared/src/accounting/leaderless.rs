//! What a catch-up policy left unpublished: an occurrence due while no producer led (a
//! leader outage, or the whole fleet stopped) is judged by the job's `catchup` as the
//! producer applied it when the next term took over (`crate::schedule::catchup`, the
//! producer's own rule).
//!
//! The terms come from the lease store ([`TermRecord`]): each from the instant its
//! catch-up was planned at to its last confirmed renewal (or its release). An occurrence
//! outside every term with a term after it is planned as the next term planned it: what
//! that term published of it (`latest`: the most recent missed within `catchup_window`;
//! `all`: each within the window; `none`: nothing) stays expected, the rest is
//! [`Expected::no_leader`](super::Expected::no_leader): counted as such when it has no run, judged as usual when it
//! has one (a leader that died after its last renewal may still have published it).
//! An occurrence after the last term's last renewal (no term began since) is expected as
//! usual: the next leader may still catch it up. One before the first term the store ever
//! had (epoch 1) was due before any leader saw the job: a file job has no cursor then, and
//! the producer catches nothing up of it.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, TimeDelta, Utc};

use super::{Definition, Expectation};
use crate::lease::TermRecord;
use crate::schedule::catchup::take_over;

/// The start of the first term after `at` when no term contains `at`; `None` when one
/// does, or none began after it.
pub fn next_start(terms: &[TermRecord], at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if terms.iter().any(|t| t.contains(at)) {
        return None;
    }
    terms.iter().map(|t| t.start).filter(|s| *s > at).min()
}

/// Marks the occurrences of `expectation` (of the job `definitions` define) that the
/// catch-up policy of the next term left unpublished as
/// [`Expected::no_leader`](super::Expected::no_leader), by
/// `terms`. Optional occurrences are left as they are.
pub fn apply(expectation: &mut Expectation, definitions: &[Definition<'_>], terms: &[TermRecord]) {
    if terms.is_empty() {
        return;
    }
    // The occurrences of each outage, by the start of the term that ended it.
    let mut outages: BTreeMap<DateTime<Utc>, Vec<usize>> = BTreeMap::new();
    for (i, e) in expectation.occurrences.iter().enumerate() {
        if e.optional {
            continue;
        }
        if let Some(start) = next_start(terms, e.at) {
            outages.entry(start).or_default().push(i);
        }
    }
    for (start, indices) in outages {
        // The job as the taking-over term had it.
        let Some(def) = definitions
            .iter()
            .rev()
            .find(|d| d.since.is_none_or(|s| s < start))
            .or_else(|| definitions.first())
        else {
            continue;
        };
        let job = &def.job;
        if job.is_after() {
            continue;
        }
        let first = indices
            .iter()
            .map(|i| expectation.occurrences[*i].at)
            .min()
            .unwrap_or(start);
        // The cursor: before the first occurrence of the outage not published; none for a
        // file job at the first term ever (no leader had seen it).
        let first_ever = terms.iter().any(|t| t.epoch == 1 && t.start == start);
        let cursor =
            (!(first_ever && def.since.is_none())).then(|| first - TimeDelta::nanoseconds(1));
        let plan = take_over(
            &job.schedule,
            job.catchup,
            job.catchup_window,
            job.jitter,
            cursor,
            start,
        );
        let published: HashSet<DateTime<Utc>> = plan.catchup.into_iter().collect();
        for i in indices {
            let e = &mut expectation.occurrences[i];
            if plan.moved && e.at <= plan.cursor && !published.contains(&e.at) {
                e.optional = true;
                e.no_leader = Some(job.catchup);
            }
        }
    }
}
