//! The leader's continuous reconciliation checked incrementally
//! (`cronq_shared::accounting::Incremental`, what `cronq_producer::accounting_check` runs)
//! against the full check (`cronq_shared::accounting::reconcile`) on generated histories:
//! a trailing window moved a minute at a time over jobs whose runs succeed, fail, retry,
//! end twice or never, are recorded late (a retry that ends after its slice was checked, a
//! backfill half an hour later), under a run history capped below or at the listing's cap,
//! with config reloads, pauses, leadership outages and leader changes on the way. Every
//! check must report what the full check reports.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, DurationRound as _, TimeDelta, Utc};
use cronq_memory::{MemoryAudit, MemoryJobStore, MemoryRunLog};
use cronq_shared::accounting::{self, Incremental, Sources, Window};
use cronq_shared::audit::{AuditLog as _, Entry};
use cronq_shared::config::Config;
use cronq_shared::control::Pause;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::lease::TermRecord;
use cronq_shared::names::JobName;
use cronq_shared::runlog::{Outcome, Run, RunLog as _};
use proptest::prelude::*;

/// The schedules jobs draw from (several fire in most minutes of an hour).
const SCHEDULES: &[&str] = &[
    "@every 5m",
    "@every 7m",
    "*/10 * * * *",
    "H * * * *",
    "@every 3m",
    "13,14,15 * * * *",
];

/// How many checks, a minute apart.
const CHECKS: i64 = 14;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A config of `jobs` jobs, the `variant`th: a reload changes one job's schedule and
/// adds one.
fn config(jobs: &[usize], after: bool, variant: usize) -> Arc<Config> {
    let mut text = String::new();
    for (i, s) in jobs.iter().enumerate() {
        let schedule = if variant == 1 && i == 0 {
            SCHEDULES[(s + 1) % SCHEDULES.len()]
        } else {
            SCHEDULES[*s]
        };
        let _ = write!(
            text,
            "[[job]]\nname = \"j{i}\"\nschedule = \"{schedule}\"\ncommand = [\"true\"]\n\
             timeout = \"30s\"\n"
        );
    }
    if variant == 1 {
        text.push_str(
            "[[job]]\nname = \"added\"\nschedule = \"@every 4m\"\ncommand = [\"true\"]\n",
        );
    }
    if after {
        text.push_str("[[job]]\nname = \"child\"\nafter = [\"j0\"]\ncommand = [\"true\"]\n");
    }
    Arc::new(Config::from_toml(&text, Path::new("incremental.toml")).expect("the config loads"))
}

/// One run, appended at `append`.
fn run(job: &JobName, at: DateTime<Utc>, attempt: u32, outcome: Outcome, later: i64) -> Run {
    Run {
        key: OccurrenceKey::scheduled(job.clone(), at),
        job: job.clone(),
        attempt,
        consumer: "c".into(),
        started_at: at + TimeDelta::seconds(1 + later),
        duration: Duration::from_secs(5),
        outcome,
        error: None,
        published_at: Some(at),
    }
}

/// The runs of every occurrence of `config` from `from` to `to`, each with the instant it
/// is appended at, by `rng`.
fn history(
    config: &Config,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    rng: &mut Rng,
) -> Vec<(DateTime<Utc>, Run)> {
    let mut out = Vec::new();
    for job in &config.jobs {
        for at in job.schedule.iter_after(from).take_while(|at| *at <= to) {
            let name = &job.name;
            let soon = TimeDelta::seconds(i64::try_from(rng.below(90)).unwrap_or(0) + 6);
            let late = TimeDelta::minutes(i64::try_from(rng.below(12)).unwrap_or(0) + 2);
            match rng.below(10) {
                // Never published.
                0 => {}
                1 => out.push((at + soon, run(name, at, 1, Outcome::Failed, 0))),
                2 => {
                    out.push((at + soon, run(name, at, 1, Outcome::Succeeded, 0)));
                    out.push((at + late, run(name, at, 2, Outcome::Succeeded, 60)));
                }
                // A retry that ends after its slice was checked.
                3 => {
                    out.push((at + soon, run(name, at, 1, Outcome::Retrying, 0)));
                    out.push((at + late, run(name, at, 2, Outcome::Succeeded, 100)));
                }
                // Unfinished.
                4 => out.push((at + soon, run(name, at, 1, Outcome::Retrying, 0))),
                // A backfill half an hour later.
                5 => out.push((
                    at + TimeDelta::minutes(30),
                    run(name, at, 1, Outcome::Succeeded, 1800),
                )),
                _ => out.push((at + soon, run(name, at, 1, Outcome::Succeeded, 0))),
            }
        }
    }
    out.sort_by_key(|(append, r)| (*append, r.key.as_str().to_owned(), r.attempt));
    out
}

