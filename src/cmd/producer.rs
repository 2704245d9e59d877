//! `cronq producer`.

use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, ServeArgs};

/// Runs until the root token is cancelled.
pub async fn run(cli: &Cli, _args: &ServeArgs, _root: CancellationToken) -> anyhow::Result<()> {
    let _config = super::load_config(cli)?;
    super::unavailable("producer")
}
