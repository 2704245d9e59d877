//! The leader's check that the fleet runs its config: every `REPORT_EVERY`, while this
//! producer leads, it compares the config digest each live instance reports
//! (`cronq_shared::registry`) with its own (the digest the process's `Digester` computed,
//! shared with its reporter); it logs once per change which instances differ
//! and in which jobs (warn; info once they agree again), and keeps `/metrics` current:
//! `cronq_config_digest_mismatch{instance}` (1 differs, 0 agrees again) and
//! `cronq_config_digest_mismatch_instances`.
//!
//! Invariant: label values are instance ids, never job names, so the series are bounded
//! by the instances seen; job names appear only in the (capped) log line.

use std::collections::BTreeSet;
use std::sync::Arc;

use cronq_shared::registry::compare::{Comparer, Difference, Reference};
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
        let mut reference: Option<(Arc<ConfigDigest>, Reference)> = None;
        let mut said: Option<Vec<String>> = None;
        let mut flagged: BTreeSet<String> = BTreeSet::new();
        loop {
            if self.leadership.borrow().is_some() {
                let digest = self.digest.borrow().clone();
                let stale = reference
                    .as_ref()
                    .is_none_or(|(d, _)| !Arc::ptr_eq(d, &digest));
                if stale {
                    let r = Reference::from(&*digest);
                    reference = Some((digest, r));
                }
                if let Some((_, r)) = &reference {
                    self.check(&mut comparer, r, &mut said, &mut flagged).await;
                }
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
        flagged: &mut BTreeSet<String>,
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
        let now: BTreeSet<String> = differences.iter().map(|d| d.instance.clone()).collect();
        for gone in flagged.difference(&now) {
            metrics::gauge!("cronq_config_digest_mismatch", "instance" => gone.clone()).set(0.0);
        }
        for instance in &now {
            metrics::gauge!("cronq_config_digest_mismatch", "instance" => instance.clone())
                .set(1.0);
        }
        metrics::gauge!("cronq_config_digest_mismatch_instances").set(now.len() as f64);
        *flagged = now;
        let lines: Vec<String> = differences.iter().map(Difference::describe).collect();
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
