//! Every occurrence of a window gets exactly one terminal outcome under each overlap
//! policy, plus what the policy promises.
//!
//! Overlap policies (docs/consumer.md, "Overlap") through real processes only: `cronq producer` ×2 and
//! `cronq consumer` ×2 on RabbitMQ and Redis, and `cronq standalone`. A job is scheduled
//! `@every 1s` for a window of occurrences, then publishing stops and the consumers drain;
//! then every occurrence of the window (every tick between the first and the last key
//! published, no gaps) must have exactly one terminal outcome, plus what its policy
//! promises, read from the run history and from the trace its command writes.
//!
//! Two job lengths on each side of a fleet consumer's heartbeat (`--lease 3s`: a beat a
//! second): 0.3 s, and 3 s, which is also longer than the schedule's interval, so
//! occurrences pile up. A standalone's lease is its default 30 s (a beat every 10 s): both
//! lengths are shorter than its heartbeat.
//!
//! Each behaviour is written once as a plain async fn over a [`Deployment`] and a
//! [`Length`], and run on every backend by `on_every_backend!` through a small adapter per
//! length: `::memory` on `cronq standalone --data :memory:`, `::sqlite` on `cronq
//! standalone` on a data file, `::real` on the fleet.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cronq_shared::runlog::Outcome;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::deployment::{Deployment, LEADER, Running, argv};
use crate::support::history::{self, Entry, Mark, TERMINAL, Trace};
use crate::support::{TestEnv, until};

/// The job every overlap test schedules.
const JOB: &str = "job";

/// How long processes may take to publish a window (8 s of ticks, plus start-up).
const WAIT: Duration = Duration::from_secs(20);

/// How long a window's backlog may take to settle once publishing stopped (6 queued
/// occurrences of 3 s run one after the other take 18 s).
const DRAIN: Duration = Duration::from_secs(40);

/// How soon after the replacing occurrence's scheduled time a replaced run must have got
/// SIGTERM (a long run would end 2 s after it).
const REPLACE_WITHIN_MS: i64 = 1500;

/// How long a job's command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// 0.3 s: shorter than a heartbeat and than the schedule's interval.
    Short,
    /// 3 s: longer than a fleet consumer's heartbeat and than the interval.
    Long,
}

impl Length {
    fn sleep(self) -> &'static str {
        match self {
            Self::Short => "0.3",
            Self::Long => "3",
        }
    }

    /// Occurrences published before publishing stops.
    fn window(self) -> usize {
        match self {
            Self::Short => 8,
            Self::Long => 6,
        }
    }
}

/// The config of an overlap test: one traced `@every 1s` job under `policy`.
fn config(policy: &str, length: Length, trace: &Path) -> String {
    let script = history::traced_script(trace, length.sleep());
    format!(
        "{LEADER}\n[[job]]\nname = \"{JOB}\"\nschedule = \"@every 1s\"\noverlap = \"{policy}\"\n\
         max_attempts = 1\ncatchup = \"all\"\ntimeout = \"1m\"\ncommand = {}\n",
        argv(&["sh", "-c", &script])
    )
}

/// What a window of the job ended with.
struct Window {
    /// Every key of the window, in order.
    expected: Vec<String>,
    /// The one terminal entry of each key.
    outcomes: BTreeMap<String, Entry>,
    entries: Vec<Entry>,
    trace: Trace,
    running: Running,
}

impl Window {
    fn outcome(&self, key: &str) -> Outcome {
        self.outcomes[key].outcome
    }

    /// Panics with `what`, every key's history and trace, and the processes' logs.
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\nper key:\n{}trace:\n{}{}",
            history::describe(&self.expected, &self.entries, &self.trace),
            self.trace.render(),
            self.running.logs()
        )
    }

    fn check(&self, ok: bool, what: &str) {
        if !ok {
            self.fail(what);
        }
    }

    /// `key` ran exactly once, to its natural end.
    fn ran_to_the_end(&self, key: &str) -> bool {
        self.trace.count(Mark::Start, key) == 1
            && self.trace.count(Mark::End, key) == 1
            && self.trace.count(Mark::Term, key) == 0
    }
}

/// Starts `kind` on the job under `policy`, lets it publish a window, stops publishing,
/// waits for the backlog to settle and checks that every key of the window has exactly
/// one terminal outcome and ran at most once.
async fn window(kind: Deployment, env: &TestEnv, policy: &str, length: Length) -> Window {
    let trace_path = env.dir.join("trace");
    let config = config(policy, length, &trace_path);
    window_of(kind, env, &config, length.window()).await
}

