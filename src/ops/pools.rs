//! How the pools (`[pools.NAME]`) and the limited jobs are used now, read from the ledger
//! (`cronq_shared::ledger::Ledger::gates`): for `cronq jobs`, the dashboard and its JSON
//! API, written once.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use cronq_shared::config::{Config, Job, Overlap};
use cronq_shared::ledger::pool_gate;
use cronq_shared::ledger::{GateUse, Ledger};
use serde_json::{Value, json};

/// One pool now: its size and its gate's use.
#[derive(Debug, Clone)]
pub struct PoolUse {
    /// `[pools.NAME] size`.
    pub size: u32,
    /// Who runs in its slots, and who waits.
    pub gate: GateUse,
}

/// Every pool of `config`, by name, as the ledger has it now.
///
/// # Errors
/// When the ledger cannot be read.
pub async fn usage(
    config: &Config,
    ledger: &dyn Ledger,
) -> anyhow::Result<BTreeMap<Arc<str>, PoolUse>> {
    let names: Vec<&Arc<str>> = config.pools.keys().collect();
    let gates: Vec<String> = names.iter().map(|n| pool_gate(n)).collect();
    let used = ledger
        .gates(&gates)
        .await
        .context("while reading the pools' slots from the ledger")?;
    Ok(names
        .into_iter()
        .zip(used)
        .map(|(name, gate)| {
            let size = config.pools.get(name).copied().unwrap_or(0);
            (name.clone(), PoolUse { size, gate })
        })
        .collect())
}

/// A job's limits for a table cell: `pool NAME 2/3 running, 4 waiting`, `max 3 (queue)`,
/// both, or `-`.
pub fn cell(job: &Job, pools: Option<&BTreeMap<Arc<str>, PoolUse>>) -> String {
    let mut parts = Vec::new();
    if let Some(pool) = &job.pool {
        let used = pools.and_then(|p| p.get(&pool.name)).map_or_else(
            || "?".to_owned(),
            |u| {
                format!(
                    "{}/{} running, {} waiting",
                    u.gate.running.len(),
                    u.size,
                    u.gate.waiting
                )
            },
        );
        parts.push(format!("pool {} {used}", pool.name));
    }
    if let Some(n) = job.max_concurrent.filter(|_| job.overlap != Overlap::Allow) {
        parts.push(format!("max {n} ({})", overlap(job.overlap)));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join("; ")
    }
}

fn overlap(o: Overlap) -> &'static str {
    match o {
        Overlap::Allow => "allow",
        Overlap::Skip => "skip",
        Overlap::Queue => "queue",
        Overlap::Replace => "replace",
    }
}

/// Adds a job's limits to its JSON object: `pool` (its name, or null) and `max_concurrent`
/// (null: one at a time unless overlap is `allow`).
pub fn job_fields(row: &mut Value, job: &Job) {
    row["pool"] = json!(job.pool.as_ref().map(|p| &*p.name));
    row["max_concurrent"] = json!(job.max_concurrent);
}

/// One pool as JSON: `{"pool", "size", "running": [KEY…], "waiting": N, "next": [KEY…]}`.
pub fn pool_json(name: &str, pool: &PoolUse) -> Value {
    json!({
        "pool": name,
        "size": pool.size,
        "running": pool.gate.running,
        "waiting": pool.gate.waiting,
        "next": pool.gate.next,
    })
}
