//! A metrics recorder for the bench process: it keeps every sample of the producer's
//! `cronq_publish_lateness_seconds` histogram, so the precision bench reads the producer's
//! own measurement (scheduled instant → publisher confirm) instead of re-deriving it.
//! Every other metric goes to a Prometheus registry, as in a `cronq` process, so the
//! in-process producer and consumers of the benches pay what a real process pays per
//! event. Left out: the `job` label policy that `cronq` puts in front of the registry
//! (`[metrics] job_label_limit`); it passes the benches' job counts unchanged.
//!
//! Owns: the process-wide `metrics` recorder (it can be installed once per process).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;

use chrono::Utc;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

use crate::lateness::Late;

/// The histogram the producer records per published occurrence.
pub const LATENESS: &str = "cronq_publish_lateness_seconds";

/// How often the Prometheus registry folds the histogram values recorded since.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The captured lateness samples, shared with the recorder; each with the second it was
/// due at, worked out when it is recorded ([`Late::taken_at`]; the producer records a
/// batch's samples once the whole batch is confirmed, so a sample of a batch whose
/// confirms took over 0.5 s may be counted with the next second).
#[derive(Debug, Clone, Default)]
pub struct Samples(Arc<Mutex<Vec<Late>>>);

impl Samples {
    /// Takes every sample recorded so far, leaving none.
    pub fn take(&self) -> Vec<Late> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// How many samples are waiting.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        let late = Late::taken_at(value, Utc::now());
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(late);
    }
}

struct Capture {
    lateness: Samples,
    prometheus: PrometheusRecorder,
}

impl Recorder for Capture {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.prometheus.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.prometheus.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if key.name() == LATENESS {
            Histogram::from_arc(Arc::new(self.lateness.clone()))
        } else {
            self.prometheus.register_histogram(key, metadata)
        }
    }
}

/// Installs the capturing recorder and returns its lateness samples.
///
/// # Errors
/// When another recorder was installed first.
pub fn install() -> anyhow::Result<Samples> {
    let lateness = Samples::default();
    let prometheus = PrometheusBuilder::new().build_recorder();
    let handle = prometheus.handle();
    metrics::set_global_recorder(Capture {
        lateness: lateness.clone(),
        prometheus,
    })
    .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    // The registry keeps every histogram value until an upkeep folds them, as `cronq`'s
    // admin module has a thread do.
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                handle.run_upkeep();
            }
        })
        .context("cannot start the metrics upkeep thread")?;
    Ok(lateness)
}
