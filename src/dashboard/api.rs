//! The JSON API under `/api/v1` (described by `openapi.json`, served at
//! `/api/v1/openapi.json`): the reads come from the snapshot (`super::snapshot`) or the
//! stores, the changes go through `super::actions` after `super::auth` allowed them.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use cronq_shared::config::{Handler, Job};
use cronq_shared::registry::serving::Fleet;
use cronq_shared::runlog::Run;
use serde::Deserialize;
use serde_json::{Value, json};

use super::App;
use super::actions::{self, ApiError};
use super::answer::Done;
use super::audit::{self, Act};
use super::auth::{Caller, Role as Access};
use super::fleet::Fleet as FleetView;
use super::query::{ApiQuery, JobsQuery, RunsQuery, paginate};
use super::read::within;
use super::snapshot::{RECENT_RUNS, Snapshot};
use crate::{ops, output};

/// The OpenAPI document of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

/// How many of the newest runs (of one job, with `job`) the runs listing filters.
pub const RUNS_SCANNED: usize = RECENT_RUNS;

/// `GET /api/v1/openapi.json`.
pub async fn openapi() -> Response {
    ([("content-type", "application/json")], OPENAPI).into_response()
}

/// `GET /api/v1/fleet`.
pub async fn fleet(State(app): State<Arc<App>>) -> Json<Value> {
    let snap = app.snapshot();
    let fleet = FleetView::of(
        &snap,
        &app.source.place,
        app.access.is_read_only(),
        app.source.config().jobs.len(),
        Utc::now(),
    );
    Json(sorted(&fleet))
}

/// A typed view as the API answers it: through [`Value`], whose objects list their keys in
/// name order, as every answer of the API does.
pub fn sorted(view: &impl serde::Serialize) -> Value {
    serde_json::to_value(view).expect("a view serializes: its maps are keyed by text")
}

/// `GET /api/v1/jobs`.
pub async fn jobs(
    State(app): State<Arc<App>>,
    ApiQuery(q): ApiQuery<JobsQuery>,
) -> Result<Json<Value>, ApiError> {
    q.check().map_err(ApiError::bad_request)?;
    let snap = app.snapshot();
    let view = app.view().await;
    let config = &view.config;
    let next = snap.next_of(&view);
    let page = q.select(config, &snap, &view.by_name, next);
    let now = Utc::now();
    let fleet = Fleet::new(&snap.instances);
    let rows: Vec<Value> = page
        .rows
        .iter()
        .map(|i| {
            let mut row = job_row(
                &config.jobs[*i],
                next.get(*i)
                    .copied()
                    .flatten()
                    .or_else(|| config.jobs[*i].schedule.next_after(now)),
                &snap,
                &fleet,
            );
            if let Some(stamp) = view.stamp(&config.jobs[*i].name) {
                row["runtime"] = json!({ "revision": stamp.revision, "by": stamp.by });
            }
            row
        })
        .collect();
    Ok(Json(json!({
        "total": page.total,
        "page": page.page,
        "pages": page.pages(),
        "per_page": page.per_page,
        "window": RECENT_RUNS,
        "jobs": rows,
        "outages": snap.outages(),
    })))
}

fn job_row(
    job: &Job,
    next: Option<chrono::DateTime<Utc>>,
    snap: &Snapshot,
    fleet: &Fleet<'_>,
) -> Value {
    let mut strip: Vec<&str> = snap
        .runs_of(&job.name)
        .map(|r| r.outcome.as_str())
        .collect();
    strip.reverse();
    let mut row = ops::json::job(job, next, snap.paused.get(&job.name), snap.last(&job.name));
    row["strip"] = json!(strip);
    let served = snap.taken_at.map(|_| fleet.assess(job));
    ops::json::served(&mut row, served.as_ref());
    ops::pools::job_fields(&mut row, job);
    row
}