/// [`window`] of `n` occurrences of the job `config` schedules, tracing to `trace`.
async fn window_of(kind: Deployment, env: &TestEnv, config: &str, n: usize) -> Window {
    let trace_path = env.dir.join("trace");
    let running = Running::start(kind, env, config).await;
    until(WAIT, &format!("{n} occurrences published"), || async {
        let published = running.published(JOB);
        if published.len() >= n {
            Ok(())
        } else {
            Err(format!("published {published:?}\n{}", running.logs()))
        }
    })
    .await;
    running.stop_producing().await;
    let published = running.published(JOB);
    let expected = history::ticks(JOB, &published, 1);
    let gaps: Vec<&String> = expected
        .iter()
        .filter(|k| !published.contains(*k))
        .collect();
    assert!(
        gaps.is_empty(),
        "ticks never published: {gaps:?}\n{}",
        running.logs()
    );
    let (expected, entries, trace) = until(
        DRAIN,
        "every occurrence of the window to settle",
        || async {
            // Read again: a standalone may log a publish confirmed as it took the reload.
            // Only the window the producers' logs cover is judged (`history::window`).
            let history::Window { expected, entries } =
                history::window(JOB, &running.published(JOB), 1, &running.entries(JOB).await);
            let trace = Trace::read(&trace_path);
            let problems = history::problems(&expected, &entries);
            let unsettled = problems.iter().any(|p| p.ends_with("no terminal outcome"));
            let open = trace.open();
            if !unsettled && open.is_empty() {
                Ok((expected, entries, trace))
            } else {
                Err(format!(
                    "problems: {problems:#?}\nstill running: {open:?}\nper key:\n{}{}",
                    history::describe(&expected, &entries, &trace),
                    running.logs()
                ))
            }
        },
    )
    .await;
    let outcomes = history::terminal(&entries);
    let w = Window {
        expected,
        outcomes,
        entries,
        trace,
        running,
    };
    let problems = history::problems(&w.expected, &w.entries);
    w.check(
        problems.is_empty(),
        &format!("not exactly one terminal outcome each: {problems:#?}"),
    );
    let twice: Vec<&String> = w
        .expected
        .iter()
        .filter(|k| w.trace.count(Mark::Start, k) > 1)
        .collect();
    w.check(
        twice.is_empty(),
        &format!("started more than once: {twice:?}"),
    );
    if kind.is_standalone() {
        standalone_metrics_agree(&w).await;
    }
    w
}

