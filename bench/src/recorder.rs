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

use chrono::Utc;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

use crate::lateness::Late;

/// The histogram the producer records per published occurrence.
pub const LATENESS: &str = "cronq_publish_lateness_seconds";

/// The captured lateness samples, shared with the recorder; each with the second it was
/// due at, worked out when it is recorded (right after its confirm).
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
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Late::taken_at(value, Utc::now()));
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
    metrics::set_global_recorder(Capture {
        lateness: lateness.clone(),
        prometheus: PrometheusBuilder::new().build_recorder(),
    })
    .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    Ok(lateness)
}
