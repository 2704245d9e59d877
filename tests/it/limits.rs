//! Concurrency limits through real processes: `cronq producer` ×2 and `cronq consumer` ×2
//! on RabbitMQ and Redis, and `cronq standalone` (on a data file, and in memory).
//!
//! - A pool of 2 shared by three `@every 1s` jobs whose runs take 1 s (3 runs a second
//!   asked, 2 at a time allowed): never 3 at once, computed from the commands' own start
//!   and end times, the limit reached, and every occurrence ends exactly once, run once.
//! - `max_concurrent = 3` with `queue` on a job whose runs take 4 s: never 4 at once, the
//!   limit reached, every occurrence ends exactly once, run once.
//! - A fleet consumer killed (-9) while it holds the only slot of a pool: the waiting run
//!   does not start while the killed one's lease lasts, and does start after it; before
//!   the kill, `cronq jobs`, the dashboard (API and job page) and the leader's `/metrics`
//!   show the pool's run and waiter.
//! - A run waiting for a pool past its `deadline` ends `missed` and never starts (fleet,
//!   and a standalone on a data file).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::State;
use cronq_shared::runlog::Outcome;
use nix::sys::signal::Signal;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::deployment::{Deployment, LEADER, Options, Running, argv};
use crate::support::history::{self, Entry, Mark, Trace};
use crate::support::inspect::Inspect;
use crate::support::{TestEnv, eventually, ports, until};

/// How long processes may take to publish a window.
const WAIT: Duration = Duration::from_secs(30);

/// How long a window's backlog may take to settle once publishing stopped.
const DRAIN: Duration = Duration::from_secs(60);

/// How many occurrences of each job are published before publishing stops.
const WINDOW: usize = 6;

/// One traced `@every 1s` job running `secs`, with `extra` fields.
fn job(name: &str, trace: &Path, secs: &str, extra: &str) -> String {
    let script = history::traced_script(trace, secs);
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"@every 1s\"\nmax_attempts = 1\ncatchup = \"all\"\n\
         timeout = \"1m\"\n{extra}command = {}\n",
        argv(&["sh", "-c", &script])
    )
}

/// What the jobs' windows ended with.
struct Windows {
    expected: Vec<String>,
    entries: Vec<Entry>,
    trace: Trace,
    running: Running,
}

impl Windows {
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\nper key:\n{}trace:\n{}{}",
            history::describe(&self.expected, &self.entries, &self.trace),
            self.trace.render(),
            self.running.logs()
        )
    }
}

/// Starts `kind` on `config`, lets every job of `jobs` publish [`WINDOW`] occurrences,
/// stops publishing, waits for the backlog to settle and checks that every occurrence of
/// every job's window has exactly one terminal outcome, a success, and ran once.
async fn windows(kind: Deployment, env: &TestEnv, config: &str, jobs: &[&str]) -> Windows {
    let trace_path = env.dir.join("trace");
    let running = Running::start(kind, env, config).await;
    until(WAIT, "a window of every job published", || async {
        let short: Vec<&str> = jobs
            .iter()
            .copied()
            .filter(|j| running.published(j).len() < WINDOW)
            .collect();
        if short.is_empty() {
            Ok(())
        } else {
            Err(format!("not yet: {short:?}\n{}", running.logs()))
        }
    })
    .await;
    running.stop_producing().await;
    let (expected, entries, trace) = until(DRAIN, "every occurrence to settle", || async {
        let (mut expected, mut entries) = (Vec::new(), Vec::new());
        for job in jobs {
            let w = history::window(job, &running.published(job), 1, &running.entries(job).await);
            expected.extend(w.expected);
            entries.extend(w.entries);
        }
        let trace = Trace::read(&trace_path);
        let problems = history::problems(&expected, &entries);
        let open = trace.open();
        if problems.is_empty() && open.is_empty() {
            Ok((expected, entries, trace))
        } else {
            Err(format!(
                "problems: {problems:#?}\nstill running: {open:?}\nper key:\n{}{}",
                history::describe(&expected, &entries, &trace),
                running.logs()
            ))
        }
    })
    .await;
    let w = Windows {
        expected,
        entries,
        trace,
        running,
    };
    for (key, e) in history::terminal(&w.entries) {
        if e.outcome != Outcome::Succeeded {
            w.fail(&format!("{key} ended {}, not succeeded", e.outcome));
        }
        if w.trace.count(Mark::Start, &key) != 1 || w.trace.count(Mark::End, &key) != 1 {
            w.fail(&format!("{key} did not run exactly once to its end"));
        }
    }
    w
}

/// A pool of 2 shared by three jobs never has 3 runs at once, and has 2.
async fn pool_of_two(backend: Backend, env: TestEnv) {
    let trace = env.dir.join("trace");
    let pooled = "pool = \"two\"\noverlap = \"allow\"\n";
    let config = format!(
        "{LEADER}\n[pools.two]\nsize = 2\n{}{}{}",
        job("pa", &trace, "1", pooled),
        job("pb", &trace, "1", pooled),
        job("pc", &trace, "1", pooled),
    );
    let kind = Deployment::on(backend);
    let w = windows(kind, &env, &config, &["pa", "pb", "pc"]).await;
    let most = w.trace.max_concurrency();
    eprintln!(
        "{}: {} occurrences, at most {most} at once",
        kind.label(),
        w.expected.len()
    );
    if most != 2 {
        w.fail(&format!(
            "at most {most} runs at once, expected the pool's 2"
        ));
    }
}

