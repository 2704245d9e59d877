//! The leader's view of the pools for `/metrics`: every [`POLL`] while this producer leads,
//! it reads how each `[pools.NAME]` of the config in force is used (from the ledger,
//! `cronq_shared::ledger::Ledger::gates`) and sets `cronq_pool_size{pool}`,
//! `cronq_pool_running{pool}` and `cronq_pool_waiting{pool}`. A pool that leaves the config,
//! and every pool when leadership goes, has its series set to 0, so that only the leader's
//! figures count.
//!
//! Invariant: one series of each per pool of the config: pools are named in the file, never
//! made at runtime.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cronq_shared::config::Config;
use cronq_shared::ledger::Ledger;
use cronq_shared::ledger::pool_gate;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::leader::Leadership;

/// How often the pools are read.
pub const POLL: Duration = Duration::from_secs(2);

/// Keeps the pools' gauges current while this producer leads.
pub struct PoolCheck {
    ledger: Arc<dyn Ledger>,
    config: watch::Receiver<Arc<Config>>,
    leadership: watch::Receiver<Option<Leadership>>,
}

impl PoolCheck {
    /// Reads the pools of the config `config` sends, while `leadership` holds.
    pub fn new(
        ledger: Arc<dyn Ledger>,
        config: watch::Receiver<Arc<Config>>,
        leadership: watch::Receiver<Option<Leadership>>,
    ) -> Self {
        Self {
            ledger,
            config,
            leadership,
        }
    }

    /// Reads until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) {
        let mut shown: BTreeSet<Arc<str>> = BTreeSet::new();
        loop {
            let leads = self.leadership.borrow().is_some();
            let config = self.config.borrow().clone();
            let pools: BTreeSet<Arc<str>> = if leads {
                config.pools.keys().cloned().collect()
            } else {
                BTreeSet::new()
            };
            for gone in shown.difference(&pools) {
                set(gone, 0, 0, 0);
            }
            if !pools.is_empty() {
                let names: Vec<&Arc<str>> = pools.iter().collect();
                let gates: Vec<String> = names.iter().map(|n| pool_gate(n)).collect();
                match self.ledger.gates(&gates).await {
                    Ok(used) => {
                        for (name, gate) in names.into_iter().zip(used) {
                            let size = config.pools.get(name).copied().unwrap_or(0);
                            set(name, size, gate.running.len(), gate.waiting);
                        }
                    }
                    Err(err) => debug!(error = %err, "cannot read the pools' use from the ledger"),
                }
            }
            shown = pools;
            if token
                .run_until_cancelled(tokio::time::sleep(POLL))
                .await
                .is_none()
            {
                return;
            }
        }
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "pool sizes and counts are far below 2^52"
)]
fn set(pool: &str, size: u32, running: usize, waiting: usize) {
    let pool = pool.to_owned();
    metrics::gauge!("cronq_pool_size", "pool" => pool.clone()).set(f64::from(size));
    metrics::gauge!("cronq_pool_running", "pool" => pool.clone()).set(running as f64);
    metrics::gauge!("cronq_pool_waiting", "pool" => pool).set(waiting as f64);
}
