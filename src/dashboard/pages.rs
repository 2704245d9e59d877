//! The HTML pages: Fleet, Jobs, a Job, Runs, Dead letters, and the login form, rendered on
//! the server with maud (which escapes every value it inserts), refreshed in place by
//! `assets/app.js` (it asks for the page's `<main>` alone with `X-Cronq-Fragment: 1`).
//! The forms post to `/ui/...`, which checks the session and its CSRF token
//! (`super::auth`) and then calls `super::actions`, like the API.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use cronq_shared::registry::{EXPIRY, REPORT_EVERY, Role as InstanceRole};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::App;
use super::actions::{self, ApiError};
use super::api;
use super::audit::{self, Act, AuditQuery};
use super::auth::{
    Caller, LOGIN_COOKIE, Refusal, Role, SESSION_COOKIE, SESSION_SECONDS, cookie, set_cookie,
};
use super::query::{JobsQuery, Page, RunsQuery};
use super::snapshot::{RECENT_RUNS, Snapshot};
use crate::output;

const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

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
pub(super) struct Viewer {
    read_only: bool,
    /// The CSRF token of the session, when logged in.
    pub(super) csrf: Option<String>,
    /// The session's token, when logged in.
    caller: Option<Caller>,
}

impl Viewer {
    pub(super) fn of(app: &App, headers: &HeaderMap) -> Self {
        let session = app.access.session_of(headers);
        Self {
            read_only: app.access.is_read_only(),
            csrf: session.as_ref().map(|(s, _)| app.access.csrf(s)),
            caller: session.map(|(_, c)| c),
        }
    }

    /// Whether the session's role allows what needs `need`, so its forms are shown.
    pub(super) fn may(&self, need: Role) -> bool {
        !self.read_only
            && self.csrf.is_some()
            && self.caller.as_ref().is_some_and(|c| c.role >= need)
    }

    /// Whether the operators' action buttons (pause, resume, trigger, backfill, replay)
    /// are shown.
    fn can_act(&self) -> bool {
        self.may(Role::Operator)
    }

    pub(super) fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.csrf.as_deref().unwrap_or_default()); }
    }
}

/// A flash message from the query string (`?msg=` after an action, `?err=` after a
/// refusal).
#[derive(Debug, Default, Deserialize)]
pub struct Flash {
    pub(super) msg: Option<String>,
    pub(super) err: Option<String>,
}