#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    jobs: Vec<usize>,
    after: bool,
    /// The listing's cap, and the history's as a multiple of it.
    max_runs: usize,
    stream: usize,
    /// The check a reload comes before, if any.
    reload: Option<i64>,
    /// A pause of `j0` from one check to another, if any.
    pause: Option<(i64, i64)>,
    /// 0: no terms recorded; 1: one term throughout; 2: an outage an hour before the
    /// first check; 3: a new leader (a new term, and a fresh check) at the sixth check.
    terms: u8,
}

fn cases() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        prop::collection::vec(0..SCHEDULES.len(), 1..5),
        any::<bool>(),
        prop::sample::select(vec![15usize, 40, 100_000]),
        1..3usize,
        prop::option::of(1..CHECKS),
        prop::option::of((0..CHECKS, 1..6i64)),
        0..4u8,
    )
        .prop_map(
            |(seed, jobs, after, max_runs, stream, reload, pause, terms)| Case {
                seed,
                jobs,
                after,
                max_runs,
                stream,
                reload,
                pause: pause.map(|(from, len)| (from, from + len)),
                terms,
            },
        )
}

/// What the checks of a case came to.
#[derive(Debug, Default)]
struct Seen {
    /// The kinds of the gaps reported.
    kinds: std::collections::BTreeSet<&'static str>,
    /// Whether the listing reached its cap (the range started at its oldest run).
    capped: bool,
    /// How many checks accounted only for the jobs that changed.
    scoped: usize,
}