/// The config of a job as shown: an `http` handler's URL and header values by origin only.
pub fn job_config(job: &Job) -> Value {
    let handler = match &job.handler {
        None if job.handler_name.is_some() => json!({ "named": job.handler_name.as_deref() }),
        None => json!({ "embedded": "registered by an embedding program" }),
        Some(Handler::Command(c)) => json!({ "command": {
            "argv": c.argv,
            "user": c.user,
            "group": c.group,
            "cwd": c.cwd.as_ref().map(|p| p.display().to_string()),
            "env": c.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            "clear_env": c.clear_env,
        }}),
        Some(Handler::Http(h)) => json!({ "http": {
            "method": h.method,
            "url": format!("hidden ({})", h.url),
            "headers": h.headers.iter().map(|(k, v)| json!({ "name": k, "value": format!("hidden ({v})") })).collect::<Vec<_>>(),
        }}),
    };
    let d = |d: std::time::Duration| humantime::format_duration(d).to_string();
    json!({
        "schedule": job.schedule.as_str(),
        "timezone": job.timezone.name(),
        "queue": job.queue.as_str(),
        "timeout": d(job.timeout),
        "overlap": job.overlap,
        "catchup": job.catchup,
        "catchup_window": d(job.catchup_window),
        "deadline": job.deadline.map(d),
        "max_attempts": job.max_attempts,
        "backoff": d(job.backoff),
        "backoff_max": d(job.backoff_max),
        "jitter": d(job.jitter),
        "retention": d(job.retention),
        "max_concurrent": job.max_concurrent,
        "pool": job.pool.as_ref().map(|p| json!({ "name": &*p.name, "size": p.size })),
        "payload": job.payload,
        "handler": handler,
    })
}

/// A run as the API shows it: as `cronq runs --json` does (`ops::json::run`), with its
/// scheduled time and its publish and start lateness in ms, each null when not known.
pub fn run_json(r: &Run) -> Value {
    ops::json::run(r)
}