/// The value of every `name{labels…} value` line whose labels contain all of `labels`.
fn counter(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A cross-check that does not rest on the standalone's log: its counters show as many
/// occurrences published, and as many terminal outcomes, as the window has keys.
async fn standalone_metrics_agree(w: &Window) {
    let metrics = w
        .running
        .metrics()
        .await
        .unwrap_or_else(|| w.fail("the standalone's /metrics did not answer"));
    let job = format!("job=\"{JOB}\"");
    let published = counter(&metrics, "cronq_occurrences_published_total", &[&job]);
    let terminal: f64 = TERMINAL
        .iter()
        .map(|o| {
            let outcome = format!("outcome=\"{o}\"");
            counter(&metrics, "cronq_attempts_total", &[&job, &outcome])
        })
        .sum();
    let n = w.expected.len() as f64;
    w.check(
        published == n && terminal == n,
        &format!(
            "/metrics: {published} published, {terminal} terminal outcomes, for {n} keys:\n{}",
            metrics
                .lines()
                .filter(|l| l.starts_with("cronq_attempts_total")
                    || l.starts_with("cronq_occurrences_published_total"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    );
}

/// `allow`: every occurrence runs, to its end, and long ones run side by side.
async fn allow_runs_every_occurrence(kind: Deployment, env: TestEnv, length: Length) {
    let w = window(kind, &env, "allow", length).await;
    for key in &w.expected {
        w.check(
            w.outcome(key) == Outcome::Succeeded && w.ran_to_the_end(key),
            &format!("{key} did not run to a success"),
        );
    }
    if length == Length::Long {
        w.check(
            w.trace.max_concurrency() >= 2,
            "3 s runs every second never overlapped",
        );
    }
}

on_every_backend!(allow_short, "ovl-allow-short", flavor = "multi_thread");

async fn allow_short(backend: Backend, env: TestEnv) {
    allow_runs_every_occurrence(Deployment::on(backend), env, Length::Short).await;
}

on_every_backend!(allow_long, "ovl-allow-long", flavor = "multi_thread");

async fn allow_long(backend: Backend, env: TestEnv) {
    allow_runs_every_occurrence(Deployment::on(backend), env, Length::Long).await;
}

/// `skip`: never two at once; an occurrence due while another runs is `skipped` and never
/// started.
async fn skip_never_runs_two_at_once(kind: Deployment, env: TestEnv, length: Length) {
    let w = window(kind, &env, "skip", length).await;
    w.check(w.trace.max_concurrency() <= 1, "two runs overlapped");
    for key in &w.expected {
        let ok = match w.outcome(key) {
            Outcome::Succeeded => w.ran_to_the_end(key),
            Outcome::Skipped => w.trace.count(Mark::Start, key) == 0,
            _ => false,
        };
        w.check(ok, &format!("{key}: neither a full run nor a skip"));
    }
    let count = |o: Outcome| w.expected.iter().filter(|k| w.outcome(k) == o).count();
    w.check(count(Outcome::Succeeded) >= 1, "nothing ran");
    if length == Length::Long {
        w.check(
            count(Outcome::Skipped) >= 1,
            "3 s runs every second, and none was skipped",
        );
    }
}

on_every_backend!(skip_short, "ovl-skip-short", flavor = "multi_thread");

async fn skip_short(backend: Backend, env: TestEnv) {
    skip_never_runs_two_at_once(Deployment::on(backend), env, Length::Short).await;
}

on_every_backend!(skip_long, "ovl-skip-long", flavor = "multi_thread");

async fn skip_long(backend: Backend, env: TestEnv) {
    skip_never_runs_two_at_once(Deployment::on(backend), env, Length::Long).await;
}

/// `skip` with a retry: the first occurrence to run fails its attempt 1 at once; its retry
/// comes back (backoff 2 s) while the next occurrence runs (3 s). It is not skipped for
/// that later one: it waits, runs when the later one ends, and succeeds; never two at once.
async fn skip_retry_waits_for_a_later_occurrence(kind: Deployment, env: TestEnv) {
    let trace_path = env.dir.join("trace");
    let failed = env.dir.join("failed");
    let script = format!(
        "if [ \"$CRONQ_ATTEMPT\" = 1 ] && mkdir '{dir}' 2>/dev/null; then \
         echo \"$CRONQ_KEY\" > '{dir}/key'; exit 1; fi; {traced}",
        dir = failed.display(),
        traced = history::traced_script(&trace_path, Length::Long.sleep()),
    );
    let config = format!(
        "{LEADER}\n[[job]]\nname = \"{JOB}\"\nschedule = \"@every 1s\"\noverlap = \"skip\"\n\
         max_attempts = 2\nbackoff = \"2s\"\ncatchup = \"all\"\ntimeout = \"1m\"\ncommand = {}\n",
        argv(&["sh", "-c", &script])
    );
    let w = window_of(kind, &env, &config, Length::Long.window()).await;
    w.check(w.trace.max_concurrency() <= 1, "two runs overlapped");
    let retried = std::fs::read_to_string(failed.join("key"))
        .unwrap_or_else(|_| w.fail("no attempt failed"))
        .trim()
        .to_owned();
    let attempts: Vec<(Option<u32>, Outcome)> = w
        .entries
        .iter()
        .filter(|e| e.key == retried)
        .map(|e| (e.attempt, e.outcome))
        .collect();
    w.check(
        w.outcome(&retried) == Outcome::Succeeded && w.ran_to_the_end(&retried),
        &format!("{retried}, retried, did not run to a success: {attempts:?}"),
    );
    // The case under test happened: a later occurrence started before the retry did.
    let retry_start = w.trace.first(Mark::Start, &retried).unwrap_or(i64::MAX);
    let overtaken = w.expected.iter().any(|k| {
        history::scheduled(k) > history::scheduled(&retried)
            && w.trace
                .first(Mark::Start, k)
                .is_some_and(|at| at < retry_start)
    });
    w.check(
        overtaken,
        &format!("no later occurrence ran before {retried}'s retry"),
    );
    for key in w.expected.iter().filter(|k| **k != retried) {
        let ok = match w.outcome(key) {
            Outcome::Succeeded => w.ran_to_the_end(key),
            Outcome::Skipped => w.trace.count(Mark::Start, key) == 0,
            _ => false,
        };
        w.check(ok, &format!("{key}: neither a full run nor a skip"));
    }
}

on_every_backend!(skip_retry, "ovl-skip-retry", flavor = "multi_thread");

async fn skip_retry(backend: Backend, env: TestEnv) {
    skip_retry_waits_for_a_later_occurrence(Deployment::on(backend), env).await;
}
/// `queue`: never two at once, and every occurrence runs to a success in turn; long ones
/// wait for the one before.
async fn queue_runs_each_in_turn(kind: Deployment, env: TestEnv, length: Length) {
    let w = window(kind, &env, "queue", length).await;
    w.check(w.trace.max_concurrency() <= 1, "two runs overlapped");
    for key in &w.expected {
        w.check(
            w.outcome(key) == Outcome::Succeeded && w.ran_to_the_end(key),
            &format!("{key} did not run to a success"),
        );
    }
    if length == Length::Long {
        let waited = w.expected.iter().any(|k| {
            w.trace
                .first(Mark::Start, k)
                .is_some_and(|ms| ms - history::scheduled(k) * 1000 >= 2000)
        });
        w.check(waited, "no occurrence was held back behind a running one");
    }
}

on_every_backend!(queue_short, "ovl-queue-short", flavor = "multi_thread");

async fn queue_short(backend: Backend, env: TestEnv) {
    queue_runs_each_in_turn(Deployment::on(backend), env, Length::Short).await;
}

on_every_backend!(queue_long, "ovl-queue-long", flavor = "multi_thread");

async fn queue_long(backend: Backend, env: TestEnv) {
    queue_runs_each_in_turn(Deployment::on(backend), env, Length::Long).await;
}

/// `replace`: the newest occurrence of the window succeeds; every other one that did not
/// succeed is `cancelled`, its error `replaced by KEY` naming a later occurrence, and if
/// it was running it got SIGTERM before its natural end (no `end` in the trace), within
/// [`REPLACE_WITHIN_MS`] of KEY's scheduled time. Long runs are all replaced but the last.
async fn replace_cancels_the_running_one(kind: Deployment, env: TestEnv, length: Length) {
    let w = window(kind, &env, "replace", length).await;
    let last = w.expected.last().expect("a window has keys");
    w.check(
        w.outcome(last) == Outcome::Succeeded && w.ran_to_the_end(last),
        &format!("the newest occurrence {last} did not run to a success"),
    );
    let mut stopped_while_running = 0;
    for key in &w.expected[..w.expected.len() - 1] {
        let entry = &w.outcomes[key];
        match entry.outcome {
            Outcome::Succeeded if length == Length::Short => {
                w.check(
                    w.ran_to_the_end(key),
                    &format!("{key} did not run to its end"),
                );
            }
            Outcome::Cancelled => {
                let by = entry
                    .error
                    .as_deref()
                    .and_then(|e| e.strip_prefix("replaced by "))
                    .unwrap_or_else(|| {
                        w.fail(&format!("{key}: cancelled without `replaced by KEY`"))
                    });
                w.check(
                    w.expected.iter().any(|k| k == by)
                        && history::scheduled(by) > history::scheduled(key),
                    &format!("{key}: replaced by {by:?}, not a later occurrence of the window"),
                );
                if w.trace.count(Mark::Start, key) > 0 {
                    w.check(
                        w.trace.count(Mark::Term, key) == 1 && w.trace.count(Mark::End, key) == 0,
                        &format!(
                            "{key} was replaced while running, but was not stopped before its end"
                        ),
                    );
                    // Loose: "within about a second" of the replacing occurrence's time.
                    let late = w.trace.first(Mark::Term, key).unwrap_or(i64::MAX)
                        - history::scheduled(by) * 1000;
                    w.check(
                        late <= REPLACE_WITHIN_MS,
                        &format!("{key} was stopped {late} ms after {by} was due"),
                    );
                    stopped_while_running += 1;
                }
            }
            other => w.fail(&format!("{key}: {other} under replace")),
        }
    }
    if length == Length::Long {
        w.check(
            stopped_while_running >= 1,
            "no running occurrence was stopped by a newer one",
        );
    }
}

on_every_backend!(replace_short, "ovl-replace-short", flavor = "multi_thread");

async fn replace_short(backend: Backend, env: TestEnv) {
    replace_cancels_the_running_one(Deployment::on(backend), env, Length::Short).await;
}

on_every_backend!(replace_long, "ovl-replace-long", flavor = "multi_thread");

async fn replace_long(backend: Backend, env: TestEnv) {
    replace_cancels_the_running_one(Deployment::on(backend), env, Length::Long).await;
}
