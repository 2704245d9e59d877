//! `cronq audit`: the operators' actions, newest first, from the audit log
//! (`cronq_shared::audit`, docs/security.md "Audit log").

use anyhow::Context as _;
use cronq_shared::audit::Filter;

use crate::cli::{AuditArgs, Cli};
use crate::ops;

/// Prints the audit log's entries that `args` selects.
///
/// # Errors
/// A config or usage error (a bad `--since`); the store unreachable.
pub async fn run(cli: &Cli, args: &AuditArgs) -> anyhow::Result<()> {
    let filter = Filter {
        job: args.job.clone(),
        since: args
            .since
            .as_deref()
            .map(|s| ops::audit::since("--since", s))
            .transpose()?,
        limit: args.limit,
    };
    let target = crate::settings::target(cli)?;
    let stores = ops::running::stores(cli, &target).await?;
    let entries = stores
        .audit
        .list(&filter)
        .await
        .context("while reading the audit log")?;
    if args.json {
        let list: Vec<_> = entries.iter().map(ops::audit::json).collect();
        println!(
            "{}",
            serde_json::json!({ "count": list.len(), "entries": list })
        );
        return Ok(());
    }
    if entries.is_empty() {
        println!("no action recorded (within the retention)");
    }
    for e in &entries {
        println!("{}", ops::audit::text(e));
    }
    Ok(())
}
