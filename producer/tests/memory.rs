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

/// Bytes a leader's continuous check (`cronq_producer::accounting_check`, one a minute)
/// may allocate per job with nothing due in its window: the jobs of a large config are
/// borrowed, the schedules they share worked out once, and no account is made for a job
/// without a gap. Copying each job and making an account of each cost several hundred
/// bytes per job and per check, which the allocator kept.
const CHECK_BUDGET: isize = 8;

/// The check of the window `[00:01, 00:59]` of Saturday 2026-01-03 UTC (none of
/// [`SCHEDULES`] fires in it) over `jobs` jobs of the mix and `due` jobs that share an
/// `@every 10m` schedule (five occurrences each in the window, none ever run): the bytes
/// allocated, and the report.
fn check(jobs: usize, due: usize) -> (isize, cronq_shared::accounting::Report) {
    use cronq_memory::{MemoryAudit, MemoryJobStore, MemoryRunLog};
    use cronq_shared::accounting::{self, Sources, Window};
    use std::collections::{BTreeMap, HashMap};
    use std::time::Duration;

    let mut text = config_text(jobs);
    for i in 0..due {
        let _ = write!(
            text,
            "[[job]]\nname = \"due{i}\"\nschedule = \"@every 10m\"\ncommand = [\"true\"]\n"
        );
    }
    let config = Config::from_toml(&text, Path::new("memory.toml")).expect("the config loads");
    let runlog = MemoryRunLog::new(1000);
    let audit = MemoryAudit::new(Duration::from_secs(3600));
    let store = MemoryJobStore::new();
    let at = |s: &str| s.parse::<DateTime<Utc>>().expect("a time");
    let window = Window {
        from: at("2026-01-03T00:01:00Z"),
        to: at("2026-01-03T00:59:00Z"),
        grace: Duration::from_secs(60),
        now: at("2026-01-03T02:00:00Z"),
        job: None,
        max_runs: 1000,
        only_gaps: true,
    };
    let sources = Sources {
        runlog: &runlog,
        audit: &audit,
        jobs: &store,
        file_history: &[],
        terms: &[],
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let region = Region::new(GLOBAL);
    let report = runtime
        .block_on(accounting::reconcile(
            sources,
            &config,
            &BTreeMap::new(),
            &HashMap::new(),
            &window,
        ))
        .expect("the check reads the stores");
    let change = region.change();
    let allocated = isize::try_from(change.bytes_allocated).expect("fits");
    (allocated, report)
}

/// Bytes a check allocates per job, from `measure` at 10,000 and 100,000 jobs of the mix
/// with two due (each reported with its five gaps, and nothing else).
fn per_job(
    what: &str,
    measure: fn(usize, usize) -> (isize, cronq_shared::accounting::Report),
) -> isize {
    let (small, large) = (10_000, 100_000);
    let (at_small, report_small) = measure(small, 2);
    let (at_large, report_large) = measure(large, 2);
    // Only the jobs with gaps are reported: the two due ones, five gaps each.
    for report in [&report_small, &report_large] {
        let gaps: Vec<(&str, usize)> = report
            .accounts
            .iter()
            .map(|a| (a.job.as_str(), a.gaps.len()))
            .collect();
        assert_eq!(gaps, [("due0", 5), ("due1", 5)]);
    }
    let more = isize::try_from(large - small).expect("fits");
    let per_job = (at_large - at_small) / more;
    eprintln!(
        "{what} allocated {at_small} B at {small} jobs, {at_large} B at {large} jobs: \
         {per_job} B per job (budget {CHECK_BUDGET} B)"
    );
    per_job
}

#[test]
fn the_leaders_check_allocates_nothing_per_job_with_nothing_due() {
    let per_job = per_job("the check", check);
    assert!(
        per_job <= CHECK_BUDGET,
        "the leader's check allocates {per_job} B per job with nothing due, over its budget \
         of {CHECK_BUDGET} B: a job is copied or an account made for it at every check \
         (cronq_shared::accounting::reconcile)"
    );
}

/// The incremental check's (`cronq_shared::accounting::Incremental`, the leader's) second
/// check over `jobs` jobs of the mix and `due` due ones, its window half a minute on, with
/// nothing entering it: the bytes allocated, and the report.
fn steady_check(jobs: usize, due: usize) -> (isize, cronq_shared::accounting::Report) {
    use cronq_memory::{MemoryAudit, MemoryJobStore, MemoryRunLog};
    use cronq_shared::accounting::{Incremental, Sources, Window};
    use std::collections::BTreeMap;
    use std::time::Duration;

    let mut text = config_text(jobs);
    for i in 0..due {
        let _ = write!(
            text,
            "[[job]]\nname = \"due{i}\"\nschedule = \"@every 10m\"\ncommand = [\"true\"]\n"
        );
    }
    let config =
        Arc::new(Config::from_toml(&text, Path::new("memory.toml")).expect("the config loads"));
    let runlog = MemoryRunLog::new(1000);
    let audit = MemoryAudit::new(Duration::from_secs(3600));
    let store = MemoryJobStore::new();
    let at = |s: &str| s.parse::<DateTime<Utc>>().expect("a time");
    let window = |from: &str, to: &str, now: &str| Window {
        from: at(from),
        to: at(to),
        grace: Duration::from_secs(60),
        now: at(now),
        job: None,
        max_runs: 1000,
        only_gaps: true,
    };
    let sources = Sources {
        runlog: &runlog,
        audit: &audit,
        jobs: &store,
        file_history: &[],
        terms: &[],
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut incremental = Incremental::new();
    let first = window(
        "2026-01-03T00:01:00Z",
        "2026-01-03T00:59:00Z",
        "2026-01-03T02:00:00Z",
    );
    runtime
        .block_on(incremental.check(sources, &config, &BTreeMap::new(), &first))
        .expect("the check reads the stores");
    let second = window(
        "2026-01-03T00:01:30Z",
        "2026-01-03T00:59:30Z",
        "2026-01-03T02:00:30Z",
    );
    let region = Region::new(GLOBAL);
    let report = runtime
        .block_on(incremental.check(sources, &config, &BTreeMap::new(), &second))
        .expect("the check reads the stores");
    let change = region.change();
    assert!(
        !incremental.last_full(),
        "the second check accounted for every job"
    );
    let allocated = isize::try_from(change.bytes_allocated).expect("fits");
    (allocated, report)
}

#[test]
fn the_leaders_steady_check_allocates_nothing_per_job_with_nothing_due() {
    let per_job = per_job("the steady check", steady_check);
    assert!(
        per_job <= CHECK_BUDGET,
        "the leader's steady check allocates {per_job} B per job with nothing due, over its \
         budget of {CHECK_BUDGET} B (cronq_shared::accounting::incremental)"
    );
}
