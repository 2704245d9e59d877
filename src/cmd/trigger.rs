//! `cronq trigger`: ask the leading producer (through the control store) to publish one
//! occurrence now, or at the future instant `--at`, under a fresh key `JOB@manual-ID`, and
//! print that key.

use anyhow::Context as _;

use crate::cli::{Cli, TriggerArgs};
use crate::ops::lookup;
use crate::settings::UsageError;

/// Requests one manual occurrence and prints its key on stdout.
///
/// # Errors
/// A config, unknown-job, bad `--payload` or past `--at` usage error; Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &TriggerArgs) -> anyhow::Result<()> {
    let payload = crate::ops::trigger::payload(args.payload.as_deref())
        .map_err(|e| UsageError(format!("--payload {e}")))?;
    let at = match args.at.as_deref() {
        Some(text) => Some(
            crate::ops::trigger::at(text, chrono::Utc::now())
                .map_err(|e| UsageError(format!("--at {e}")))?,
        ),
        None => None,
    };
    let target = crate::settings::target(cli)?;
    let (config, stores) = lookup::job_with_stores(cli, &target, &args.job).await?;
    let job = lookup::job(&config, &args.job)?;
    let control = &stores.control;
    let key = control
        .request_trigger_at(&job.name, payload, at)
        .await
        .with_context(|| format!("while requesting a trigger of job {:?}", job.name.as_str()))?;
    crate::ops::audit::record(
        &*stores.audit,
        crate::ops::audit::cli("trigger", Some(job.name.as_str())).detail(Some(match at {
            Some(at) => format!(
                "{key} at {}",
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            None => key.to_string(),
        })),
    )
    .await;
    println!("{key}");
    if let Some(note) = lookup::no_leader_note(&stores, &target).await {
        eprintln!("{note}");
    }
    Ok(())
}
