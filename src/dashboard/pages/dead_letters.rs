//! The Dead letters page (`GET /dead-letters`) and its replay form
//! (`POST /ui/dead-letters/replay`), which answers with the page and the replay's result.
//!
//! Invariant: a replay posted here runs `crate::dashboard::actions::replay`, as the API's
//! does, and is noted in the audit log, done or refused.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};

use super::form::{authorize_act, field, form};
use super::layout::{Flash, Viewer, notices, render, time};
use crate::dashboard::App;
use crate::dashboard::actions;
use crate::dashboard::answer::{Done, ReplayReport};
use crate::dashboard::api;
use crate::dashboard::audit::{self, Act};
use crate::dashboard::auth::Role;

/// `GET /dead-letters`.
pub async fn dead_letters(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(flash): Query<Flash>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    dead_letters_page(&app, &headers, &viewer, flash, None).await
}

async fn dead_letters_page(
    app: &App,
    headers: &HeaderMap,
    viewer: &Viewer,
    mut flash: Flash,
    result: Option<ReplayReport>,
) -> Response {
    let snap = app.snapshot();
    let letters = api::read_dead_letters(app).await;
    if let Err(e) = &letters {
        flash.err = Some(e.clone());
    }
    let main = html! {
        (notices(&snap, &flash))
        h1 { "Dead letters" }
        @if let Some(result) = &result {
            section.result #replay-result {
                p { (result.message) }
                table {
                    thead { tr { th { "key" } th { "job" } th { "reason" } th { "result" } } }
                    tbody {
                        @for e in &result.entries {
                            tr { td { code { (e.key.as_deref().unwrap_or("-")) } } td { (e.job.as_deref().unwrap_or("-")) } td { (e.reason) } td { (e.result) } }
                        }
                    }
                }
            }
        }
        @if let Ok(letters) = &letters {
            @if letters.is_empty() { p #dlq-empty { "The dead-letter queue is empty." } }
            @else {
                @if viewer.can_act() {
                    form method="post" action="/ui/dead-letters/replay" #replay {
                        (viewer.csrf_field())
                        (letters_table(letters, true))
                        p.actions {
                            label { input type="checkbox" name="dry_run" value="1" checked; " dry run first (shows what would be replayed, changes nothing)" }
                            button #replay-selected type="submit" name="scope" value="selected" { "Replay selected" }
                            button #replay-all type="submit" name="scope" value="all" { "Replay all" }
                        }
                    }
                } @else {
                    (letters_table(letters, false))
                }
            }
        }
    };
    let live = result.is_none();
    render(
        app,
        headers,
        viewer,
        ("Dead letters", "Dead letters"),
        main,
        live,
    )
}

fn letters_table(letters: &[cronq_shared::broker::Folded], selectable: bool) -> Markup {
    html! {
        table #letters {
            thead { tr { @if selectable { th { "" } } th { "key" } th { "job" } th { "attempts" } th { "copies" } th { "reason" } th { "last error" } th { "dead-lettered" } } }
            tbody {
                @for cronq_shared::broker::Folded { letter: l, copies } in letters {
                    tr data-key=[l.key.as_deref()] {
                        @if selectable { td { @if let Some(k) = &l.key { input type="checkbox" name="key" value=(k); } } }
                        td { code { (l.key.as_deref().unwrap_or("-")) } }
                        td { (l.job.as_deref().unwrap_or("-")) }
                        td { (l.attempts) }
                        td { (copies) }
                        td { (l.reason) }
                        td.error { (l.last_error.as_deref().unwrap_or("")) }
                        td { (time(l.dead_lettered_at, None)) }
                    }
                }
            }
        }
    }
}

/// `POST /ui/dead-letters/replay`.
pub async fn replay(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let form = form(&body);
    let mut act = Act::new("dlq.replay", None);
    if let Err(page) =
        authorize_act(&app, peer, &headers, &viewer, &form, Role::Operator, &act).await
    {
        return page;
    }
    let req = actions::Replay {
        keys: form
            .iter()
            .filter(|(k, _)| k == "key")
            .map(|(_, v)| v.clone())
            .collect(),
        all: field(&form, "scope") == Some("all"),
        job: None,
        dry_run: field(&form, "dry_run").is_some(),
    };
    let view = app.view().await;
    let done = actions::replay(&app.source, &view.config, &req).await;
    if let Ok(report) = &done {
        act.detail = report.detail();
    }
    audit::note(&app, &headers, peer, act, done.as_ref().err()).await;
    match done {
        Ok(v) => dead_letters_page(&app, &headers, &viewer, Flash::default(), Some(v)).await,
        Err(e) => {
            dead_letters_page(
                &app,
                &headers,
                &viewer,
                Flash {
                    msg: None,
                    err: Some(e.message),
                },
                None,
            )
            .await
        }
    }
}
