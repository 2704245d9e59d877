//! `GET/PUT/DELETE /api/v1/jobs/{job}` for runtime jobs (docs/runtime-jobs.md): a job's
//! definition with its revision (`ETag`), written by compare-and-set (`If-Match: "N"`,
//! 412 when stale; `If-None-Match: *` creates only). File jobs are read-only here (409,
//! naming the file); an invalid job answers 400 with `cronq check`'s problems; a body over
//! 1 MiB answers 413. The body of a PUT is the job's table in TOML, as in a `[[job]]`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cronq_shared::audit::diff;
use cronq_shared::jobs::{Expect, Written, current};
use cronq_shared::names::JobName;
use serde::Deserialize;
use serde_json::json;

use super::App;
use super::actions::ApiError;
use super::audit::{self, Act};
use super::auth::{Caller, Role};

/// The largest PUT body accepted.
pub const MAX_BODY: usize = 1 << 20;

fn error(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
    }
}

/// The caller, when its role is admin (runtime job changes need it).
fn allowed(app: &App, headers: &HeaderMap) -> Result<Caller, ApiError> {
    app.access
        .authorize(headers, None, Role::Admin)
        .map_err(ApiError::from)
}

fn name_of(text: &str) -> Result<JobName, ApiError> {
    JobName::new(text).map_err(|e| ApiError::bad_request(e.to_string()))
}

fn file_job(app: &App, name: &JobName) -> Result<(), ApiError> {
    if app.source.config.job(name.as_str()).is_some() {
        return Err(error(
            StatusCode::CONFLICT,
            format!(
                "job {:?} is a job of the config file {}: change it there (file jobs are read-only through the API)",
                name.as_str(),
                app.source.config.path.display()
            ),
        ));
    }
    Ok(())
}

/// `If-Match: "N"` (or `N`) as the expected revision; `If-None-Match: *` as "absent".
fn expect(headers: &HeaderMap) -> Result<Expect, ApiError> {
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == b"*")
    {
        return Ok(Expect::Revision(0));
    }
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(Expect::Any);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Ok(Expect::Any);
    }
    text.trim_start_matches("W/")
        .trim_matches('"')
        .parse()
        .map(Expect::Revision)
        .map_err(|_| {
            ApiError::bad_request(format!(
                "If-Match: {text:?} is not a revision: give the ETag of a GET, such as \"3\""
            ))
        })
}

fn with_etag(status: StatusCode, revision: u64, body: serde_json::Value) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{revision}\"")) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
}

fn stale(name: &JobName, current: u64) -> ApiError {
    let message = if current == 0 {
        format!("job {:?} does not exist (anymore)", name.as_str())
    } else {
        format!(
            "job {:?} is at revision {current}, not the one in If-Match: GET it again and retry",
            name.as_str()
        )
    };
    error(StatusCode::PRECONDITION_FAILED, message)
}

/// `GET /api/v1/jobs/{job}`: a file job's status (as before), or a runtime job's
/// definition with its revision as the `ETag`.
pub async fn get(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    if app.source.config.job(&name).is_some() {
        return super::api::job(State(app), Path(name))
            .await
            .map(IntoResponse::into_response);
    }
    let job = name_of(&name)?;
    match current(&*app.source.stores.jobs, &job).await {
        Ok(Some(rev)) => Ok(with_etag(
            StatusCode::OK,
            rev.revision,
            crate::ops::json::revision(&rev),
        )),
        // Not a runtime job either: the config's answer, with its "did you mean".
        Ok(None) => Err(super::actions::job(&app.source, &name)
            .err()
            .unwrap_or_else(|| error(StatusCode::NOT_FOUND, format!("no job {name:?}")))),
        Err(e) => Err(ApiError::unavailable(format!("the job store: {e}"))),
    }
}

/// The query of a PUT.
#[derive(Debug, Default, Deserialize)]
pub struct PutQuery {
    /// Accept a handler name no live consumer offers (nor, while none runs, the
    /// dashboard's config): `crate::ops::handler_check`.
    #[serde(default)]
    pub allow_unknown_handler: bool,
}

