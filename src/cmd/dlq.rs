//! `cronq dlq list` and `cronq dlq replay`.

use crate::cli::{Cli, JsonArg, ReplayArgs};

/// Lists the dead-letter queue.
pub async fn list(_cli: &Cli, _args: &JsonArg) -> anyhow::Result<()> {
    super::unavailable("dlq list")
}

/// Replays dead letters.
pub async fn replay(_cli: &Cli, _args: &ReplayArgs) -> anyhow::Result<()> {
    super::unavailable("dlq replay")
}
