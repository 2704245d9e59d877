//! Unit tests of `max_concurrent`, `[pools.NAME]` and `pool`: what is read, and the exact
//! text of each problem.

use super::tests::{load, problems};

const JOB: &str = "schedule = \"@every 5m\"\ncommand = [\"true\"]\n";

#[test]
fn pools_and_limits_are_read() {
    let config = load(&format!(
        "[defaults]\nmax_concurrent = 2\n[pools.reports]\nsize = 3\n[[job]]\nname = \"a\"\npool = \"reports\"\n{JOB}[[job]]\nname = \"b\"\nmax_concurrent = 5\noverlap = \"queue\"\n{JOB}"
    ))
    .unwrap();
    assert_eq!(config.pools.get("reports"), Some(&3));
    let pool = config.jobs[0].pool.as_ref().unwrap();
    assert_eq!((&*pool.name, pool.size), ("reports", 3));
    assert_eq!(config.jobs[0].max_concurrent, Some(2));
    assert_eq!(config.jobs[1].pool, None);
    assert_eq!(config.jobs[1].max_concurrent, Some(5));
}

#[test]
fn a_zero_limit_an_empty_pool_and_an_unknown_pool_are_refused() {
    let found = problems(&format!(
        "[pools.reports]\nsize = 0\n[pools.batch]\nsize = 2\n[[job]]\nname = \"a\"\nmax_concurrent = 0\n{JOB}[[job]]\nname = \"b\"\npool = \"bacth\"\n{JOB}"
    ));
    assert_eq!(
        found,
        [
            "[pools.reports]: size: must be at least 1 (how many runs of the pool's jobs may run at once), got 0: give it 1 or more, or remove the pool and its jobs' pool = \"reports\"",
            "job \"a\": max_concurrent: must be at least 1 (how many occurrences of the job may run at once, fleet-wide), got 0: give it 1 or more, or remove it (one at a time under overlap skip, queue or replace)",
            "job \"b\": pool: \"bacth\" is not a [pools.NAME] of this file; did you mean \"batch\"?: define it with [pools.bacth] size = N, or remove pool from the job",
        ]
    );
}

#[test]
fn a_limit_under_allow_and_a_pool_without_size_are_refused() {
    let found = problems(&format!(
        "[pools.p]\nsiz = 2\n[[job]]\nname = \"a\"\nmax_concurrent = 3\noverlap = \"allow\"\n{JOB}"
    ));
    assert_eq!(
        found,
        [
            "[pools.p]: siz: unknown field; did you mean \"size\"?",
            "[pools.p]: size: is required: how many runs of the pool's jobs may run at once, such as size = 2",
            "job \"a\": max_concurrent: is 3 but overlap is \"allow\" (no limit): set overlap to \"skip\", \"queue\" or \"replace\" to say what the occurrence past the limit does, or remove max_concurrent",
        ]
    );
}

#[test]
fn a_runtime_job_may_name_the_pools_of_the_reading_config() {
    let c = load(&format!(
        "[pools.batch]\nsize = 2\n[[job]]\nname = \"f\"\n{JOB}"
    ))
    .unwrap();
    let ok = c
        .runtime_jobs(
            "[[job]]\nname = \"a\"\nschedule = \"@every 5s\"\nhandler = \"report\"\npool = \"batch\"\nmax_concurrent = 2\noverlap = \"queue\"\n",
            std::path::Path::new("jobs.toml"),
        )
        .unwrap();
    let pool = ok[0].job.pool.as_ref().unwrap();
    assert_eq!((&*pool.name, pool.size), ("batch", 2));
    assert_eq!(ok[0].job.max_concurrent, Some(2));
    let err = c
        .runtime_jobs(
            "[[job]]\nname = \"b\"\nschedule = \"@daily\"\nhandler = \"report\"\npool = \"bathc\"\n",
            std::path::Path::new("jobs.toml"),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("jobs.toml: job \"b\": pool: \"bathc\" is not a [pools.NAME] of this file; did you mean \"batch\"?: define it with [pools.bathc] size = N, or remove pool from the job"),
        "{err}"
    );
}
