//! What became of each occurrence, read from outside the processes: the run history in
//! Redis or in a standalone's data file, an in-memory standalone's JSON log (its history
//! lives in its memory, which no other process can reach), the keys producers logged as
//! published (and why: schedule, catch-up, …), and the trace a job's command writes
//! (`start KEY MS`, `end KEY MS`, `term KEY MS`). Plus the checks every overlap and
//! crash test makes: each occurrence of the window has exactly one terminal outcome, and
//! none succeeded twice.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};
use cronq_shared::runlog::{Outcome, Run};

/// The outcomes after which nothing more happens to an occurrence.
pub const TERMINAL: [Outcome; 5] = [
    Outcome::Succeeded,
    Outcome::Failed,
    Outcome::Skipped,
    Outcome::Cancelled,
    Outcome::Missed,
];

/// One entry of an occurrence's history: an attempt, or a settlement without running.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    /// Unknown in a standalone's log for settlements.
    pub attempt: Option<u32>,
    pub outcome: Outcome,
    pub error: Option<String>,
    /// When the attempt started (or the occurrence was settled), when known.
    pub at: Option<DateTime<Utc>>,
}

impl Entry {
    pub fn is_terminal(&self) -> bool {
        TERMINAL.contains(&self.outcome)
    }
}

/// Entries of run records (`RedisRunLog`, `cronq runs`).
pub fn from_runs(runs: &[Run]) -> Vec<Entry> {
    runs.iter()
        .map(|r| Entry {
            key: r.key.to_string(),
            attempt: Some(r.attempt),
            outcome: r.outcome,
            error: r.error.clone(),
            at: Some(r.started_at),
        })
        .collect()
}

fn field<'a>(line: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    line.get(name).and_then(serde_json::Value::as_str)
}

/// Entries of `job` in a `--log-format json` log of the consumer half (`cronq standalone`
/// logs each attempt at debug by default): `attempt succeeded`, and every line about a key
/// that names an `outcome` (an attempt that did not succeed, an occurrence not run).
pub fn from_json_log(log: &str, job: &str) -> Vec<Entry> {
    super::json_log::lines(log)
        .filter(|l| field(l, "job") == Some(job))
        .filter_map(|l| {
            let key = field(&l, "key")?.to_owned();
            let outcome = if field(&l, "message") == Some("attempt succeeded") {
                Outcome::Succeeded
            } else {
                Outcome::parse(field(&l, "outcome")?)?
            };
            let error = field(&l, "error")
                .or_else(|| field(&l, "reason"))
                .filter(|e| !e.is_empty())
                .map(str::to_owned);
            let at = field(&l, "timestamp")
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc));
            let attempt = l
                .get("attempt")
                .and_then(serde_json::Value::as_u64)
                .and_then(|a| u32::try_from(a).ok());
            Some(Entry {
                key,
                attempt,
                outcome,
                error,
                at,
            })
        })
        .collect()
}

/// Keys of `job` a producer logged as published (`cronq_producer::publisher=debug`).
pub fn published(log: &str, job: &str) -> BTreeSet<String> {
    super::json_log::lines(log)
        .filter(|l| field(l, "message") == Some("published occurrence"))
        .filter(|l| field(l, "job") == Some(job))
        .filter_map(|l| field(&l, "key").map(str::to_owned))
        .collect()
}

/// One `published occurrence` line of a producer's JSON log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub key: String,
    /// Why it was published, as the producer logs it: `Schedule`, `Catchup`, `Manual`,
    /// `Backfill`, `Replay`.
    pub trigger: String,
}

