//! `cronq next`: preview fire times.

use crate::cli::{Cli, NextArgs};

/// Prints the next fire times.
pub fn run(cli: &Cli, _args: &NextArgs) -> anyhow::Result<()> {
    let _config = super::load_config(cli)?;
    super::unavailable("next")
}
