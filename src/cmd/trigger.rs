//! `cronq trigger`: ask the leading producer (through the control store) to publish one
//! occurrence now, under a fresh key `JOB@manual-ID`, and print that key.

use anyhow::Context as _;

use super::lookup;
use super::settings::UsageError;
use crate::cli::{Cli, TriggerArgs};

/// Requests one manual occurrence and prints its key on stdout.
///
/// # Errors
/// A config, unknown-job or bad `--payload` usage error; Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &TriggerArgs) -> anyhow::Result<()> {
    let config = super::settings::load_config(cli)?;
    let job = lookup::job(&config, &args.job)?;
    let payload = match args.payload.as_deref() {
        None => None,
        Some(text) => Some(serde_json::from_str::<serde_json::Value>(text).map_err(|e| {
            UsageError(format!(
                "--payload is not valid JSON ({e}); pass a JSON value such as '{{\"region\": \"cn\"}}'"
            ))
        })?),
    };
    let target = super::settings::target(cli)?;
    let stores = lookup::stores(&target, config.longest_retention()).await?;
    let control = &stores.control;
    let key = control
        .request_trigger(&job.name, payload)
        .await
        .with_context(|| format!("while requesting a trigger of job {:?}", job.name.as_str()))?;
    println!("{key}");
    if let Some(note) = lookup::no_leader_note(&stores, &target).await {
        eprintln!("{note}");
    }
    Ok(())
}
