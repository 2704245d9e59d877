//! Unit tests of the expected occurrences (revisions, pauses, bounds) and of the
//! classification of runs.

use std::path::Path;

use super::*;

fn t(text: &str) -> DateTime<Utc> {
    text.parse().expect("valid instant")
}

/// The one job of a config whose `[[job]]` table is `job`.
fn job(table: &str) -> Job {
    let text = format!("[[job]]\nname = \"j\"\ncommand = [\"true\"]\ntimeout = \"5s\"\n{table}\n");
    let config = Config::from_toml_at(&text, Path::new("cronq.toml"), t("2026-01-01T00:00:00Z"))
        .expect("valid config");
    config.jobs[0].clone()
}

fn file(table: &str) -> Definition<'static> {
    Definition {
        since: None,
        until: None,
        job: Cow::Owned(job(table)),
    }
}

fn instants(e: &Expectation) -> Vec<String> {
    e.occurrences
        .iter()
        .map(|o| o.at.format("%H:%M:%S").to_string())
        .collect()
}

#[test]
fn a_range_includes_both_ends() {
    let e = expected(
        &[file("schedule = \"@every 10s\"")],
        &[],
        t("2026-03-01T10:00:00Z"),
        t("2026-03-01T10:00:30Z"),
    );
    assert_eq!(
        instants(&e),
        ["10:00:00", "10:00:10", "10:00:20", "10:00:30"]
    );
    assert!(e.occurrences.iter().all(|o| !o.optional));
    assert_eq!(e.paused, 0);
}

#[test]
fn start_at_and_end_at_bound_the_expectation() {
    let def = file(
        "schedule = \"@every 10s\"\nstart_at = \"2026-03-01T10:00:15Z\"\nend_at = \"2026-03-01T10:00:40Z\"",
    );
    let e = expected(
        &[def],
        &[],
        t("2026-03-01T10:00:00Z"),
        t("2026-03-01T10:01:00Z"),
    );
    assert_eq!(instants(&e), ["10:00:20", "10:00:30", "10:00:40"]);
}

#[test]
fn each_revision_expects_its_own_schedule_from_its_time() {
    let created = t("2026-03-01T10:00:05Z");
    let changed = t("2026-03-01T10:00:42Z");
    let deleted = t("2026-03-01T10:01:30Z");
    let defs = [
        Definition {
            since: Some(created),
            until: Some(changed),
            job: Cow::Owned(job("schedule = \"@every 10s\"")),
        },
        Definition {
            since: Some(changed),
            until: Some(deleted),
            job: Cow::Owned(job("schedule = \"@every 20s\"")),
        },
    ];
    let e = expected(
        &defs,
        &[],
        t("2026-03-01T10:00:00Z"),
        t("2026-03-01T10:03:00Z"),
    );
    // Nothing before the creation, the 10 s schedule up to the change, the 20 s one from
    // the change to the delete, nothing after.
    assert_eq!(
        instants(&e),
        [
            "10:00:10", "10:00:20", "10:00:30", "10:00:40", "10:01:00", "10:01:20"
        ]
    );
    let optional: Vec<bool> = e.occurrences.iter().map(|o| o.optional).collect();
    assert_eq!(optional, [false, false, false, false, false, false]);

    // An occurrence within the settle time of a change is optional.
    let e = expected(
        &defs[1..],
        &[],
        t("2026-03-01T10:00:00Z"),
        t("2026-03-01T10:01:30Z"),
    );
    assert_eq!(instants(&e), ["10:01:00", "10:01:20"]);
    let soon = Definition {
        since: Some(t("2026-03-01T10:00:59Z")),
        ..defs[1].clone()
    };
    let e = expected(
        &[soon],
        &[],
        t("2026-03-01T10:00:00Z"),
        t("2026-03-01T10:01:30Z"),
    );
    assert!(e.occurrences[0].optional, "{e:?}");
    assert!(!e.occurrences[1].optional, "{e:?}");
}

