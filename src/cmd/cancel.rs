//! `cronq cancel KEY`: stop a running occurrence, or one that waits, before it starts
//! (`crate::ops::cancel`). Exit 0 when cancelled or stopping, 2 for an unknown key, 1 for
//! an occurrence that already ended.

use anyhow::Context as _;
use cronq_shared::ledger::Cancelled;

use crate::cli::{CancelArgs, Cli};
use crate::ops;
use crate::output;
use crate::settings::UsageError;

/// Cancels one occurrence and says what became of it.
///
/// # Errors
/// A usage error for a malformed or unknown key; a runtime error for an occurrence that
/// already ended; Redis unreachable, or the data file unusable.
pub async fn run(cli: &Cli, args: &CancelArgs) -> anyhow::Result<()> {
    let key = ops::cancel::key(&args.key).map_err(UsageError)?;
    let target = crate::settings::target(cli)?;
    let stores = ops::running::stores(cli, &target).await?;
    let entry = ops::audit::cli(ops::cancel::ACTION, None);
    let cancelled = ops::cancel::cancel(&*stores.ledger, &key, &entry.who)
        .await
        .with_context(|| format!("while cancelling {key}"))?;
    let entry = ops::cancel::audited(entry, &key, &cancelled);
    ops::audit::record(&*stores.audit, entry).await;
    if args.json {
        output::print_json(&ops::cancel::json(&key, &cancelled));
    }
    let message = ops::cancel::message(&key, &cancelled);
    match cancelled {
        Cancelled::Unknown => Err(UsageError(message).into()),
        Cancelled::Finished(_) => Err(anyhow::anyhow!(message)),
        Cancelled::Stopping | Cancelled::Ended(_) => {
            if !args.json {
                println!("{message}");
            }
            Ok(())
        }
    }
}
