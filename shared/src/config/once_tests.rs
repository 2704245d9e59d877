//! Unit tests of one-shot jobs (`at`) and the same-second herd warning, through a load.

use std::time::Instant;

use chrono::{DateTime, Utc};

use super::tests::{load, now, problems};
use super::*;

fn warnings(config: &Config) -> Vec<String> {
    config.warnings.iter().map(ToString::to_string).collect()
}

fn t(s: &str) -> DateTime<Utc> {
    s.parse().expect("valid instant")
}

#[test]
fn a_one_shot_fires_once_at_its_instant_in_the_jobs_zone() {
    let config = load(
        r#"
        [[job]]
        name = "utc"
        at = "2026-12-24T10:00:00+01:00"

        [[job]]
        name = "local"
        timezone = "Europe/Berlin"
        at = 2026-12-24T10:00:00
        "#,
    )
    .unwrap();
    assert!(warnings(&config).is_empty(), "{:?}", warnings(&config));
    for name in ["utc", "local"] {
        let s = &config.job(name).unwrap().schedule;
        let times: Vec<_> = s.iter_after(now()).collect();
        assert_eq!(times, [t("2026-12-24T09:00:00Z")], "{name}");
        assert_eq!(s.once_at(), Some(t("2026-12-24T09:00:00Z")));
        assert_eq!(s.next_after(t("2026-12-24T09:00:00Z")), None);
    }
    assert_eq!(
        config.job("local").unwrap().schedule.as_str(),
        "at 2026-12-24T10:00:00+01:00"
    );
}

#[test]
fn a_past_one_shot_is_a_warning_and_has_no_fire() {
    let config = load("[[job]]\nname = \"old\"\nat = \"2025-06-01T08:00:00Z\"\n").unwrap();
    assert_eq!(
        warnings(&config),
        [
            "job \"old\": at: 2025-06-01T08:00:00+00:00 is past: this one-shot job will not run unless a leader's catch-up covers it (catchup and catchup_window); move at, or remove the job"
        ]
    );
    assert_eq!(config.job("old").unwrap().schedule.next_after(now()), None);
}

#[test]
fn at_problems_name_the_job_and_the_field() {
    assert_eq!(
        problems(
            r#"
            [[job]]
            name = "both"
            schedule = "@daily"
            at = "2026-12-24T10:00:00Z"

            [[job]]
            name = "bad"
            at = "christmas"

            [[job]]
            name = "frac"
            at = "2026-12-24T10:00:00.5Z"
            "#
        ),
        [
            "job \"both\": at: is set together with schedule = \"@daily\": a job runs either on a schedule or once at `at`; remove one of them",
            "job \"bad\": at: \"christmas\" is not a date-time: use RFC 3339 such as \"2026-12-01T09:00:00+01:00\", or a local date-time in the job's zone such as \"2026-12-01T09:00:00\"",
            "job \"frac\": at: 2026-12-24T10:00:00.500+00:00 has a fraction of a second: occurrences are on whole seconds; drop the fraction",
        ]
    );
}

fn many(n: usize, schedule: &str) -> String {
    (0..n)
        .map(|i| format!("[[job]]\nname = \"j{i}\"\nschedule = \"{schedule}\"\n\n"))
        .collect()
}

#[test]
fn many_jobs_in_one_second_are_a_herd_warning_and_hashed_ones_are_not() {
    let herd = load(&many(200, "0 * * * *")).unwrap();
    assert_eq!(
        warnings(&herd),
        [
            "200 of 200 jobs (100%) fire in the same second, 2026-01-15T01:00:00Z (schedules \"0 * * * *\"): a herd that loads the broker and the consumers at once; spread them with H in a cron field (such as \"H * * * *\") or with jitter"
        ]
    );
    assert!(warnings(&load(&many(200, "H * * * *")).unwrap()).is_empty());
    // Below 100 jobs in the second, or not more than 10 % of all jobs: no warning.
    assert!(warnings(&load(&many(99, "0 * * * *")).unwrap()).is_empty());
    let spread = format!(
        "{}{}",
        many(100, "0 * * * *"),
        many(1000, "H H * * *").replace("\"j", "\"h")
    );
    assert!(warnings(&load(&spread).unwrap()).is_empty());
}

/// The herd count's share of a 100,000-job load (printed; `--nocapture` shows it). A
/// measurement, run on demand (`--run-ignored`).
#[test]
#[ignore = "a measurement: loads 100,000 jobs"]
fn the_herd_count_is_cheap_at_100k_jobs() {
    let text = many(100_000, "H H * * *");
    let started = Instant::now();
    let config = load(&text).unwrap();
    let load_time = started.elapsed();
    let started = Instant::now();
    let mut herd = super::herd::Herd::default();
    for job in &config.jobs {
        herd.add(&job.schedule);
    }
    let mut report = super::report::Report::default();
    herd.warn(now(), &mut report);
    let herd_time = started.elapsed();
    println!("100k jobs: load {load_time:?}, of which the herd count ≈ {herd_time:?}");
    assert!(report.warnings.is_empty());
}
