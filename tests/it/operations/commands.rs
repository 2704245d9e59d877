//! The operations commands do what they say and say it exactly: their output, their usage
//! errors and exit codes, a pause that outlives its leader, a backfill that reruns no key.
//!
//! The operations commands (`jobs`, `runs`, `pause`/`resume`, `trigger`, `backfill`,
//! `dlq list`/`dlq replay`) as the real binary, against running producers and consumers,
//! with `--json` output parsed, plus their usage errors and exit codes.

use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::cli::{WAIT, at, config, counts, fails, job, json, ok, ran, start_consumer};
use crate::support::producer_process::{cursor, leader};
use crate::support::{eventually, scoped};

#[tokio::test]
async fn ops_commands_against_a_running_producer_and_consumer() {
    scoped("ops_fleet", |env| async move {
        let jobs = format!(
            "{}\n{}",
            job(&env, "tick", "@every 1s", ""),
            job(&env, "manual", "0 0 1 1 *", "overlap = \"allow\"")
        );
        let cfg = config(&env, &jobs);
        let cfg = cfg.as_str();
        env.spawn("p", &["producer", "--config", cfg]);
        start_consumer(&env, cfg, "c1");
        start_consumer(&env, cfg, "c2");
        eventually(WAIT, "three runs of tick", || async {
            (ran(&env, "tick").len() >= 3).then_some(())
        })
        .await;

        // runs: newest first, every field there.
        let runs = json(&env, &["runs", "--json", "--limit", "3"]);
        let runs = runs["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3, "{runs:?}");
        let starts: Vec<&str> = runs
            .iter()
            .map(|r| r["started_at"].as_str().unwrap())
            .collect();
        assert!(
            starts.windows(2).all(|w| w[0] >= w[1]),
            "newest first: {starts:?}"
        );
        for r in runs {
            assert_eq!(r["job"], "tick");
            assert_eq!(r["outcome"], "succeeded");
            assert_eq!(r["attempt"], 1);
            assert!(
                ["c1", "c2"].contains(&r["consumer"].as_str().unwrap()),
                "{r}"
            );
            assert!(r["key"].as_str().unwrap().starts_with("tick@"));
            assert!(r["duration_ms"].is_u64());
            // The scheduled time is the key's, to the millisecond; the latenesses in ms.
            let key = r["key"].as_str().unwrap();
            let scheduled = r["scheduled_at"].as_str().unwrap_or_else(|| panic!("{r}"));
            assert_eq!(
                scheduled,
                format!("{}.000Z", key["tick@".len()..].trim_end_matches('Z')),
                "{r}"
            );
            assert!(
                r["publish_lateness_ms"].is_i64() && r["start_lateness_ms"].is_i64(),
                "{r}"
            );
            assert!(
                r["started_at"].as_str().unwrap().ends_with('Z')
                    && r["started_at"].as_str().unwrap().contains('.'),
                "{r}"
            );
            // Published by the producer no later than the attempt started (one clock).
            let published = r["published_at"].as_str().unwrap_or_else(|| panic!("{r}"));
            assert!(published <= r["started_at"].as_str().unwrap(), "{r}");
        }
        let table = ok(
            &env,
            &["runs", "--job", "tick", "--limit", "2", "--config", cfg],
        );
        assert!(table.starts_with("KEY"), "{table}");
        assert_eq!(table.lines().count(), 3, "{table}");
        // The two latenesses, from the JSON's own times: each row's publish and start
        // lateness in seconds, the publish no later than the start.
        let header: Vec<&str> = table
            .lines()
            .next()
            .unwrap()
            .split("  ")
            .filter(|c| !c.is_empty())
            .map(str::trim)
            .collect();
        assert_eq!(&header[4..6], ["PUBLISHED LATE", "STARTED LATE"], "{table}");
        for row in table.lines().skip(1) {
            let late: Vec<f64> = row
                .split_whitespace()
                .filter_map(|c| {
                    c.strip_suffix('s')
                        .and_then(|n| n.parse().ok())
                        .filter(|_| c.contains('.') && !c.contains(':'))
                })
                .collect();
            assert!(late.len() >= 2, "{row}");
            assert!(
                late[0] >= 0.0 && late[0] <= late[1] && late[1] < 30.0,
                "{row}"
            );
        }
        let none = json(&env, &["runs", "--job", "manual", "--json"]);
        assert_eq!(none["runs"].as_array().unwrap().len(), 0);

        // jobs: schedule, zone, next fire, paused, last outcome.
        let jobs = json(&env, &["jobs", "--json", "--config", cfg]);
        let tick = &jobs["jobs"][0];
        assert_eq!(tick["job"], "tick");
        assert_eq!(tick["schedule"], "@every 1s");
        assert_eq!(tick["timezone"], "UTC");
        assert!(tick["next"]["utc"].as_str().unwrap().ends_with('Z'));
        assert_eq!(tick["paused"], Value::Null);
        assert_eq!(tick["last"]["outcome"], "succeeded");
        assert_eq!(jobs["jobs"][1]["last"], Value::Null);

        // pause / resume through the control store, shown by `jobs`.
        let out = ok(
            &env,
            &["pause", "tick", "--note", "db upgrade", "--config", cfg],
        );
        assert!(out.contains("paused job \"tick\""), "{out}");
        let jobs = json(&env, &["jobs", "--json", "--config", cfg]);
        assert_eq!(jobs["jobs"][0]["paused"]["note"], "db upgrade");
        assert!(jobs["jobs"][0]["paused"]["since"].is_string());
        let table = ok(&env, &["jobs", "--config", cfg]);
        assert!(table.contains("(db upgrade)"), "{table}");
        // Pausing it again keeps the pause and its note unless a note is given.
        let since = jobs["jobs"][0]["paused"]["since"].clone();
        let out = ok(&env, &["pause", "tick", "--config", cfg]);
        assert!(
            out.contains("already paused") && out.contains("nothing changed"),
            "{out}"
        );
        let again = json(&env, &["jobs", "--json", "--config", cfg]);
        assert_eq!(
            (
                &again["jobs"][0]["paused"]["note"],
                &again["jobs"][0]["paused"]["since"]
            ),
            (&serde_json::json!("db upgrade"), &since),
            "{again}"
        );
        let out = ok(
            &env,
            &[
                "pause",
                "tick",
                "--note",
                "db upgrade, day 2",
                "--config",
                cfg,
            ],
        );
        assert!(
            out.contains("already paused") && out.contains("it was \"db upgrade\""),
            "{out}"
        );
        let again = json(&env, &["jobs", "--json", "--config", cfg]);
        assert_eq!(
            (
                &again["jobs"][0]["paused"]["note"],
                &again["jobs"][0]["paused"]["since"]
            ),
            (&serde_json::json!("db upgrade, day 2"), &since),
            "{again}"
        );
        let out = ok(&env, &["resume", "tick", "--config", cfg]);
        assert!(out.contains("resumed job \"tick\""), "{out}");
        let out = ok(&env, &["resume", "tick", "--config", cfg]);
        assert!(out.contains("was not paused"), "{out}");

        // trigger: several in the same second all run, each under its own key.
        let mut keys = Vec::new();
        for i in 0..4 {
            let payload = format!("{{\"i\": {i}}}");
            let out = ok(
                &env,
                &["trigger", "manual", "--payload", &payload, "--config", cfg],
            );
            keys.push(out.trim().to_owned());
        }
        for k in &keys {
            assert!(k.starts_with("manual@manual-"), "{k}");
        }
        assert_eq!(counts(&keys).len(), 4, "distinct keys: {keys:?}");
        eventually(WAIT, "every trigger to run", || async {
            let c = counts(&ran(&env, "manual"));
            keys.iter().all(|k| c.contains_key(k)).then_some(())
        })
        .await;
        let c = counts(&ran(&env, "manual"));
        assert!(c.values().all(|n| *n == 1), "each trigger ran once: {c:?}");
        let runs = json(
            &env,
            &["runs", "--job", "manual", "--json", "--config", cfg],
        );
        assert_eq!(runs["runs"].as_array().unwrap().len(), 4);
        // Without a config, a misspelt --job is caught by the recorded config's jobs.
        let err = fails(&env, 2, &["runs", "--job", "manul"]);
        assert!(
            err.contains("(recorded); did you mean \"manual\"?"),
            "{err}"
        );
        let err = fails(&env, 2, &["runs", "--job", "zzz-never"]);
        assert!(err.contains("no job \"zzz-never\""), "{err}");

        // dlq list on an empty queue.
        let dlq = json(&env, &["dlq", "list", "--json"]);
        assert_eq!(dlq["count"], 0);
        assert_eq!(
            ok(&env, &["dlq", "list"]).trim(),
            "the dead-letter queue is empty"
        );
    })
    .await;
}

#[tokio::test]
async fn ops_usage_errors_exit_2_and_unreachable_services_exit_1() {
    scoped("ops_errors", |env| async move {
        let cfg = config(&env, &job(&env, "tick", "@every 1s", ""));
        let cfg = cfg.as_str();
        for args in [
            vec!["pause", "tik", "--config", cfg],
            vec!["resume", "tik", "--config", cfg],
            vec!["trigger", "tik", "--config", cfg],
            vec!["runs", "--job", "tik", "--config", cfg],
            vec!["dlq", "replay", "--job", "tik", "--config", cfg],
            vec![
                "backfill",
                "tik",
                "--from",
                "2026-01-01T00:00:00Z",
                "--to",
                "2026-01-01T00:01:00Z",
                "--config",
                cfg,
            ],
        ] {
            let err = fails(&env, 2, &args);
            assert!(
                err.contains("no job \"tik\" in ") && err.contains("did you mean \"tick\"?"),
                "{args:?}: {err}"
            );
        }
        let err = fails(&env, 2, &["dlq", "replay", "--config", cfg]);
        assert!(
            err.contains("needs a selector: --job JOB, --key KEY or --all"),
            "{err}"
        );
        let err = fails(
            &env,
            2,
            &["dlq", "replay", "--key", "nope", "--config", cfg],
        );
        assert!(
            err.contains("--key: \"nope\" is not an occurrence key"),
            "{err}"
        );
        let err = fails(
            &env,
            2,
            &["trigger", "tick", "--payload", "{x", "--config", cfg],
        );
        assert!(err.contains("--payload is not valid JSON"), "{err}");
        let err = fails(
            &env,
            2,
            &[
                "backfill",
                "tick",
                "--from",
                "yesterday",
                "--to",
                "2026-01-01T00:00:00Z",
                "--config",
                cfg,
            ],
        );
        assert!(
            err.contains("--from \"yesterday\" is not an RFC 3339 instant"),
            "{err}"
        );
        let err = fails(
            &env,
            2,
            &[
                "backfill",
                "tick",
                "--from",
                "2026-01-02T00:00:00Z",
                "--to",
                "2026-01-01T00:00:00Z",
                "--config",
                cfg,
            ],
        );
        assert!(err.contains("is after --to"), "{err}");
        let err = fails(
            &env,
            2,
            &[
                "backfill",
                "tick",
                "--from",
                "2026-01-01T00:00:00Z",
                "--to",
                "2026-01-01T03:00:00Z",
                "--config",
                cfg,
            ],
        );
        assert!(
            err.contains("covers 10801 occurrences, more than 10000: pass --yes"),
            "{err}"
        );
        let err = fails(&env, 2, &["runs", "--limit", "0"]);
        assert!(err.contains("--limit must be at least 1"), "{err}");
        let err = fails(&env, 2, &["jobs"]);
        assert!(
            err.contains("no config recorded in the store of namespace"),
            "{err}"
        );

        // With no producer running, a trigger is stored and waits; the command says so.
        let out = env.run(&["trigger", "tick", "--config", cfg]);
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("tick@manual-"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no producer leads namespace"), "{err}");
        let out = ok(
            &env,
            &[
                "backfill",
                "tick",
                "--from",
                "2026-01-01T00:00:00.500Z",
                "--to",
                "2026-01-01T00:00:00.900Z",
                "--config",
                cfg,
            ],
        );
        assert!(out.contains("nothing to backfill"), "{out}");

        // Unreachable services: exit 1, the URL named without its password.
        let out = env
            .cronq()
            .env("CRONQ_REDIS_URL", "redis://admin:s3cret@127.0.0.1:1")
            .args(["runs"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot reach Redis at redis://***@127.0.0.1:1"),
            "{err}"
        );
        assert!(!err.contains("s3cret"), "{err}");
        // A refused connection says so once, and does not claim to have waited 10 s.
        assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
        assert!(
            !err.contains("within 10s") && !err.contains("--data"),
            "{err}"
        );
        // With a standalone's data file in the directory, the error says how to read it.
        std::fs::write(env.dir.join("cronq.db"), b"").expect("a cronq.db");
        for args in [&["runs"][..], &["dlq", "list"][..]] {
            let out = env
                .cronq()
                .env("CRONQ_REDIS_URL", "redis://127.0.0.1:1")
                .env("CRONQ_AMQP_URL", "amqp://guest:guest@127.0.0.1:1/%2f")
                .args(args)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains("pass --data cronq.db"), "{args:?}: {err}");
        }
        std::fs::remove_file(env.dir.join("cronq.db")).expect("cronq.db removed");
        let asked = std::time::Instant::now();
        let out = env
            .cronq()
            .env("CRONQ_AMQP_URL", "amqp://admin:s3cret@127.0.0.1:1/%2f")
            .args(["dlq", "list"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        // A one-shot command tries the broker once: a refusal is not retried for the
        // services' 10 s connect timeout (it took 6 to 10 s).
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(4),
            "{:?}",
            asked.elapsed()
        );
        assert!(err.contains("amqp://***@127.0.0.1:1/%2f"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    })
    .await;
}

#[tokio::test]
async fn pause_survives_a_leader_sigkill_and_resume_publishes_again() {
    scoped("ops_pause_failover", |env| async move {
        let cfg = config(&env, &job(&env, "tick", "@every 1s", ""));
        let cfg = cfg.as_str();
        let pids = [
            env.spawn("p1", &["producer", "--config", cfg]),
            env.spawn("p2", &["producer", "--config", cfg]),
        ];
        start_consumer(&env, cfg, "c");
        eventually(WAIT, "a first run", || async {
            (!ran(&env, "tick").is_empty()).then_some(())
        })
        .await;
        let (epoch, pid) = eventually(WAIT, "a leader", || leader(&env)).await;
        let log = if pid == pids[0] { "p1" } else { "p2" };
        ok(&env, &["pause", "tick", "--config", cfg]);
        eventually(WAIT, "the leader to honour the pause", || async {
            env.log(log)
                .contains("job paused: not publishing it")
                .then_some(())
        })
        .await;
        let paused_seen = Utc::now();
        env.signal(pid, Signal::SIGKILL);
        let (_, _) = eventually(WAIT, "the standby to lead", || async {
            leader(&env).await.filter(|(e, _)| *e > epoch)
        })
        .await;
        let jobs = json(&env, &["jobs", "--json", "--config", cfg]);
        assert!(jobs["jobs"][0]["paused"]["since"].is_string(), "{jobs}");
        // The new leader keeps skipping the paused job: its cursor moves on, nothing runs.
        let start = eventually(WAIT, "a cursor", || cursor(&env, "tick")).await;
        eventually(WAIT, "the new leader to pass 3 paused ticks", || async {
            cursor(&env, "tick").await.filter(|c| *c >= start + 3000)
        })
        .await;
        let resumed_at = Utc::now();
        ok(&env, &["resume", "tick", "--config", cfg]);
        eventually(WAIT, "a run after resume", || async {
            ran(&env, "tick")
                .iter()
                .any(|k| at(k) > resumed_at)
                .then_some(())
        })
        .await;
        let during: Vec<String> = ran(&env, "tick")
            .into_iter()
            .filter(|k| at(k) > paused_seen && at(k) <= resumed_at)
            .collect();
        assert!(during.is_empty(), "published while paused: {during:?}");
    })
    .await;
}

#[tokio::test]
async fn backfill_over_a_partly_run_range_yields_one_success_per_key() {
    scoped("ops_backfill", |env| async move {
        let cfg = config(
            &env,
            &job(
                &env,
                "tick",
                "@every 1s",
                "catchup = \"none\"\noverlap = \"allow\"",
            ),
        );
        let cfg = cfg.as_str();
        let before = Utc::now() - chrono::Duration::seconds(6);
        env.spawn("p", &["producer", "--config", cfg]);
        start_consumer(&env, cfg, "c1");
        start_consumer(&env, cfg, "c2");
        let first = eventually(WAIT, "three scheduled runs", || async {
            let r = ran(&env, "tick");
            (r.len() >= 3).then(|| r[2].clone())
        })
        .await;
        let from = before.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let to = at(&first);
        let to_text = to.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let out = ok(
            &env,
            &[
                "backfill", "tick", "--from", &from, "--to", &to_text, "--config", cfg,
            ],
        );
        assert!(out.contains("requested backfill"), "{out}");
        let from_t: DateTime<Utc> = from.parse().unwrap();
        let want: Vec<i64> = (from_t.timestamp()..=to.timestamp()).collect();
        eventually(WAIT, "every second of the range to run", || async {
            let c = counts(&ran(&env, "tick"));
            want.iter()
                .all(|s| c.keys().any(|k| at(k).timestamp() == *s))
                .then_some(())
        })
        .await;
        let c = counts(&ran(&env, "tick"));
        let twice: Vec<_> = c.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "ran more than once: {twice:?}");
    })
    .await;
}
