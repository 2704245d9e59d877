//! `cronq consumer`.

use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, ConsumerArgs};

/// Runs until the root token is cancelled.
pub async fn run(cli: &Cli, _args: &ConsumerArgs, _root: CancellationToken) -> anyhow::Result<()> {
    let _config = super::load_config(cli)?;
    super::unavailable("consumer")
}
