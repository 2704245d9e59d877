//! The pools on the dashboard: `GET /api/v1/pools` (each `[pools.NAME]`: size, runs in its
//! slots, runs waiting, the next ones) and a job page's "Limits" section (its
//! `max_concurrent` and its pool's use), read from the ledger when asked
//! (`crate::ops::pools`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use cronq_shared::config::Job;
use maud::{Markup, html};
use serde_json::{Value, json};

use super::App;
use super::actions::ApiError;
use crate::ops::pools;

/// `GET /api/v1/pools`: `{"pools": [{"pool", "size", "running": [KEY…], "waiting": N,
/// "next": [KEY…]}…]}`, by name.
pub async fn list(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    let view = app.view().await;
    let used = pools::usage(&view.config, &*app.source.stores.ledger)
        .await
        .map_err(|e| ApiError::unavailable(format!("{e:#}")))?;
    let rows: Vec<Value> = used
        .iter()
        .map(|(name, pool)| pools::pool_json(name, pool))
        .collect();
    Ok(Json(json!({ "pools": rows })))
}

/// A job page's "Limits" section; nothing for a job without `max_concurrent` or a pool.
pub async fn section(app: &App, job: &Job) -> Markup {
    if job.pool.is_none() && job.max_concurrent.is_none() {
        return html! {};
    }
    let view = app.view().await;
    let used = pools::usage(&view.config, &*app.source.stores.ledger).await;
    let pool = job.pool.as_ref().map(|p| {
        let shown = used.as_ref().ok().and_then(|u| u.get(&p.name)).cloned();
        (p, shown)
    });
    html! {
        section #limits {
            h2 { "Limits" }
            p { (pools::cell(job, used.as_ref().ok())) }
            @if let Err(e) = &used {
                div.banner.bad { "cannot read the pools from the ledger: " (format!("{e:#}")) }
            }
            @if let Some((p, Some(u))) = &pool {
                table.pool {
                    tr { th { "pool" } td { code { (&*p.name) } } }
                    tr { th { "size" } td { (u.size) } }
                    tr { th { "running" } td { @for k in &u.gate.running { code { (k) } " " } } }
                    tr { th { "waiting" } td { (u.gate.waiting) } }
                    tr { th { "next" } td { @for k in &u.gate.next { code { (k) } " " } } }
                }
            }
        }
    }
}
