//! `cronq verify` and the catch-up policies through real processes, on a fleet (RabbitMQ
//! and Redis) and on a standalone's data file: every producer stops (SIGTERM, or killed
//! with SIGKILL) for about 5 s and one
//! starts again; the occurrences due while no producer led that `catchup = "none"` (all)
//! and `catchup = "latest"` (all but the latest) left unpublished are counted as such, to
//! the number the recorded terms and the run history give, and are no gap; a run removed behind cronq's back
//! inside a term still is; and without the terms (deleted, as in an older store) they are
//! gaps again, with a note saying why.

use std::time::Duration;

use chrono::{DateTime, SubsecRound as _, TimeDelta, Utc};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::lease::{Lease, TermRecord};
use cronq_shared::names::{JobName, Names, Namespace};
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, LEADER, Running, argv};
use crate::support::{TestEnv, metrics_page, ports, scoped};

fn config() -> String {
    let job = |name: &str, catchup: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"@every 1s\"\ncatchup = \"{catchup}\"\ncommand = {}\ntimeout = \"2s\"\n",
            argv(&["true"])
        )
    };
    format!(
        "{LEADER}\n{}\n{}",
        job("none", "none"),
        job("latest", "latest")
    )
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn job<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == name)
        .unwrap_or_else(|| panic!("no job {name} in {report}"))
}

/// `cronq verify ARGS`, asserting exit `code`; its stdout.
fn verify(running: &Running, code: i32, args: &[&str]) -> String {
    let mut all = vec!["verify"];
    all.extend(args);
    let out = running.cli(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "cronq {all:?}\nstdout: {stdout}\nstderr: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        running.logs()
    );
    stdout
}

/// Stops every producer with `signal` (a fleet's two, or the standalone), waiting for each.
fn stop_all(backend: Backend, running: &Running, env: &TestEnv, signal: Signal) {
    let pids = match backend {
        // The consumers keep running.
        Backend::Real => {
            let consumers = running.consumers().to_vec();
            running
                .pids()
                .into_iter()
                .filter(|p| !consumers.contains(p))
                .collect()
        }
        _ => running.pids(),
    };
    for pid in &pids {
        env.signal(*pid, signal);
    }
    for pid in pids {
        let started = std::time::Instant::now();
        let code = env.wait(pid, Duration::from_secs(20));
        // Killed by a signal, a process has no exit code: it ended if the wait did not last.
        assert!(
            code.is_some() || started.elapsed() < Duration::from_secs(19),
            "{pid} did not stop:\n{}",
            running.logs()
        );
    }
}

/// Starts one producer again: a fleet producer, or a standalone on the same data file,
/// serving `/metrics` at `admin`, its continuous check every second over the last 30 s.
fn start_again(running: &Running, env: &TestEnv, admin: &str) {
    let mut cmd = env.cronq();
    cmd.env("RUST_LOG", "info")
        .env("CRONQ_RECONCILE_EVERY", "1s")
        .env("CRONQ_RECONCILE_WINDOW", "30s")
        .env("CRONQ_RECONCILE_LAG", "1s")
        .args(["--log-format", "json", "--config"])
        .arg(running.config_path());
    match running.data_file() {
        None => {
            cmd.args(["producer", "--admin-addr", admin]);
            env.spawn_command("producer-3", cmd);
        }
        Some(file) => {
            cmd.args(["standalone", "--admin-addr", admin, "--data"])
                .arg(file);
            env.spawn_command("standalone-2", cmd);
        }
    }
}

/// The whole seconds in `(after, upto]`.
fn seconds_in(after: DateTime<Utc>, upto: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = after.trunc_subsecs(0) + TimeDelta::seconds(1);
    while t <= upto {
        out.push(t);
        t += TimeDelta::seconds(1);
    }
    out
}