async fn check_case(case: &Case) -> Result<Seen, TestCaseError> {
    let mut seen = Seen::default();
    let mut rng = Rng(case.seed);
    // Whole minutes, in the past: the audit log keeps entries by the real clock.
    let start = Utc::now()
        .duration_trunc(TimeDelta::minutes(1))
        .expect("a minute")
        - TimeDelta::hours(3);
    let configs = [
        config(&case.jobs, case.after, 0),
        config(&case.jobs, case.after, 1),
    ];
    let end = start + TimeDelta::minutes(CHECKS);
    let mut planned = history(&configs[0], start - TimeDelta::minutes(70), end, &mut rng);
    if case.reload.is_some() {
        planned.extend(history(
            &configs[1],
            start - TimeDelta::minutes(70),
            end,
            &mut rng,
        ));
        planned.sort_by_key(|(append, r)| (*append, r.key.as_str().to_owned(), r.attempt));
    }
    let runlog = MemoryRunLog::new(case.max_runs.saturating_mul(case.stream));
    let audit = MemoryAudit::new(Duration::from_secs(86_400));
    let store = MemoryJobStore::new();
    let mut incremental = Incremental::new();
    let mut appended = 0;
    let mut paused: BTreeMap<JobName, Pause> = BTreeMap::new();
    let j0 = JobName::new("j0").expect("a name");
    for k in 0..CHECKS {
        let now = start + TimeDelta::minutes(k);
        while let Some((at, r)) = planned.get(appended)
            && *at <= now
        {
            runlog.record(r).await.expect("recorded");
            appended += 1;
        }
        if let Some((from, to)) = case.pause {
            let action = if k == from {
                paused.insert(
                    j0.clone(),
                    Pause {
                        since: now - TimeDelta::seconds(20),
                        note: None,
                    },
                );
                Some("pause")
            } else if k == to {
                paused.clear();
                Some("resume")
            } else {
                None
            };
            if let Some(action) = action {
                let mut entry = Entry::done(action, "test", "cli");
                entry.at = now - TimeDelta::seconds(20);
                entry.job = Some("j0".into());
                audit.record(&entry).await.expect("recorded");
            }
        }
        let term = |epoch: u64, from: DateTime<Utc>, to: DateTime<Utc>| TermRecord {
            epoch,
            instance: format!("p{epoch}"),
            start: from,
            alive: to,
        };
        let alive = now - TimeDelta::seconds(2);
        let terms = match case.terms {
            0 => vec![],
            1 => vec![term(1, start - TimeDelta::hours(2), alive)],
            2 => vec![
                term(
                    1,
                    start - TimeDelta::hours(2),
                    start - TimeDelta::minutes(50),
                ),
                term(2, start - TimeDelta::minutes(47), alive),
            ],
            _ if k < 6 => vec![term(1, start - TimeDelta::hours(2), alive)],
            _ => {
                let change = start + TimeDelta::minutes(5);
                vec![
                    term(1, start - TimeDelta::hours(2), change),
                    term(2, change + TimeDelta::seconds(30), alive),
                ]
            }
        };
        if case.terms == 3 && k == 6 {
            incremental.reset();
        }
        let config = &configs[usize::from(case.reload.is_some_and(|r| k >= r))];
        let window = Window {
            from: now - TimeDelta::hours(1),
            to: now - TimeDelta::minutes(2),
            grace: Duration::from_secs(120),
            now,
            job: None,
            max_runs: case.max_runs,
            only_gaps: true,
        };
        let sources = Sources {
            runlog: &runlog,
            audit: &audit,
            jobs: &store,
            file_history: &[],
            terms: &terms,
        };
        let full = accounting::reconcile(sources, config, &paused, &HashMap::new(), &window)
            .await
            .expect("the full check reads");
        let step = incremental
            .check(sources, config, &paused, &window)
            .await
            .expect("the incremental check reads");
        prop_assert_eq!(
            &step.accounts,
            &full.accounts,
            "check {} at {}: the incremental check differs from the full one",
            k,
            now
        );
        prop_assert_eq!(step.runs_from, full.runs_from, "check {}", k);
        seen.capped |= full.runs_from.is_some();
        seen.scoped += usize::from(!incremental.last_full());
        for a in &full.accounts {
            seen.kinds.extend(a.gaps.iter().map(|(_, g)| g.kind()));
        }
    }
    Ok(seen)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn an_incremental_check_reports_what_the_full_check_reports(case in cases()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(check_case(&case))?;
    }
}

/// The generated histories do have gaps of every kind the leader's check reports, a
/// capped history, and checks that accounted only for what changed: the comparison above
/// is not between two empty reports, nor between two full checks.
#[test]
fn the_generated_histories_have_gaps_of_every_kind_and_scoped_checks() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut all = Seen::default();
    for seed in 0..6 {
        let case = Case {
            seed,
            jobs: vec![0, 1, 2, 4],
            after: seed % 3 == 0,
            max_runs: if seed % 2 == 0 { 40 } else { 100_000 },
            stream: 1,
            reload: Some(8),
            pause: Some((3, 6)),
            terms: u8::try_from(seed % 4).expect("small"),
        };
        let seen = runtime
            .block_on(check_case(&case))
            .expect("the checks agree");
        all.kinds.extend(seen.kinds);
        all.capped |= seen.capped;
        all.scoped += seen.scoped;
    }
    assert!(all.capped, "no history reached the listing's cap");
    assert!(all.scoped >= 20, "only {} checks were scoped", all.scoped);
    for kind in ["never_published", "unfinished", "succeeded_twice"] {
        assert!(all.kinds.contains(kind), "no {kind} gap: {:?}", all.kinds);
    }
}
