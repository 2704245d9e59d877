//! `cronq trigger`.

use crate::cli::{Cli, TriggerArgs};

/// Requests one manual occurrence.
pub async fn run(_cli: &Cli, _args: &TriggerArgs) -> anyhow::Result<()> {
    super::unavailable("trigger")
}
