//! The loop every producer, consumer and standalone runs beside its work: report itself
//! to the registry every [`REPORT_EVERY`] (its record lapses [`EXPIRY`] after the last
//! report), write the per-job digests of its config once per config (the digests come from
//! the process's [`Digester`](crate::digester::Digester)), and add what its [`Tally`] counted
//! to the per-minute counters.
//!
//! Invariant: a failing registry never stops the process's work: a failed report is logged
//! once per outage and tried again on the next beat; counts not written are kept for it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use cronq_shared::registry::digest::ConfigDigest;
use cronq_shared::registry::{
    Beat, Counter, DIGESTS_TTL, EXPIRY, InFlight, REPORT_EVERY, Registry, Role, Serves, minute_of,
};
use cronq_shared::store::StoreError;

use crate::tally::Tally;

/// How often the per-job digests are written again, keeping them [`DIGESTS_TTL`].
const DIGESTS_REFRESH: Duration = Duration::from_secs(600);

/// Since when the process leads, if it does ([`Reporter::with_leading`]).
type Leading = Box<dyn Fn() -> Option<DateTime<Utc>> + Send + Sync>;

/// What the process serves now, if it consumes ([`Reporter::with_serves`]).
type Serving = Box<dyn Fn() -> Serves + Send + Sync>;

/// The attempts the process runs now, if it consumes ([`Reporter::with_running`]).
type Running = Box<dyn Fn() -> Vec<InFlight> + Send + Sync>;

/// Reports one process until cancelled.
pub struct Reporter {
    registry: Arc<dyn Registry>,
    beat: Beat,
    digest: watch::Receiver<Arc<ConfigDigest>>,
    tally: Tally,
    leading: Option<Leading>,
    serving: Option<Serving>,
    running: Option<Running>,
}

impl Reporter {
    /// A reporter for the process `instance` of `role`, running the configs whose digests
    /// `digest` sends, adding what `tally` counts.
    pub fn new(
        registry: Arc<dyn Registry>,
        instance: impl Into<String>,
        role: Role,
        digest: watch::Receiver<Arc<ConfigDigest>>,
        tally: Tally,
    ) -> Self {
        let now = Utc::now();
        let beat = Beat {
            instance: instance.into(),
            role,
            host: cronq_shared::host::name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: now,
            last_seen: now,
            digest: String::new(),
            jobs: 0,
            leading_since: None,
            serves: None,
            running: Vec::new(),
        };
        Self {
            registry,
            beat,
            digest,
            tally,
            leading: None,
            serving: None,
            running: None,
        }
    }

    /// Reports with each beat since when the process leads, as `leading` says (`None`
    /// while it does not).
    #[must_use]
    pub fn with_leading(
        mut self,
        leading: impl Fn() -> Option<DateTime<Utc>> + Send + Sync + 'static,
    ) -> Self {
        self.leading = Some(Box::new(leading));
        self
    }

    /// Reports with each beat what the process serves, as `serves` says at that moment (a
    /// consumer's queues and handler names follow its reloads).
    #[must_use]
    pub fn with_serves(mut self, serves: impl Fn() -> Serves + Send + Sync + 'static) -> Self {
        self.serving = Some(Box::new(serves));
        self
    }

    /// Reports with each beat the attempts `running` lists at that moment (a consumer's
    /// attempts of jobs with an `sla`).
    #[must_use]
    pub fn with_running(
        mut self,
        running: impl Fn() -> Vec<InFlight> + Send + Sync + 'static,
    ) -> Self {
        self.running = Some(Box::new(running));
        self
    }

    /// Reports until `token` is cancelled, then removes the record.
    pub async fn run(mut self, token: CancellationToken) {
        let mut watching = true;
        let mut digest = self.digest.borrow_and_update().clone();
        let mut digests_put: Option<DateTime<Utc>> = None;
        let mut failing = false;
        loop {
            let now = Utc::now();
            if digests_put
                .is_none_or(|at| (now - at).to_std().unwrap_or_default() >= DIGESTS_REFRESH)
            {
                match self
                    .registry
                    .put_digests(&digest.overall, &digest.jobs, DIGESTS_TTL)
                    .await
                {
                    Ok(()) => digests_put = Some(now),
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot write the config's job digests yet")
                    }
                }
            }
            self.beat.last_seen = now;
            self.beat.digest.clone_from(&digest.overall);
            self.beat.jobs = digest.jobs.len();
            self.beat.leading_since = self.leading.as_ref().and_then(|since| since());
            self.beat.serves = self.serving.as_ref().map(|serves| serves());
            self.beat.running = self.running.as_ref().map(|r| r()).unwrap_or_default();
            let reported = self.report().await;
            match (&reported, failing) {
                (Err(e), false) => {
                    tracing::warn!(instance_id = %self.beat.instance, error = %e, "cannot report this instance to the fleet registry; retrying")
                }
                (Ok(()), true) => {
                    tracing::info!(instance_id = %self.beat.instance, "reporting to the fleet registry again")
                }
                _ => {}
            }
            failing = reported.is_err();
            tokio::select! {
                biased;
                () = token.cancelled() => break,
                changed = self.digest.changed(), if watching => {
                    if changed.is_ok() {
                        digest = self.digest.borrow_and_update().clone();
                        digests_put = None;
                    } else {
                        watching = false;
                    }
                }
                () = tokio::time::sleep(REPORT_EVERY) => {}
            }
        }
        self.flush().await.ok();
        if let Err(e) = self.registry.leave(&self.beat.instance).await {
            tracing::debug!(error = %e, "cannot remove this instance from the fleet registry; it lapses by itself");
        }
    }

    async fn report(&self) -> Result<(), StoreError> {
        self.registry.report(&self.beat, EXPIRY).await?;
        self.flush().await
    }

    /// Adds what was counted to this minute's counters; what cannot be written is kept.
    async fn flush(&self) -> Result<(), StoreError> {
        let minute = minute_of(Utc::now());
        for counter in [Counter::Published, Counter::Executed] {
            let n = self.tally.take(counter);
            if n == 0 {
                continue;
            }
            if let Err(e) = self.registry.count(counter, minute, n).await {
                self.tally.add(counter, n);
                return Err(e);
            }
        }
        Ok(())
    }
}
