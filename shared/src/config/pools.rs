//! `[pools.NAME] size = N`: shared concurrency limits. Jobs name one with `pool = "NAME"`;
//! at most `size` runs of a pool's jobs run at once across the fleet, the others wait in
//! the ledger in scheduled order (`backends/rules`, `docs/config.md`).
//!
//! Owns: reading the sections, and every problem of one; a job's `pool` is checked against
//! them where the job is resolved (`validate`).

use std::collections::BTreeMap;
use std::sync::Arc;

use toml::Value;

use super::Pool;
use super::raw::{describe, unknown_field};
use super::report::Report;
use super::suggest::did_you_mean;

/// Reads every `[pools.NAME]` of `table` (the value of the top-level `pools` key): each
/// pool's size, by name.
pub(super) fn resolve(table: Option<Value>, out: &mut Report) -> BTreeMap<Arc<str>, u32> {
    super::sections::read("pools", table, out, |name, scope, fields, out| {
        let mut size = None;
        for (key, value) in fields {
            match (key.as_str(), value) {
                ("size", Value::Integer(n)) => match u32::try_from(*n) {
                    Ok(n) if n >= 1 => size = Some(n),
                    _ => out.problem(
                        scope,
                        "size",
                        format!(
                            "must be at least 1 (how many runs of the pool's jobs may run at once), got {n}: give it 1 or more, or remove the pool and its jobs' pool = {name:?}"
                        ),
                    ),
                },
                ("size", other) => out.problem(
                    scope,
                    "size",
                    format!("expected an integer such as 2, got {}", describe(other)),
                ),
                (other, _) => out
                    .problems
                    .push(unknown_field(scope, "", other, ["size"].into_iter())),
            }
        }
        if !fields.contains_key("size") {
            out.problem(
                scope,
                "size",
                "is required: how many runs of the pool's jobs may run at once, such as size = 2",
            );
        }
        size
    })
}

/// A job's `pool = "NAME"`: the pool when `pools` has it; else a problem naming the
/// closest pool.
pub(super) fn check(
    name: &str,
    pools: &BTreeMap<Arc<str>, u32>,
    scope: &str,
    out: &mut Report,
) -> Option<Pool> {
    if let Some((known, size)) = pools.get_key_value(name) {
        return Some(Pool {
            name: known.clone(),
            size: *size,
        });
    }
    let hint = match did_you_mean(name, pools.keys().map(|k| &**k)) {
        Some(s) => format!("; did you mean \"{s}\"?"),
        None => String::new(),
    };
    out.problem(
        scope,
        "pool",
        format!("{name:?} is not a [pools.NAME] of this file{hint}: define it with [pools.{name}] size = N, or remove pool from the job"),
    );
    None
}