on_every_backend!(pool_of_two, "limits_pool", flavor = "multi_thread");

/// `max_concurrent = 3` with `queue`: never 4 runs of the job at once, and 3.
async fn max_concurrent_queue(backend: Backend, env: TestEnv) {
    let trace = env.dir.join("trace");
    let config = format!(
        "{LEADER}\n{}",
        job(
            "mc",
            &trace,
            "4",
            "overlap = \"queue\"\nmax_concurrent = 3\n"
        )
    );
    let kind = Deployment::on(backend);
    let w = windows(kind, &env, &config, &["mc"]).await;
    let most = w.trace.max_concurrency();
    eprintln!(
        "{}: {} occurrences, at most {most} at once",
        kind.label(),
        w.expected.len()
    );
    if most != 3 {
        w.fail(&format!(
            "at most {most} runs at once, expected max_concurrent 3"
        ));
    }
}

on_every_backend!(max_concurrent_queue, "limits_mc", flavor = "multi_thread");

/// The pool-slot test's trace: "start KEY MS PPID" lines.
fn starts(path: &Path) -> Vec<(String, i64, u32)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.split(' ');
            (parts.next()? == "start").then_some(())?;
            let key = parts.next()?.to_owned();
            let ms = parts.next()?.parse().ok()?;
            let ppid = parts.next()?.parse().ok()?;
            Some((key, ms, ppid))
        })
        .collect()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A consumer killed (-9) while holding the only slot of a pool frees it after its lease:
/// not before (the waiting run has not started a second after the kill, the lease being 3 s
/// with a heartbeat a second), and after (it starts, no sooner than two seconds after the
/// kill). The killed run is run again (at-least-once); both end succeeded.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_consumer_frees_its_pool_slot_after_its_lease() {
    crate::support::scoped("limits_kill", |env| async move {
        let trace = env.dir.join("starts");
        let marker = env.dir.join("marker");
        // `hold` sleeps a minute the first time, and ends at once when run again.
        let hold = format!(
            "echo \"start $CRONQ_KEY $(date +%s%3N) $PPID\" >> '{}'; \
             if [ -e '{m}' ]; then exit 0; fi; touch '{m}'; exec sleep 60",
            trace.display(),
            m = marker.display()
        );
        let next = format!(
            "echo \"start $CRONQ_KEY $(date +%s%3N) $PPID\" >> '{}'",
            trace.display()
        );
        let config = format!(
            "{LEADER}\n[pools.one]\nsize = 1\n\
             [[job]]\nname = \"hold\"\nschedule = \"0 0 1 1 *\"\npool = \"one\"\noverlap = \"allow\"\ncommand = {}\n\
             [[job]]\nname = \"next\"\nschedule = \"0 0 1 1 *\"\npool = \"one\"\noverlap = \"allow\"\ncommand = {}\n",
            argv(&["sh", "-c", &hold]),
            argv(&["sh", "-c", &next]),
        );
        let options = Options {
            producer_admin: true,
            ..Options::default()
        };
        let running = Running::start_with(Deployment::Fleet, &env, &config, options).await;
        let ledger = ports::ledger(Backend::Real, &env).await;
        let trigger = |job: &str| running.ok(&["trigger", job]).trim().to_owned();

        let held = trigger("hold");
        let (_, _, owner) = eventually(WAIT, "hold to start", || async {
            starts(&trace).into_iter().find(|(k, _, _)| *k == held)
        })
        .await;
        assert!(
            running.consumers().contains(&owner),
            "hold runs under {owner}, not a consumer: {:?}",
            running.consumers()
        );
        let waiting = trigger("next");
        let waiting_key: OccurrenceKey = waiting.parse().unwrap();
        eventually(WAIT, "next to wait for the pool", || async {
            let state = ledger.inspect(&waiting_key).await.map(|r| r.state);
            (state == Some(State::Waiting)).then_some(())
        })
        .await;

        // What `cronq jobs` and /metrics show of the pool meanwhile.
        let jobs: serde_json::Value =
            serde_json::from_str(&running.ok(&["jobs", "--json"])).expect("jobs --json");
        assert_eq!(
            jobs["pools"],
            serde_json::json!([{
                "pool": "one", "size": 1, "running": [held], "waiting": 1, "next": [waiting],
            }]),
            "{jobs}"
        );
        let hold_row = jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job"] == "hold")
            .unwrap();
        assert_eq!(hold_row["pool"], "one");
        let table = running.ok(&["jobs"]);
        assert!(
            table.contains("pool one 1/1 running, 1 waiting"),
            "{table}"
        );
        // The dashboard: the JSON API and the job page.
        let cfg = running.config_path().to_string_lossy().into_owned();
        let d = crate::support::dashboard::start(
            &env,
            "dashboard",
            &["dashboard", "--config", &cfg],
            "--addr",
            false,
        )
        .await;
        assert_eq!(
            d.json("/api/v1/pools").await["pools"],
            jobs["pools"],
            "the API shows what cronq jobs shows"
        );
        let page = crate::support::dashboard::text(&d.url("/jobs/next")).await;
        assert!(
            page.contains("pool one 1/1 running, 1 waiting") && page.contains(&waiting),
            "{page}"
        );
        eventually(WAIT, "the leader's /metrics to show the pool", || async {
            let metrics = running.metrics().await?;
            let shown = |line: &str| metrics.lines().any(|l| l == line);
            (shown("cronq_pool_size{pool=\"one\"} 1")
                && shown("cronq_pool_running{pool=\"one\"} 1")
                && shown("cronq_pool_waiting{pool=\"one\"} 1"))
            .then_some(())
        })
        .await;

        env.signal(owner, Signal::SIGKILL);
        let killed = Instant::now();
        let killed_ms = now_ms();

        // Inside the lease: still held.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let started: BTreeSet<String> = starts(&trace).into_iter().map(|s| s.0).collect();
        assert!(
            !started.contains(&waiting),
            "next started inside the killed consumer's lease:\n{}",
            running.logs()
        );
        assert_eq!(
            ledger.inspect(&waiting_key).await.map(|r| r.state),
            Some(State::Waiting)
        );
        assert!(killed.elapsed() < Duration::from_millis(1900), "checked in time");

        // After it: the slot is free, and the waiting run starts.
        let (_, at, by) = eventually(WAIT, "next to start after the lease", || async {
            starts(&trace).into_iter().find(|(k, _, _)| *k == waiting)
        })
        .await;
        eprintln!(
            "next started {} ms after the kill, under {by}",
            at - killed_ms
        );
        assert!(
            at - killed_ms >= 1900,
            "next started {} ms after the kill, inside the lease",
            at - killed_ms
        );
        assert_ne!(by, owner);
        for key in [&held, &waiting] {
            let job = key.split('@').next().unwrap();
            eventually(WAIT, &format!("{key} to succeed"), || async {
                let entries = running.entries(job).await;
                let ok = entries
                    .iter()
                    .filter(|e| e.key == *key && e.outcome == Outcome::Succeeded)
                    .count();
                (ok == 1).then_some(())
            })
            .await;
        }
    })
    .await;
}

