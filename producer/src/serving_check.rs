//! The leader's check that every job runs somewhere: every `REPORT_EVERY`, while this
//! producer leads, it reads what the live consumers serve from the fleet registry and
//! assesses each job of the config in force, file and runtime jobs alike
//! (`cronq_shared::registry::serving`). It logs once per change: a warning when a job
//! becomes unserved (its occurrences would be dead-lettered as having no handler), an
//! info when it is served again, and the same once for the whole fleet while no consumer
//! runs at all; and it keeps `/metrics` current ([`publish`]).
//!
//! Invariant: the per-job series are bounded: at most [`NAMED`] jobs are named at a time,
//! whatever the number of jobs; the count covers them all.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cronq_shared::config::Config;
use cronq_shared::names::JobName;
use cronq_shared::registry::serving::{Fleet, Service};
use cronq_shared::registry::{REPORT_EVERY, Registry};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::leader::Leadership;

/// At most this many jobs have a `cronq_job_unserved{job}` series of their own, and are
/// named in one log line.
pub const NAMED: usize = 100;

/// How long a new leader waits before its first assessment: consumers that started with
/// it report within one `REPORT_EVERY`, so a fleet starting together raises no alarm.
const SETTLE: Duration = Duration::from_secs(4);

/// What the last assessment found.
#[derive(Debug, Default, PartialEq, Eq)]
struct Found {
    /// Whether no consumer reports itself at all.
    no_consumer: bool,
    /// The unserved jobs, with why.
    unserved: BTreeMap<JobName, String>,
}

/// Assesses the fleet's jobs against what its consumers serve.
pub struct ServingCheck {
    registry: Arc<dyn Registry>,
    config: watch::Receiver<Arc<Config>>,
    leadership: watch::Receiver<Option<Leadership>>,
}

impl ServingCheck {
    /// Checks while `leadership` holds, the jobs of the config `config` sends.
    pub fn new(
        registry: Arc<dyn Registry>,
        config: watch::Receiver<Arc<Config>>,
        leadership: watch::Receiver<Option<Leadership>>,
    ) -> Self {
        Self {
            registry,
            config,
            leadership,
        }
    }

    /// Checks until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) {
        announce();
        let mut found: Option<Found> = None;
        let mut leading = false;
        loop {
            let leads = self.leadership.borrow().is_some();
            if leads && !leading {
                // Give the consumers that start with this leader a beat to report.
                if token
                    .run_until_cancelled(tokio::time::sleep(SETTLE))
                    .await
                    .is_none()
                {
                    return;
                }
            }
            if leading && !leads {
                // A standby exports nothing unserved: the new leader does.
                if let Some(was) = found.take() {
                    publish(&was.unserved, &BTreeMap::new());
                }
            }
            leading = leads;
            if leads {
                self.check(&mut found).await;
            }
            if token
                .run_until_cancelled(tokio::time::sleep(REPORT_EVERY))
                .await
                .is_none()
            {
                return;
            }
        }
    }

    async fn check(&self, before: &mut Option<Found>) {
        let beats = match self.registry.instances().await {
            Ok(beats) => beats,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the fleet registry to tell which jobs are served");
                return;
            }
        };
        let config = self.config.borrow().clone();
        let fleet = Fleet::new(&beats);
        let mut now = Found {
            no_consumer: fleet.consumers() == 0,
            unserved: BTreeMap::new(),
        };
        if !now.no_consumer {
            for job in &config.jobs {
                if let Service::Unserved(why) = fleet.assess(job) {
                    now.unserved.insert(job.name.clone(), why);
                }
            }
        }
        let empty = Found::default();
        let was = before.as_ref().unwrap_or(&empty);
        publish(&was.unserved, &now.unserved);
        say(before.as_ref(), &now, &config);
        *before = Some(now);
    }
}

/// Logs what changed from `before` (`None` on the first assessment) to `now`, for the
/// jobs of `config`.
fn say(before: Option<&Found>, now: &Found, config: &Config) {
    let was_none = before.is_some_and(|b| b.no_consumer);
    if now.no_consumer && !was_none {
        warn!("no consumer is running: occurrences wait in their queues until one starts");
    } else if !now.no_consumer && was_none {
        info!("a consumer is running again");
    }
    let empty = BTreeMap::new();
    let was = before.map_or(&empty, |b| &b.unserved);
    let became: Vec<(&JobName, &String)> = now
        .unserved
        .iter()
        .filter(|(job, _)| !was.contains_key(*job))
        .collect();
    for (job, why) in became.iter().take(NAMED) {
        warn!(job = %job, reason = %why, "job unserved: no live consumer runs it, so its occurrences would be dead-lettered; define its handler on a consumer of its queue (or start one)");
    }
    if became.len() > NAMED {
        warn!(
            jobs = became.len() - NAMED,
            "more jobs unserved (`cronq jobs` lists them all)"
        );
    }
    let mut served: Vec<&JobName> = was
        .keys()
        .filter(|job| !now.unserved.contains_key(*job))
        .collect();
    if !served.is_empty() {
        // A job deleted meanwhile is not "served again".
        let exists: HashSet<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
        served.retain(|job| exists.contains(job.as_str()));
    }
    // While no consumer runs, nothing is served: not "served again".
    if !now.no_consumer {
        for job in served.iter().take(NAMED) {
            info!(job = %job, "job served again");
        }
    }
}

/// Exported at 0 from the start, so an alert can tell "none unserved" from "not known".
fn announce() {
    metrics::gauge!("cronq_jobs_unserved").set(0.0);
}

/// Brings `/metrics` from the unserved jobs published last (`before`) to `now`:
/// - `cronq_job_unserved{job}`: 1 for each unserved job (the first [`NAMED`]), 0 once it
///   is served again (or no longer exists, or is no longer named);
/// - `cronq_jobs_unserved`: how many jobs are unserved now (0 while no consumer runs at
///   all: that is "no consumer", logged once, not a job's fault).
pub fn publish(before: &BTreeMap<JobName, String>, now: &BTreeMap<JobName, String>) {
    let named: Vec<&JobName> = now.keys().take(NAMED).collect();
    for job in before.keys().take(NAMED) {
        if !named.contains(&job) {
            metrics::gauge!("cronq_job_unserved", "job" => job.as_str().to_owned()).set(0.0);
        }
    }
    for job in &named {
        metrics::gauge!("cronq_job_unserved", "job" => job.as_str().to_owned()).set(1.0);
    }
    metrics::gauge!("cronq_jobs_unserved").set(now.len() as f64);
}
