//! `cronq backfill`.

use crate::cli::{BackfillArgs, Cli};

/// Requests a backfill.
pub async fn run(_cli: &Cli, _args: &BackfillArgs) -> anyhow::Result<()> {
    super::unavailable("backfill")
}