/// A run waiting for a pool honours its job's `deadline`: behind a long run in a pool of
/// one, it ends `missed` (once), never starts, and the long run ends `succeeded`.
async fn a_waiting_run_misses_its_deadline(kind: Deployment, env: TestEnv) {
    let trace = env.dir.join("trace");
    let config = format!(
        "{LEADER}\n[pools.one]\nsize = 1\n\
         [[job]]\nname = \"long\"\nschedule = \"0 0 1 1 *\"\npool = \"one\"\noverlap = \"allow\"\ncommand = {}\n\
         [[job]]\nname = \"late\"\nschedule = \"0 0 1 1 *\"\npool = \"one\"\noverlap = \"allow\"\ndeadline = \"2s\"\ncommand = {}\n",
        argv(&["sh", "-c", &history::traced_script(&trace, "6")]),
        argv(&["sh", "-c", &history::traced_script(&trace, "0")]),
    );
    let running = Running::start(kind, &env, &config).await;
    if let Some(file) = running.data_file() {
        let file = file.to_owned();
        eventually(WAIT, "the standalone to create its data file", || async {
            file.exists().then_some(())
        })
        .await;
    }
    let long = running.ok(&["trigger", "long"]).trim().to_owned();
    eventually(WAIT, "long to start", || async {
        (Trace::read(&trace).count(Mark::Start, &long) == 1).then_some(())
    })
    .await;
    let late = running.ok(&["trigger", "late"]).trim().to_owned();
    let ended = eventually(WAIT, "late to end", || async {
        let entries = running.entries("late").await;
        let terminal: Vec<Entry> = entries
            .into_iter()
            .filter(|e| e.key == late && e.is_terminal())
            .collect();
        (!terminal.is_empty()).then_some(terminal)
    })
    .await;
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].outcome, Outcome::Missed, "{ended:?}");
    assert!(
        ended[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("could not start before its deadline"),
        "{ended:?}"
    );
    eventually(WAIT, "long to succeed", || async {
        let entries = running.entries("long").await;
        entries
            .iter()
            .any(|e| e.key == long && e.outcome == Outcome::Succeeded)
            .then_some(())
    })
    .await;
    assert_eq!(
        Trace::read(&trace).count(Mark::Start, &late),
        0,
        "the late run never started"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_run_misses_its_deadline_on_a_fleet() {
    crate::support::scoped("limits_deadline_fleet", |env| async move {
        a_waiting_run_misses_its_deadline(Deployment::Fleet, env).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_run_misses_its_deadline_on_a_data_file() {
    crate::support::scoped("limits_deadline_file", |env| async move {
        a_waiting_run_misses_its_deadline(
            Deployment::Standalone(crate::support::deployment::Data::File),
            env,
        )
        .await;
    })
    .await;
}
