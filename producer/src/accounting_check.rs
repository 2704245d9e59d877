//! The leader's continuous reconciliation: every [`Trailing::every`], while this producer
//! leads, it accounts for the occurrences of a trailing window (from [`Trailing::window`]
//! ago to [`Trailing::lag`] ago) of every job of the config in force, file and runtime
//! jobs, as `cronq verify` does (`cronq_shared::accounting`), and exports
//! `cronq_occurrences_unaccounted{job}`: the gaps each job has in the window. A standby
//! exports 0.
//!
//! A check costs what changed since the last one (`cronq_shared::accounting::incremental`):
//! the runs appended since, the jobs with an occurrence entering the window or a new run;
//! its report is the full one's. A new term, a check after a store failed, and a check
//! [`Trailing::resync`] after the last full read start over with a full read of the run
//! history (what changed in it other than by appending shows then).
//!
//! Invariant: the per-job series are bounded as every per-job series is (`[metrics]
//! job_label_limit`, `cronq_shared::job_labels`): the gauge moves by increments, so jobs
//! past the limit add up under `job="other"` instead of overwriting each other.
//!
//! Not checked here: the dead-letter queue (listing it every minute would load the broker
//! for every letter); `cronq verify` checks it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use cronq_shared::accounting::{Incremental, Sources, Window};
use cronq_shared::audit::AuditLog;
use cronq_shared::config::Config;
use cronq_shared::control::Control;
use cronq_shared::jobs::JobStore;
use cronq_shared::lease::Lease;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, RunLog};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::alerts::Gaps;
use crate::leader::Leadership;

/// The gauge's name.
pub const METRIC: &str = "cronq_occurrences_unaccounted";

/// The trailing window and how often it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailing {
    /// How often.
    pub every: Duration,
    /// How far back the window starts.
    pub window: Duration,
    /// How far back it ends; also the grace each occurrence gets after it could have ended.
    pub lag: Duration,
    /// How often the run history is read in full again: what changed in it other than by
    /// appending (a run removed behind cronq's back) shows by then.
    pub resync: Duration,
}

impl Default for Trailing {
    /// Every minute, from an hour ago to two minutes ago; read in full every hour.
    fn default() -> Self {
        Self {
            every: Duration::from_secs(60),
            window: Duration::from_secs(3600),
            lag: Duration::from_secs(120),
            resync: Duration::from_secs(3600),
        }
    }
}

/// Where the check reads.
pub struct Stores {
    /// The run history.
    pub runlog: Arc<dyn RunLog>,
    /// The audit log (past pauses, runtime job changes).
    pub audit: Arc<dyn AuditLog>,
    /// The runtime jobs' revisions.
    pub jobs: Arc<dyn JobStore>,
    /// The pauses in force.
    pub control: Control,
    /// The leadership terms recorded (what no leader published, by the catch-up policy).
    pub lease: Arc<dyn Lease>,
}

/// Reconciles a trailing window while leading.
pub struct AccountingCheck {
    stores: Stores,
    config: watch::Receiver<Arc<Config>>,
    leadership: watch::Receiver<Option<Leadership>>,
    trailing: Trailing,
    gaps: watch::Sender<Arc<Gaps>>,
    /// The runs read so far and what the last check found, for the next one (its term).
    incremental: Incremental,
    /// The term `incremental` belongs to, and when it last read the history in full.
    term: Option<(u64, tokio::time::Instant)>,
}

impl AccountingCheck {
    /// Checks `trailing` while `leadership` holds, the jobs of the config `config` sends.
    pub fn new(
        stores: Stores,
        config: watch::Receiver<Arc<Config>>,
        leadership: watch::Receiver<Option<Leadership>>,
        trailing: Trailing,
    ) -> Self {
        Self {
            stores,
            config,
            leadership,
            trailing,
            gaps: watch::Sender::new(Arc::default()),
            incremental: Incremental::new(),
            term: None,
        }
    }

    /// The gaps each check finds, by job (for the alerts, `crate::alerts`).
    pub fn gaps(&self) -> watch::Receiver<Arc<Gaps>> {
        self.gaps.subscribe()
    }

    /// Checks until `token` is cancelled.
    pub async fn run(mut self, token: CancellationToken) {
        announce();
        let mut shown: HashMap<String, f64> = HashMap::new();
        let mut waited = Duration::ZERO;
        loop {
            let epoch = self.leadership.borrow().as_ref().map(|l| l.term.epoch);
            if let Some(epoch) = epoch {
                // This leader's own term is recorded as its scheduler takes over; until
                // then what no leader published before it cannot be judged: wait for it
                // (a while: a term that cannot be recorded does not stop the checks).
                let wait_for_term = waited < TERM_WAIT;
                match self.check(&shown, epoch, wait_for_term).await {
                    Checked::Gaps(now) => publish(&mut shown, now),
                    Checked::Unreadable => {}
                    Checked::TermNotRecorded => {
                        waited += TERM_POLL;
                        if token
                            .run_until_cancelled(tokio::time::sleep(TERM_POLL))
                            .await
                            .is_none()
                        {
                            return;
                        }
                        continue;
                    }
                }
            } else {
                // A standby exports nothing unaccounted: the leader does; and keeps nothing
                // of a check (a next term starts with a full read).
                publish(&mut shown, HashMap::new());
                self.incremental.reset();
                self.term = None;
            }
            waited = Duration::ZERO;
            if token
                .run_until_cancelled(tokio::time::sleep(self.trailing.every))
                .await
                .is_none()
            {
                return;
            }
        }
    }