/// `GET /api/v1/jobs/{job}`.
pub async fn job(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = actions::job(&app.source, &name).await?;
    let job = &job;
    let snap = app.snapshot();
    let runs = job_runs(&app, job).await;
    let (runs, error) = match runs {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    // The file's jobs with the runtime ones, as the refresher last merged them.
    let file = app.source.config();
    let config = snap.view.as_ref().map_or(&file, |v| &v.config);
    let children: Vec<&str> = config
        .children(job.name.as_str())
        .iter()
        .map(|j| j.name.as_str())
        .collect();
    Ok(Json(json!({
        "job": job.name.as_str(),
        "config": job_config(job),
        "after": job.parents().iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "children": children,
        "next": actions::next_fires_in(config, job, Utc::now(), 10),
        "paused": snap.paused.get(&job.name).map(|p| json!({ "since": output::utc(p.since), "note": p.note })),
        "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
        "runs_error": error,
        "outages": snap.outages(),
    })))
}

/// How many runs a job's page shows.
pub const JOB_RUNS: usize = 100;

/// The newest runs of `job`, read from the run log.
///
/// # Errors
/// The store's error, as text.
pub async fn job_runs(app: &App, job: &Job) -> Result<Vec<Run>, String> {
    runs_of(app, Some(&job.name), JOB_RUNS)
        .await
        .map(|(r, _)| r)
}

/// Up to `limit` newest runs (of `job`), and how many entries they were chosen from: on a
/// data file from its index (all of the job's history); on Redis, whose stream is not
/// indexed by job and costs a read per entry, from the snapshot's newest entries (at most
/// [`RECENT_RUNS`], at most [`super::snapshot::REFRESH`] old).
async fn runs_of(
    app: &App,
    job: Option<&cronq_shared::names::JobName>,
    limit: usize,
) -> Result<(Vec<Run>, usize), String> {
    if app.source.runs_indexed {
        let runs = within(app.source.stores.runlog.list(job, limit)).await?;
        let scanned = runs.len();
        return Ok((runs, scanned));
    }
    let snap = app.snapshot();
    let runs = snap
        .recent
        .iter()
        .filter(|r| job.is_none_or(|j| r.job == *j))
        .take(limit)
        .cloned()
        .collect();
    Ok((runs, snap.recent.len()))
}

/// A runs listing: the page, how many were scanned, and whether the store answered.
pub struct RunsPage {
    /// The page.
    pub page: super::query::Page<Run>,
    /// How many of the newest runs were scanned.
    pub scanned: usize,
    /// The store's error, if it did not answer.
    pub error: Option<String>,
}

/// The runs a [`RunsQuery`] selects.
///
/// # Errors
/// 400 for a bad parameter; 404 for an unknown job.
pub async fn select_runs(app: &App, q: &RunsQuery) -> Result<RunsPage, ApiError> {
    let filter = q.filter().map_err(ApiError::bad_request)?;
    let job = match &filter.job {
        Some(name) => Some(actions::job(&app.source, name).await?.name.clone()),
        None => None,
    };
    let (runs, scanned, error) = match runs_of(app, job.as_ref(), RUNS_SCANNED).await {
        Ok((r, scanned)) => (r, scanned, None),
        Err(e) => (Vec::new(), 0, Some(e)),
    };
    let kept: Vec<Run> = runs.into_iter().filter(|r| filter.keeps(r)).collect();
    Ok(RunsPage {
        page: paginate(kept, q.page, q.per_page),
        scanned,
        error,
    })
}

/// `GET /api/v1/runs`.
pub async fn runs(
    State(app): State<Arc<App>>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> Result<Response, ApiError> {
    let r = select_runs(&app, &q).await?;
    if let Some(error) = r.error {
        return Err(ApiError::unavailable(format!(
            "cannot read the run history from {}: {error}",
            app.source.store_name
        )));
    }
    // One occurrence's attempts come with their outputs.
    let runs: Vec<Value> = match key_outputs(&app, &q).await? {
        Some(outputs) => r
            .page
            .rows
            .iter()
            .map(|run| ops::json::run_with_output(run, outputs.get(&run.attempt)))
            .collect(),
        None => r.page.rows.iter().map(run_json).collect(),
    };
    Ok(Json(json!({
        "total": r.page.total,
        "page": r.page.page,
        "pages": r.page.pages(),
        "per_page": r.page.per_page,
        "scanned": r.scanned,
        "runs": runs,
    }))
    .into_response())
}

/// With a `key` filter naming an occurrence, the outputs kept of its attempts.
///
/// # Errors
/// 503 when the run history cannot be read.
pub async fn key_outputs(
    app: &App,
    q: &RunsQuery,
) -> Result<Option<std::collections::BTreeMap<u32, cronq_shared::runlog::RunOutput>>, ApiError> {
    let Some(key) = q
        .key
        .as_deref()
        .and_then(|k| k.trim().parse::<cronq_shared::key::OccurrenceKey>().ok())
    else {
        return Ok(None);
    };
    app.source
        .stores
        .runlog
        .outputs(&key)
        .await
        .map(Some)
        .map_err(|e| {
            ApiError::unavailable(format!(
                "cannot read the outputs of {key} from {}: {e}",
                app.source.store_name
            ))
        })
}

/// `GET /api/v1/dead-letters`.
pub async fn dead_letters(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let letters = read_dead_letters(&app)
        .await
        .map_err(ApiError::unavailable)?;
    Ok(Json(json!({
        "count": letters.len(),
        "letters": letters.iter().map(ops::json::dead_letter).collect::<Vec<_>>(),
    })))
}

/// The dead runs, oldest first, copies folded.
///
/// # Errors
/// A message naming the queue's service.
pub async fn read_dead_letters(app: &App) -> Result<Vec<cronq_shared::broker::Folded>, String> {
    within(app.source.broker.dead_letters())
        .await
        .map(|l| cronq_shared::broker::fold_copies(&l))
        .map_err(|e| {
            format!(
                "cannot read the dead-letter queue from {}: {e}",
                app.source.queue_name
            )
        })
}

/// Checks that the caller may do what needs `need`.
fn allowed(app: &App, headers: &HeaderMap, need: Access) -> Result<Caller, ApiError> {
    app.access
        .authorize(headers, None, need)
        .map_err(ApiError::from)
}

/// The body of `POST /api/v1/jobs/{job}/pause`.
#[derive(Debug, Default, Deserialize)]
pub struct PauseBody {
    /// Why.
    #[serde(default)]
    pub note: Option<String>,
}

/// The body of `POST /api/v1/jobs/{job}/trigger`.
#[derive(Debug, Default, Deserialize)]
pub struct TriggerBody {
    /// JSON replacing the configured payload.
    #[serde(default)]
    pub payload: Option<Value>,
    /// Run it once at this future instant (RFC 3339) instead of now.
    #[serde(default)]
    pub at: Option<String>,
}

/// A JSON body, or 400 naming what is wrong (an empty body is the default).
fn body<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!("the request body is not the JSON expected: {e}"))
    })
}

