//! Which jobs have a `job` label of their own on `/metrics`: the one place that bounds the
//! per-job series, whatever the number of jobs (`[metrics] job_label_limit`,
//! `docs/config.md`).
//!
//! The first `limit` distinct jobs seen keep their own label, in the order they are first
//! seen (first counted, first admitted); every later job is counted under
//! `job="other"`. An admitted job stays admitted for the life of the process, so a series
//! never changes label half-way. Failures get no special treatment: a storm of failures
//! over a million jobs must not make a million series either; the failing job's name is
//! in the log lines, `cronq runs` and the dead-letter queue.
//!
//! The reserved values `other` and `unknown` (a message whose job is not in the config)
//! pass unchanged and use none of the budget.

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock};

use crate::config::MetricsConfig;

/// The label value the jobs past the limit share.
pub const OTHER: &str = "other";

/// The label value of a message whose job is not in the config, or unreadable.
pub const UNKNOWN: &str = "unknown";

/// The label policy: which job name goes on a series. Cheap to ask from many threads: a
/// job already admitted, or any job once the budget is spent, takes a read lock only.
#[derive(Debug)]
pub struct JobLabels {
    /// `None`: every job keeps its own label.
    limit: Option<usize>,
    /// The jobs that keep their own label; never more than `limit`.
    admitted: RwLock<HashSet<Box<str>>>,
}

impl JobLabels {
    /// A policy with `[metrics]`'s limit, nothing admitted yet.
    pub fn new(config: &MetricsConfig) -> Self {
        Self {
            limit: config.job_label_limit,
            admitted: RwLock::new(HashSet::new()),
        }
    }

    /// The `job` label value for a series of `job`: `job` itself when it has (or now gets)
    /// a label of its own, else [`OTHER`].
    pub fn label<'a>(&self, job: &'a str) -> &'a str {
        let Some(limit) = self.limit else {
            return job;
        };
        if job == OTHER || job == UNKNOWN {
            return job;
        }
        {
            let admitted = self.admitted.read().unwrap_or_else(PoisonError::into_inner);
            if admitted.contains(job) {
                return job;
            }
            if admitted.len() >= limit {
                return OTHER;
            }
        }
        let mut admitted = self
            .admitted
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if admitted.contains(job) {
            return job;
        }
        if admitted.len() >= limit {
            return OTHER;
        }
        admitted.insert(job.into());
        job
    }

    /// How many jobs have a label of their own so far.
    pub fn admitted(&self) -> usize {
        self.admitted
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Default for JobLabels {
    /// The default policy (`job_label_limit = 1000`).
    fn default() -> Self {
        Self::new(&MetricsConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(n: usize) -> JobLabels {
        JobLabels::new(&MetricsConfig {
            job_label_limit: Some(n),
        })
    }

    #[test]
    fn the_first_n_distinct_jobs_keep_their_label() {
        let labels = limited(2);
        assert_eq!(labels.label("a"), "a");
        assert_eq!(labels.label("a"), "a", "asking again uses no budget");
        assert_eq!(labels.label("b"), "b");
        assert_eq!(labels.label("c"), OTHER);
        assert_eq!(labels.label("d"), OTHER);
        assert_eq!(labels.label("a"), "a", "admitted jobs stay admitted");
        assert_eq!(labels.label("b"), "b");
        assert_eq!(labels.admitted(), 2);
    }

    #[test]
    fn zero_puts_every_job_under_other() {
        let labels = limited(0);
        assert_eq!(labels.label("a"), OTHER);
        assert_eq!(labels.admitted(), 0);
    }

    #[test]
    fn unlimited_keeps_every_label() {
        let labels = JobLabels::new(&MetricsConfig {
            job_label_limit: None,
        });
        for i in 0..5000 {
            let job = format!("job-{i}");
            assert_eq!(labels.label(&job), job);
        }
    }

    #[test]
    fn reserved_values_pass_and_use_no_budget() {
        let labels = limited(1);
        assert_eq!(labels.label(UNKNOWN), UNKNOWN);
        assert_eq!(labels.label(OTHER), OTHER);
        assert_eq!(labels.label("a"), "a");
        assert_eq!(labels.label("b"), OTHER);
    }

    #[test]
    fn the_default_admits_a_thousand() {
        let labels = JobLabels::default();
        for i in 0..MetricsConfig::DEFAULT_JOB_LABEL_LIMIT {
            let job = format!("job-{i}");
            assert_eq!(labels.label(&job), job);
        }
        assert_eq!(labels.label("one-more"), OTHER);
        assert_eq!(labels.admitted(), MetricsConfig::DEFAULT_JOB_LABEL_LIMIT);
    }

    #[test]
    fn threads_never_admit_more_than_the_limit() {
        let labels = limited(10);
        std::thread::scope(|s| {
            for t in 0..4 {
                let labels = &labels;
                s.spawn(move || {
                    for i in 0..100 {
                        labels.label(&format!("job-{}", (i * 7 + t) % 50));
                    }
                });
            }
        });
        assert_eq!(labels.admitted(), 10);
    }
}
