//! The producer's heap per job: a config of 100,000 jobs, loaded and led as the
//! producer does it (the config, the term's job table and timer, the config digest its
//! fleet reports share), must hold at most [`BUDGET`] bytes per job. Memory per job is not
//! noisy, so a change that adds a few dozen bytes per job (at a million jobs, tens of MiB)
//! fails here, not months later in the scale bench (docs/benchmarks-notebook.md).
//!
//! The heap is counted by the allocator of this test binary (every allocation and free,
//! in requested bytes: malloc's own overhead and fragmentation are the scale bench's to
//! show), as the difference between 100,000 and 10,000 jobs of the same schedules, so the
//! fixed costs (the parsed schedules, the shared settings) do not count per job.

use std::alloc::System;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use cronq_producer::footprint::Footprint;
use cronq_shared::config::Config;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes of heap per job a leading producer may hold (measured: see the test's output
/// and docs/benchmarks-notebook.md; a little headroom, not room for a regression). 206 B measured
/// once jobs could name a handler (`handler = "NAME"`: 16 B in every job's config).
const BUDGET: isize = 215;

/// Schedules and zones like the scale bench's mix: weekly and yearly cron jobs in several
/// zones, and `@every` jobs (none near a DST change, so no job has a warning).
const SCHEDULES: &[(&str, &str)] = &[
    ("7 9 * * MON", "UTC"),
    ("14 10 * * TUE", "America/New_York"),
    ("21 11 * * WED", "Europe/Berlin"),
    ("28 12 * * THU", "Asia/Shanghai"),
    ("35 13 5 6 *", "Australia/Sydney"),
    ("42 14 6 7 *", "Asia/Kolkata"),
    ("*/15 * 7 8 *", "America/Sao_Paulo"),
    ("@every 6h", "UTC"),
    ("@every 36h", "UTC"),
];

fn config_text(jobs: usize) -> String {
    let mut text = String::with_capacity(jobs * 100);
    for i in 0..jobs {
        let (schedule, zone) = SCHEDULES[i % SCHEDULES.len()];
        let _ = write!(
            text,
            "[[job]]\nname = \"s{i}\"\nschedule = \"{schedule}\"\ntimezone = \"{zone}\"\n\
             command = [\"true\"]\n"
        );
    }
    text
}

/// The bytes of heap held since `region` began (a reallocation counts its growth as
/// allocated, its shrinking as freed).
fn net(region: &Region<'_, System>) -> isize {
    let change = region.change();
    let allocated = isize::try_from(change.bytes_allocated).expect("fits");
    let freed = isize::try_from(change.bytes_deallocated).expect("fits");
    allocated - freed
}

/// The bytes of heap a producer leading `jobs` jobs holds: its config, and all of it.
fn held(jobs: usize, now: DateTime<Utc>) -> (isize, isize) {
    let text = config_text(jobs);
    let region = Region::new(GLOBAL);
    let config = Config::from_toml(&text, Path::new("memory.toml")).expect("the config loads");
    assert_eq!(config.jobs.len(), jobs);
    // No job has a warning; the config as a whole has one: a ninth of the jobs (the
    // `@every 6h` ones) fire in one second, a herd.
    assert!(
        config
            .warnings
            .iter()
            .all(|w| w.to_string().contains("fire in the same second")),
        "{:?}",
        config.warnings
    );
    let loaded = net(&region);
    let footprint = Footprint::leading(Arc::new(config), now);
    let all = net(&region);
    drop(footprint);
    (loaded, all)
}

#[test]
fn a_leading_producer_holds_at_most_its_budget_per_job() {
    let now = Utc::now();
    let (small, large) = (10_000, 100_000);
    let ((config_small, at_small), (config_large, at_large)) = (held(small, now), held(large, now));
    let more = isize::try_from(large - small).expect("fits");
    let per_job = (at_large - at_small) / more;
    let config = (config_large - config_small) / more;
    eprintln!(
        "heap held: {at_small} B at {small} jobs, {at_large} B at {large} jobs: \
         {per_job} B per job (budget {BUDGET} B), of which the config {config} B"
    );
    assert!(
        per_job <= BUDGET,
        "a leading producer holds {per_job} B of heap per job, over its budget of {BUDGET} B: \
         find what grew with a heap profile (docs/benchmarks-notebook.md, memory per job)"
    );
}
