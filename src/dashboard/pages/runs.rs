//! The Runs page (`GET /runs`): the run history filtered as the API's `GET /api/v1/runs`
//! selects it, one occurrence's attempts with their output; and the runs table a job's
//! page shows too.
//!
//! Invariant: its rows are those the API answers for the same query
//! (`crate::dashboard::api::select_runs`).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono_tz::Tz;
use maud::{Markup, html};

use super::layout::{Flash, Viewer, encode, notices, outcome, page, pager, select, time};
use crate::dashboard::App;
use crate::dashboard::api;
use crate::dashboard::query::RunsQuery;
use crate::output;

/// A lateness as the runs table shows it: seconds, empty when not known.
fn late(d: Option<chrono::TimeDelta>) -> String {
    d.map_or_else(String::new, |d| format!("{} s", output::seconds(d)))
}

pub(super) fn runs_table(
    runs: &[cronq_shared::runlog::Run],
    zone: Option<Tz>,
    with_job: bool,
) -> Markup {
    html! {
        table #runs {
            thead { tr { th { "key" } @if with_job { th { "job" } } th { "attempt" } th { "consumer" } th { "started" } th title="scheduled time to publish" { "published late" } th title="scheduled time to start" { "started late" } th { "duration" } th { "outcome" } th { "error" } } }
            tbody {
                @for r in runs {
                    tr data-key=(r.key) {
                        td { a href=(format!("/runs?{}", encode(&[("key", r.key.to_string())]))) title="this occurrence's attempts and their output" { code { (r.key) } } }
                        @if with_job { td { a href=(format!("/jobs/{}", r.job)) { (r.job.as_str()) } } }
                        td { (r.attempt) }
                        td { (r.consumer) }
                        td { (time(r.started_at, zone)) }
                        td.publish-lateness { (late(r.publish_lateness())) }
                        td.start-lateness { (late(r.start_lateness())) }
                        td { (output::duration(r.duration)) }
                        td { (outcome(r.outcome.as_str())) }
                        td.error { (r.error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    }
}

/// `GET /runs`.
pub async fn runs(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<RunsQuery>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let snap = app.snapshot();
    let selected = api::select_runs(&app, &q).await;
    let outputs = api::key_outputs(&app, &q).await.ok().flatten();
    let outcomes = [
        ("", "any outcome"),
        ("succeeded", "succeeded"),
        ("failed", "failed"),
        ("retrying", "retrying"),
        ("skipped", "skipped"),
        ("cancelled", "cancelled"),
        ("missed", "missed"),
        ("interrupted", "interrupted"),
        ("lost", "lost"),
    ];
    let flash = Flash {
        msg: None,
        err: match &selected {
            Err(e) => Some(e.message.clone()),
            Ok(r) => r
                .error
                .as_ref()
                .map(|e| format!("cannot read the run history: {e}")),
        },
    };
    let main = html! {
        (notices(&snap, &flash))
        h1 { "Runs" }
        form.filters method="get" action="/runs" {
            input type="text" name="job" placeholder="job" value=[q.job.as_deref()];
            (select("outcome", q.outcome.as_deref(), &outcomes))
            input type="text" name="from" placeholder="from (RFC 3339)" value=[q.from.as_deref()];
            input type="text" name="to" placeholder="to (RFC 3339)" value=[q.to.as_deref()];
            input type="search" name="key" placeholder="find by key JOB@TIME" value=[q.key.as_deref()];
            button type="submit" { "Apply" }
        }
        @if let Ok(r) = &selected {
            (runs_table(&r.page.rows, None, true))
            (pager(&r.page, |p| {
                let mut pairs: Vec<(&str, String)> = Vec::new();
                for (k, v) in [("job", &q.job), ("outcome", &q.outcome), ("from", &q.from), ("to", &q.to), ("key", &q.key)] {
                    if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) { pairs.push((k, v.to_owned())); }
                }
                pairs.push(("page", p.to_string()));
                format!("/runs?{}", encode(&pairs))
            }))
            p.note { "Newest first; filtered from the " (r.scanned) " newest entries read." }
            @if let Some(outputs) = &outputs {
                h2 { "Output" }
                @if outputs.is_empty() { p.note { "No output kept for this occurrence." } }
                @for (attempt, o) in outputs {
                    section.output data-attempt=(attempt) {
                        h3 { "attempt " (attempt) @if o.truncated { " (cut to its limit)" } }
                        @if let Some(status) = o.http_status { p { "http status " (status) } }
                        @for (name, text) in [("stdout", &o.stdout), ("stderr", &o.stderr), ("http body", &o.http_body)] {
                            @if !text.is_empty() { h4 { (name) } pre.output { (text) } }
                        }
                    }
                }
            }
        }
    };
    page(&app, &headers, &viewer, "Runs", "Runs", main)
}
