//! A metrics recorder for the bench process: it keeps every sample of the producer's
//! `cronq_publish_lateness_seconds` histogram, so the precision bench reads the producer's
//! own measurement (scheduled instant → publisher confirm) instead of re-deriving it.
//!
//! Owns: the process-wide `metrics` recorder (it can be installed once per process).
//! Every other metric is discarded.

use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// The histogram the producer records per published occurrence.
pub const LATENESS: &str = "cronq_publish_lateness_seconds";

/// The captured lateness samples, shared with the recorder.
#[derive(Debug, Clone, Default)]
pub struct Samples(Arc<Mutex<Vec<f64>>>);

impl Samples {
    /// Takes every sample recorded so far, leaving none.
    pub fn take(&self) -> Vec<f64> {
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
            .push(value);
    }
}

struct Capture {
    lateness: Samples,
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        if key.name() == LATENESS {
            Histogram::from_arc(Arc::new(self.lateness.clone()))
        } else {
            Histogram::noop()
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
    })
    .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    Ok(lateness)
}
