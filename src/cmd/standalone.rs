//! `cronq standalone`.

use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, StandaloneArgs};

/// Runs until the root token is cancelled.
pub async fn run(
    cli: &Cli,
    _args: &StandaloneArgs,
    _root: CancellationToken,
) -> anyhow::Result<()> {
    let _config = super::load_config(cli)?;
    super::unavailable("standalone")
}