/// The whole page, or only `<main>` for the live refresh.
pub(super) fn page(
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
pub(super) fn render(
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

pub(super) fn html_response(status: StatusCode, body: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body.into_string(),
    )
        .into_response()
}

/// An instant, absolute: shown in UTC and re-shown by the script in the chosen zone
/// (`zone` is the job's, for "each job's zone").
pub(super) fn time(t: DateTime<Utc>, zone: Option<Tz>) -> Markup {
    let utc = output::utc(t);
    html! { time datetime=(utc) data-zone=[zone.map(|z| z.name())] { (utc) } }
}

/// The outage banners and the flash message.
pub(super) fn notices(snap: &Snapshot, flash: &Flash) -> Markup {
    html! {
        @for o in api::outages(snap) {
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

fn outcome(o: &str) -> Markup {
    html! { span class={ "outcome " (o) } { (o) } }
}

/// `GET /`: the fleet.
pub async fn fleet(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(flash): Query<Flash>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let snap = app.snapshot();
    let view = app.view().await;
    let fleet = api::fleet_json(&app, &snap);
    let main = html! {
        (notices(&snap, &flash))
        h1 { "Fleet" }
        section.cards {
            div.card {
                h2 { "Leader" }
                @match &snap.leader {
                    Some(h) => {
                        p { "instance " code { (h.instance) } }
                        p { "epoch " strong #epoch { (h.epoch) } }
                        @if let Some(since) = snap.leading_since() { p #leading-since { "leading since " (time(since, None)) } }
                        p { "lease renewed: " (output::duration(h.remaining)) " left" }
                    }
                    None => p.warn { "no producer leads now: nothing is published (start " code { "cronq producer" } ")" }
                }
                h3 { "Standbys" }
                @let standbys = fleet["standbys"].as_array().cloned().unwrap_or_default();
                @if standbys.is_empty() { p #standbys { "none alive" } }
                @else {
                    ul #standbys { @for b in &standbys { li { code { (b["instance"].as_str().unwrap_or("")) } " on " (b["host"].as_str().unwrap_or("")) } } }
                }
            }
            div.card {
                h2 { "Dead letters" }
                p.big #dlq-count { @match snap.dead_letters { Some(n) => (n), None => "?" } }
                a href="/dead-letters" { "review and replay" }
            }
            div.card {
                h2 { "Jobs" }
                p.big { (view.config.jobs.len()) }
                @if !view.runtime.is_empty() { p { (view.runtime.len()) " runtime" } }
                p { (snap.paused.len()) " paused" }
            }
            div.card {
                h2 { "Last hour" }
                p { "expected by the schedules: " strong #expected { @match snap.expected_last_hour { Some(n) => (n), None => "?" } } }
                p { "published: " strong #published { @match snap.published_last_hour { Some(n) => (n), None => "?" } } }
                p { "executed: " strong #executed { @match snap.executed_last_hour { Some(n) => (n), None => "?" } } }
                @if let Some(from) = snap.expected_from { p.note { "Expected counted from " (time(from, None)) " (the oldest producer alive started then, or an hour ago); paused jobs up to their pause." } }
                @let outcomes = &fleet["last_hour"]["outcomes"];
                @if let Some(map) = outcomes.as_object() {
                    @if map.is_empty() { p { "no run recorded" } }
                    @for (k, v) in map { p { (outcome(k)) " " (v) } }
                }
                p.note { "Published and executed: per-minute counters. Outcomes: from the newest " (RECENT_RUNS) " run-history entries (a lower bound when that many are read)." }
            }
        }
        h2 { "Config" }
        @if snap.differences.is_empty() {
            p #config-same { "Every instance alive runs " (snap.reference.as_deref().unwrap_or("the same config")) "." }
        } @else {
            p.warn { (snap.differences.len()) " instances run another config than " (snap.reference.as_deref().unwrap_or("the reference")) ": deploy the same file to every host." }
            table #config-differ {
                thead { tr { th { "instance" } th { "role" } th { "digest" } th { "differing jobs" } } }
                tbody {
                    @for d in &snap.differences {
                        tr {
                            td { code { (d.instance) } }
                            td { (d.role.as_str()) }
                            td { code { (d.digest) } }
                            td {
                                @match d.count {
                                    Some(n) => {
                                        @for (i, j) in d.jobs.iter().enumerate() { @if i > 0 { ", " } code { (j) } }
                                        @if n > d.jobs.len() { " and " (n - d.jobs.len()) " more" }
                                        " (" (n) ")"
                                    }
                                    None => "not known yet"
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Instances alive" }
        p.note { "From their heartbeats (every " (REPORT_EVERY.as_secs()) " s; an instance that stops reporting is gone after " (EXPIRY.as_secs()) " s)." }
        table #instances {
            thead { tr { th { "instance" } th { "role" } th { "host" } th { "pid" } th { "version" } th { "started" } th { "last seen" } th { "config digest" } } }
            tbody {
                @for b in &snap.instances {
                    tr {
                        td { code { (b.instance) } }
                        td {
                            @if snap.leader.as_ref().is_some_and(|h| h.instance == b.instance) { "leader" }
                            @else if b.role == InstanceRole::Producer { "standby" }
                            @else { (b.role.as_str()) }
                        }
                        td { (b.host) }
                        td { (b.pid) }
                        td { (b.version) }
                        td { (time(b.started_at, None)) }
                        td { (time(b.last_seen, None)) }
                        td { code { (b.digest) } @if snap.differences.iter().any(|d| d.instance == b.instance) { " " span.warn { "differs" } } }
                    }
                }
            }
        }
        h2 { "Queues and consumers" }
        table {
            thead { tr { th { "queue" } th { "ready messages" } th { "consumers subscribed" } } }
            tbody {
                @for q in &snap.queues {
                    tr {
                        td { (q.queue) }
                        td { @match q.messages { Some(n) => (n), None => "not declared" } }
                        td { @match q.consumers { Some(n) => (n), None => "-" } }
                    }
                }
            }
        }
        @if let Some(t) = snap.taken_at { p.note { "State read at " (time(t, None)) "." } }
    };
    page(&app, &headers, &viewer, "Fleet", "Fleet", main)
}

/// A link to the jobs listing with `q` changed by `set`.
fn jobs_link(q: &JobsQuery, set: impl FnOnce(&mut JobsQuery)) -> String {
    let mut q = q.clone();
    set(&mut q);
    let mut pairs: Vec<(&str, String)> = Vec::new();
    let mut push = |k: &'static str, v: &Option<String>| {
        if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
            pairs.push((k, v.to_owned()));
        }
    };
    push("q", &q.q);
    push("queue", &q.queue);
    push("outcome", &q.outcome);
    push("paused", &q.paused);
    push("sort", &q.sort);
    push("order", &q.order);
    if let Some(p) = q.page {
        pairs.push(("page", p.to_string()));
    }
    if let Some(p) = q.per_page {
        pairs.push(("per_page", p.to_string()));
    }
    format!("/jobs?{}", encode(&pairs))
}

/// `application/x-www-form-urlencoded` of `pairs`.
pub(super) fn encode(pairs: &[(&str, String)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())))
        .finish()
}

fn pager<T>(page: &Page<T>, link: impl Fn(usize) -> String) -> Markup {
    html! {
        nav.pager {
            @if page.page > 1 { a href=(link(page.page - 1)) rel="prev" { "← previous" } }
            span { "page " (page.page) " of " (page.pages()) " · " (page.total) " in all" }
            @if page.page < page.pages() { a href=(link(page.page + 1)) rel="next" { "next →" } }
        }
    }
}

fn select(name: &str, current: Option<&str>, options: &[(&str, &str)]) -> Markup {
    html! {
        select name=(name) {
            @for (value, label) in options {
                option value=(value) selected[current.unwrap_or("") == *value] { (label) }
            }
        }
    }
}

/// `GET /jobs`.
pub async fn jobs(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<JobsQuery>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let snap = app.snapshot();
    let view = app.view().await;
    let config = &view.config;
    let next_of = snap.next_of(&view);
    let flash = Flash {
        msg: q.msg.clone(),
        err: q.check().err(),
    };
    let page_of = if flash.err.is_none() {
        Some(q.select(config, &snap, &view.by_name, next_of))
    } else {
        None
    };
    let queues: Vec<String> = config.queues().iter().map(|q| q.to_string()).collect();
    let mut queue_opts: Vec<(&str, &str)> = vec![("", "any queue")];
    queue_opts.extend(queues.iter().map(|q| (q.as_str(), q.as_str())));
    let outcomes = [
        ("", "any last outcome"),
        ("none", "no run"),
        ("succeeded", "succeeded"),
        ("failed", "failed"),
        ("retrying", "retrying"),
        ("skipped", "skipped"),
        ("cancelled", "cancelled"),
        ("missed", "missed"),
        ("interrupted", "interrupted"),
        ("lost", "lost"),
    ];
    let now = Utc::now();
    let fleet = cronq_shared::registry::serving::Fleet::new(&snap.instances);
    let main = html! {
        (notices(&snap, &flash))
        h1 { "Jobs" }
        @if viewer.may(Role::Admin) && app.source.config.runtime.jobs {
            p.actions { a #new-job .button href="/jobs/new" { "New job" } }
        }
        form.filters method="get" action="/jobs" {
            input type="search" name="q" placeholder="search by name" value=[q.q.as_deref()];
            (select("queue", q.queue.as_deref(), &queue_opts))
            (select("outcome", q.outcome.as_deref(), &outcomes))
            (select("paused", q.paused.as_deref(), &[("", "paused or not"), ("yes", "paused"), ("no", "not paused")]))
            (select("sort", q.sort.as_deref(), &[("name", "sort by name"), ("next", "by next fire"), ("last", "by last run"), ("queue", "by queue")]))
            (select("order", q.order.as_deref(), &[("asc", "ascending"), ("desc", "descending")]))
            button type="submit" { "Apply" }
        }
        @if let Some(page_of) = &page_of {
            table #jobs {
                thead { tr { th { "job" } th { "schedule" } th { "zone" } th { "next fire" } th { "paused" } th { "last outcome" } th { "last 20" } th { "served" } } }
                tbody {
                    @for i in &page_of.rows {
                        @let job = &config.jobs[*i];
                        @let next = next_of.get(*i).copied().flatten().or_else(|| job.schedule.next_after(now));
                        @let stamp = view.stamp(&job.name);
                        tr data-job=(job.name.as_str()) data-runtime=[stamp.map(|s| s.revision)] {
                            td {
                                a href=(format!("/jobs/{}", job.name)) { (job.name.as_str()) }
                                @if let Some(s) = stamp { " " span.badge.runtime title={ "a runtime job, revision " (s.revision) " by " (s.by) } { "runtime r" (s.revision) } }
                            }
                            td { code { (job.schedule.as_str()) } }
                            td { (job.timezone.name()) }
                            td {
                                @match next {
                                    Some(t) => { (time(t, Some(job.timezone))) br; small { (output::local(&t.with_timezone(&job.timezone))) } }
                                    None => "never"
                                }
                            }
                            td.paused {
                                @if let Some(p) = snap.paused.get(&job.name) {
                                    span.badge { "paused" } " since " (time(p.since, Some(job.timezone)))
                                    @if let Some(n) = &p.note { br; q.note { (n) } }
                                } @else { "no" }
                            }
                            td {
                                @match snap.last(&job.name) {
                                    Some(r) => { (outcome(r.outcome.as_str())) br; (time(r.started_at, Some(job.timezone))) }
                                    None => "-"
                                }
                            }
                            td { (strip(&snap, job)) }
                            td.served { (served_cell(snap.taken_at.map(|_| fleet.assess(job)))) }
                        }
                    }
                }
            }
            (pager(page_of, |p| jobs_link(&q, |q| q.page = Some(p))))
            p.note { "Last outcomes come from the newest " (RECENT_RUNS) " run-history entries." }
        }
    };
    page(&app, &headers, &viewer, "Jobs", "Jobs", main)
}

/// The jobs page's "served" cell: whether a live consumer of the job's queue offers its
/// handler (`cronq_shared::registry::serving`); unknown before the first snapshot.
fn served_cell(served: Option<cronq_shared::registry::serving::Service>) -> Markup {
    use cronq_shared::registry::serving::Service;
    html! {
        @match served {
            None => "-",
            Some(Service::Served) => "yes",
            Some(Service::NoConsumer) => span.badge title="no consumer reports itself in the fleet registry" { "no consumer" },
            Some(Service::Unserved(why)) => {
                span.badge.unserved title=(why) { "unserved" }
                br;
                small { (why) }
            }
        }
    }
}

fn strip(snap: &Snapshot, job: &cronq_shared::config::Job) -> Markup {
    let mut runs: Vec<_> = snap.runs_of(&job.name).collect();
    runs.reverse();
    html! {
        span.strip {
            @for r in runs {
                span class={ "tick " (r.outcome.as_str()) } title={ (r.key) ": " (r.outcome) } {}
            }
        }
    }
}

fn json_text(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// `GET /jobs/{job}`.
pub async fn job(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(flash): Query<Flash>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let snap = app.snapshot();
    let (job, revision) = match actions::find(&app.source, &name).await {
        Ok(found) => found,
        Err(e) => return error_page(&app, &headers, &viewer, e),
    };
    let job = &job;
    let runs = api::job_runs(&app, job).await;
    let zone = Some(job.timezone);
    // The file's jobs with the runtime ones, as the refresher last merged them.
    let config = snap.view.as_ref().map_or(&app.source.config, |v| &v.config);
    let next = actions::next_fires_in(config, job, Utc::now(), 10);
    let children = config.children(job.name.as_str());
    let action = |a: &str| format!("/ui/jobs/{}/{a}", job.name);
    let limits = super::pools::section(&app, job).await;
    let main = html! {
        (notices(&snap, &flash))
        h1 { "Job " code { (job.name.as_str()) } }
        (ownership(app.as_ref(), &viewer, job, revision.as_ref()))
        @if let Some(p) = snap.paused.get(&job.name) {
            div.banner.warn #paused {
                "Paused since " (time(p.since, zone))
                @if let Some(n) = &p.note { ": " q.note { (n) } }
            }
        }
        @if viewer.can_act() {
            section.actions {
                @if snap.paused.contains_key(&job.name) {
                    form method="post" action=(action("resume")) { (viewer.csrf_field()) button #resume type="submit" { "Resume" } }
                } @else {
                    form method="post" action=(action("pause")) {
                        (viewer.csrf_field())
                        input #note type="text" name="note" placeholder="note (why)";
                        button #pause type="submit" { "Pause" }
                    }
                }
                form method="post" action=(action("trigger")) {
                    (viewer.csrf_field())
                    input #payload type="text" name="payload" placeholder="payload JSON (optional)";
                    button #trigger type="submit" { "Trigger now" }
                }
                form method="post" action=(action("backfill")) {
                    (viewer.csrf_field())
                    input type="text" name="from" placeholder="from 2026-11-29T00:00:00Z" required;
                    input type="text" name="to" placeholder="to 2026-11-29T06:00:00Z" required;
                    label { input type="checkbox" name="dry_run" value="1" checked; " preview the count only" }
                    label { input type="checkbox" name="confirm" value="1"; " allow more than 10,000" }
                    button type="submit" { "Backfill" }
                }
                form method="post" action=(action("cancel")) {
                    (viewer.csrf_field())
                    input #cancel-key type="text" name="key" placeholder=(format!("{}@2026-11-29T06:00:00Z (running or waiting)", job.name)) required;
                    button #cancel type="submit" { "Cancel occurrence" }
                }
            }
        }
        (limits)
        @if !job.parents().is_empty() || !children.is_empty() {
            section #chain {
                @if !job.parents().is_empty() {
                    p #parents {
                        "Runs after "
                        @for (i, p) in job.parents().iter().enumerate() {
                            @if i > 0 { ", " }
                            a href=(format!("/jobs/{}", encode_path(p.as_str()))) { code { (p.as_str()) } }
                        }
                        " succeeded for the same scheduled time (skipped when one of them ends otherwise)."
                    }
                }
                @if !children.is_empty() {
                    p #children {
                        "Then runs "
                        @for (i, c) in children.iter().enumerate() {
                            @if i > 0 { ", " }
                            a href=(format!("/jobs/{}", encode_path(c.name.as_str()))) { code { (c.name.as_str()) } }
                        }
                        "."
                    }
                }
            }
        }
        section.cols {
            div {
                h2 { "Next 10 fire times" }
                (next_table(job.timezone, &next))
            }
            div {
                h2 { "Config" }
                pre.config { (json_text(&api::job_config(job))) }
            }
        }
        h2 { "Runs" }
        @match &runs {
            Err(e) => div.banner.bad { "cannot read the run history: " (e) }
            Ok(runs) => {
                (chart(runs))
                (runs_table(runs, zone, false))
            }
        }
    };
    page(&app, &headers, &viewer, job.name.as_str(), "Jobs", main)
}

/// The next fire times of a job in `zone` (`actions::next_fires`), in UTC and the zone.
pub(super) fn next_table(zone: Tz, next: &[Value]) -> Markup {
    html! {
        table #next {
            thead { tr { th { "UTC" } th { "in " (zone.name()) } th { "" } } }
            tbody {
                @for n in next {
                    tr {
                        td { code { (n["utc"].as_str().unwrap_or_default()) } }
                        td { code { (n["local"].as_str().unwrap_or_default()) } }
                        td { @if let Some(t) = n["transition"].as_str() { span.badge.dst { "DST: " (t) } } }
                    }
                }
            }
        }
    }
}

/// Where a job is defined: a runtime job's revision, with Edit and Delete for an admin;
/// a file job's file, read-only here.
fn ownership(
    app: &App,
    viewer: &Viewer,
    job: &cronq_shared::config::Job,
    revision: Option<&cronq_shared::jobs::Revision>,
) -> Markup {
    let path = encode_path(job.name.as_str());
    html! {
        @match revision {
            Some(r) => {
                p #ownership {
                    "Runtime job, revision " strong #revision { (r.revision) } " by " (r.by) " at " (time(r.at, None)) " ("
                    a href=(format!("/audit?job={path}")) { "history" } ")."
                }
                @if viewer.may(Role::Admin) {
                    section.actions #job-admin {
                        a #edit .button href=(format!("/jobs/{path}/edit")) { "Edit" }
                        form #delete-form method="post" action=(format!("/ui/jobs/{path}/delete")) {
                            (viewer.csrf_field())
                            input type="hidden" name="revision" value=(r.revision);
                            label { input #confirm-delete type="checkbox" name="confirm" value="1" required; " yes, delete this job (its queued occurrences end cancelled)" }
                            button #delete type="submit" { "Delete" }
                        }
                    }
                }
            }
            None => p #ownership.note { "Defined in " code { (app.source.config.path.display()) } ": read-only here (change it in the file, then reload)." }
        }
    }
}

/// Bars of run durations over time (oldest left), coloured by outcome, and two lines on one
/// scale: the publish lateness (scheduled time to publish) and the start lateness (to start).
fn chart(runs: &[cronq_shared::runlog::Run]) -> Markup {
    if runs.is_empty() {
        return html! { p { "no run recorded yet" } };
    }
    let runs: Vec<_> = runs.iter().rev().collect();
    let longest = runs
        .iter()
        .map(|r| r.duration.as_secs_f64())
        .fold(0.001, f64::max);
    let w = 6.0;
    let h = 80.0;
    let secs = |d: Option<chrono::TimeDelta>| {
        d.map_or(0.0, |d| d.num_milliseconds().max(0) as f64 / 1000.0)
    };
    let (publish, start): (Vec<f64>, Vec<f64>) = runs
        .iter()
        .map(|r| (secs(r.publish_lateness()), secs(r.start_lateness())))
        .unzip();
    let late_max = publish.iter().chain(&start).copied().fold(0.001, f64::max);
    let line = |lateness: &[f64]| -> String {
        lateness
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{:.1},{:.1}", i as f64 * w + w / 2.0, h - l / late_max * h))
            .collect::<Vec<_>>()
            .join(" ")
    };
    html! {
        figure.chart {
            svg width=(runs.len() as f64 * w) height=(h) viewBox={ "0 0 " (runs.len() as f64 * w) " " (h) } role="img" aria-label="run durations, publish lateness and start lateness" {
                @for (i, r) in runs.iter().enumerate() {
                    @let bh = (r.duration.as_secs_f64() / longest * h).max(2.0);
                    rect class=(r.outcome.as_str()) x=(format!("{:.1}", i as f64 * w)) y=(format!("{:.1}", h - bh)) width=(w - 1.0) height=(format!("{:.1}", bh)) {
                        title { (r.key) ": " (r.outcome) ", " (output::duration(r.duration)) }
                    }
                }
                polyline.publish-lateness points=(line(&publish)) {}
                polyline.lateness points=(line(&start)) {}
            }
            figcaption {
                "Bars: duration (longest " (output::duration(std::time::Duration::from_secs_f64(longest))) "), coloured by outcome. "
                "Dashed line: publish lateness (scheduled time to publish); solid line: start lateness (scheduled time to start); one scale, largest " (format!("{late_max:.1}")) " s."
            }
        }
    }
}

/// A lateness as the runs table shows it: seconds, empty when not known.
fn late(d: Option<chrono::TimeDelta>) -> String {
    d.map_or_else(String::new, |d| format!("{} s", output::seconds(d)))
}

fn runs_table(runs: &[cronq_shared::runlog::Run], zone: Option<Tz>, with_job: bool) -> Markup {
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
    result: Option<Value>,
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
                p { (result["message"].as_str().unwrap_or_default()) }
                table {
                    thead { tr { th { "key" } th { "job" } th { "reason" } th { "result" } } }
                    tbody {
                        @for e in result["entries"].as_array().into_iter().flatten() {
                            tr { td { code { (e["key"].as_str().unwrap_or("-")) } } td { (e["job"].as_str().unwrap_or("-")) } td { (e["reason"].as_str().unwrap_or_default()) } td { (e["result"].as_str().unwrap_or_default()) } }
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

pub(super) fn error_page(app: &App, headers: &HeaderMap, viewer: &Viewer, e: ApiError) -> Response {
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

/// The fields of a posted form (a key may repeat).
pub(super) fn form(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body).into_owned().collect()
}

pub(super) fn field<'f>(form: &'f [(String, String)], name: &str) -> Option<&'f str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Refuses a posted form without a valid session and CSRF token, or whose session's role
/// is weaker than `need`.
pub(super) fn authorize(
    app: &App,
    headers: &HeaderMap,
    form: &[(String, String)],
    need: Role,
) -> Result<Caller, Refusal> {
    app.access.authorize(headers, field(form, "csrf"), need)
}

/// [`authorize`] for a form that acts: when refused, `act` is noted refused in the audit log
/// and the answer is the error page.
pub(super) async fn authorize_act(
    app: &App,
    peer: SocketAddr,
    headers: &HeaderMap,
    viewer: &Viewer,
    form: &[(String, String)],
    need: Role,
    act: &Act,
) -> Result<Caller, Response> {
    match authorize(app, headers, form, need) {
        Ok(caller) => Ok(caller),
        Err(e) => {
            let e = ApiError::from(e);
            audit::note(app, headers, peer, act.clone(), Some(&e)).await;
            Err(error_page(app, headers, viewer, e))
        }
    }
}

/// `POST /ui/jobs/{job}/{action}`: pause, resume, trigger, backfill, cancel (an occurrence
/// of the job, by key) from the job's page.
pub async fn job_action(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    if action == "delete" {
        return super::editor::delete(&app, peer, &headers, &name, &body).await;
    }
    let viewer = Viewer::of(&app, &headers);
    let form = form(&body);
    let mut act = Act::new(
        match action.as_str() {
            "pause" => "pause",
            "resume" => "resume",
            "trigger" => "trigger",
            "backfill" => "backfill",
            "cancel" => crate::ops::cancel::ACTION,
            _ => "unknown",
        },
        Some(&name),
    );
    if let Err(page) =
        authorize_act(&app, peer, &headers, &viewer, &form, Role::Operator, &act).await
    {
        return page;
    }
    let source = &app.source;
    let key = field(&form, "key").map(str::trim).unwrap_or_default();
    let done = match action.as_str() {
        "cancel" if !key.starts_with(&format!("{name}@")) => Err(ApiError::bad_request(format!(
            "{key:?} is not an occurrence key of job {name:?}: give JOB@SCHEDULED_UTC or JOB@manual-ID, as the runs list them"
        ))),
        "cancel" => actions::cancel(source, key, &audit::who(&app, &headers)).await,
        "pause" => actions::pause(source, &name, field(&form, "note").map(str::to_owned)).await,
        "resume" => actions::resume(source, &name).await,
        "trigger" => actions::trigger(source, &name, field(&form, "payload"), None).await,
        "backfill" => {
            let req = actions::Backfill {
                from: field(&form, "from").unwrap_or_default().to_owned(),
                to: field(&form, "to").unwrap_or_default().to_owned(),
                dry_run: field(&form, "dry_run").is_some(),
                confirm: field(&form, "confirm").is_some(),
            };
            actions::backfill(source, &name, &req).await
        }
        _ => Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("no action {action:?}: pause, resume, trigger, backfill or cancel"),
        }),
    };
    if action == "cancel" {
        act.detail = Some(key.to_owned());
    }
    if action == "pause" {
        act.detail = field(&form, "note")
            .filter(|n| !n.trim().is_empty())
            .map(|n| format!("note: {n}"));
    }
    if let Ok(v) = &done {
        act.detail = act.detail.or_else(|| api::detail_of(act.action, v));
    }
    audit::note(&app, &headers, peer, act, done.as_ref().err()).await;
    let target = format!("/jobs/{}", encode_path(&name));
    match done {
        Ok(v) => Redirect::to(&format!(
            "{target}?{}",
            encode(&[("msg", v["message"].as_str().unwrap_or("done").to_owned())])
        ))
        .into_response(),
        Err(e) if e.status == StatusCode::NOT_FOUND => error_page(&app, &headers, &viewer, e),
        Err(e) => {
            Redirect::to(&format!("{target}?{}", encode(&[("err", e.message)]))).into_response()
        }
    }
}

/// A job name for a path (job names are `[A-Za-z0-9_.-]`, but an unknown one may be
/// anything).
pub(super) fn encode_path(name: &str) -> String {
    form_urlencoded::byte_serialize(name.as_bytes()).collect()
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
    if let Ok(v) = &done {
        act.detail = api::detail_of(act.action, v);
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

/// The query of `/login`.
#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// Only a path of this dashboard (no `//host`): where to go after logging in.
fn local_path(next: Option<&str>) -> String {
    next.filter(|n| n.starts_with('/') && !n.starts_with("//") && !n.contains('\\'))
        .unwrap_or("/")
        .to_owned()
}

/// `GET /login`.
pub async fn login_form(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> Response {
    login_page(&app, &headers, q.next.as_deref(), None)
}

/// Why the login form is shown again: the status it answers with and what it says.
type LoginRefusal<'a> = (StatusCode, &'a str);

/// The login page, shown again after a refused login with its status (401 for a wrong
/// token, 403 for a form that did not come from this dashboard, as for every other form).
fn login_page(
    app: &App,
    headers: &HeaderMap,
    next: Option<&str>,
    refusal: Option<LoginRefusal<'_>>,
) -> Response {
    let error = refusal.map(|(_, message)| message);
    let viewer = Viewer::of(app, headers);
    let nonce = app.access.new_login();
    let csrf = app.access.login_csrf(&nonce);
    let main = html! {
        h1 { "Log in" }
        @if let Some(e) = error { div.banner.bad role="alert" { (e) } }
        @if viewer.read_only {
            p { "This dashboard is read-only: no token is configured (" code { "--tokens-file" } ", " code { "CRONQ_DASHBOARD_TOKEN" } " or " code { "--dashboard-token-file" } ")." }
        } @else {
            form #login method="post" action="/login" {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="next" value=(local_path(next));
                label { "Token " input #token type="password" name="token" autocomplete="current-password" required; }
                button #login-submit type="submit" { "Log in" }
            }
        }
    };
    let mut response = render(app, headers, &viewer, ("Log in", ""), main, false);
    if let Some((status, _)) = refusal {
        *response.status_mut() = status;
    }
    if let Ok(v) = set_cookie(LOGIN_COOKIE, &nonce, 600).parse() {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// `POST /login`.
pub async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form = form(&body);
    let next = local_path(field(&form, "next"));
    let nonce = cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    let csrf_ok = !nonce.is_empty()
        && app
            .access
            .is_login_csrf(&nonce, field(&form, "csrf").unwrap_or_default());
    if !csrf_ok {
        let e = ApiError {
            status: StatusCode::FORBIDDEN,
            message: "the login form's CSRF token is wrong or missing".into(),
        };
        audit::note_as(&app, "-", peer, Act::new("login", None), Some(&e)).await;
        return login_page(
            &app,
            &headers,
            Some(&next),
            Some((
                StatusCode::FORBIDDEN,
                "the login form expired or did not come from this dashboard: try again",
            )),
        );
    }
    let Some(caller) = app.access.token(field(&form, "token").unwrap_or_default()) else {
        tracing::warn!("dashboard: a login with a wrong token");
        let e = ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "wrong token".into(),
        };
        audit::note_as(&app, "-", peer, Act::new("login", None), Some(&e)).await;
        return login_page(
            &app,
            &headers,
            Some(&next),
            Some((
                StatusCode::UNAUTHORIZED,
                "wrong token: none of the dashboard's tokens",
            )),
        );
    };
    tracing::info!(token = %caller.name, role = %caller.role, "dashboard: logged in");
    let mut act = Act::new("login", None);
    act.detail = Some(format!("role {}", caller.role));
    audit::note_as(&app, &caller.name, peer, act, None).await;
    let session = app.access.new_session(&caller);
    let mut response = Redirect::to(&next).into_response();
    for c in [
        set_cookie(SESSION_COOKIE, &session, SESSION_SECONDS),
        set_cookie(LOGIN_COOKIE, "", 0),
    ] {
        if let Ok(v) = c.parse() {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

/// `POST /logout`.
pub async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let form = form(&body);
    if let Err(e) = authorize(&app, &headers, &form, Role::Viewer) {
        return error_page(&app, &headers, &viewer, ApiError::from(e));
    }
    let mut response = Redirect::to("/").into_response();
    if let Ok(v) = set_cookie(SESSION_COOKIE, "", 0).parse() {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}
