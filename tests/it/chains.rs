//! Jobs that run after other jobs (`after`), through real processes: a chain a → b → c
//! (`@every 1s` parent) on a fleet (2 producers, 2 consumers, RabbitMQ and Redis) and on
//! a standalone's data file. b fails once, for the first slot it runs, and is dead-lettered
//! at once: c is skipped naming b, and once `cronq dlq replay` made b succeed, c runs
//! exactly once for that slot. Every other slot runs a, b and c once each, in order (each
//! child starts after its parent ended, from the commands' own trace). On the fleet the
//! leader is killed with `kill -9` mid-chain: nothing is lost.

use std::collections::BTreeSet;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::deployment::{Deployment, LEADER, Running, argv};
use crate::support::history::{Entry, Mark, TERMINAL, Trace, by_key, scheduled_at};
use crate::support::{TestEnv, scoped, until};

/// The config: a every second, b after a, c after b; each command traced; b fails the
/// first time it runs (its slot written to `failed`), and is not retried.
fn config(env: &TestEnv) -> String {
    let trace = env.dir.join("trace");
    let traced = crate::support::history::traced_script(&trace, "0.2");
    let fail_once = format!(
        "if mkdir '{dir}/failed.d' 2>/dev/null; then echo \"$CRONQ_KEY\" > '{dir}/failed'; exit 3; fi; {traced}",
        dir = env.dir.display()
    );
    format!(
        r#"{LEADER}
[defaults]
overlap = "allow"

[[job]]
name = "a"
schedule = "@every 1s"
command = {a}

[[job]]
name = "b"
after = ["a"]
max_attempts = 1
command = {b}

[[job]]
name = "c"
after = ["b"]
command = {c}
"#,
        a = argv(&["/bin/sh", "-c", &traced]),
        b = argv(&["/bin/sh", "-c", &fail_once]),
        c = argv(&["/bin/sh", "-c", &traced]),
    )
}

/// The terminal outcomes of `key` in order of `entries` (newest first, as the history
/// lists them), oldest first.
fn terminal_outcomes(entries: &[Entry], key: &str) -> Vec<String> {
    let by = by_key(entries);
    let mut out: Vec<String> = by
        .get(key)
        .map(|es| {
            es.iter()
                .filter(|e| e.is_terminal())
                .map(|e| e.outcome.to_string())
                .collect()
        })
        .unwrap_or_default();
    out.reverse();
    out
}

