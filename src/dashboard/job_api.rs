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
use cronq_shared::config::{ConfigError, Problem, RuntimeJob};
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
    let config = app.source.config();
    if config.job(name.as_str()).is_some() {
        return Err(error(
            StatusCode::CONFLICT,
            format!(
                "job {:?} is a job of the config file {}: change it there (file jobs are read-only through the API)",
                name.as_str(),
                config.path.display()
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

/// A write refused because the job is not at the revision expected: who changed it last.
async fn stale(app: &App, name: &JobName, current: u64) -> ApiError {
    let message = if current == 0 {
        format!(
            "job {:?} was deleted meanwhile (it does not exist now): nothing was written",
            name.as_str()
        )
    } else {
        let by = match cronq_shared::jobs::current(&*app.source.stores.jobs, name).await {
            Ok(Some(r)) => r.by,
            _ => "someone".to_owned(),
        };
        format!(
            "job {:?} was changed meanwhile by {by} (revision {current}): nothing was written; read it again and redo the change",
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
    if app.source.config().job(&name).is_some() {
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
            .await
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
    let expect = expect(headers)?;
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::bad_request("the body is not UTF-8 TOML"))?;
    let change = Change {
        name,
        spec: Some(text),
        expect,
        allow_unknown_handler: query.allow_unknown_handler,
    };
    let wrote = write(app, &caller, &change, act)
        .await
        .map_err(|r| r.error)?;
    let status = if wrote.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(with_etag(
        status,
        wrote.revision,
        json!({ "job": name, "revision": wrote.revision }),
    ))
}

/// A change of one runtime job, as the API and the dashboard's editor ask it.
pub struct Change<'a> {
    /// The job.
    pub name: &'a str,
    /// Its table in TOML, without the `[[job]]` header (its `name` may be left out);
    /// `None` deletes it.
    pub spec: Option<&'a str>,
    /// The revision the change is made to (0: create only).
    pub expect: Expect,
    /// Accept a handler no live consumer offers.
    pub allow_unknown_handler: bool,
}

/// What a write did.
#[derive(Debug, Clone, Copy)]
pub struct Wrote {
    /// The job's revision now.
    pub revision: u64,
    /// Whether it created the job.
    pub created: bool,
}

/// Why a write was refused: the error as the API answers it, and, for an invalid job,
/// its problems with the field each names.
#[derive(Debug, Clone)]
pub struct Refused {
    /// The status and the whole message.
    pub error: ApiError,
    /// The problems of an invalid job (empty for another refusal).
    pub problems: Vec<Problem>,
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Self {
        Self {
            error,
            problems: Vec::new(),
        }
    }
}

/// Checks the runtime job `change.spec` as `Config::runtime_job_named` does, without
/// writing it: the job resolved against the dashboard's config.
///
/// # Errors
/// 400 for an invalid job (with its problems); 409 for a file job's name or a config that
/// refuses runtime jobs.
pub fn check(app: &App, name: &str, spec: &str) -> Result<RuntimeJob, Refused> {
    let job = name_of(name)?;
    file_job(app, &job)?;
    let config = &app.source.config();
    if !config.runtime.jobs {
        return Err(error(
            StatusCode::CONFLICT,
            format!(
                "{} says [runtime] jobs = false: runtime jobs are refused",
                config.path.display()
            ),
        )
        .into());
    }
    config.runtime_job_named(name, spec).map_err(|e| Refused {
        error: ApiError::bad_request(format!("{e:#}")),
        problems: match e {
            ConfigError::Invalid { problems, .. } => problems,
            ConfigError::Read { .. } => Vec::new(),
        },
    })
}

/// Writes `change` as `caller`: the one path of every runtime job change of the API and
/// of the dashboard's editor. Sets `act` to what the audit log records (`job.create`,
/// `job.update` or `job.delete`, with the diff); the caller records it, done or refused.
///
/// # Errors
/// As [`check`]; 422 for a handler no consumer offers (unless allowed); 412 when the job
/// is not at the revision expected (naming who changed it), 404 deleting a job that does
/// not exist; 503 when the job store cannot be used.
pub async fn write(
    app: &App,
    caller: &Caller,
    change: &Change<'_>,
    act: &mut Act,
) -> Result<Wrote, Refused> {
    let name = change.name;
    let job = name_of(name)?;
    let read = match change.spec {
        Some(spec) => Some(check(app, name, spec)?),
        None => {
            file_job(app, &job)?;
            None
        }
    };
    let config = &app.source.config();
    if let Some(read) = &read
        && !change.allow_unknown_handler
    {
        // Which handlers the live consumers offer; the config stands in when it is unknown.
        let beats = app.source.stores.registry.instances().await.ok();
        if let Some(why) = crate::ops::handler_check::refusal(config, &read.job, beats.as_deref()) {
            return Err(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("{why}; or add ?allow_unknown_handler=true when they register it in Rust"),
            )
            .into());
        }
    }
    let store = &app.source.stores.jobs;
    if let Some(read) = &read
        && read.job.is_after()
    {
        // `after` names jobs among the file's and the runtime ones it joins.
        let revisions = store
            .list()
            .await
            .map_err(|e| ApiError::unavailable(format!("the job store: {e}")))?;
        let applied = std::slice::from_ref(read);
        if let Err(e) = config.check_applied(&revisions, applied, std::path::Path::new("request")) {
            return Err(Refused {
                error: ApiError::bad_request(format!("{e:#}")),
                problems: match e {
                    ConfigError::Invalid { problems, .. } => problems,
                    ConfigError::Read { .. } => Vec::new(),
                },
            });
        }
    }
    let before = current(&**store, &job)
        .await
        .map_err(|e| ApiError::unavailable(format!("the job store: {e}")))?;
    let old = before.as_ref().and_then(|r| r.spec.as_deref());
    let new = read.as_ref().map(|r| r.spec.as_str());
    act.action = match (new, &before) {
        (None, _) => "job.delete",
        (Some(_), Some(_)) => "job.update",
        (Some(_), None) => "job.create",
    };
    if new.is_some() || old.is_some() {
        act.detail = Some(diff(old.unwrap_or_default(), new.unwrap_or_default()).join("\n"));
    }
    match store.write(&job, new, &caller.name, change.expect).await {
        Ok(Written::Done(n)) => Ok(Wrote {
            revision: n,
            created: new.is_some() && before.is_none(),
        }),
        Ok(Written::Stale { current: 0 }) if new.is_none() => {
            Err(error(StatusCode::NOT_FOUND, format!("no runtime job {name:?}")).into())
        }
        Ok(Written::Stale { current }) => Err(stale(app, &job, current).await.into()),
        Err(e) => Err(ApiError::unavailable(format!("the job store: {e}")).into()),
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
    let expect = expect(headers)?;
    let change = Change {
        name,
        spec: None,
        expect,
        allow_unknown_handler: false,
    };
    let wrote = write(app, &caller, &change, act)
        .await
        .map_err(|r| r.error)?;
    Ok(with_etag(
        StatusCode::OK,
        wrote.revision,
        json!({ "job": name, "revision": wrote.revision, "deleted": true }),
    ))
}