    /// The gaps per job of the window ending now, or why not; warns of each job whose gaps
    /// grew since `shown`. With `wait_for_term`, nothing is judged before the term `epoch`
    /// (this leader's) is recorded.
    async fn check(
        &mut self,
        shown: &HashMap<String, f64>,
        epoch: u64,
        wait_for_term: bool,
    ) -> Checked {
        let config = self.config.borrow().clone();
        let now = Utc::now();
        let back = |d: Duration| now - TimeDelta::from_std(d).unwrap_or(TimeDelta::zero());
        let window = Window {
            from: back(self.trailing.window),
            to: back(self.trailing.lag),
            grace: self.trailing.lag,
            now,
            job: None,
            max_runs: DEFAULT_MAX_RUNS,
            only_gaps: true,
        };
        let paused = match self.stores.control.paused().await {
            Ok(p) => p,
            Err(e) => {
                debug!(error = %e, "cannot read the pauses to account for the occurrences");
                return Checked::Unreadable;
            }
        };
        let terms = match self.stores.lease.terms().await {
            Ok(t) => t,
            Err(e) => {
                debug!(error = %e, "cannot read the leadership terms to account for the occurrences");
                return Checked::Unreadable;
            }
        };
        if wait_for_term && !terms.iter().any(|t| t.epoch == epoch) {
            return Checked::TermNotRecorded;
        }
        let sources = Sources {
            runlog: &*self.stores.runlog,
            audit: &*self.stores.audit,
            jobs: &*self.stores.jobs,
            // The trailing window's file jobs as the config defines them now: reading and
            // parsing the recorded versions at every check would cost a large config's
            // load each time.
            file_history: &[],
            terms: &terms,
        };
        // A new term starts from a full read of the history: what another leader read is
        // not this one's to trust.
        // And the history is read in full again every `resync`.
        let started = tokio::time::Instant::now();
        if self.term.is_none_or(|(e, read)| {
            e != epoch || started.duration_since(read) >= self.trailing.resync
        }) {
            self.incremental.reset();
            self.term = Some((epoch, started));
        }
        let report = match self
            .incremental
            .check(sources, &config, &paused, &window)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                debug!(error = %e, "cannot read the run history to account for the occurrences");
                return Checked::Unreadable;
            }
        };
        let mut gaps = HashMap::new();
        let mut first: BTreeMap<&str, String> = BTreeMap::new();
        let mut found = Gaps::new();
        for a in &report.accounts {
            if a.gaps.is_empty() {
                continue;
            }
            found.insert(
                a.job.clone(),
                a.gaps
                    .iter()
                    .map(|(key, gap)| (key.to_string(), gap.to_string()))
                    .collect(),
            );
            #[allow(clippy::cast_precision_loss)]
            let count = a.gaps.len() as f64;
            gaps.insert(a.job.clone(), count);
            if shown.get(&a.job).is_some_and(|was| *was >= count) {
                continue;
            }
            if let Some((key, gap)) = a.gaps.last() {
                first.insert(&a.job, format!("{key}: {gap}"));
            }
        }
        self.gaps.send_replace(Arc::new(found));
        for (job, example) in first.iter().take(crate::serving_check::NAMED) {
            warn!(job = %job, gap = %example, "occurrences not accounted for in the trailing window (`cronq verify` lists them)");
        }
        Checked::Gaps(gaps)
    }
}

/// What one check came to.
enum Checked {
    /// The gaps per job.
    Gaps(HashMap<String, f64>),
    /// A store could not be read: nothing is published this time.
    Unreadable,
    /// This leader's term is not recorded yet.
    TermNotRecorded,
}

/// How long a new leader's first check waits for its term to be recorded, and how often it
/// looks.
const TERM_WAIT: Duration = Duration::from_secs(10);
const TERM_POLL: Duration = Duration::from_millis(250);

/// Exported at 0 from the start, so an alert can tell "all accounted for" from "not
/// known".
fn announce() {
    metrics::gauge!(METRIC, "job" => cronq_shared::job_labels::OTHER).set(0.0);
}

/// Moves each job's gauge from `shown` to `now` (gaps by job) by increments, so that
/// jobs sharing the `other` label add up, and keeps `now` as shown.
pub fn publish(shown: &mut HashMap<String, f64>, now: HashMap<String, f64>) {
    for (job, was) in shown.iter() {
        if !now.contains_key(job) {
            metrics::gauge!(METRIC, "job" => job.clone()).decrement(*was);
        }
    }
    for (job, value) in &now {
        let was = shown.get(job).copied().unwrap_or(0.0);
        if (value - was).abs() > f64::EPSILON {
            metrics::gauge!(METRIC, "job" => job.clone()).increment(value - was);
        }
    }
    *shown = now;
}
