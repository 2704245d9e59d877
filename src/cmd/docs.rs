//! `cronq completions`, `cronq man` and `cronq version`: what packagers install beside the
//! binary, generated from the command line's own definition (`crate::cli`), so they never
//! drift from it.

use std::path::Path;

use anyhow::Context as _;

use crate::cli::Cli;

/// Prints the completion script of `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) {
    let mut command = Cli::shaped();
    clap_complete::generate(shell, &mut command, "cronq", &mut std::io::stdout());
}

/// Prints `cronq.1` on stdout, or with `dir` writes it and one page per subcommand there.
///
/// # Errors
/// When a page cannot be written, naming the file.
pub fn man(dir: Option<&Path>) -> anyhow::Result<()> {
    let command = Cli::shaped();
    let Some(dir) = dir else {
        clap_mangen::Man::new(command)
            .render(&mut std::io::stdout())
            .context("while printing the man page")?;
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("while creating the directory {}", dir.display()))?;
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("while writing the man pages into {}", dir.display()))?;
    Ok(())
}

/// Prints `cronq VERSION`, as `cronq --version` does.
pub fn version() {
    println!("cronq {}", env!("CARGO_PKG_VERSION"));
}
