//! The dashboard's side of the audit log (docs/security.md, "Audit log"): every change
//! asked through the API or a page form, done or refused, is recorded with the token's
//! name and the remote address; `GET /api/v1/audit` and the Audit page read it back, for
//! operators and admins.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use cronq_shared::audit::{DEFAULT_LIMIT, Entry, Filter};
use serde::Deserialize;
use serde_json::{Value, json};

use super::App;
use super::actions::ApiError;
use super::auth::Role;
use super::query::ApiQuery;
use super::read::within;
use crate::ops;

/// What a request asked for, as its entry records it.
#[derive(Debug, Clone, Default)]
pub struct Act {
    /// `pause`, `job.update`, … (`cronq_shared::audit::Entry::action`).
    pub action: &'static str,
    /// The job, if any.
    pub job: Option<String>,
    /// What: a diff, a key, a range.
    pub detail: Option<String>,
}

impl Act {
    /// `action` on `job`.
    pub fn new(action: &'static str, job: Option<&str>) -> Self {
        Self {
            action,
            job: job.map(str::to_owned),
            detail: None,
        }
    }
}

/// Who a request says it is: its token's name (bearer or session), `(unknown token)` for
/// a bearer token that is none of them, `-` without either.
pub fn who(app: &App, headers: &HeaderMap) -> String {
    match app.access.reader(headers) {
        Ok(Some(caller)) => caller.name,
        Ok(None) => "-".to_owned(),
        Err(_) => "(unknown token)".to_owned(),
    }
}

/// Records `act` by the request's caller from `peer`: done, or refused with `refused`'s
/// status and message.
pub async fn note(
    app: &App,
    headers: &HeaderMap,
    peer: SocketAddr,
    act: Act,
    refused: Option<&ApiError>,
) {
    note_as(app, &who(app, headers), peer, act, refused).await;
}

/// As [`note`], for a caller named `who`.
pub async fn note_as(app: &App, who: &str, peer: SocketAddr, act: Act, refused: Option<&ApiError>) {
    let mut entry = Entry::done(act.action, who, &peer.ip().to_string())
        .job(act.job.as_deref())
        .detail(act.detail);
    if let Some(e) = refused {
        entry = entry.refused(&format!("{} {}", e.status.as_u16(), e.message));
    }
    ops::audit::record(&*app.source.stores.audit, entry).await;
}

/// The query of `GET /api/v1/audit` and of the Audit page.
#[derive(Debug, Default, Deserialize)]
pub struct AuditQuery {
    /// Only this job's actions.
    pub job: Option<String>,
    /// Since then: RFC 3339, or a duration such as `2h` (ago).
    pub since: Option<String>,
    /// At most this many (100 when not given).
    pub limit: Option<usize>,
}

/// The entries `q` selects, newest first.
///
/// # Errors
/// 400 for a bad `since`; 503 when the store cannot be read.
pub async fn entries(app: &App, q: &AuditQuery) -> Result<Vec<Entry>, ApiError> {
    let since = match q.since.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        Some(s) => Some(ops::audit::since("since", s).map_err(|e| ApiError::bad_request(e.0))?),
        None => None,
    };
    let filter = Filter {
        job: q
            .job
            .as_deref()
            .map(str::trim)
            .filter(|j| !j.is_empty())
            .map(str::to_owned),
        since,
        limit: q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, 10_000),
    };
    within(app.source.stores.audit.list(&filter))
        .await
        .map_err(|e| ApiError::unavailable(format!("cannot read the audit log: {e}")))
}

/// `GET /api/v1/audit`: for operators and admins.
///
/// # Errors
/// 401 without a token, 403 for a viewer or a read-only dashboard, 400 for a bad query,
/// 503 when the store cannot be read.
pub async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<Value>, ApiError> {
    app.access.authorize_read(&headers, Role::Operator)?;
    let list = entries(&app, &q).await?;
    Ok(Json(json!({
        "count": list.len(),
        "entries": list.iter().map(ops::audit::json).collect::<Vec<_>>(),
    })))
}
