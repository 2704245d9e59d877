//! `cronq check`: validate the config and summarise it.
//!
//! Exit 0 with a summary (jobs, queues, warnings, jobs that need a handler registered by
//! an embedding program), or exit 2 with every problem (the error from
//! [`Config::load`](cronq_shared::config::Config::load)).

use crate::cli::Cli;

/// Loads the config, prints a summary on stdout and warnings on stderr.
///
/// # Errors
/// The config error listing every problem, or a usage error when no file is given.
pub fn run(cli: &Cli) -> anyhow::Result<()> {
    let config = crate::settings::load_config(cli)?;
    let path = config.path.display();
    let queues: Vec<String> = config.queues().iter().map(ToString::to_string).collect();
    println!(
        "{path}: ok: {}, {} ({})",
        plural(config.jobs.len(), "job", "jobs"),
        plural(queues.len(), "queue", "queues"),
        if queues.is_empty() {
            "none".to_owned()
        } else {
            queues.join(", ")
        }
    );
    for warning in &config.warnings {
        eprintln!("{path}: warning: {warning}");
    }
    for job in config
        .jobs
        .iter()
        .filter(|j| j.handler.is_none() && j.handler_name.is_none())
    {
        println!(
            "{path}: note: job {:?} has no handler in the file: a program embedding the consumer library must register one for it",
            job.name.as_str()
        );
    }
    Ok(())
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
