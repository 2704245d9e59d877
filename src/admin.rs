//! The admin HTTP endpoints (docs/operations.md, "Admin endpoints, logs, signals"): `/metrics` (Prometheus text), `/healthz`
//! (the process is up) and `/readyz` (its connections are up; the producer also says
//! whether it leads). Served only when `--admin-addr` has a non-zero port.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

mod recorder;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use cronq_shared::config::MetricsConfig;
use cronq_shared::job_labels::JobLabels;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

/// Answers `/readyz`: `Ok(detail)` when ready (e.g. `leader epoch 7` or `standby`),
/// `Err(reason)` when not.
pub type ReadyProbe =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> + Send + Sync>;

/// Seconds-valued histogram buckets: from 1 ms (publish lateness) to 1 h (long runs).
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];

/// How often the registry folds the histogram values recorded since into their buckets
/// when no scrape did it: until then it keeps every value, so a process that nobody
/// scrapes (no `--admin-addr`) would grow by every attempt's duration for ever.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the global metrics recorder once per process and returns its handle. Series
/// with a `job` label follow `[metrics] job_label_limit` (`config`), read once here: a
/// reload does not change it. A thread folds the recorded histogram values into their
/// buckets every [`UPKEEP_EVERY`], as each scrape also does.
///
/// # Errors
/// When a recorder is already installed.
pub fn install_metrics(config: &MetricsConfig) -> anyhow::Result<PrometheusHandle> {
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .context("while configuring metric buckets")?
        .build_recorder();
    let handle = prometheus.handle();
    metrics::set_global_recorder(recorder::JobLabelRecorder {
        inner: prometheus,
        labels: JobLabels::new(config),
    })
    .context("while installing the metrics recorder")?;
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                upkeep.run_upkeep();
            }
        })
        .context("while starting the metrics upkeep thread")?;
    Ok(handle)
}

#[derive(Clone)]
struct AdminState {
    metrics: PrometheusHandle,
    ready: ReadyProbe,
}

/// Serves the admin endpoints on `addr` until `token` is cancelled. A port of 0 means
/// off: returns at once.
///
/// # Errors
/// When the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    ready: ReadyProbe,
    token: CancellationToken,
) -> anyhow::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot bind the admin address {addr}: choose a free one with --admin-addr")
    })?;
    tracing::info!(addr = %listener.local_addr().unwrap_or(addr), "admin endpoints listening");
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AdminState { metrics, ready });
    axum::serve(listener, app)
        .with_graceful_shutdown(token.cancelled_owned())
        .await
        .context("admin server failed")
}

async fn render_metrics(State(state): State<AdminState>) -> String {
    render(state.metrics).await
}

/// The Prometheus text of every series, made on the blocking pool: at many jobs it takes
/// long enough to hold up a runtime thread, and a consumer runs on one (its deliveries and
/// its lease renewals would wait for the scrape). Empty when the runtime is shutting down.
async fn render(metrics: PrometheusHandle) -> String {
    cronq_shared::blocking::off_runtime(move || {
        metrics.run_upkeep();
        metrics.render()
    })
    .await
    .unwrap_or_default()
}

async fn readyz(State(state): State<AdminState>) -> (StatusCode, String) {
    match tokio::time::timeout(Duration::from_secs(3), (state.ready)()).await {
        Ok(Ok(detail)) => (StatusCode::OK, format!("ready: {detail}\n")),
        Ok(Err(reason)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: probe timed out\n".into(),
        ),
    }
}

/// `cronq probe URL`: GET the URL; success when it answers 2xx within 5 s. For container
/// health checks, where the runtime image has no curl.
///
/// # Errors
/// When the request fails or the status is not 2xx.
pub async fn probe(url: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .context("while building the HTTP client")?;
    let resp = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url} failed"))?;
    let status = resp.status();
    anyhow::ensure!(status.is_success(), "GET {url} answered {status}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use cronq_shared::blocking::TurnCounter;
    use metrics_exporter_prometheus::PrometheusBuilder;

    /// Series enough for a scrape to take several milliseconds.
    const SERIES: usize = 50_000;

    #[tokio::test(flavor = "current_thread")]
    async fn a_scrape_of_many_series_leaves_the_runtime_thread_to_its_other_tasks() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            for i in 0..SERIES {
                metrics::counter!("t_total", "job" => format!("j{i}")).increment(1);
            }
        });
        let counter = TurnCounter::start();
        tokio::task::yield_now().await;
        let before = counter.turns();
        let text = super::render(handle).await;
        let during = counter.turns() - before;
        assert!(
            text.contains(&format!("t_total{{job=\"j{}\"}} 1", SERIES - 1)),
            "{}",
            &text[..text.len().min(500)]
        );
        // Rendered on this thread, the counter would not have run at all meanwhile.
        assert!(
            during >= 10,
            "the other task ran {during} times while {SERIES} series were rendered"
        );
    }
}
