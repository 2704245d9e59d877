//! The Jobs page (`GET /jobs`): the jobs filtered, sorted and paged as the API's
//! `GET /api/v1/jobs` selects them (`crate::dashboard::query`), with their next fire, pause,
//! last outcomes and whether a consumer serves them.
//!
//! Invariant: its rows are those the API answers for the same query
//! (`JobsQuery::select`).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::Utc;
use maud::{Markup, html};

use super::layout::{Flash, Viewer, encode, notices, outcome, page, pager, select, time};
use crate::dashboard::App;
use crate::dashboard::auth::Role;
use crate::dashboard::query::JobsQuery;
use crate::dashboard::snapshot::{RECENT_RUNS, Snapshot};
use crate::output;

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
        @if viewer.may(Role::Admin) && app.source.config().runtime.jobs {
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