#[test]
fn a_paused_stretch_is_not_expected_and_its_edges_are_optional() {
    let entry = |action: &str, at: &str| audit::Entry {
        at: t(at),
        ..audit::Entry::done(action, "me", "cli").job(Some("j"))
    };
    let pause = |at: &str| entry("pause", at);
    let resume = |at: &str| entry("resume", at);
    // The occurrences of a job every 10 s over a minute, with these paused stretches.
    let every_10s = |stretches: &[Stretch]| {
        expected(
            &[file("schedule = \"@every 10s\"")],
            stretches,
            t("2026-03-01T10:00:00Z"),
            t("2026-03-01T10:01:00Z"),
        )
    };
    let noop = resume("2026-03-01T10:00:12Z").detail(Some("was not paused".into()));
    let refused = pause("2026-03-01T10:00:02Z").refused("not allowed");
    let stretches = paused(
        &[
            resume("2026-03-01T10:00:41Z"),
            pause("2026-03-01T10:00:15Z"),
            noop,
            refused,
        ],
        None,
    );
    assert_eq!(
        stretches,
        [Stretch {
            from: Some(t("2026-03-01T10:00:15Z")),
            to: Some(t("2026-03-01T10:00:41Z")),
        }]
    );
    let e = every_10s(&stretches);
    assert_eq!(
        instants(&e),
        ["10:00:00", "10:00:10", "10:00:50", "10:01:00"]
    );
    assert_eq!(e.paused, 3, "10:00:20, :30 and :40");

    // The control store's pause in force holds to the end, even without a log entry.
    let now = paused(
        &[],
        Some(&Pause {
            since: t("2026-03-01T10:00:35Z"),
            note: None,
        }),
    );
    let e = every_10s(&now);
    assert_eq!(
        instants(&e),
        ["10:00:00", "10:00:10", "10:00:20", "10:00:30"]
    );
    assert!(
        !e.occurrences[3].optional,
        "5 s before the pause is past SETTLE"
    );
    assert_eq!(e.paused, 3);
}

#[test]
fn a_resume_without_its_pause_counts_as_paused_from_the_start() {
    let resume = audit::Entry {
        at: t("2026-03-01T10:00:25Z"),
        ..audit::Entry::done("resume", "me", "cli").job(Some("j"))
    };
    let stretches = paused(&[resume], None);
    let e = expected(
        &[file("schedule = \"@every 10s\"")],
        &stretches,
        t("2026-03-01T10:00:00Z"),
        t("2026-03-01T10:00:40Z"),
    );
    assert_eq!(instants(&e), ["10:00:30", "10:00:40"]);
}

fn run(key: &OccurrenceKey, attempt: u32, outcome: Outcome) -> Run {
    Run {
        key: key.clone(),
        job: key.job().clone(),
        attempt,
        consumer: "c".into(),
        started_at: key.scheduled_at().unwrap_or_else(Utc::now),
        duration: Duration::from_millis(10),
        outcome,
        error: None,
        published_at: None,
    }
}

