//! `cronq next`: preview the next fire times of each job, strictly after `--from`
//! (default now), in the job's zone and in UTC; a schedule with `H` also shows what it
//! resolved to for the job. A job that runs after other jobs (`after`) shows its expected
//! times: those its parents share.

use chrono::{DateTime, Utc};
use cronq_shared::config::Config;

use crate::cli::{Cli, NextArgs};
use crate::ops::{lookup, next, running};
use crate::settings::UsageError;

/// Prints the next `--count` fire times per job, as a table or one JSON document. The
/// config's jobs; `--job` may also name a runtime job (then the job store is read).
///
/// # Errors
/// A config error, or a usage error for an unknown `--job`, a bad `--from` or `--count 0`.
pub async fn run(cli: &Cli, args: &NextArgs) -> anyhow::Result<()> {
    let from = next::from(args.from.as_deref())?;
    if args.count == 0 {
        return Err(UsageError("--count must be at least 1".into()).into());
    }
    // With `--config`, the file is previewed (no service is needed); without, the config
    // the target runs, its runtime jobs included (`crate::ops::running`).
    let Some(_) = cli.config else {
        let target = crate::settings::target(cli)?;
        let (config, stores) = running::config_and_stores(cli, &target).await?;
        let config = lookup::with_runtime(config, &stores).await?;
        return preview(&config, args, from);
    };
    let config = crate::settings::load_config(cli)?;
    // A `--job` not in the file may be a runtime job of the target's job store.
    let config = match args.job.as_deref() {
        Some(name) if config.job(name).is_none() => match crate::settings::target(cli) {
            Ok(target) => {
                lookup::job_with_stores(cli, &target, name)
                    .await
                    .map_err(|e| match e.downcast::<UsageError>() {
                        Ok(UsageError(m)) => UsageError(format!("--job: {m}")).into(),
                        Err(e) => e,
                    })?
                    .0
            }
            Err(_) => config,
        },
        _ => config,
    };
    preview(&config, args, from)
}

/// Prints the preview of `config`'s jobs (or `--job`'s).
fn preview(config: &Config, args: &NextArgs, from: DateTime<Utc>) -> anyhow::Result<()> {
    let previews = next::previews(config, args.job.as_deref(), from, args.count)?;
    if args.json {
        println!("{}", next::to_json(from, &previews));
    } else {
        next::print_table(&previews, args.count);
    }
    Ok(())
}
