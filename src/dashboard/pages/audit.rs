//! The Audit page (`GET /audit`): the operators' actions, newest first, for an operator
//! or an admin.
//!
//! Invariant: it is shown only to a session whose role is operator or admin.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use super::layout::{Flash, Viewer, encode_path, error_page, notices, page, time};
use crate::dashboard::App;
use crate::dashboard::actions::ApiError;
use crate::dashboard::audit::{self, AuditQuery};
use crate::dashboard::auth::Role;

/// `GET /audit`: the operators' actions, newest first, for a session of an operator or an
/// admin (the API's `GET /api/v1/audit` answers the same).
pub async fn audit(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if let Err(e) = app.access.authorize_read(&headers, Role::Operator) {
        return error_page(&app, &headers, &viewer, ApiError::from(e));
    }
    let snap = app.snapshot();
    let (entries, err) = match audit::entries(&app, &q).await {
        Ok(list) => (list, None),
        Err(e) => (Vec::new(), Some(e.message)),
    };
    let flash = Flash { msg: None, err };
    let main = html! {
        (notices(&snap, &flash))
        h1 { "Audit" }
        form.filters method="get" action="/audit" {
            label { "Job " input type="text" name="job" value=[q.job.as_deref()]; }
            label { "Since " input type="text" name="since" placeholder="24h or 2026-11-29T00:00:00Z" value=[q.since.as_deref()]; }
            label { "Limit " input type="number" name="limit" min="1" value=[q.limit]; }
            button type="submit" { "Show" }
        }
        @if entries.is_empty() {
            p #audit-empty { "No action recorded (within the retention)." }
        } @else {
            table #audit {
                thead { tr { th { "when" } th { "who" } th { "action" } th { "job" } th { "outcome" } th { "from" } th { "detail" } } }
                tbody {
                    @for e in &entries {
                        tr {
                            td { (time(e.at, None)) }
                            td { (e.who) }
                            td { code { (e.action) } }
                            td { @if let Some(j) = &e.job { a href=(format!("/jobs/{}", encode_path(j))) { (j) } } @else { "-" } }
                            td {
                                span class={ "outcome " (if e.outcome == cronq_shared::audit::Outcome::Done { "succeeded" } else { "failed" }) } { (e.outcome.as_str()) }
                                @if let Some(r) = &e.reason { br; small { (r) } }
                            }
                            td { (e.from) }
                            td { @if let Some(d) = &e.detail { pre { (d) } } }
                        }
                    }
                }
            }
        }
    };
    page(&app, &headers, &viewer, "Audit", "Audit", main)
}
