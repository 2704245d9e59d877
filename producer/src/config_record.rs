//! While this process leads, it records the config file it loaded in the job store
//! (`cronq_shared::recorded`): when it takes the lead, and at each reload while it leads.
//! The operations commands read that record, so they need no config file
//! (`docs/operations.md`).
//!
//! Invariant: only a leader records, so the record is the config whose jobs are
//! published; a record that fails is tried again every [`RETRY`] while the lead lasts,
//! and never holds up the scheduler.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use cronq_shared::jobs::JobStore;
use cronq_shared::recorded::{ConfigRecord, Load};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::leader::Leadership;

/// How long a failed record waits before it is tried again.
pub const RETRY: Duration = Duration::from_secs(5);

/// Records each load of the config file while this process leads.
pub struct ConfigRecorder {
    jobs: Arc<dyn JobStore>,
    loads: watch::Receiver<Option<Arc<Load>>>,
    leadership: watch::Receiver<Option<Leadership>>,
    instance: String,
}

impl ConfigRecorder {
    /// Records the loads `loads` sends into `jobs`, while `leadership` holds, as `instance`.
    pub fn new(
        jobs: Arc<dyn JobStore>,
        loads: watch::Receiver<Option<Arc<Load>>>,
        leadership: watch::Receiver<Option<Leadership>>,
        instance: String,
    ) -> Self {
        Self {
            jobs,
            loads,
            leadership,
            instance,
        }
    }

    /// Records until `token` is cancelled or the leadership or the loads end.
    pub async fn run(self, token: CancellationToken) {
        let Self {
            jobs,
            mut loads,
            mut leadership,
            instance,
        } = self;
        loop {
            let led = tokio::select! {
                biased;
                () = token.cancelled() => return,
                led = leadership.wait_for(Option::is_some) => led.is_ok(),
            };
            if !led {
                return;
            }
            // One term: record the current load, then each next one, until the lead ends.
            loop {
                let load = loads.borrow_and_update().clone();
                // A store that does not answer must not hold up a shutdown.
                let done = match load {
                    Some(load) => tokio::select! {
                        biased;
                        () = token.cancelled() => return,
                        done = record(&*jobs, load, &instance) => done,
                    },
                    None => true,
                };
                tokio::select! {
                    biased;
                    () = token.cancelled() => return,
                    lost = leadership.wait_for(Option::is_none) => {
                        if lost.is_err() {
                            return;
                        }
                        break;
                    }
                    changed = loads.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep(RETRY), if !done => {}
                }
            }
        }
    }
}

/// Records `load`; false when the store refused (logged).
async fn record(jobs: &dyn JobStore, load: Arc<Load>, instance: &str) -> bool {
    let by = instance.to_owned();
    // A large file takes a while to rewrite without its handlers: not on the runtime.
    let record = match tokio::task::spawn_blocking(move || {
        ConfigRecord::new(&load, &by, Utc::now())
    })
    .await
    {
        Ok(record) => record,
        Err(err) => {
            warn!(error = %err, "cannot record the config file's jobs");
            return true;
        }
    };
    match jobs.record_config(&record).await {
        Ok(()) => {
            debug!(path = %record.path, jobs = record.jobs, "recorded the config file's jobs");
            true
        }
        Err(err) => {
            warn!(error = %err, "cannot record the config file's jobs in the store, trying again: the operations commands read the previous record until then");
            false
        }
    }
}
