//! `footprint`: resident memory of idle `cronq producer`, `cronq consumer` and
//! `cronq standalone` processes (the real release binary) after a few seconds, on a
//! one-job config; the standalone on a fresh data file in the bench's temporary directory
//! (its default, `cronq.db`, would land in the working directory). A command that exits on
//! its own (e.g. not built yet) is skipped with a note.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use crate::env::BenchEnv;
use crate::procfs;
use crate::report::Figure;
use crate::scale::{spawn_cronq, stop};
use crate::standalone::Data;
use crate::stats::Unit;

/// Sizes of the footprint bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct FootprintArgs {
    /// How long each process idles before its memory is read.
    #[arg(long = "settle", default_value = "5s", value_parser = humantime::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub settle: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

const COMMANDS: &[&str] = &["producer", "consumer", "standalone"];

/// Runs the bench `runs` times; returns its figures and notes.
///
/// # Errors
/// When the config cannot be written.
pub async fn run(
    args: &FootprintArgs,
    runs: usize,
    cronq: &Path,
) -> anyhow::Result<(Vec<Figure>, Vec<String>)> {
    let dir = std::env::temp_dir().join(format!("cronq-bench-footprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("one.toml");
    std::fs::write(
        &config,
        "[[job]]\nname = \"idle\"\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n",
    )
    .context("while writing the footprint config")?;
    let mut figures = Vec::new();
    let mut notes = Vec::new();
    for command in COMMANDS {
        let mut rss = Figure::new(
            "footprint",
            format!("`cronq {command}` idle RSS, 1 job"),
            Unit::Bytes,
        );
        let mut skipped = None;
        for run in 1..=runs {
            eprintln!("footprint: cronq {command}, run {run}/{runs}");
            let env = BenchEnv::new()?;
            // A fresh data file for each standalone run.
            let file = Data::File(dir.join("footprint.db"));
            file.remove();
            let data = dir.join("footprint.db").display().to_string();
            let flags: Vec<&str> = match *command {
                "standalone" => vec![command, "--data", &data, "--config"],
                _ => vec![command, "--config"],
            };
            let measured = measure(&env, cronq, &flags, &config, args.settle).await;
            env.track_queue(&cronq_shared::names::QueueName::new("default")?);
            env.cleanup().await;
            match measured {
                Ok(bytes) => rss.runs.push(bytes as f64),
                Err(err) => {
                    skipped = Some(format!("`cronq {command}` skipped: {err:#}"));
                    break;
                }
            }
        }
        match skipped {
            Some(note) => notes.push(note),
            None => figures.push(rss),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok((figures, notes))
}

async fn measure(
    env: &BenchEnv,
    cronq: &Path,
    flags: &[&str],
    config: &Path,
    settle: Duration,
) -> anyhow::Result<u64> {
    let mut child = spawn_cronq(env, cronq, flags, config, "warn")?;
    let pid = child.id().context("exited at once")?;
    let mut stderr = child.stderr.take().context("no stderr pipe")?;
    let collect = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
        text
    });
    tokio::time::sleep(settle).await;
    let outcome = match child.try_wait()? {
        Some(status) => Err(status),
        None => Ok(procfs::memory(Some(pid))?.rss),
    };
    stop(&mut child).await;
    let stderr = collect.await.unwrap_or_default();
    outcome.map_err(|status| {
        anyhow::anyhow!(
            "it exited with {status} within {settle:?}: {}",
            stderr.lines().last().unwrap_or("").trim()
        )
    })
}