async fn chain_runs_in_order_and_a_replay_runs_the_skipped_child(kind: Deployment, env: TestEnv) {
    let running = Running::start(kind, &env, &config(&env)).await;
    // The slot b failed for.
    let failed = until(Duration::from_secs(30), "b to fail once", || async {
        std::fs::read_to_string(env.dir.join("failed"))
            .map(|k| k.trim().to_owned())
            .map_err(|_| running.logs())
    })
    .await;
    let slot = failed.strip_prefix("b@").expect("a key of b").to_owned();
    let c_key = format!("c@{slot}");
    // c is skipped, naming b's occurrence.
    until(Duration::from_secs(20), "c skipped for b", || async {
        let entries = running.entries("c").await;
        let skipped = entries.iter().find(|e| e.key == c_key);
        match skipped {
            Some(e) if e.outcome == cronq_shared::runlog::Outcome::Skipped => {
                let error = e.error.clone().unwrap_or_default();
                assert_eq!(error, format!("parent {failed} ended failed"));
                Ok(())
            }
            _ => Err(format!("{entries:?}\n{}", running.logs())),
        }
    })
    .await;

    // Mid-chain on the fleet: the leader is killed while an occurrence of a runs, so a ends
    // while no one leads (the standby takes over after the lease, 2 s): its children are
    // started by the new leader's catch-up.
    let mut mid_chain = None;
    if kind == Deployment::Fleet {
        let (name, pid) = running.leader().expect("a leader");
        let started = until(Duration::from_secs(10), "a to start again", || async {
            let trace = Trace::read(&env.dir.join("trace"));
            trace
                .events
                .iter()
                .rev()
                .find(|e| {
                    e.mark == Mark::Start && e.key.starts_with("a@") && e.key > format!("a@{slot}")
                })
                .map(|e| e.key.clone())
                .ok_or_else(|| trace.render())
        })
        .await;
        env.signal(pid, Signal::SIGKILL);
        eprintln!("killed the leader {name} (pid {pid}) while {started} ran");
        let mid = started.strip_prefix("a@").expect("a key of a").to_owned();
        let other = if name == "producer-1" {
            "producer-2"
        } else {
            "producer-1"
        };
        until(
            Duration::from_secs(20),
            "the standby to take over",
            || async {
                if env.log(other).contains("became leader") {
                    Ok(())
                } else {
                    Err(running.logs())
                }
            },
        )
        .await;
        mid_chain = Some((mid, other));
    }

    // Replay b's dead letter: b succeeds, then c runs once for that slot.
    let out = running.ok(&["dlq", "replay", "--key", &failed]);
    eprintln!("dlq replay: {out}");
    until(
        Duration::from_secs(30),
        "c to run after the replay",
        || async {
            let entries = running.entries("c").await;
            let outcomes = terminal_outcomes(&entries, &c_key);
            if outcomes == ["skipped", "succeeded"] {
                Ok(())
            } else {
                Err(format!("{c_key}: {outcomes:?}\n{}", running.logs()))
            }
        },
    )
    .await;
    // Every slot a succeeded for, up to a few seconds ago (what is in flight aside), once
    // there are enough of them: b and c once each, in order.
    let horizon = || chrono::Utc::now() - chrono::Duration::seconds(4);
    let succeeded_slots = |a: &[Entry], horizon| -> BTreeSet<String> {
        a.iter()
            .filter(|e| e.outcome == cronq_shared::runlog::Outcome::Succeeded)
            .map(|e| e.key.strip_prefix("a@").expect("a key of a").to_owned())
            .filter(|s| scheduled_at(&format!("a@{s}")) <= horizon)
            .collect()
    };
    until(Duration::from_secs(30), "a to run for 8 slots", || async {
        let n = succeeded_slots(&running.entries("a").await, horizon()).len();
        if n >= 8 {
            Ok(())
        } else {
            Err(format!("{n} slots"))
        }
    })
    .await;
    let horizon = horizon();
    let a = running.entries("a").await;
    let b = running.entries("b").await;
    let c = running.entries("c").await;
    let trace = Trace::read(&env.dir.join("trace"));
    let slots = succeeded_slots(&a, horizon);
    assert!(
        slots.contains(&slot),
        "the failed slot {slot} is checked: {slots:?}"
    );
    if let Some((mid, new_leader)) = &mid_chain {
        assert!(
            slots.contains(mid),
            "the slot run across the kill {mid} is checked: {slots:?}"
        );
        // Its a ended while no one led: the new leader started b from the history.
        let by_new = crate::support::history::published(&env.log(new_leader), "b");
        assert!(
            by_new.contains(&format!("b@{mid}")),
            "b@{mid} published by the new leader {new_leader}: {by_new:?}"
        );
    }
    let mut problems = Vec::new();
    for s in &slots {
        let (ak, bk, ck) = (format!("a@{s}"), format!("b@{s}"), format!("c@{s}"));
        let want_b: &[&str] = if bk == failed {
            &["failed", "succeeded"]
        } else {
            &["succeeded"]
        };
        let want_c: &[&str] = if bk == failed {
            &["skipped", "succeeded"]
        } else {
            &["succeeded"]
        };
        let got_a = terminal_outcomes(&a, &ak);
        let got_b = terminal_outcomes(&b, &bk);
        let got_c = terminal_outcomes(&c, &ck);
        if got_a != ["succeeded"] || got_b != want_b || got_c != want_c {
            problems.push(format!("{s}: a {got_a:?} b {got_b:?} c {got_c:?}"));
        }
        // Each command ran once per slot, each child after its parent's end.
        for key in [&ak, &bk, &ck] {
            if trace.count(Mark::Start, key) != 1 || trace.count(Mark::End, key) != 1 {
                problems.push(format!(
                    "{key} traced {} starts",
                    trace.count(Mark::Start, key)
                ));
            }
        }
        for (parent, child) in [(&ak, &bk), (&bk, &ck)] {
            let ended = trace.first(Mark::End, parent);
            let started = trace.first(Mark::Start, child);
            if !matches!((ended, started), (Some(e), Some(s)) if s >= e) {
                problems.push(format!(
                    "{child} started at {started:?}, before {parent} ended at {ended:?}"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} slots wrong:\n{}\ntrace:\n{}\n{}",
        problems.len(),
        slots.len(),
        problems.join("\n"),
        trace.render(),
        running.logs()
    );
    // Nothing ever ran twice: no key of b or c with two successes, none left unfinished
    // (of those old enough to have ended).
    for (job, entries) in [("b", &b), ("c", &c)] {
        for (key, es) in by_key(entries) {
            if scheduled_at(key) > horizon {
                continue;
            }
            let wins = es
                .iter()
                .filter(|e| e.outcome == cronq_shared::runlog::Outcome::Succeeded)
                .count();
            assert!(wins <= 1, "{job}: {key} succeeded {wins} times");
            assert!(
                es.iter().any(|e| TERMINAL.contains(&e.outcome)),
                "{job}: {key} has no terminal outcome: {es:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_on_a_fleet_survives_a_leader_kill_and_a_replay() {
    scoped("chains_fleet", |env| {
        chain_runs_in_order_and_a_replay_runs_the_skipped_child(Deployment::Fleet, env)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_on_a_standalone_data_file_runs_in_order_and_after_a_replay() {
    scoped("chains_standalone", |env| {
        chain_runs_in_order_and_a_replay_runs_the_skipped_child(
            Deployment::Standalone(crate::support::deployment::Data::File),
            env,
        )
    })
    .await;
}