#[test]
fn runs_classify_each_occurrence_and_name_every_gap() {
    let name = JobName::new("j").unwrap();
    let (from, to) = (t("2026-03-01T10:00:00Z"), t("2026-03-01T10:01:00Z"));
    let e = expected(&[file("schedule = \"@every 10s\"")], &[], from, to);
    let key = |at: &str| OccurrenceKey::scheduled(name.clone(), t(at));
    let k0 = key("2026-03-01T10:00:00Z");
    let k1 = key("2026-03-01T10:00:10Z");
    let k2 = key("2026-03-01T10:00:20Z");
    let k3 = key("2026-03-01T10:00:30Z");
    let k4 = key("2026-03-01T10:00:40Z");
    let k5 = key("2026-03-01T10:00:50Z");
    let k6 = key("2026-03-01T10:01:00Z");
    let runs = by_key([
        run(&k0, 1, Outcome::Succeeded),
        run(&k1, 1, Outcome::Retrying),
        run(&k1, 2, Outcome::Failed),
        run(&k2, 1, Outcome::Succeeded),
        run(&k2, 1, Outcome::Succeeded),
        run(&k3, 1, Outcome::Interrupted),
        run(&k5, 1, Outcome::Skipped),
        // A manual trigger's run does not count.
        run(&OccurrenceKey::manual(name.clone()), 1, Outcome::Succeeded),
    ]);
    let stray = key("2026-03-01T10:00:05Z");
    let letters: HashMap<String, String> = [
        (k1.as_str().to_owned(), "failed".to_owned()),
        (k5.as_str().to_owned(), "unknown job".to_owned()),
        (stray.as_str().to_owned(), "no handler".to_owned()),
    ]
    .into();
    // Judged well after: every gap shows.
    let now = t("2026-03-01T11:00:00Z");
    let a = account(&name, &e, &runs, &letters, (from, to), DEFAULT_GRACE, now);
    assert_eq!(a.expected, 7);
    assert_eq!(a.count(Outcome::Succeeded), 2);
    assert_eq!(a.count(Outcome::Failed), 1);
    assert_eq!(a.count(Outcome::Skipped), 1);
    assert_eq!(a.pending, 0);
    let gaps: Vec<(String, &str)> = a
        .gaps
        .iter()
        .map(|(k, g)| (k.to_string(), g.kind()))
        .collect();
    assert_eq!(
        gaps,
        [
            (k2.to_string(), "succeeded_twice"),
            (k3.to_string(), "unfinished"),
            (k4.to_string(), "never_published"),
            (k5.to_string(), "dead_letter_without_failed"),
            (k6.to_string(), "never_published"),
            (stray.to_string(), "dead_letter_without_failed"),
        ]
    );
    assert_eq!(
        a.gaps[1].1.to_string(),
        "published but without a terminal state (last attempt interrupted)"
    );

    // Judged right after `to`: the last ones are still within their time to end.
    let soon = t("2026-03-01T10:01:20Z");
    let soon_with =
        |grace: Duration| account(&name, &e, &runs, &HashMap::new(), (from, to), grace, soon);
    let a = soon_with(DEFAULT_GRACE);
    assert_eq!(a.pending, 3, "10:00:30 (interrupted), :40, 10:01:00: {a:?}");
    assert_eq!(a.gaps.len(), 1, "the double success only: {a:?}");
    let a = soon_with(Duration::ZERO);
    assert_eq!(
        a.pending, 1,
        "the interrupted one may still be retried: {a:?}"
    );
    assert_eq!(
        a.gaps.len(),
        3,
        "10:00:40 and 10:01:00 never published: {a:?}"
    );
}

/// A term from `start` to `alive` (`HH:MM:SS` on 2026-03-01).
fn term(epoch: u64, start: &str, alive: &str) -> TermRecord {
    let at = |hms: &str| t(&format!("2026-03-01T{hms}Z"));
    TermRecord {
        epoch,
        instance: "p".into(),
        start: at(start),
        alive: at(alive),
    }
}

fn no_leader(e: &Expectation) -> Vec<String> {
    e.occurrences
        .iter()
        .filter(|o| o.no_leader.is_some())
        .map(|o| o.at.format("%H:%M:%S").to_string())
        .collect()
}

