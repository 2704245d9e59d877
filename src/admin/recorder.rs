//! The recorder in front of the Prometheus one: every series with a `job` label has it
//! passed through the label policy ([`cronq_shared::job_labels`]) before it is registered,
//! so every metric of the producer and the consumer, present and future, is bounded the
//! same way, with no call site to remember it.

use std::borrow::Cow;

use cronq_shared::job_labels::JobLabels;
use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};

/// The `job` label's key.
const JOB: &str = "job";

/// `inner`, with each series' `job` label decided by `labels`.
pub(super) struct JobLabelRecorder<R> {
    pub(super) inner: R,
    pub(super) labels: JobLabels,
}

impl<R> JobLabelRecorder<R> {
    /// `key` with its `job` label as the policy says: borrowed when unchanged (the common
    /// case: a job with its own label, or no `job` label at all).
    fn relabel<'k>(&self, key: &'k Key) -> Cow<'k, Key> {
        let Some(job) = key.labels().find(|l| l.key() == JOB) else {
            return Cow::Borrowed(key);
        };
        let label = self.labels.label(job.value());
        if label == job.value() {
            return Cow::Borrowed(key);
        }
        let label = label.to_owned();
        let labels: Vec<Label> = key
            .labels()
            .map(|l| {
                if l.key() == JOB {
                    Label::new(JOB, label.clone())
                } else {
                    l.clone()
                }
            })
            .collect();
        Cow::Owned(Key::from_parts(key.name_shared(), labels))
    }
}

impl<R: Recorder> Recorder for JobLabelRecorder<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.inner.register_counter(&self.relabel(key), metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.inner.register_gauge(&self.relabel(key), metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.inner.register_histogram(&self.relabel(key), metadata)
    }
}

#[cfg(test)]
mod tests {
    use cronq_shared::config::MetricsConfig;
    use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

    use super::*;

    /// A Prometheus recorder behind a [`JobLabelRecorder`] that labels one job, and the
    /// handle that renders it.
    fn limited_to_one_job() -> (JobLabelRecorder<PrometheusRecorder>, PrometheusHandle) {
        let prometheus = PrometheusBuilder::new().build_recorder();
        let handle = prometheus.handle();
        let recorder = JobLabelRecorder {
            inner: prometheus,
            labels: JobLabels::new(&MetricsConfig {
                job_label_limit: Some(1),
            }),
        };
        (recorder, handle)
    }

    #[test]
    fn jobs_past_the_limit_are_counted_under_other() {
        let (recorder, handle) = limited_to_one_job();
        metrics::with_local_recorder(&recorder, || {
            for job in ["a", "b", "c", "a"] {
                metrics::counter!("t_total", "job" => job, "outcome" => "ok").increment(1);
            }
            metrics::counter!("t_plain_total").increment(1);
        });
        let text = handle.render();
        assert!(
            text.contains("t_total{job=\"a\",outcome=\"ok\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("t_total{job=\"other\",outcome=\"ok\"} 2"),
            "{text}"
        );
        assert!(!text.contains("job=\"b\""), "{text}");
        assert!(text.contains("t_plain_total 1"), "{text}");
    }

    /// The value of `cronq_occurrences_unaccounted{job}` in `text`.
    fn gauge(text: &str, job: &str) -> Option<String> {
        let series = format!("cronq_occurrences_unaccounted{{job=\"{job}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map(str::to_owned)
    }

    #[test]
    fn unaccounted_occurrences_of_jobs_past_the_limit_add_up_under_other() {
        use std::collections::HashMap;

        use cronq_producer::accounting_check::publish;

        let (recorder, handle) = limited_to_one_job();
        let gaps = |pairs: &[(&str, f64)]| -> HashMap<String, f64> {
            pairs.iter().map(|(j, n)| ((*j).to_owned(), *n)).collect()
        };
        let mut shown = HashMap::new();
        metrics::with_local_recorder(&recorder, || {
            publish(&mut shown, gaps(&[("a", 2.0)]));
            publish(&mut shown, gaps(&[("a", 2.0), ("b", 3.0), ("c", 1.0)]));
        });
        let text = handle.render();
        assert_eq!(gauge(&text, "a").as_deref(), Some("2"), "{text}");
        assert_eq!(
            gauge(&text, "other").as_deref(),
            Some("4"),
            "b and c: {text}"
        );
        metrics::with_local_recorder(&recorder, || {
            publish(&mut shown, gaps(&[("c", 1.0)]));
        });
        let text = handle.render();
        assert_eq!(gauge(&text, "a").as_deref(), Some("0"), "{text}");
        assert_eq!(
            gauge(&text, "other").as_deref(),
            Some("1"),
            "c alone: {text}"
        );
    }
}
