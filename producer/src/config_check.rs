//! The leader's check that the fleet runs its config: every `REPORT_EVERY`, while this
//! producer leads, it compares the config digest each live instance reports
//! (`cronq_shared::registry`) with its own (the digest the process's `Digester` computed,
//! shared with its reporter); it logs once per change which instances differ
//! and in which jobs (warn; info once they agree again), and keeps `/metrics` current
//! ([`publish_mismatch`], which the dashboard's `/metrics` uses too).
//!
//! Invariant: the series are bounded by the instances seen: per instance, at most
//! [`NAMED`] job names (those [`Difference::jobs`] names), whatever the number of jobs.

use std::collections::BTreeSet;
use std::sync::Arc;

use cronq_fleet::compare::{Comparer, Difference, NAMED, Reference};
use cronq_shared::registry::digest::ConfigDigest;
use cronq_shared::registry::{REPORT_EVERY, Registry};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::leader::Leadership;

/// Compares the fleet's configs with this leader's.
pub struct ConfigCheck {
    registry: Arc<dyn Registry>,
    digest: watch::Receiver<Arc<ConfigDigest>>,
    leadership: watch::Receiver<Option<Leadership>>,
}

impl ConfigCheck {
    /// Checks while `leadership` holds, against the config whose digest `digest` sends.
    pub fn new(
        registry: Arc<dyn Registry>,
        digest: watch::Receiver<Arc<ConfigDigest>>,
        leadership: watch::Receiver<Option<Leadership>>,
    ) -> Self {
        Self {
            registry,
            digest,
            leadership,
        }
    }

    /// Checks until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) {
        let mut comparer = Comparer::default();
        let mut said: Option<Vec<String>> = None;
        let mut flagged: Vec<Difference> = Vec::new();
        loop {
            if self.leadership.borrow().is_some() {
                let digest = self.digest.borrow().clone();
                self.check(&mut comparer, &digest, &mut said, &mut flagged)
                    .await;
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

    async fn check(
        &self,
        comparer: &mut Comparer,
        reference: &Reference,
        said: &mut Option<Vec<String>>,
        flagged: &mut Vec<Difference>,
    ) {
        let differences = match self.registry.instances().await {
            Ok(beats) => {
                comparer
                    .differences(&*self.registry, reference, &beats)
                    .await
            }
            Err(e) => Err(e),
        };
        let differences: Vec<Difference> = match differences {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the fleet registry to compare configs");
                return;
            }
        };
        publish_mismatch(flagged, &differences);
        let lines: Vec<String> = differences.iter().map(Difference::describe).collect();
        *flagged = differences;
        if said.as_ref() == Some(&lines) {
            return;
        }
        if lines.is_empty() {
            if said.is_some() {
                info!(digest = %reference.overall, "every instance runs the leader's config again");
            }
        } else {
            warn!(
                digest = %reference.overall,
                instances = lines.len(),
                differ = %lines.join("; "),
                "instances run another config than the leader: deploy the same config file to every host"
            );
        }
        *said = Some(lines);
    }
}

/// Brings `/metrics` from the differences published last (`before`) to `now`:
/// - `cronq_config_digest_mismatch{instance}`: 1 for each instance whose config differs
///   from the reference, 0 once it agrees again (or is gone);
/// - `cronq_config_digest_mismatch_jobs{instance}`: how many of its jobs differ, lack or
///   are extra (0 when they agree, or when its per-job digests are not known);
/// - `cronq_config_digest_mismatch_job{instance, job}`: 1 for each job named in its
///   difference (at most [`NAMED`] per instance), 0 once it no longer differs;
/// - `cronq_config_digest_mismatch_instances`: how many instances differ now.
pub fn publish_mismatch(before: &[Difference], now: &[Difference]) {
    let named = |d: &Difference| -> BTreeSet<(String, String)> {
        d.jobs
            .iter()
            .take(NAMED)
            .map(|j| (d.instance.clone(), j.as_str().to_owned()))
            .collect()
    };
    let was: BTreeSet<(String, String)> = before.iter().flat_map(named).collect();
    let is: BTreeSet<(String, String)> = now.iter().flat_map(named).collect();
    for (instance, job) in was.difference(&is) {
        metrics::gauge!("cronq_config_digest_mismatch_job", "instance" => instance.clone(), "job" => job.clone())
            .set(0.0);
    }
    for (instance, job) in &is {
        metrics::gauge!("cronq_config_digest_mismatch_job", "instance" => instance.clone(), "job" => job.clone())
            .set(1.0);
    }
    for gone in before
        .iter()
        .filter(|b| !now.iter().any(|d| d.instance == b.instance))
    {
        metrics::gauge!("cronq_config_digest_mismatch", "instance" => gone.instance.clone())
            .set(0.0);
        metrics::gauge!("cronq_config_digest_mismatch_jobs", "instance" => gone.instance.clone())
            .set(0.0);
    }
    for d in now {
        metrics::gauge!("cronq_config_digest_mismatch", "instance" => d.instance.clone()).set(1.0);
        metrics::gauge!("cronq_config_digest_mismatch_jobs", "instance" => d.instance.clone())
            .set(d.count.unwrap_or(0) as f64);
    }
    metrics::gauge!("cronq_config_digest_mismatch_instances").set(now.len() as f64);
}
