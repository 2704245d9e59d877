//! `cronq pause` and `cronq resume`.

use crate::cli::{Cli, JobArg, PauseArgs};

/// Pauses a job fleet-wide.
pub async fn pause(_cli: &Cli, _args: &PauseArgs) -> anyhow::Result<()> {
    super::unavailable("pause")
}

/// Resumes a paused job.
pub async fn resume(_cli: &Cli, _args: &JobArg) -> anyhow::Result<()> {
    super::unavailable("resume")
}
