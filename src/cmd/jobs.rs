//! `cronq jobs`.

use crate::cli::{Cli, JsonArg};

/// Prints each job's status.
pub async fn run(cli: &Cli, _args: &JsonArg) -> anyhow::Result<()> {
    let _config = super::load_config(cli)?;
    super::unavailable("jobs")
}
