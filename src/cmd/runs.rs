//! `cronq runs`.

use crate::cli::{Cli, RunsArgs};

/// Prints the run history.
pub async fn run(_cli: &Cli, _args: &RunsArgs) -> anyhow::Result<()> {
    super::unavailable("runs")
}