/// `PUT /api/v1/jobs/{job}`: creates or updates a runtime job; recorded in the audit log,
/// done (with the change's diff) or refused.
pub async fn put(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
    Query(query): Query<PutQuery>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let mut act = Act::new("job.put", Some(&name));
    let result = put_job(&app, &name, &query, &headers, &bytes, &mut act).await;
    audit::note(&app, &headers, peer, act, result.as_ref().err()).await;
    result
}

async fn put_job(
    app: &App,
    name: &str,
    query: &PutQuery,
    headers: &HeaderMap,
    bytes: &[u8],
    act: &mut Act,
) -> Result<Response, ApiError> {
    let caller = allowed(app, headers)?;
    if bytes.len() > MAX_BODY {
        return Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body has {} bytes: at most {MAX_BODY}", bytes.len()),
        ));
    }
    let job = name_of(name)?;
    file_job(app, &job)?;
    let config = &app.source.config;
    if !config.runtime.jobs {
        return Err(error(
            StatusCode::CONFLICT,
            format!(
                "{} says [runtime] jobs = false: runtime jobs are refused",
                config.path.display()
            ),
        ));
    }
    let expect = expect(headers)?;
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::bad_request("the body is not UTF-8 TOML"))?;
    let read = config
        .runtime_job_named(name, text)
        .map_err(|e| ApiError::bad_request(format!("{e:#}")))?;
    if !query.allow_unknown_handler {
        // Which handlers the live consumers offer; the config stands in when it is unknown.
        let beats = app.source.stores.registry.instances().await.ok();
        if let Some(why) = crate::ops::handler_check::refusal(config, &read.job, beats.as_deref()) {
            return Err(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("{why}; or add ?allow_unknown_handler=true when they register it in Rust"),
            ));
        }
    }
    let store = &app.source.stores.jobs;
    let before = current(&**store, &job)
        .await
        .map_err(|e| ApiError::unavailable(format!("the job store: {e}")))?;
    let old = before.as_ref().and_then(|r| r.spec.as_deref());
    act.action = if before.is_some() {
        "job.update"
    } else {
        "job.create"
    };
    act.detail = Some(diff(old.unwrap_or_default(), &read.spec).join("\n"));
    match store
        .write(&job, Some(&read.spec), &caller.name, expect)
        .await
    {
        Ok(Written::Done(n)) => {
            let status = if before.is_some() {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(with_etag(status, n, json!({ "job": name, "revision": n })))
        }
        Ok(Written::Stale { current }) => Err(stale(&job, current)),
        Err(e) => Err(ApiError::unavailable(format!("the job store: {e}"))),
    }
}

/// `DELETE /api/v1/jobs/{job}`: deletes a runtime job; recorded in the audit log.
pub async fn delete(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let mut act = Act::new("job.delete", Some(&name));
    let result = delete_job(&app, &name, &headers, &mut act).await;
    audit::note(&app, &headers, peer, act, result.as_ref().err()).await;
    result
}

async fn delete_job(
    app: &App,
    name: &str,
    headers: &HeaderMap,
    act: &mut Act,
) -> Result<Response, ApiError> {
    let caller = allowed(app, headers)?;
    let job = name_of(name)?;
    file_job(app, &job)?;
    let expect = expect(headers)?;
    let store = &app.source.stores.jobs;
    let before = current(&**store, &job)
        .await
        .map_err(|e| ApiError::unavailable(format!("the job store: {e}")))?;
    if let Some(old) = before.as_ref().and_then(|r| r.spec.as_deref()) {
        act.detail = Some(diff(old, "").join("\n"));
    }
    match store.write(&job, None, &caller.name, expect).await {
        Ok(Written::Done(n)) => Ok(with_etag(
            StatusCode::OK,
            n,
            json!({ "job": name, "revision": n, "deleted": true }),
        )),
        Ok(Written::Stale { current: 0 }) => Err(error(
            StatusCode::NOT_FOUND,
            format!("no runtime job {name:?}"),
        )),
        Ok(Written::Stale { current }) => Err(stale(&job, current)),
        Err(e) => Err(ApiError::unavailable(format!("the job store: {e}"))),
    }
}