#[test]
fn what_no_leader_published_is_judged_by_the_next_terms_catchup() {
    let (from, to) = (t("2026-03-01T10:00:00Z"), t("2026-03-01T10:01:00Z"));
    // Led until 10:00:12, nobody until 10:00:45.5, led since.
    let terms = [
        term(1, "09:00:00", "10:00:12"),
        term(2, "10:00:45.500", "10:01:30"),
    ];
    let of = |policy: &str, window: &str| {
        let defs = [file(&format!(
            "schedule = \"@every 10s\"\ncatchup = \"{policy}\"\ncatchup_window = \"{window}\""
        ))];
        let mut e = expected(&defs, &[], from, to);
        leaderless::apply(&mut e, &defs, &terms);
        e
    };
    // 10:00:20, :30 and :40 were due with no leader.
    assert_eq!(
        no_leader(&of("none", "1h")),
        ["10:00:20", "10:00:30", "10:00:40"]
    );
    assert_eq!(no_leader(&of("latest", "1h")), ["10:00:20", "10:00:30"]);
    assert_eq!(no_leader(&of("all", "1h")), Vec::<String>::new());
    // The window counts back from the next term's start: 10:00:25.5.
    assert_eq!(no_leader(&of("all", "20s")), ["10:00:20"]);
    // latest, with a window too short to reach back to 10:00:40: nothing caught up.
    assert_eq!(
        no_leader(&of("latest", "5s")),
        ["10:00:20", "10:00:30", "10:00:40"]
    );
    let none = of("none", "1h");
    assert!(
        none.occurrences
            .iter()
            .filter(|o| o.no_leader.is_some())
            .all(|o| o.optional && o.no_leader == Some(Catchup::None))
    );
    // Without terms, or with no term after the outage, everything is expected as before.
    let defs = [file("schedule = \"@every 10s\"\ncatchup = \"none\"")];
    let mut e = expected(&defs, &[], from, to);
    leaderless::apply(&mut e, &defs, &[]);
    assert!(no_leader(&e).is_empty());
    leaderless::apply(&mut e, &defs, &terms[..1]);
    assert!(no_leader(&e).is_empty(), "no term began after the outage");
    assert_eq!(
        leaderless::next_start(&terms, t("2026-03-01T10:00:12Z")),
        None,
        "the last renewal is inside the term"
    );
    assert_eq!(
        leaderless::next_start(&terms, t("2026-03-01T10:00:13Z")),
        Some(t("2026-03-01T10:00:45.500Z"))
    );
    // Before the first term ever (epoch 1) no leader had seen the job: nothing caught up.
    let first = [term(1, "10:00:45.500", "10:01:30")];
    let defs = [file("schedule = \"@every 10s\"\ncatchup = \"all\"")];
    let mut e = expected(&defs, &[], from, to);
    leaderless::apply(&mut e, &defs, &first);
    assert_eq!(
        no_leader(&e),
        ["10:00:00", "10:00:10", "10:00:20", "10:00:30", "10:00:40"]
    );
}

#[test]
fn an_occurrence_left_by_catchup_counts_as_no_leader_unless_it_ran() {
    let name = JobName::new("j").unwrap();
    let (from, to) = (t("2026-03-01T10:00:00Z"), t("2026-03-01T10:01:00Z"));
    let terms = [
        term(1, "09:00:00", "10:00:12"),
        term(2, "10:00:45.500", "10:01:30"),
    ];
    let defs = [file("schedule = \"@every 10s\"\ncatchup = \"latest\"")];
    let mut e = expected(&defs, &[], from, to);
    leaderless::apply(&mut e, &defs, &terms);
    let key = |at: &str| OccurrenceKey::scheduled(name.clone(), t(at));
    let mut runs = Vec::new();
    for at in [
        "2026-03-01T10:00:00Z",
        "2026-03-01T10:00:10Z",
        // The dying leader published 10:00:20 after its last renewal.
        "2026-03-01T10:00:20Z",
        // The catch-up of the next term.
        "2026-03-01T10:00:40Z",
        "2026-03-01T10:00:50Z",
        "2026-03-01T10:01:00Z",
    ] {
        runs.push(run(&key(at), 1, Outcome::Succeeded));
    }
    let a = account(
        &name,
        &e,
        &by_key(runs),
        &HashMap::new(),
        (from, to),
        DEFAULT_GRACE,
        t("2026-03-01T11:00:00Z"),
    );
    assert!(a.gaps.is_empty(), "{:?}", a.gaps);
    assert_eq!((a.expected, a.no_leader), (6, 1), "10:00:30 left by latest");
    assert_eq!(a.catchup, Some(Catchup::Latest));
    assert_eq!(a.count(Outcome::Succeeded), 6);
    // Without the terms 10:00:30 is a gap.
    let plain = expected(&defs, &[], from, to);
    let runs = by_key(
        [
            "10:00:00", "10:00:10", "10:00:20", "10:00:40", "10:00:50", "10:01:00",
        ]
        .map(|hms| run(&key(&format!("2026-03-01T{hms}Z")), 1, Outcome::Succeeded)),
    );
    let a = account(
        &name,
        &plain,
        &runs,
        &HashMap::new(),
        (from, to),
        DEFAULT_GRACE,
        t("2026-03-01T11:00:00Z"),
    );
    assert_eq!(a.gaps, [(key("2026-03-01T10:00:30Z"), Gap::NeverPublished)]);
    assert_eq!(a.no_leader, 0);
}