/// Every occurrence of `job` a producer logged as published, in the order of the log.
pub fn published_lines(log: &str, job: &str) -> Vec<Published> {
    super::json_log::lines(log)
        .filter(|l| field(l, "message") == Some("published occurrence"))
        .filter(|l| field(l, "job") == Some(job))
        .filter_map(|l| {
            Some(Published {
                key: field(&l, "key")?.to_owned(),
                trigger: field(&l, "trigger").unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

/// How many successful attempts each key of `runs` has (keys without one are left out).
pub fn successes(runs: &[Run]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in runs.iter().filter(|r| r.outcome == Outcome::Succeeded) {
        *out.entry(r.key.to_string()).or_insert(0) += 1;
    }
    out
}

/// What breaks "each of `expected` succeeded exactly once, and no key of `runs` succeeded
/// twice": one line per problem, empty when none.
pub fn not_once(expected: &[String], runs: &[Run]) -> Vec<String> {
    let ok = successes(runs);
    let mut out: Vec<String> = expected
        .iter()
        .filter(|k| !ok.contains_key(*k))
        .map(|k| format!("{k}: no success"))
        .collect();
    out.extend(
        ok.iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, n)| format!("{k}: {n} successes")),
    );
    out
}

/// The runs of `runs`, one line each, oldest first, for failure messages.
pub fn render_runs(runs: &[Run]) -> String {
    let mut out = String::new();
    for r in runs.iter().rev() {
        let _ = writeln!(
            out,
            "  {} attempt {} {} by {} at {}{}",
            r.key,
            r.attempt,
            r.outcome,
            r.consumer,
            r.started_at.to_rfc3339_opts(SecondsFormat::Millis, true),
            r.error
                .as_ref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    out
}

/// The scheduled instant of a key `JOB@RFC3339`, in unix seconds.
///
/// # Panics
/// When `key` is not a scheduled key.
pub fn scheduled(key: &str) -> i64 {
    scheduled_at(key).timestamp()
}

/// The scheduled instant of a key `JOB@RFC3339`.
///
/// # Panics
/// When `key` is not a scheduled key.
pub fn scheduled_at(key: &str) -> DateTime<Utc> {
    let (_, at) = key.split_once('@').expect("a key is JOB@TIME");
    DateTime::parse_from_rfc3339(at)
        .unwrap_or_else(|e| panic!("key {key}: {e}"))
        .with_timezone(&Utc)
}

/// The key of `job` scheduled at unix second `secs`.
pub fn key_at(job: &str, secs: i64) -> String {
    let at = DateTime::from_timestamp(secs, 0).expect("a time in range");
    format!("{job}@{}", at.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

/// Every tick of an `@every {every}s` job from the earliest to the latest of `keys`.
///
/// # Panics
/// When `keys` is empty.
pub fn ticks<'a>(job: &str, keys: impl IntoIterator<Item = &'a String>, every: i64) -> Vec<String> {
    let secs: BTreeSet<i64> = keys.into_iter().map(|k| scheduled(k)).collect();
    let (first, last) = (
        *secs.first().expect("at least one key"),
        *secs.last().expect("at least one key"),
    );
    (first..=last)
        .step_by(usize::try_from(every).expect("a positive interval"))
        .map(|s| key_at(job, s))
        .collect()
}

/// The part of a job's history a check can judge: every tick of an `@every {every}s` job
/// from the first to the last key a producer logged as published, and the entries of
/// those ticks only.
///
/// Why not everything: a producer stopped (SIGTERM) with a publish in flight gives up its
/// confirm (`publish given up unconfirmed`), and that message may have arrived and run all
/// the same. Such a key lies past the last logged one, where nothing is known of what was
/// published, so only the window the producers' logs fully cover is judged; inside it a
/// given-up publish was published again by the next leader, and is logged.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Every tick of the window, in order.
    pub expected: Vec<String>,
    /// The entries of those ticks.
    pub entries: Vec<Entry>,
}

/// [`Window`] of `job` from the keys `published` and the history `entries`.
///
/// # Panics
/// When `published` is empty.
pub fn window(job: &str, published: &BTreeSet<String>, every: i64, entries: &[Entry]) -> Window {
    let expected = ticks(job, published, every);
    let entries = entries
        .iter()
        .filter(|e| expected.contains(&e.key))
        .cloned()
        .collect();
    Window { expected, entries }
}

impl Window {
    /// What breaks "each tick exactly one terminal outcome" ([`problems`]).
    pub fn problems(&self) -> Vec<String> {
        problems(&self.expected, &self.entries)
    }

    /// The ticks that succeeded other than exactly once, one line each: `KEY xN`.
    pub fn not_exactly_once(&self) -> Vec<String> {
        let by_key = by_key(&self.entries);
        self.expected
            .iter()
            .filter_map(|k| {
                let n = by_key.get(k.as_str()).map_or(0, |es| {
                    es.iter()
                        .filter(|e| e.outcome == Outcome::Succeeded)
                        .count()
                });
                (n != 1).then(|| format!("{k} x{n}"))
            })
            .collect()
    }
}

/// `entries` by key, in key order.
pub fn by_key(entries: &[Entry]) -> BTreeMap<&str, Vec<&Entry>> {
    let mut out: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for e in entries {
        out.entry(e.key.as_str()).or_default().push(e);
    }
    out
}

/// What breaks "each expected key has exactly one terminal outcome, and nothing ran that
/// was not expected": one line per problem, empty when none.
pub fn problems(expected: &[String], entries: &[Entry]) -> Vec<String> {
    let by_key = by_key(entries);
    let mut out = Vec::new();
    for key in expected {
        let terminal: Vec<&&Entry> = by_key
            .get(key.as_str())
            .map(|es| es.iter().filter(|e| e.is_terminal()).collect())
            .unwrap_or_default();
        match terminal.len() {
            1 => {}
            0 => out.push(format!("{key}: no terminal outcome")),
            n => out.push(format!(
                "{key}: {n} terminal outcomes: {}",
                terminal
                    .iter()
                    .map(|e| e.outcome.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    for key in by_key.keys() {
        if !expected.iter().any(|k| k == key) {
            out.push(format!("{key}: in the history but not in the window"));
        }
    }
    out
}

/// The one terminal entry of each key (call after [`problems`] is empty).
pub fn terminal(entries: &[Entry]) -> BTreeMap<String, Entry> {
    entries
        .iter()
        .filter(|e| e.is_terminal())
        .map(|e| (e.key.clone(), e.clone()))
        .collect()
}

/// One line of a command's trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mark {
    // Declared in this order so that, at the same millisecond, an end sorts before a start.
    End,
    Term,
    Start,
}

/// A traced event: what, which key, when (unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub mark: Mark,
    pub key: String,
    pub ms: i64,
}

/// The shell a traced command runs: `start`, sleep `secs`, `end`; on SIGTERM `term` and
/// exit 143. The sleep runs in the background so the trap fires at once.
pub fn traced_script(trace: &Path, secs: &str) -> String {
    format!(
        "mark() {{ echo \"$1 $CRONQ_KEY $(date +%s%3N)\" >> '{}'; }}; \
         trap 'mark term; exit 143' TERM; mark start; sleep {secs} & wait $!; mark end",
        trace.display()
    )
}

/// What a traced command wrote.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    pub events: Vec<Event>,
}

impl Trace {
    /// Reads the trace file (empty when it does not exist yet).
    pub fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let events = text
            .lines()
            .filter_map(|l| {
                let mut parts = l.split(' ');
                let mark = match parts.next()? {
                    "start" => Mark::Start,
                    "end" => Mark::End,
                    "term" => Mark::Term,
                    _ => return None,
                };
                let key = parts.next()?.to_owned();
                let ms = parts.next()?.parse().ok()?;
                Some(Event { mark, key, ms })
            })
            .collect();
        Self { events }
    }

    /// How many times `key` got `mark`.
    pub fn count(&self, mark: Mark, key: &str) -> usize {
        self.events
            .iter()
            .filter(|e| e.mark == mark && e.key == key)
            .count()
    }

    /// When `key` first got `mark`.
    pub fn first(&self, mark: Mark, key: &str) -> Option<i64> {
        self.events
            .iter()
            .find(|e| e.mark == mark && e.key == key)
            .map(|e| e.ms)
    }

    /// Keys started more often than they ended or were stopped: still running.
    pub fn open(&self) -> Vec<String> {
        let mut balance: BTreeMap<&str, i64> = BTreeMap::new();
        for e in &self.events {
            *balance.entry(&e.key).or_default() += if e.mark == Mark::Start { 1 } else { -1 };
        }
        balance
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, _)| k.to_owned())
            .collect()
    }

    /// The most commands running at once.
    pub fn max_concurrency(&self) -> usize {
        let mut events: Vec<&Event> = self.events.iter().collect();
        events.sort_by_key(|e| (e.ms, e.mark));
        let (mut now, mut max) = (0i64, 0i64);
        for e in events {
            now += if e.mark == Mark::Start { 1 } else { -1 };
            max = max.max(now);
        }
        usize::try_from(max).unwrap_or(0)
    }

    /// Every line, for failure messages.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for e in &self.events {
            let _ = writeln!(out, "  {:?} {} {}", e.mark, e.key, e.ms);
        }
        out
    }
}

/// Each key's entries and trace events, for failure messages.
pub fn describe(expected: &[String], entries: &[Entry], trace: &Trace) -> String {
    let by_key = by_key(entries);
    let mut out = String::new();
    for key in expected {
        let outcomes: Vec<String> = by_key
            .get(key.as_str())
            .map(|es| {
                es.iter()
                    .map(|e| match &e.error {
                        Some(err) => format!("{} ({err})", e.outcome),
                        None => e.outcome.to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let marks: Vec<String> = trace
            .events
            .iter()
            .filter(|e| &e.key == key)
            .map(|e| format!("{:?}@{}", e.mark, e.ms))
            .collect();
        let _ = writeln!(
            out,
            "  {key}: [{}] trace [{}]",
            outcomes.join(", "),
            marks.join(" ")
        );
    }
    out
}
