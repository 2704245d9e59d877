//! The soak's checker, from what an operator sees only: the handlers' log, `cronq runs
//! --json` and `cronq dlq list --json`.
//!
//! Every occurrence the schedules produced in the window (less the paused stretches), and
//! every other key the run log shows (triggers, ticks just outside the window), has
//! exactly one terminal outcome; none succeeded twice; an always-failing occurrence that
//! ran ended `failed` and is in the dead-letter queue exactly once, as is every failed
//! one, and nothing else is there (`cronq dlq list` folds the copies a consumer killed
//! between dead-lettering and acking leaves: one dead run, listed once, its copies counted
//! apart, see docs/reliability.md); every attempt the handlers' log shows twice follows a
//! consumer killed or frozen (or, counted apart, a dropped connection) between the two.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::faults::Event;
use super::{Kind, cronq, every, jobs, kind_of_key};
use crate::support::TestEnv;
use crate::support::ha::Ha;
use crate::support::history::key_at;

/// The occurrences the schedules must have produced.
pub struct Window {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Each pause: the job, when paused, when resumed.
    pub paused: Vec<(String, DateTime<Utc>, DateTime<Utc>)>,
}

/// One line of the handlers' log.
#[derive(Debug, Clone)]
pub struct Line {
    pub key: String,
    pub attempt: u32,
    pub start_ms: i64,
    pub ok: bool,
}

/// The lines of the handlers' log so far.
pub fn handler_lines(env: &TestEnv) -> Vec<Line> {
    std::fs::read_to_string(env.dir.join("handlers.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 5 {
                return None;
            }
            Some(Line {
                key: f[0].to_owned(),
                attempt: f[1].parse().ok()?,
                start_ms: f[2].parse().ok()?,
                ok: f[4] == "ok",
            })
        })
        .collect()
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub expected: usize,
    pub succeeded_once: usize,
    pub failed_dlq: usize,
    pub skipped: usize,
    pub cancelled: usize,
    pub missed: usize,
    /// Expected occurrences the run log does not show at all.
    pub lost: usize,
    /// Occurrences with runs but no terminal outcome yet.
    pub open: usize,
    pub succeeded_twice: usize,
    /// Dead runs the dead-letter queue holds more than one letter of (listed once).
    pub dead_letter_copies: usize,
    pub reruns_after_kills: usize,
    pub reruns_after_connections: usize,
    pub attempts: usize,
    pub problems: Vec<String>,
}

