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
    let mut gaps_ms = Vec::new();
    for s in &slots {
        let (ak, bk, ck) = (format!("a@{s}"), format!("b@{s}"), format!("c@{s}"));
        if let (Some(e), Some(st)) = (trace.first(Mark::End, &ak), trace.first(Mark::Start, &bk)) {
            gaps_ms.push(st - e);
        }
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
    gaps_ms.sort_unstable();
    eprintln!(
        "{}: from a's end to b's start over {} slots: median {} ms, max {} ms",
        kind.label(),
        gaps_ms.len(),
        gaps_ms.get(gaps_ms.len() / 2).copied().unwrap_or_default(),
        gaps_ms.last().copied().unwrap_or_default()
    );
    assert!(
        problems.is_empty(),
        "{} of {} slots wrong:\n{}\ntrace:\n{}\n{}",
        problems.len(),
        slots.len(),
        problems.join("\n"),
        trace.render(),
        running.logs()
    );
    // `cronq verify` expects c at a's times (its parents' common times): every slot
    // checked, none a gap. (On the fleet, the slot a missed across the failover is a gap of
    // a's and so of its children: a `catchup = "latest"` choice, not checked here.)
    if kind.is_standalone() {
        let fmt = |s: &String| s.clone();
        let (first, last) = (
            fmt(slots.first().expect("slots")),
            fmt(slots.last().expect("slots")),
        );
        let out = running.cli(&[
            "verify", "--from", &first, "--to", &last, "--job", "c", "--json",
        ]);
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        assert_eq!(out.status.code(), Some(0), "{report}");
        let c_account = report["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["job"] == "c")
            .unwrap_or_else(|| panic!("no c in {report}"));
        assert_eq!(c_account["expected"], slots.len(), "{report}");
        assert_eq!(c_account["gaps"], serde_json::json!([]), "{report}");
    }

    // `cronq jobs` shows each job's parents and children, and a child's next time.
    let jobs: serde_json::Value =
        serde_json::from_str(&running.ok(&["jobs", "--json"])).expect("jobs JSON");
    let row = |name: &str| {
        jobs["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["job"] == name)
            .unwrap_or_else(|| panic!("no {name} in {jobs}"))
            .clone()
    };
    let (ra, rb, rc) = (row("a"), row("b"), row("c"));
    assert_eq!(ra["children"], serde_json::json!(["b"]), "{jobs}");
    assert_eq!(ra.get("after"), None, "{jobs}");
    assert_eq!(rb["after"], serde_json::json!(["a"]), "{jobs}");
    assert_eq!(rb["children"], serde_json::json!(["c"]), "{jobs}");
    assert_eq!(rc["after"], serde_json::json!(["b"]), "{jobs}");
    assert_eq!(rc.get("children"), None, "{jobs}");
    assert_eq!(rc["schedule"], "after b", "{jobs}");
    assert!(
        rc["next"]["utc"].is_string(),
        "c's next time is a's: {jobs}"
    );
    let table = running.ok(&["jobs"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("a ") && l.contains("@every 1s; then b")),
        "{table}"
    );

    // The dashboard's job page and API show them too (a `cronq dashboard` on the same
    // stores).
    let config_arg = running.config_path().to_string_lossy().into_owned();
    let mut args = vec!["dashboard", "--config", config_arg.as_str()];
    let data_arg = running
        .data_file()
        .map(|f| f.to_string_lossy().into_owned());
    if let Some(data) = &data_arg {
        args.extend(["--data", data.as_str()]);
    }
    let d = crate::support::dashboard::start(&env, "dashboard", &args, "--addr", false).await;
    let v = d.json("/api/v1/jobs/b").await;
    assert_eq!(v["after"], serde_json::json!(["a"]), "{v}");
    assert_eq!(v["children"], serde_json::json!(["c"]), "{v}");
    let v = d.json("/api/v1/jobs/c").await;
    assert_eq!(v["after"], serde_json::json!(["b"]), "{v}");
    assert_eq!(
        v["next"].as_array().map(Vec::len),
        Some(10),
        "c's next times are a's: {v}"
    );
    let page = crate::support::dashboard::text(&d.url("/jobs/b")).await;
    assert!(
        page.contains("id=\"parents\"")
            && page.contains("href=\"/jobs/a\"")
            && page.contains("href=\"/jobs/c\""),
        "{page}"
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

/// Asserts `cronq check --config cronq.toml` exits 2 with exactly `expected` on stderr.
#[track_caller]
fn assert_rejected(test: &str, config: &str, expected: &str) {
    use crate::support::config_dir::{ConfigDir, stderr};
    let dir = ConfigDir::with(test, config);
    let out = dir.run(&["check", "--config", "cronq.toml"]);
    assert_eq!(stderr(&out), expected, "config:\n{config}");
    assert_eq!(out.status.code(), Some(2), "config:\n{config}");
}

const PARENT: &str =
    "[[job]]\nname = \"extract\"\nschedule = \"@every 1m\"\ncommand = [\"true\"]\n";

#[test]
fn an_unknown_parent_is_named_with_the_closest_job() {
    assert_rejected(
        "after-unknown",
        &format!("{PARENT}[[job]]\nname = \"load\"\nafter = [\"extrct\", \"nowhere\"]\ncommand = [\"true\"]\n"),
        "cronq: invalid config (2 problems):
cronq.toml: job \"load\": after: \"extrct\" is not a job (did you mean \"extract\"?): name a job of this config, or remove it from after
cronq.toml: job \"load\": after: \"nowhere\" is not a job: name a job of this config, or remove it from after
",
    );
}

#[test]
fn a_cycle_names_every_job_on_it() {
    assert_rejected(
        "after-cycle",
        &format!(
            "{PARENT}[[job]]\nname = \"a\"\nafter = [\"extract\", \"c\"]\ncommand = [\"true\"]\n\
             [[job]]\nname = \"b\"\nafter = [\"a\"]\ncommand = [\"true\"]\n\
             [[job]]\nname = \"c\"\nafter = [\"b\"]\ncommand = [\"true\"]\n"
        ),
        "cronq: invalid config (1 problem):
cronq.toml: job \"a\": after: the jobs run after each other in a cycle (a after c after b after a), so none of them could ever start: remove one of these after entries
",
    );
}

#[test]
fn after_naming_itself_or_beside_a_schedule_is_refused() {
    assert_rejected(
        "after-self",
        &format!(
            "{PARENT}[[job]]\nname = \"load\"\nafter = [\"load\", \"extract\", \"extract\"]\ncommand = [\"true\"]\n\
             [[job]]\nname = \"report\"\nafter = [\"extract\"]\nschedule = \"@daily\"\ncommand = [\"true\"]\n\
             [[job]]\nname = \"empty\"\nafter = []\ncommand = [\"true\"]\n"
        ),
        "cronq: invalid config (4 problems):
cronq.toml: job \"load\": after: names the job itself (\"load\"): a job cannot run after itself; remove it from after
cronq.toml: job \"load\": after: names \"extract\" twice: list each job once
cronq.toml: job \"report\": after: is set together with schedule: a job that runs after other jobs has no times of its own, its occurrences are its parents' scheduled times; remove schedule, or remove after
cronq.toml: job \"empty\": after: is empty: name the jobs it runs after, such as after = [\"extract\"], or give it a schedule instead
",
    );
}

/// A runtime job (`cronq job apply`) may run after a file job: it runs for the file job's
/// slots once each, after them; an unknown parent or a cycle among runtime jobs is refused
/// at apply, naming the file, the job and `after`, and nothing is applied.
#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_job_runs_after_a_file_job_and_a_bad_after_is_refused() {
    use crate::support::deployment::{Data, appending_config};
    scoped("chains_runtime", |env| async move {
        let running = Running::start_ticking(
            Deployment::Standalone(Data::File),
            &env,
            &appending_config(&env, LEADER, ""),
        )
        .await;
        let bad = env.write_config(
            "bad.toml",
            "[[job]]\nname = \"x\"\nafter = [\"tik\"]\nhandler = \"append\"\n\
             [[job]]\nname = \"y\"\nafter = [\"z\"]\nhandler = \"append\"\n\
             [[job]]\nname = \"z\"\nafter = [\"y\"]\nhandler = \"append\"\n",
        );
        let bad = bad.to_string_lossy().into_owned();
        let out = running.cli(&["job", "apply", "-f", &bad]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "cronq: invalid config (2 problems):
{bad}: job \"x\": after: \"tik\" is not a job (did you mean \"tick\"?): name a job of this config, or remove it from after
{bad}: job \"y\": after: the jobs run after each other in a cycle (y after z after y), so none of them could ever start: remove one of these after entries
"
            )
        );
        // The same through the dashboard's API: 400, the problem named, nothing written.
        let config_arg = running.config_path().to_string_lossy().into_owned();
        let data_arg = running
            .data_file()
            .expect("a data file")
            .to_string_lossy()
            .into_owned();
        let d = crate::support::dashboard::start(
            &env,
            "dashboard",
            &["dashboard", "--config", &config_arg, "--data", &data_arg],
            "--addr",
            true,
        )
        .await;
        let resp = reqwest::Client::new()
            .put(d.url("/api/v1/jobs/x"))
            .bearer_auth(crate::support::dashboard::TOKEN)
            .header("content-type", "application/toml")
            .body("after = [\"tik\"]\nhandler = \"append\"\n")
            .send()
            .await
            .expect("PUT");
        assert_eq!(resp.status(), reqwest::StatusCode::BAD_REQUEST);
        let body = resp.text().await.expect("body");
        assert!(
            body.contains("job \\\"x\\\": after: \\\"tik\\\" is not a job (did you mean \\\"tick\\\"?)"),
            "{body}"
        );
        let get = running.cli(&["job", "get", "x"]);
        assert!(
            String::from_utf8_lossy(&get.stderr).contains("no runtime job \"x\""),
            "nothing written: {get:?}"
        );
        let good = env.write_config(
            "good.toml",
            "[[job]]\nname = \"follow\"\nafter = [\"tick\"]\nhandler = \"append\"\n",
        );
        let out = running.ok(&["job", "apply", "-f", &good.to_string_lossy()]);
        assert_eq!(out, "created job \"follow\" (revision 1)\n");
        running
            .until_succeeded("follow", 3, Duration::from_secs(20), "follow to run thrice")
            .await;
        let ran = crate::support::cli::ran(&env, "follow");
        let ticks = crate::support::cli::ran(&env, "tick");
        let mut seen = BTreeSet::new();
        for key in &ran {
            let slot = key.strip_prefix("follow@").expect("a key of follow");
            assert!(seen.insert(slot.to_owned()), "follow ran twice for {slot}: {ran:?}");
            let parent = format!("tick@{slot}");
            assert!(ticks.contains(&parent), "{key} ran without {parent}: ticks {ticks:?}");
        }
    })
    .await;
}

/// `cronq next` lists a child's expected times: those all its parents share.
#[test]
fn next_lists_the_times_the_parents_share() {
    use crate::support::config_dir::{ConfigDir, stdout};
    let dir = ConfigDir::with(
        "after-next",
        "[[job]]\nname = \"two\"\nschedule = \"*/2 * * * * *\"\ncommand = [\"true\"]\n\
         [[job]]\nname = \"three\"\nschedule = \"*/3 * * * * *\"\ncommand = [\"true\"]\n\
         [[job]]\nname = \"both\"\nafter = [\"two\", \"three\"]\ncommand = [\"true\"]\n\
         [[job]]\nname = \"then\"\nafter = [\"both\"]\ncommand = [\"true\"]\n",
    );
    for job in ["both", "then"] {
        let out = dir.run(&[
            "next",
            "--config",
            "cronq.toml",
            "--job",
            job,
            "--from",
            "2026-01-01T00:00:00Z",
            "--count",
            "3",
        ]);
        assert_eq!(
            stdout(&out),
            format!(
                "{job} (\"after {}\" in UTC)
  2026-01-01 00:00:06 +00:00 UTC  2026-01-01T00:00:06Z
  2026-01-01 00:00:12 +00:00 UTC  2026-01-01T00:00:12Z
  2026-01-01 00:00:18 +00:00 UTC  2026-01-01T00:00:18Z
",
                if job == "both" { "two, three" } else { "both" }
            ),
            "{out:?}"
        );
    }
}

/// The same chain on a standalone in memory (no outside command reaches its stores, so no
/// replay): every slot runs a, b and c once each, in order, and the slot b failed for
/// skips c, naming b.
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_on_a_standalone_in_memory_runs_in_order() {
    use crate::support::deployment::Data;
    scoped("chains_memory", |env| async move {
        let running =
            Running::start(Deployment::Standalone(Data::Memory), &env, &config(&env)).await;
        let trace_path = env.dir.join("trace");
        // Slots whose c ended, past the one b failed for.
        let done = |trace: &Trace| -> BTreeSet<String> {
            trace
                .events
                .iter()
                .filter(|e| e.mark == Mark::End)
                .filter_map(|e| e.key.strip_prefix("c@").map(str::to_owned))
                .collect()
        };
        until(Duration::from_secs(30), "c to end for 6 slots", || async {
            let trace = Trace::read(&trace_path);
            if done(&trace).len() >= 6 {
                Ok(())
            } else {
                Err(trace.render())
            }
        })
        .await;
        let failed = std::fs::read_to_string(env.dir.join("failed")).expect("b failed once");
        let failed = failed.trim();
        let slot = failed.strip_prefix("b@").expect("a key of b");
        let log = env.log("standalone");
        assert!(
            log.lines()
                .any(|l| l.contains("skipped: a parent did not succeed")
                    && l.contains(&format!("c@{slot}"))
                    && l.contains(failed)),
            "c@{slot} skipped naming {failed}:\n{}",
            running.logs()
        );
        let trace = Trace::read(&trace_path);
        assert_eq!(
            trace.count(Mark::Start, &format!("c@{slot}")),
            0,
            "c did not run for {slot}"
        );
        let mut problems = Vec::new();
        for s in done(&trace) {
            let (ak, bk, ck) = (format!("a@{s}"), format!("b@{s}"), format!("c@{s}"));
            for key in [&ak, &bk, &ck] {
                if trace.count(Mark::Start, key) != 1 {
                    problems.push(format!(
                        "{key} started {} times",
                        trace.count(Mark::Start, key)
                    ));
                }
            }
            for (parent, child) in [(&ak, &bk), (&bk, &ck)] {
                let (ended, started) = (
                    trace.first(Mark::End, parent),
                    trace.first(Mark::Start, child),
                );
                if !matches!((ended, started), (Some(e), Some(s)) if s >= e) {
                    problems.push(format!(
                        "{child} started at {started:?}, {parent} ended at {ended:?}"
                    ));
                }
            }
        }
        assert!(
            problems.is_empty(),
            "{}\n{}",
            problems.join("\n"),
            trace.render()
        );
    })
    .await;
}

/// `kill -9` of a standalone on its data file right after an occurrence of a parent ended,
/// before its child started, then a restart on the same file: the child runs for that slot
/// (once successfully), and for every slot the parent succeeded for.
#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_killed_between_a_parent_and_its_child_loses_nothing() {
    use crate::support::data_file::{DataFile, LEADER as FILE_LEADER};
    scoped("chains_standalone_kill", |env| async move {
        let trace = env.dir.join("trace");
        let traced = crate::support::history::traced_script(&trace, "0.2");
        let toml = format!(
            "{FILE_LEADER}\n[[job]]\nname = \"a\"\nschedule = \"@every 1s\"\ncommand = {cmd}\n\
             [[job]]\nname = \"b\"\nafter = [\"a\"]\noverlap = \"allow\"\ncommand = {cmd}\n",
            cmd = argv(&["/bin/sh", "-c", &traced]),
        );
        let file = DataFile::new(&env, &toml);
        let first = file.start("standalone-1", &["--lease", "2s"]);
        file.leading(&first).await;
        // Two slots through, then the next end of a whose b has not started: kill.
        let cut = until(
            Duration::from_secs(30),
            "a to end with b not started",
            || async {
                let t = Trace::read(&trace);
                let b_ended = t
                    .events
                    .iter()
                    .filter(|e| e.mark == Mark::End && e.key.starts_with("b@"))
                    .count();
                let pending = t.events.iter().rev().find(|e| {
                    e.mark == Mark::End
                        && e.key.starts_with("a@")
                        && t.count(Mark::Start, &e.key.replacen("a@", "b@", 1)) == 0
                });
                match pending {
                    Some(e) if b_ended >= 2 => {
                        Ok(e.key.strip_prefix("a@").expect("a key").to_owned())
                    }
                    _ => Err(t.render()),
                }
            },
        )
        .await;
        file.kill(&first);
        eprintln!("killed the standalone after a@{cut} ended");
        let second = file.start("standalone-2", &["--lease", "2s"]);
        file.leading(&second).await;
        let b_key = format!("b@{cut}");
        until(
            Duration::from_secs(30),
            "b to succeed for the slot cut",
            || async {
                let runs = file.runs(Some("b")).await;
                let ok = runs.iter().any(|r| {
                    r.key.to_string() == b_key
                        && r.outcome == cronq_shared::runlog::Outcome::Succeeded
                });
                if ok {
                    Ok(())
                } else {
                    Err(format!("{runs:?}\n{}", file.logs()))
                }
            },
        )
        .await;
        // A few more slots, then: every slot a succeeded for (but the last seconds) has b
        // succeeded once.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let horizon = chrono::Utc::now() - chrono::Duration::seconds(2);
        let a = file.runs(Some("a")).await;
        let b = file.runs(Some("b")).await;
        let mut problems = Vec::new();
        for run in a
            .iter()
            .filter(|r| r.outcome == cronq_shared::runlog::Outcome::Succeeded)
        {
            let at = run.key.scheduled_at().expect("a scheduled key");
            if at > horizon {
                continue;
            }
            let bk = format!(
                "b@{}",
                run.key.to_string().strip_prefix("a@").expect("a key")
            );
            let wins = b
                .iter()
                .filter(|r| {
                    r.key.to_string() == bk && r.outcome == cronq_shared::runlog::Outcome::Succeeded
                })
                .count();
            if wins != 1 {
                problems.push(format!("{bk} succeeded {wins} times"));
            }
        }
        assert!(
            problems.is_empty(),
            "{}\n{}",
            problems.join("\n"),
            file.logs()
        );
    })
    .await;
}

/// Parents whose times never meet: a warning, the config still valid.
#[test]
fn parents_that_never_share_a_time_are_a_warning() {
    use crate::support::config_dir::{ConfigDir, stderr};
    let dir = ConfigDir::with(
        "after-never",
        "[[job]]\nname = \"top\"\nschedule = \"0 * * * *\"\ncommand = [\"true\"]\n\
         [[job]]\nname = \"half\"\nschedule = \"30 * * * *\"\ncommand = [\"true\"]\n\
         [[job]]\nname = \"both\"\nafter = [\"top\", \"half\"]\ncommand = [\"true\"]\n",
    );
    let out = dir.run(&["check", "--config", "cronq.toml"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        stderr(&out),
        "cronq.toml: warning: job \"both\": after: its parents (\"top\", \"half\") share no scheduled time from now on, so it would never run: give them a common time, or change after\n"
    );
}

/// Two parents on different schedules (every 2 s and every 3 s): the child runs at the
/// times they share (every 6 s) only, once each, after both ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_child_of_two_schedules_runs_at_their_common_times_after_both() {
    use crate::support::deployment::Data;
    scoped("chains_two_parents", |env| async move {
        let trace = env.dir.join("trace");
        let traced = crate::support::history::traced_script(&trace, "0.3");
        let cmd = argv(&["/bin/sh", "-c", &traced]);
        let toml = format!(
            "{LEADER}\n[defaults]\noverlap = \"allow\"\n\
             [[job]]\nname = \"two\"\nschedule = \"*/2 * * * * *\"\ncommand = {cmd}\n\
             [[job]]\nname = \"three\"\nschedule = \"*/3 * * * * *\"\ncommand = {cmd}\n\
             [[job]]\nname = \"both\"\nafter = [\"two\", \"three\"]\ncommand = {cmd}\n"
        );
        let _running = Running::start(Deployment::Standalone(Data::Memory), &env, &toml).await;
        let ended = |t: &Trace| -> Vec<String> {
            t.events
                .iter()
                .filter(|e| e.mark == Mark::End && e.key.starts_with("both@"))
                .map(|e| e.key.clone())
                .collect()
        };
        until(Duration::from_secs(40), "both to run thrice", || async {
            let t = Trace::read(&trace);
            if ended(&t).len() >= 3 {
                Ok(())
            } else {
                Err(t.render())
            }
        })
        .await;
        let t = Trace::read(&trace);
        for key in ended(&t) {
            let at = scheduled_at(&key);
            assert_eq!(
                at.timestamp() % 6,
                0,
                "{key} is not a common time:\n{}",
                t.render()
            );
            assert_eq!(t.count(Mark::Start, &key), 1, "{key}:\n{}", t.render());
            let start = t.first(Mark::Start, &key).expect("started");
            for parent in ["two", "three"] {
                let pk = key.replacen("both@", &format!("{parent}@"), 1);
                let end = t.first(Mark::End, &pk).expect("the parent ended");
                assert!(
                    start >= end,
                    "{key} started before {pk} ended:\n{}",
                    t.render()
                );
            }
        }
        // No other time ran it: every start of the child is at a common time.
        assert!(
            t.events
                .iter()
                .filter(|e| e.key.starts_with("both@"))
                .all(|e| scheduled_at(&e.key).timestamp() % 6 == 0),
            "{}",
            t.render()
        );
    })
    .await;
}

/// A paused child does not run: while `cronq pause b` holds, each slot a succeeds for ends
/// `skipped` for b (reason `job paused`) and b's command does not start; after `cronq
/// resume b`, b runs again for new slots, and the paused ones are not caught up, on a
/// fleet even by a new leader that reads the same ends again (`kill -9` of the leader
/// after the resume).
async fn a_paused_child_is_skipped_and_not_caught_up(kind: Deployment, env: TestEnv) {
    use chrono::{TimeDelta, Utc};
    use cronq_shared::runlog::Outcome;
    let trace_path = env.dir.join("trace");
    let traced = argv(&[
        "/bin/sh",
        "-c",
        &crate::support::history::traced_script(&trace_path, "0"),
    ]);
    let toml = format!(
        r#"{LEADER}
[defaults]
overlap = "allow"

[[job]]
name = "a"
schedule = "@every 1s"
command = {traced}

[[job]]
name = "b"
after = ["a"]
command = {traced}
"#
    );
    let running = Running::start(kind, &env, &toml).await;
    running
        .until_succeeded("b", 1, Duration::from_secs(30), "b to run after a")
        .await;
    running.ok(&["pause", "b", "--note", "chains test"]);
    let paused_at = Utc::now();
    let paused_keys = |entries: &[Entry]| -> BTreeSet<String> {
        entries
            .iter()
            .filter(|e| e.outcome == Outcome::Skipped && e.error.as_deref() == Some("job paused"))
            .map(|e| e.key.clone())
            .collect()
    };
    until(
        Duration::from_secs(30),
        "b skipped as paused for 3 slots",
        || async {
            let entries = running.entries("b").await;
            if paused_keys(&entries).len() >= 3 {
                Ok(())
            } else {
                Err(format!("{entries:?}\n{}", running.logs()))
            }
        },
    )
    .await;
    running.ok(&["resume", "b"]);
    let resumed_at = Utc::now();
    let ran_after_resume = || async {
        let entries = running.entries("b").await;
        let n = entries
            .iter()
            .filter(|e| e.outcome == Outcome::Succeeded && scheduled_at(&e.key) > resumed_at)
            .count();
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("{entries:?}\n{}", running.logs()))
        }
    };
    until(
        Duration::from_secs(30),
        "b to run again after the resume",
        ran_after_resume,
    )
    .await;
    if kind == Deployment::Fleet {
        // A new leader reads the history from its lookback again, the paused slots' ends
        // of a with it.
        let (name, pid) = running.leader().expect("a leader");
        env.signal(pid, nix::sys::signal::Signal::SIGKILL);
        eprintln!("killed the leader {name} (pid {pid}) after the resume");
        let killed_at = Utc::now();
        until(
            Duration::from_secs(30),
            "b to run under the new leader",
            || async {
                let entries = running.entries("b").await;
                let n = entries
                    .iter()
                    .filter(|e| e.outcome == Outcome::Succeeded && scheduled_at(&e.key) > killed_at)
                    .count();
                if n >= 2 {
                    Ok(())
                } else {
                    Err(format!("{entries:?}\n{}", running.logs()))
                }
            },
        )
        .await;
    }

    let entries = running.entries("b").await;
    let trace = Trace::read(&trace_path);
    let paused = paused_keys(&entries);
    let mut problems = Vec::new();
    // Every slot of a well inside the pause (its end came after the pause was written,
    // and before the resume) was skipped for b, and b never started for it.
    let a_slots: BTreeSet<String> = running
        .entries("a")
        .await
        .iter()
        .filter(|e| e.outcome == Outcome::Succeeded)
        .map(|e| e.key.clone())
        .collect();
    for a in &a_slots {
        let at = scheduled_at(a);
        if at <= paused_at + TimeDelta::seconds(1) || at >= resumed_at - TimeDelta::seconds(1) {
            continue;
        }
        let b = format!("b@{}", a.strip_prefix("a@").expect("a key of a"));
        if !paused.contains(&b) {
            problems.push(format!("{b}: not skipped as paused"));
        }
    }
    for b in &paused {
        if trace.count(Mark::Start, b) != 0 {
            problems.push(format!("{b}: skipped as paused, yet it started"));
        }
        let outcomes = terminal_outcomes(&entries, b);
        if outcomes != ["skipped"] {
            problems.push(format!("{b}: terminal outcomes {outcomes:?}"));
        }
    }
    assert!(paused.len() >= 3, "{entries:?}");
    assert!(
        problems.is_empty(),
        "{}\n{}\n{}",
        problems.join("\n"),
        trace.render(),
        running.logs()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_child_on_a_fleet_is_skipped_and_not_caught_up_by_a_new_leader() {
    scoped("chains_pause_fleet", |env| {
        a_paused_child_is_skipped_and_not_caught_up(Deployment::Fleet, env)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_child_on_a_standalone_data_file_is_skipped_and_not_caught_up() {
    scoped("chains_pause_standalone", |env| {
        a_paused_child_is_skipped_and_not_caught_up(
            Deployment::Standalone(crate::support::deployment::Data::File),
            env,
        )
    })
    .await;
}
