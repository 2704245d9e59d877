//! `cronq plan`: what a new config (`--config NEW`) changes in the next `--hours` against
//! what runs now (the config the target records, `crate::ops::running`, with its runtime
//! jobs) or against `--against OLD`; glue over `crate::ops::plan`, which the dashboard's
//! job editor uses too. Exit 0 when no job changes, 3 when one does.

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use cronq_shared::config::{Config, DEFAULT_RETENTION};
use cronq_shared::recorded::{self, without_secrets};

use super::Status;
use crate::cli::{Cli, PlanArgs};
use crate::ops::{self, lookup, running};
use crate::output;
use crate::settings::UsageError;

/// The status `cronq plan` exits with when some job changes.
pub const CHANGED: u8 = 3;

/// Prints the plan (a table, or one JSON document).
///
/// # Errors
/// A usage or config error (no `--config`, a file that does not load, nothing recorded and
/// no `--against`); the store unreachable; [`Status`] 3 after printing, when a job changes.
pub async fn run(cli: &Cli, args: &PlanArgs) -> anyhow::Result<()> {
    let path = cli.config.as_deref().ok_or_else(|| {
        UsageError(
            "no new config: pass --config NEW.toml, the file to compare with what runs".into(),
        )
    })?;
    if args.hours == 0 {
        return Err(UsageError("--hours must be at least 1".into()).into());
    }
    let load = recorded::load_file(path)?;
    let now = Utc::now();
    let (old, new, against) = match &args.against {
        Some(old) => (
            Config::load(old)?,
            (*load.config).clone(),
            old.display().to_string(),
        ),
        None => {
            let target = crate::settings::target(cli)?;
            let stores = lookup::stores(&target, DEFAULT_RETENTION).await?;
            let Some(record) = running::newest(&stores).await? else {
                return Err(UsageError(format!(
                    "no config recorded {} yet to compare with: start {}, or compare with a file: --against OLD.toml",
                    running::place(&target),
                    running::runner(&target)
                ))
                .into());
            };
            let old = record.load()?;
            // The record has no handlers: compare the new file without its own, so that
            // only what the leader plans counts.
            let new = Config::from_toml_at(
                &without_secrets(&load.text, &load.config),
                Path::new(path),
                now,
            )?;
            // The runtime jobs join both sides, as every producer merges them.
            let revisions =
                if old.runtime.jobs || new.runtime.jobs {
                    stores.jobs.list().await.map_err(|e| {
                        anyhow::Error::new(e).context("while reading the runtime jobs")
                    })?
                } else {
                    Vec::new()
                };
            let against = format!(
                "the config recorded {} ({}, loaded {} by {})",
                running::place(&target),
                record.path,
                output::utc(record.at),
                record.by
            );
            (
                old.with_runtime(&revisions).0,
                new.with_runtime(&revisions).0,
                against,
            )
        }
    };
    let horizon = Duration::from_secs(u64::from(args.hours) * 3600);
    let plan = ops::plan::plan(&old, &new, &against, now, horizon);
    if args.json {
        output::print_json(&ops::plan::json(&plan));
    } else {
        print!("{}", ops::plan::text(&plan));
    }
    if plan.changes() {
        return Err(Status(CHANGED).into());
    }
    Ok(())
}
