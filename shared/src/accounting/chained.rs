//! What a job with parents (`after`) is expected to run: the scheduled times every one of
//! its parents is expected to run at (each parent's own expectation, its pauses applied,
//! followed up through parents that have parents), while the job was defined as running
//! after them. Each is judged once its slowest parent could have ended, every attempt
//! used, and it could have run after it.
//!
//! A parent's occurrence that did not succeed makes the child's end `skipped`, so a child
//! is judged as every job is: a terminal outcome accounts for it. A parent's occurrence
//! that was never published (an outage) shows twice: the parent's gap and the child's; one
//! a catch-up policy left unpublished while no producer led is the child's too.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{Definition, Expectation, Expected, Stretch, delta, plus};
use crate::config::{Catchup, Job};

/// By scheduled time: the latest a parent may end, whether any is optional, and the
/// catch-up policy that left any unpublished.
type Slots = BTreeMap<DateTime<Utc>, (DateTime<Utc>, bool, Option<Catchup>)>;

/// A parent as the child's expectation needs it: its own expectation and its job.
pub(super) struct Parent<'a> {
    /// The occurrences it is expected to run.
    pub(super) expected: &'a Expectation,
    /// Its current definition (for its attempts and retry delays); `None` when unknown.
    pub(super) job: Option<&'a Job>,
}

/// The expectation of the child defined by `definitions` from its `parents`', less the
/// occurrences in a `paused` stretch of its own.
pub(super) fn expected(
    definitions: &[Definition<'_>],
    parents: &[Parent<'_>],
    paused: &[Stretch],
) -> Expectation {
    let mut out = Expectation::default();
    let Some(child) = definitions.last().map(|d| &*d.job) else {
        return out;
    };
    let mut common: Option<Slots> = None;
    for parent in parents {
        out.cut |= parent.expected.cut;
        let last_end = |e: &Expected| {
            let attempts = parent.job.map_or(1, |j| j.max_attempts.max(1));
            let retries = e.retry_within * attempts.saturating_sub(1);
            plus(e.judged_from, delta(retries))
        };
        let mine: Slots = parent
            .expected
            .occurrences
            .iter()
            .map(|e| (e.at, (last_end(e), e.optional, e.no_leader)))
            .collect();
        common = Some(match common {
            None => mine,
            Some(before) => before
                .into_iter()
                .filter_map(|(at, (end, optional, no_leader))| {
                    let (other_end, other_optional, other_no_leader) = mine.get(&at)?;
                    Some((
                        at,
                        (
                            end.max(*other_end),
                            optional || *other_optional,
                            no_leader.or(*other_no_leader),
                        ),
                    ))
                })
                .collect(),
        });
    }
    for (at, (parents_end, optional, no_leader)) in common.unwrap_or_default() {
        let defined = definitions.iter().any(|d| {
            d.job.is_after() && d.since.is_none_or(|s| s < at) && d.until.is_none_or(|u| at <= u)
        });
        if !defined {
            continue;
        }
        if paused.iter().any(|s| s.contains(at)) {
            out.paused += 1;
            continue;
        }
        out.occurrences.push(Expected {
            at,
            optional,
            judged_from: plus(parents_end, delta(child.timeout)),
            retry_within: child.backoff_max + child.timeout,
            no_leader,
        });
    }
    out
}

/// How deep parents of parents are followed (a validated config has no cycle).
pub(super) const MAX_DEPTH: usize = 64;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn t(text: &str) -> DateTime<Utc> {
        text.parse().expect("valid instant")
    }

    #[test]
    fn a_child_expects_its_parents_common_times_judged_after_the_slowest() {
        let config = Config::from_toml_at(
            r#"
[[job]]
name = "two"
schedule = "*/2 * * * * *"
timeout = "5s"
max_attempts = 2
backoff_max = "10s"
command = ["true"]
[[job]]
name = "three"
schedule = "*/3 * * * * *"
timeout = "1s"
max_attempts = 1
command = ["true"]
[[job]]
name = "child"
after = ["two", "three"]
timeout = "7s"
command = ["true"]
"#,
            Path::new("cronq.toml"),
            t("2026-01-01T00:00:00Z"),
        )
        .expect("valid config");
        let def = |name: &str| Definition {
            since: None,
            until: None,
            job: std::borrow::Cow::Borrowed(config.job(name).expect("job")),
        };
        let (from, to) = (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:13Z"));
        let two = super::super::expected(&[def("two")], &[], from, to);
        let three = super::super::expected(&[def("three")], &[], from, to);
        let parents = [
            Parent {
                expected: &two,
                job: config.job("two"),
            },
            Parent {
                expected: &three,
                job: config.job("three"),
            },
        ];
        let child = expected(&[def("child")], &parents, &[]);
        let times: Vec<DateTime<Utc>> = child.occurrences.iter().map(|e| e.at).collect();
        assert_eq!(
            times,
            [
                t("2026-01-01T00:00:00Z"),
                t("2026-01-01T00:00:06Z"),
                t("2026-01-01T00:00:12Z")
            ]
        );
        // "two" may end last: 5 s timeout, then one retry within 10 s + 5 s; then 7 s.
        let at = t("2026-01-01T00:00:06Z");
        let slowest = at + chrono::Duration::seconds(5) + chrono::Duration::seconds(15);
        assert_eq!(
            child.occurrences[1].judged_from,
            slowest + chrono::Duration::seconds(7)
        );
        // Config::next_time agrees with what is expected.
        let next: Vec<DateTime<Utc>> = config
            .times_after(
                config.job("child").unwrap(),
                from - chrono::Duration::seconds(1),
            )
            .take(3)
            .collect();
        assert_eq!(next, times);
    }
}
