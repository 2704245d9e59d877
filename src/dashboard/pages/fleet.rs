//! The Fleet page (`GET /`): the leader, the instances alive, the config they run, the
//! queues and the last hour, rendered from the same typed view the API serves
//! (`crate::dashboard::fleet`).
//!
//! Invariant: what it shows comes from one snapshot and the current view of the jobs
//! (`crate::dashboard::view`), never from a store read of its own.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::Utc;
use cronq_shared::registry::{EXPIRY, REPORT_EVERY, Role as InstanceRole};
use maud::html;

use super::layout::{Flash, Viewer, notices, outcome, page, time};
use crate::dashboard::App;
use crate::dashboard::fleet::Fleet;
use crate::output;

/// `GET /`: the fleet.
pub async fn fleet(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(flash): Query<Flash>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let snap = app.snapshot();
    let view = app.view().await;
    let fleet = Fleet::of(
        &snap,
        &app.source.place,
        app.access.is_read_only(),
        app.source.config().jobs.len(),
        Utc::now(),
    );
    let main = html! {
        (notices(&snap, &flash))
        h1 { "Fleet" }
        section.cards {
            div.card {
                h2 { "Leader" }
                @match &fleet.leader {
                    Some(h) => {
                        p { "instance " code { (h.instance) } }
                        p { "epoch " strong #epoch { (h.epoch) } }
                        @if let Some(since) = h.since { p #leading-since { "leading since " (time(since, None)) } }
                        p { "lease renewed: " (output::duration(h.lease_left)) " left" }
                    }
                    None => p.warn { "no producer leads now: nothing is published (start " code { "cronq producer" } ")" }
                }
                h3 { "Standbys" }
                @if fleet.standbys.is_empty() { p #standbys { "none alive" } }
                @else {
                    ul #standbys { @for b in &fleet.standbys { li { code { (b.instance) } " on " (b.host) } } }
                }
            }
            div.card {
                h2 { "Dead letters" }
                p.big #dlq-count { @match fleet.dead_letters { Some(n) => (n), None => "?" } }
                a href="/dead-letters" { "review and replay" }
            }
            div.card {
                h2 { "Jobs" }
                p.big { (view.config.jobs.len()) }
                @if !view.runtime.is_empty() { p { (view.runtime.len()) " runtime" } }
                p { (fleet.paused) " paused" }
            }
            div.card {
                h2 { "Last hour" }
                @let hour = &fleet.last_hour;
                p { "expected by the schedules: " strong #expected { @match hour.expected { Some(n) => (n), None => "?" } } }
                p { "published: " strong #published { @match hour.published { Some(n) => (n), None => "?" } } }
                p { "executed: " strong #executed { @match hour.executed { Some(n) => (n), None => "?" } } }
                @if let Some(from) = hour.expected_from { p.note { "Expected counted from " (time(from, None)) " (the oldest producer alive started then, or an hour ago); paused jobs up to their pause." } }
                @if hour.outcomes.is_empty() { p { "no run recorded" } }
                @for (k, v) in &hour.outcomes { p { (outcome(k)) " " (v) } }
                p.note { "Published and executed: per-minute counters. Outcomes: from the newest " (hour.window) " run-history entries (a lower bound when that many are read)." }
            }
        }
        h2 { "Config" }
        @if fleet.config.differ.is_empty() {
            p #config-same { "Every instance alive runs " (fleet.config.reference.unwrap_or("the same config")) "." }
        } @else {
            p.warn { (fleet.config.differ.len()) " instances run another config than " (fleet.config.reference.unwrap_or("the reference")) ": deploy the same file to every host." }
            table #config-differ {
                thead { tr { th { "instance" } th { "role" } th { "digest" } th { "differing jobs" } } }
                tbody {
                    @for d in fleet.config.differ {
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
                @for q in fleet.queues {
                    tr {
                        td { (q.queue) }
                        td { @match q.messages { Some(n) => (n), None => "not declared" } }
                        td { @match q.consumers { Some(n) => (n), None => "-" } }
                    }
                }
            }
        }
        @if let Some(t) = fleet.taken_at { p.note { "State read at " (time(t, None)) "." } }
    };
    page(&app, &headers, &viewer, "Fleet", "Fleet", main)
}
