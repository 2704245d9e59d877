//! `cronq check`: validate the config.

use crate::cli::Cli;

/// Loads the config; prints warnings; errors carry every problem.
pub fn run(cli: &Cli) -> anyhow::Result<()> {
    let config = super::load_config(cli)?;
    for w in &config.warnings {
        eprintln!("{}: warning: {w}", config.path.display());
    }
    println!(
        "{}: ok, {} job(s)",
        config.path.display(),
        config.jobs.len()
    );
    Ok(())
}
