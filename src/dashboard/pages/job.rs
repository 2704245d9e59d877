//! A job's page (`GET /jobs/{job}`) and its forms (`POST /ui/jobs/{job}/{action}`: pause,
//! resume, trigger, backfill, cancel; delete is the editor's): where the job is defined,
//! its chain, its next fire times, its config and its runs.
//!
//! Invariant: a form acts only once `super::form::authorize_act` accepted it, through
//! `crate::dashboard::actions` as the API does, and each action is noted in the audit log,
//! done or refused.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use chrono_tz::Tz;
use maud::{Markup, html};
use serde_json::Value;

use super::form::{authorize_act, field, form};
use super::layout::{Flash, Viewer, encode, encode_path, error_page, notices, page, time};
use super::runs::runs_table;
use crate::dashboard::App;
use crate::dashboard::actions::{self, ApiError};
use crate::dashboard::answer::{Done, NextFire};
use crate::dashboard::api;
use crate::dashboard::audit::{self, Act};
use crate::dashboard::auth::Role;
use crate::output;

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
    let file = app.source.config();
    let config = snap.view.as_ref().map_or(&file, |v| &v.config);
    let next = actions::next_fires_in(config, job, Utc::now(), 10);
    let children = config.children(job.name.as_str());
    let action = |a: &str| format!("/ui/jobs/{}/{a}", job.name);
    let limits = crate::dashboard::pools::section(&app, job).await;
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
pub(in crate::dashboard) fn next_table(zone: Tz, next: &[NextFire]) -> Markup {
    html! {
        table #next {
            thead { tr { th { "UTC" } th { "in " (zone.name()) } th { "" } } }
            tbody {
                @for n in next {
                    tr {
                        td { code { (n.utc) } }
                        td { code { (n.local) } }
                        td { @if let Some(t) = &n.transition { span.badge.dst { "DST: " (t) } } }
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
            None => p #ownership.note { "Defined in " code { (app.source.config().path.display()) } ": read-only here (change it in the file, then reload)." }
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

/// `POST /ui/jobs/{job}/{action}`: pause, resume, trigger, backfill, cancel (an occurrence
/// of the job, by key) from the job's page (`delete` is the editor's,
/// `crate::dashboard::editor::delete`).
pub async fn job_action(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
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
        "cancel" => said(actions::cancel(source, key, &audit::who(&app, &headers)).await),
        "pause" => {
            said(actions::pause(source, &name, field(&form, "note").map(str::to_owned)).await)
        }
        "resume" => said(actions::resume(source, &name).await),
        "trigger" => said(actions::trigger(source, &name, field(&form, "payload"), None).await),
        "backfill" => {
            let req = actions::Backfill {
                from: field(&form, "from").unwrap_or_default().to_owned(),
                to: field(&form, "to").unwrap_or_default().to_owned(),
                dry_run: field(&form, "dry_run").is_some(),
                confirm: field(&form, "confirm").is_some(),
            };
            said(actions::backfill(source, &name, &req).await)
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
    if let Ok((_, detail)) = &done {
        act.detail = act.detail.or_else(|| detail.clone());
    }
    audit::note(&app, &headers, peer, act, done.as_ref().err()).await;
    let target = format!("/jobs/{}", encode_path(&name));
    match done {
        Ok((message, _)) => {
            Redirect::to(&format!("{target}?{}", encode(&[("msg", message)]))).into_response()
        }
        Err(e) if e.status == StatusCode::NOT_FOUND => error_page(&app, &headers, &viewer, e),
        Err(e) => {
            Redirect::to(&format!("{target}?{}", encode(&[("err", e.message)]))).into_response()
        }
    }
}

/// A done operation's message and audit detail: what a form's answer needs of it.
fn said(done: Result<impl Done, ApiError>) -> Result<(String, Option<String>), ApiError> {
    done.map(|d| (d.message().to_owned(), d.detail()))
}
