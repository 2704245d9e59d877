//! `digest`: what the config digest of the fleet registry costs a process at many jobs.
//!
//! Every producer, consumer and standalone computes the digest of its config
//! (`ConfigDigest::of`, `shared/src/registry/digest.rs`) at start and at each reload, once
//! per config, on a blocking thread. Here, in the bench process, on the scale bench's job
//! mix ([`crate::scale::Mix`]) written to a file: the digest's time next to the load of
//! the same file (`Config::load`: read, parse, validate), which every process pays anyway
//! at the same moments. Needs neither RabbitMQ nor Redis.

use std::time::Instant;

use anyhow::Context as _;
use chrono::Utc;
use cronq_shared::config::Config;
use cronq_shared::registry::digest::ConfigDigest;

use crate::report::Figure;
use crate::scale::Mix;
use crate::stats::{Unit, format};

/// Sizes of the digest bench.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct DigestArgs {
    /// Jobs in the config, one measurement per size (a list: `100000,1000000`).
    #[arg(
        id = "digest_jobs",
        long = "digest-jobs",
        value_delimiter = ',',
        default_value = "100000,1000000"
    )]
    pub jobs: Vec<usize>,
}

/// Runs the bench `runs` times per size; returns its figures.
///
/// # Errors
/// When the config cannot be written or does not load.
pub fn run(args: &DigestArgs, runs: usize) -> anyhow::Result<Vec<Figure>> {
    let dir = std::env::temp_dir().join(format!("cronq-bench-digest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("while creating {}", dir.display()))?;
    let measured = measure(args, runs, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

fn measure(args: &DigestArgs, runs: usize, dir: &std::path::Path) -> anyhow::Result<Vec<Figure>> {
    let mix = Mix::new(Utc::now())?;
    let mut figures = Vec::new();
    for &jobs in &args.jobs {
        let n = format(jobs as f64, Unit::Count);
        let mut digest = Figure::new(
            "digest",
            format!("config digest (`ConfigDigest::of`), {n} jobs"),
            Unit::Seconds,
        )
        .baseline("config load (`Config::load`) of the same file");
        let mut share = Figure::new(
            "digest",
            format!("config digest as a share of the load, {n} jobs"),
            Unit::Ratio,
        );
        let path = dir.join(format!("digest-{jobs}.toml"));
        std::fs::write(&path, mix.config_text(jobs).0)
            .with_context(|| format!("while writing {}", path.display()))?;
        for run in 1..=runs {
            let started = Instant::now();
            let config = Config::load(&path).context("while loading the digest bench's config")?;
            let load = started.elapsed().as_secs_f64();
            let started = Instant::now();
            let d = std::hint::black_box(ConfigDigest::of(&config));
            let took = started.elapsed().as_secs_f64();
            eprintln!(
                "digest: {jobs} jobs, run {run}/{runs}: load {load:.3}s, digest {took:.3}s ({} job digests)",
                d.jobs.len()
            );
            digest.runs.push(took);
            digest.push_baseline(load);
            share.runs.push(took / load);
            drop(d);
            drop(config);
        }
        figures.extend([digest, share]);
    }
    Ok(figures)
}
