//! The web dashboard and its JSON API (docs/dashboard.md): `cronq dashboard`, and
//! `cronq standalone --dashboard-addr`. Server-rendered pages (`pages`) with a little
//! JavaScript (`assets/`, compiled in), the API under `/api/v1` (`api`, `openapi.json`),
//! the operations both share (`actions`) and their typed answers (`answer`, and `fleet` for
//! the fleet's state), who may change things (`auth`), the job editor
//! (`editor`, writing through `job_api`), the jobs listed (`view`: the file's and the
//! runtime ones), and the state they show (`snapshot`, read from `source`).
//!
//! Invariant: every response carries a Content-Security-Policy that allows only the
//! dashboard's own script and style (no inline script), and every text a user or a store
//! supplied is escaped by the templates; no GET changes anything.

mod actions;
mod answer;
mod api;
mod audit;
mod auth;
pub mod beside;
mod editor;
mod fleet;
mod job_api;
mod pages;
mod pools;
mod query;
mod read;
mod snapshot;
mod source;
mod view;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::http::{HeaderValue, header};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use self::auth::Access;
pub use self::beside::Beside;
pub use self::source::Source;

use self::snapshot::{Refresher, Snapshot};

/// What every request handler shares.
pub struct App {
    source: Source,
    access: Access,
    snapshot: watch::Receiver<Arc<Snapshot>>,
    /// The config's jobs and the runtime jobs (`view`).
    views: Arc<self::view::Views>,
    /// The process's metrics, served at `/metrics`.
    metrics: PrometheusHandle,
}

impl App {
    /// The latest snapshot.
    fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }

    /// The jobs now: the file's and the runtime ones.
    async fn view(&self) -> Arc<self::view::View> {
        self.views.get().await
    }
}

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The routes of the dashboard.
fn router(app: Arc<App>) -> Router {
    let api = Router::new()
        .route("/openapi.json", get(api::openapi))
        .route("/fleet", get(api::fleet))
        .route("/jobs", get(api::jobs))
        .route(
            "/jobs/{job}",
            get(job_api::get).put(job_api::put).delete(job_api::delete),
        )
        .route("/jobs/{job}/pause", post(api::pause))
        .route("/jobs/{job}/resume", post(api::resume))
        .route("/jobs/{job}/trigger", post(api::trigger))
        .route("/jobs/{job}/backfill", post(api::backfill))
        .route("/runs", get(api::runs))
        .route("/pools", get(pools::list))
        .route("/runs/{key}/cancel", post(api::cancel))
        .route("/dead-letters", get(api::dead_letters))
        .route("/dead-letters/replay", post(api::replay))
        .route("/audit", get(audit::list))
        .fallback(api::not_found);
    Router::new()
        .route("/", get(pages::fleet))
        .route("/jobs", get(pages::jobs))
        .route("/jobs/new", get(editor::new))
        .route("/jobs/{job}", get(pages::job))
        .route("/jobs/{job}/edit", get(editor::edit))
        .route("/ui/editor", post(editor::submit))
        .route("/runs", get(pages::runs))
        .route("/dead-letters", get(pages::dead_letters))
        .route("/audit", get(pages::audit))
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/ui/jobs/{job}/delete", post(editor::delete))
        .route("/ui/jobs/{job}/{action}", post(pages::job_action))
        .route("/ui/dead-letters/replay", post(pages::replay))
        .route("/metrics", get(metrics))
        .route("/assets/app.js", get(pages::script))
        .route("/assets/app.css", get(pages::style))
        .nest("/api/v1", api)
        .fallback(pages::not_found)
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(app)
}

/// `GET /metrics`: the dashboard's own metrics, with which instances run another config
/// (`cronq_config_digest_mismatch`, docs/operations.md).
async fn metrics(
    axum::extract::State(app): axum::extract::State<Arc<App>>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

async fn secure_headers(mut response: axum::response::Response) -> axum::response::Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// [`serve`] while `following` feeds the source its config: the dashboard's end (its
/// token, or a failure) ends the following too; the following's end leaves the dashboard
/// on the last config it was given.
///
/// # Errors
/// As [`serve`].
pub async fn serve_following(
    served: impl Future<Output = anyhow::Result<()>>,
    following: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::pin!(served);
    tokio::select! {
        result = &mut served => return result,
        () = following => {}
    }
    served.await
}

/// Serves the dashboard on `addr` until `token` is cancelled, refreshing its snapshot of
/// `source` meanwhile; `/metrics` renders `metrics`.
///
/// # Errors
/// When the address cannot be bound, or the server fails.
pub async fn serve(
    addr: SocketAddr,
    source: Source,
    access: Access,
    metrics: PrometheusHandle,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot bind the dashboard address {addr}: choose a free one with --addr (or --dashboard-addr)")
    })?;
    let local = listener.local_addr().unwrap_or(addr);
    if !local.ip().is_loopback() {
        tracing::warn!(addr = %local, "the dashboard listens beyond this machine: put it behind TLS (see docs/dashboard.md)");
    }
    tracing::info!(
        addr = %local,
        read_only = access.is_read_only(),
        url = %format!("http://{local}/"),
        "dashboard listening"
    );
    let views = Arc::new(self::view::Views::new(
        source.config_feed(),
        source.stores.jobs.clone(),
    ));
    let (refresher, snapshot) = Refresher::new(source.clone(), views.clone());
    let app = Arc::new(App {
        views,
        source,
        access,
        snapshot,
        metrics,
    });
    let refreshing = token.child_token();
    let (served, refreshed) = tokio::join!(
        async {
            let r = axum::serve(
                listener,
                router(app).into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(token.clone().cancelled_owned())
            .await
            .context("dashboard server failed");
            refreshing.cancel();
            r
        },
        refresher.run(refreshing.clone()),
    );
    served?;
    refreshed
}