async fn suite(backend: Backend, signal: Signal, env: TestEnv) {
    let running = Running::start(Deployment::on(backend), &env, &config()).await;
    running
        .until_succeeded("none", 2, Duration::from_secs(30), "none to run")
        .await;
    running
        .until_succeeded("latest", 2, Duration::from_secs(30), "latest to run")
        .await;
    let from = Utc::now().trunc_subsecs(0) + TimeDelta::seconds(1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_all(backend, &running, &env, signal);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let admin = crate::support::free_addr();
    start_again(&running, &env, &admin);
    let (lease, _) = ports::leases(backend, &env).await;
    // The new term has begun.
    let terms: Vec<TermRecord> = crate::support::eventually(
        Duration::from_secs(20),
        "a term to begin after the outage",
        || async {
            let terms = lease.terms().await.unwrap();
            terms
                .last()
                .filter(|t| t.start > from + TimeDelta::seconds(5))
                .map(|_| terms.clone())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let to = Utc::now().trunc_subsecs(0);
    // Every occurrence of the range has had its 2 s timeout.
    tokio::time::sleep(Duration::from_secs(4)).await;

    // The outage: from the last term before to the first after.
    let next = terms.last().unwrap();
    let before = terms
        .iter()
        .rev()
        .find(|t| t.epoch < next.epoch)
        .unwrap_or_else(|| panic!("a term before the outage: {terms:?}"));
    assert!(
        before.alive < next.start && before.alive > from,
        "the outage is between two recorded terms inside the range: {terms:?}"
    );
    let missed = seconds_in(before.alive, next.start);
    assert!(missed.len() >= 4, "about 5 s without a leader: {terms:?}");
    // What ran of them: the stopping leader may have published one after its last renewal;
    // `latest` has the latest caught up by the next term.
    let mut left = Vec::new();
    for name in ["none", "latest"] {
        let ran: std::collections::BTreeSet<String> = running
            .entries(name)
            .await
            .into_iter()
            .map(|e| e.key)
            .collect();
        let key = |t: &DateTime<Utc>| {
            OccurrenceKey::scheduled(JobName::new(name).unwrap(), *t).to_string()
        };
        let last = missed.last().unwrap();
        assert_eq!(
            ran.contains(&key(last)),
            name == "latest",
            "{name}@{last}, the latest missed, is caught up by latest only: {terms:?}"
        );
        left.push(i64::try_from(missed.iter().filter(|t| !ran.contains(&key(t))).count()).unwrap());
    }
    // Each job on its own: the stopping leader may have published one job's occurrence of
    // a second after its last renewal and not the other's (seen once: 5 and 5 of 6 left),
    // and verify is asked below for the number each job's own runs leave.
    assert!(left[0] >= 3 && left[1] >= 2, "{left:?} of {missed:?}");

    let (from_arg, to_arg) = (rfc(from), rfc(to));
    let range = [
        "--from",
        from_arg.as_str(),
        "--to",
        to_arg.as_str(),
        "--grace",
        "0s",
    ];
    let mut args = range.to_vec();
    args.push("--json");
    let report: Value = serde_json::from_str(&verify(&running, 0, &args)).unwrap();
    assert_eq!(report["gaps"], 0, "{report}");
    assert_eq!(report["terms"], terms.len(), "{report}");
    let seconds = (to - from).num_seconds() + 1;
    let none = job(&report, "none");
    let n = left[0];
    assert_eq!(none["no_leader"], n, "terms {terms:?}: {report}");
    assert_eq!(none["expected"], seconds - n, "{report}");
    assert_eq!(
        none["not_published"], "not published: no leader, catchup = none",
        "{report}"
    );
    let latest = job(&report, "latest");
    assert_eq!(latest["no_leader"], left[1], "terms {terms:?}: {report}");
    assert_eq!(latest["expected"], seconds - left[1], "{report}");
    assert_eq!(
        latest["not_published"], "not published: no leader, catchup = latest",
        "{report}"
    );
    let text = verify(&running, 0, &range);
    assert!(
        text.contains(&format!(
            "none: {n} occurrences not published: no leader, catchup = none"
        )),
        "{text}"
    );
    assert!(text.contains("NO LEADER"), "{text}");

    // The new leader's continuous check (the same rule) counts no gap either, though its
    // trailing window (30 s) has covered the outage for a while. Its newest seconds may
    // hold an occurrence a loaded machine has not ended yet, counted until it ends: read
    // until every count is 0, for as long as the whole outage stays inside the window.
    let unaccounted = |page: &str| {
        page.lines()
            .filter(|l| l.starts_with("cronq_occurrences_unaccounted{"))
            .any(|l| !l.ends_with(" 0"))
    };
    let inside = before.alive + TimeDelta::seconds(20);
    let page = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let page = metrics_page(&admin).await.unwrap();
        if !unaccounted(&page) || Utc::now() > inside {
            break page;
        }
    };
    assert!(
        page.contains("cronq_occurrences_unaccounted{job=\"other\"} 0"),
        "{page}"
    );
    for name in ["none", "latest"] {
        let series = format!("cronq_occurrences_unaccounted{{job=\"{name}\"}}");
        assert!(
            page.lines()
                .filter(|l| l.starts_with(&series))
                .all(|l| l.ends_with(" 0")),
            "{page}"
        );
    }
    let log = env.log(if backend == Backend::Real {
        "producer-3"
    } else {
        "standalone-2"
    });
    assert!(
        !log.contains("not accounted for in the trailing window"),
        "{log}"
    );

    // A run removed behind cronq's back inside a term is still a gap.
    let removed =
        OccurrenceKey::scheduled(JobName::new("none").unwrap(), from + TimeDelta::seconds(1));
    assert!(before.contains(from + TimeDelta::seconds(1)), "{terms:?}");
    super::verify::remove_runs(backend, &env, removed.as_str()).await;
    let text = verify(&running, 1, &range);
    assert!(
        text.contains(&format!("{removed}: expected but never published")),
        "{text}"
    );
    assert_eq!(
        text.matches(": expected but never published").count(),
        1,
        "{text}"
    );

    // Without the terms (a store older than them), everything is expected as before, and
    // the report says so.
    forget_terms(backend, &env).await;
    let report: Value = serde_json::from_str(&verify(&running, 1, &args)).unwrap();
    assert_eq!(report["terms"], 0, "{report}");
    assert_eq!(report["gaps"], left[0] + left[1] + 1, "{report}");
    assert_eq!(job(&report, "none")["no_leader"], 0, "{report}");
    assert!(
        report["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("no leadership term is recorded")),
        "{report}"
    );
}

/// Deletes the recorded terms behind cronq's back.
async fn forget_terms(backend: Backend, env: &TestEnv) {
    match backend {
        Backend::Real => {
            let mut conn = env.redis().await;
            let names = Names::new(&Namespace::new(&env.namespace).unwrap());
            let _: i64 = redis::cmd("DEL")
                .arg(names.redis_key(&["leader", "terms"]))
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        _ => crate::support::data_file::raw::execute(
            &ports::data_file(env),
            "DELETE FROM leader_terms",
        ),
    }
}

#[tokio::test]
async fn verify_counts_what_catchup_left_on_a_fleet() {
    scoped("verify-catchup-real", |env| {
        suite(Backend::Real, Signal::SIGTERM, env)
    })
    .await;
}

#[tokio::test]
async fn verify_counts_what_catchup_left_on_a_fleet_killed() {
    scoped("verify-catchup-real-kill", |env| {
        suite(Backend::Real, Signal::SIGKILL, env)
    })
    .await;
}

#[tokio::test]
async fn verify_counts_what_catchup_left_on_a_data_file() {
    scoped("verify-catchup-sqlite", |env| {
        suite(Backend::Sqlite, Signal::SIGTERM, env)
    })
    .await;
}

#[tokio::test]
async fn verify_counts_what_catchup_left_on_a_data_file_killed() {
    scoped("verify-catchup-sqlite-kill", |env| {
        suite(Backend::Sqlite, Signal::SIGKILL, env)
    })
    .await;
}
