//! What every page shares: the frame around its `<main>` (header, navigation, who is
//! looking, footer), the compiled-in script and style, the error page, and the small
//! fragments several pages show (an instant, an outcome, a pager, a select, a flash).
//!
//! Invariant: every page is answered through [`render`], so a live refresh
//! (`X-Cronq-Fragment: 1`) always gets the `<main>` alone and a page always its frame.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use crate::dashboard::App;
use crate::dashboard::actions::ApiError;
use crate::dashboard::auth::{Caller, Role};
use crate::dashboard::query::Page;
use crate::dashboard::snapshot::Snapshot;
use crate::output;

const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// `GET /assets/app.js`.
pub async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        SCRIPT,
    )
        .into_response()
}

/// `GET /assets/app.css`.
pub async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        STYLE,
    )
        .into_response()
}

/// Who is looking, and what they may do.
pub(in crate::dashboard) struct Viewer {
    pub(super) read_only: bool,
    /// The CSRF token of the session, when logged in.
    pub(in crate::dashboard) csrf: Option<String>,
    /// The session's token, when logged in.
    caller: Option<Caller>,
}

impl Viewer {
    pub(in crate::dashboard) fn of(app: &App, headers: &HeaderMap) -> Self {
        let session = app.access.session_of(headers);
        Self {
            read_only: app.access.is_read_only(),
            csrf: session.as_ref().map(|(s, _)| app.access.csrf(s)),
            caller: session.map(|(_, c)| c),
        }
    }

    /// Whether the session's role allows what needs `need`, so its forms are shown.
    pub(in crate::dashboard) fn may(&self, need: Role) -> bool {
        !self.read_only
            && self.csrf.is_some()
            && self.caller.as_ref().is_some_and(|c| c.role >= need)
    }

    /// Whether the operators' action buttons (pause, resume, trigger, backfill, replay)
    /// are shown.
    pub(super) fn can_act(&self) -> bool {
        self.may(Role::Operator)
    }

    pub(in crate::dashboard) fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.csrf.as_deref().unwrap_or_default()); }
    }
}

/// A flash message from the query string (`?msg=` after an action, `?err=` after a
/// refusal).
#[derive(Debug, Default, Deserialize)]
pub struct Flash {
    pub(in crate::dashboard) msg: Option<String>,
    pub(in crate::dashboard) err: Option<String>,
}

/// The whole page, or only `<main>` for the live refresh.
pub(in crate::dashboard) fn page(
    app: &App,
    headers: &HeaderMap,
    viewer: &Viewer,
    title: &str,
    active: &str,
    main: Markup,
) -> Response {
    render(app, headers, viewer, (title, active), main, true)
}

/// As [`page`]; `live` says whether the script refreshes it (not a form's answer to a
/// POST, nor the login form).
pub(in crate::dashboard) fn render(
    app: &App,
    headers: &HeaderMap,
    viewer: &Viewer,
    (title, active): (&str, &str),
    main: Markup,
    live: bool,
) -> Response {
    if headers.get("x-cronq-fragment").is_some() {
        return html_response(StatusCode::OK, main);
    }
    let nav = [
        ("/", "Fleet"),
        ("/jobs", "Jobs"),
        ("/runs", "Runs"),
        ("/dead-letters", "Dead letters"),
        ("/audit", "Audit"),
    ];
    let body = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · cronq" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header {
                    span.brand { "cronq" }
                    nav {
                        @for (href, label) in nav {
                            a href=(href) .active[active == label] { (label) }
                        }
                    }
                    label.zone {
                        "Times in "
                        select #zone {
                            option value="utc" { "UTC" }
                            option value="browser" { "this browser's zone" }
                            option value="job" { "each job's zone" }
                        }
                    }
                    span.who {
                        @if viewer.read_only {
                            span.badge { "read-only" }
                        } @else if let (Some(_), Some(c)) = (&viewer.csrf, &viewer.caller) {
                            span #who { (c.name) " (" (c.role.as_str()) ")" }
                            form method="post" action="/logout" {
                                (viewer.csrf_field())
                                button type="submit" { "Log out" }
                            }
                        } @else {
                            a href="/login" { "Log in" }
                        }
                    }
                }
                main #main data-live=[live.then_some("1")] { (main) }
                footer { (app.source.place) " · " a href="/api/v1/openapi.json" { "API" } }
            }
        }
    };
    html_response(StatusCode::OK, body)
}

pub(in crate::dashboard) fn html_response(status: StatusCode, body: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body.into_string(),
    )
        .into_response()
}

/// An instant, absolute: shown in UTC and re-shown by the script in the chosen zone
/// (`zone` is the job's, for "each job's zone").
pub(in crate::dashboard) fn time(t: DateTime<Utc>, zone: Option<Tz>) -> Markup {
    let utc = output::utc(t);
    html! { time datetime=(utc) data-zone=[zone.map(|z| z.name())] { (utc) } }
}

/// The outage banners and the flash message.
pub(in crate::dashboard) fn notices(snap: &Snapshot, flash: &Flash) -> Markup {
    html! {
        @for o in snap.outages() {
            div.banner.bad role="alert" {
                (o.service) " is unreachable since " (time(o.since, None)) ": " (o.error)
                ". The page shows the last state read and recovers by itself."
            }
        }
        @if let Some(m) = &flash.msg { div.banner.good role="status" { (m) } }
        @if let Some(e) = &flash.err { div.banner.bad role="alert" { (e) } }
        @if snap.taken_at.is_none() { div.banner { "Reading the state…" } }
    }
}

pub(super) fn outcome(o: &str) -> Markup {
    html! { span class={ "outcome " (o) } { (o) } }
}

/// `application/x-www-form-urlencoded` of `pairs`.
pub(in crate::dashboard) fn encode(pairs: &[(&str, String)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())))
        .finish()
}

pub(super) fn pager<T>(page: &Page<T>, link: impl Fn(usize) -> String) -> Markup {
    html! {
        nav.pager {
            @if page.page > 1 { a href=(link(page.page - 1)) rel="prev" { "← previous" } }
            span { "page " (page.page) " of " (page.pages()) " · " (page.total) " in all" }
            @if page.page < page.pages() { a href=(link(page.page + 1)) rel="next" { "next →" } }
        }
    }
}

pub(super) fn select(name: &str, current: Option<&str>, options: &[(&str, &str)]) -> Markup {
    html! {
        select name=(name) {
            @for (value, label) in options {
                option value=(value) selected[current.unwrap_or("") == *value] { (label) }
            }
        }
    }
}

pub(in crate::dashboard) fn error_page(
    app: &App,
    headers: &HeaderMap,
    viewer: &Viewer,
    e: ApiError,
) -> Response {
    let mut response = page(
        app,
        headers,
        viewer,
        "Error",
        "",
        html! {
            h1 { "Error" }
            div.banner.bad role="alert" { (e.message) }
        },
    );
    *response.status_mut() = e.status;
    response
}

/// Any other path.
pub async fn not_found(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let viewer = Viewer::of(&app, &headers);
    error_page(
        &app,
        &headers,
        &viewer,
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: "no such page".into(),
        },
    )
}

/// A job name for a path (job names are `[A-Za-z0-9_.-]`, but an unknown one may be
/// anything).
pub(in crate::dashboard) fn encode_path(name: &str) -> String {
    form_urlencoded::byte_serialize(name.as_bytes()).collect()
}