/// Runs `action` when the caller's role is operator, and records it (done or refused).
async fn operate(
    app: &App,
    headers: &HeaderMap,
    peer: SocketAddr,
    mut act: Act,
    action: impl Future<Output = Result<impl Done, ApiError>>,
) -> Result<Json<Value>, ApiError> {
    let result = match allowed(app, headers, Access::Operator) {
        Ok(_) => action.await,
        Err(e) => Err(e),
    };
    if let Ok(done) = &result {
        act.detail = act.detail.or_else(|| done.detail());
    }
    audit::note(app, headers, peer, act, result.as_ref().err()).await;
    result.map(|done| Json(sorted(&done)))
}

/// `POST /api/v1/jobs/{job}/pause`.
pub async fn pause(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let b: Result<PauseBody, ApiError> = body(&bytes);
    let mut act = Act::new("pause", Some(&name));
    act.detail = b
        .as_ref()
        .ok()
        .and_then(|b| b.note.as_ref())
        .map(|n| format!("note: {n}"));
    let source = &app.source;
    operate(&app, &headers, peer, act, async move {
        actions::pause(source, &name, b?.note).await
    })
    .await
}

/// `POST /api/v1/jobs/{job}/resume`.
pub async fn resume(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let act = Act::new("resume", Some(&name));
    operate(
        &app,
        &headers,
        peer,
        act,
        actions::resume(&app.source, &name),
    )
    .await
}

/// `POST /api/v1/jobs/{job}/trigger`.
pub async fn trigger(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let act = Act::new("trigger", Some(&name));
    let source = &app.source;
    operate(&app, &headers, peer, act, async move {
        let b: TriggerBody = body(&bytes)?;
        let payload = b.payload.map(|p| p.to_string());
        actions::trigger(source, &name, payload.as_deref(), b.at.as_deref()).await
    })
    .await
}

/// `POST /api/v1/jobs/{job}/backfill`.
pub async fn backfill(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let act = Act::new("backfill", Some(&name));
    let source = &app.source;
    operate(&app, &headers, peer, act, async move {
        let b: actions::Backfill = body(&bytes)?;
        actions::backfill(source, &name, &b).await
    })
    .await
}

/// `POST /api/v1/runs/{key}/cancel`: an operator's cancel, in the caller's name.
pub async fn cancel(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let mut act = Act::new(
        crate::ops::cancel::ACTION,
        key.split_once('@').map(|(j, _)| j),
    );
    act.detail = Some(key.clone());
    let who = audit::who(&app, &headers);
    operate(
        &app,
        &headers,
        peer,
        act,
        actions::cancel(&app.source, &key, &who),
    )
    .await
}

/// `POST /api/v1/dead-letters/replay`.
pub async fn replay(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let b: Result<actions::Replay, ApiError> = body(&bytes);
    let job = b.as_ref().ok().and_then(|b| b.job.clone());
    let act = Act::new("dlq.replay", job.as_deref());
    let source = &app.source;
    let view = app.view().await;
    operate(&app, &headers, peer, act, async move {
        actions::replay(source, &view.config, &b?).await
    })
    .await
}

/// Any other path under `/api/v1`.
pub async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: "no such API path: GET /api/v1/openapi.json lists them".into(),
    }
}