fn cli(env: &TestEnv, ha: Option<&Ha>, args: &[&str]) -> Value {
    let out = cronq(env, ha)
        .arg("--config")
        .arg(env.dir.join("cronq.toml"))
        .args(args)
        .output()
        .expect("run cronq");
    assert!(
        out.status.success(),
        "cronq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

/// Checks everything, reading the harness `ha` if given; see the module docs.
pub fn check(env: &TestEnv, ha: Option<&Ha>, window: &Window, events: &[Event]) -> Report {
    let mut r = Report::default();
    let runs = cli(env, ha, &["runs", "--json", "--limit", "1000000"]);
    let runs = runs["runs"].as_array().cloned().unwrap_or_default();
    let letters = cli(env, ha, &["dlq", "list", "--json"]);
    let letters = letters["letters"].as_array().cloned().unwrap_or_default();
    r.attempts = runs.len();

    let mut outcomes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for run in &runs {
        let key = run["key"].as_str().unwrap_or_default().to_owned();
        let outcome = run["outcome"].as_str().unwrap_or_default().to_owned();
        outcomes.entry(key).or_default().push(outcome);
    }
    let mut in_dlq: BTreeMap<String, usize> = BTreeMap::new();
    for l in &letters {
        let key = l["key"].as_str().unwrap_or("(no key)").to_owned();
        *in_dlq.entry(key).or_insert(0) += 1;
        if l["copies"].as_u64().unwrap_or(1) > 1 {
            r.dead_letter_copies += 1;
        }
    }

    // The schedules' occurrences in the window, less the paused stretches (with a margin
    // for when the leader saw the pause and the resume).
    let mut expected: BTreeSet<String> = BTreeSet::new();
    for job in jobs() {
        let step = every(job).expect("a job of the soak");
        let first = (window.from.timestamp() / step + 1) * step;
        for t in (first..=window.to.timestamp()).step_by(step as usize) {
            let paused = window.paused.iter().any(|(j, from, to)| {
                j == job && t >= from.timestamp() - 2 && t <= to.timestamp() + 3
            });
            if !paused {
                expected.insert(key_at(job, t));
            }
        }
    }
    let mut keys = expected.clone();
    keys.extend(outcomes.keys().cloned());
    r.expected = keys.len();

    const TERMINAL: [&str; 5] = ["succeeded", "failed", "skipped", "cancelled", "missed"];
    for key in &keys {
        let Some(all) = outcomes.get(key) else {
            r.lost += 1;
            r.problems.push(format!("{key}: lost (no run, no outcome)"));
            continue;
        };
        let terminal: Vec<&String> = all
            .iter()
            .filter(|o| TERMINAL.contains(&o.as_str()))
            .collect();
        let successes = terminal.iter().filter(|o| *o == &"succeeded").count();
        match terminal.as_slice() {
            [] => {
                r.open += 1;
                r.problems
                    .push(format!("{key}: no terminal outcome: {all:?}"));
            }
            [one] => match one.as_str() {
                "succeeded" => r.succeeded_once += 1,
                "failed" => {
                    r.failed_dlq += 1;
                    let n = in_dlq.get(key).copied().unwrap_or(0);
                    if n != 1 {
                        r.problems
                            .push(format!("{key}: failed, {n} times in the dead-letter queue"));
                    }
                }
                "skipped" => r.skipped += 1,
                "cancelled" => r.cancelled += 1,
                _ => r.missed += 1,
            },
            _ if successes >= 2 => {
                r.succeeded_twice += 1;
                r.problems
                    .push(format!("{key}: succeeded {successes} times: {all:?}"));
            }
            _ => r.problems.push(format!(
                "{key}: {} terminal outcomes: {all:?}",
                terminal.len()
            )),
        }
        if kind_of_key(key) == Kind::Failing
            && terminal.len() == 1
            && !["failed", "skipped", "missed"].contains(&terminal[0].as_str())
        {
            r.problems
                .push(format!("{key}: always failing, yet ended {}", terminal[0]));
        }
    }
    for (key, n) in &in_dlq {
        let failed = outcomes
            .get(key)
            .is_some_and(|all| all.iter().any(|o| o == "failed"));
        if !failed {
            r.problems.push(format!(
                "{key}: {n} times in the dead-letter queue without a failed outcome"
            ));
        }
    }

    // Attempts the handlers ran more than once, and keys they ran to success twice: each
    // must follow a fault between the first start and the next.
    let lines = handler_lines(env);
    let mut runs_of: BTreeMap<(String, u32), Vec<i64>> = BTreeMap::new();
    let mut oks: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for l in &lines {
        runs_of
            .entry((l.key.clone(), l.attempt))
            .or_default()
            .push(l.start_ms);
        if l.ok {
            oks.entry(l.key.clone()).or_default().push(l.start_ms);
        }
    }
    let explain = |first: i64, next: i64| -> Option<&'static str> {
        let between = |e: &&Event| {
            let at = e.at.timestamp_millis();
            at >= first - 1000 && at <= next + 1000
        };
        let faults: Vec<&Event> = events.iter().filter(between).collect();
        if faults.iter().any(|e| e.kind != "connections") {
            Some("kill")
        } else if !faults.is_empty() {
            Some("connections")
        } else {
            None
        }
    };
    for ((key, attempt), mut starts) in runs_of {
        starts.sort_unstable();
        for pair in starts.windows(2) {
            match explain(pair[0], pair[1]) {
                Some("kill") => r.reruns_after_kills += 1,
                Some(_) => r.reruns_after_connections += 1,
                None => r.problems.push(format!(
                    "{key} attempt {attempt}: ran again at {} ms after {} ms with no fault between",
                    pair[1], pair[0]
                )),
            }
        }
    }
    for (key, mut starts) in oks {
        // Two handler successes of one key under different attempt numbers (a success
        // the run log did not get, then a retry): also at-least-once, also explained.
        let attempts: BTreeSet<u32> = lines
            .iter()
            .filter(|l| l.key == key && l.ok)
            .map(|l| l.attempt)
            .collect();
        if attempts.len() < 2 {
            continue;
        }
        starts.sort_unstable();
        for pair in starts.windows(2) {
            if explain(pair[0], pair[1]).is_none() {
                r.problems.push(format!(
                    "{key}: succeeded in the handler at {} ms and again at {} ms with no fault between",
                    pair[0], pair[1]
                ));
            }
        }
    }
    r
}

impl Report {
    /// The table of docs/reliability.md.
    pub fn table(
        &self,
        seed: u64,
        secs: u64,
        ha: bool,
        faults: &BTreeMap<&'static str, usize>,
    ) -> String {
        let mut out = String::new();
        let on = if ha {
            "the HA harness (3 RabbitMQ nodes, Redis with Sentinel)"
        } else {
            "the local RabbitMQ and Redis"
        };
        let _ = writeln!(out, "chaos soak: seed {seed}, {secs} s of faults, on {on}");
        let _ = writeln!(out, "| fault injected | count |\n| --- | ---: |");
        for (name, n) in faults {
            let _ = writeln!(out, "| {name} | {n} |");
        }
        let _ = writeln!(out, "\n| measure | value |\n| --- | ---: |");
        for (name, value) in [
            ("occurrences expected", self.expected),
            ("succeeded once", self.succeeded_once),
            ("failed, in the dead-letter queue", self.failed_dlq),
            (
                "of which left twice by a killed consumer, listed once",
                self.dead_letter_copies,
            ),
            ("skipped", self.skipped),
            ("cancelled", self.cancelled),
            ("missed", self.missed),
            ("lost (must be 0)", self.lost),
            ("succeeded twice (must be 0)", self.succeeded_twice),
            ("attempts recorded", self.attempts),
            (
                "re-runs after a consumer killed, frozen or cut from Redis",
                self.reruns_after_kills,
            ),
            (
                "re-runs after dropped connections",
                self.reruns_after_connections,
            ),
            ("problems (must be 0)", self.problems.len()),
        ] {
            let _ = writeln!(out, "| {name} | {value} |");
        }
        out
    }
}
