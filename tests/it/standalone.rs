//! `cronq standalone` with its defaults: producer and consumer in one process, on the data
//! file `cronq.db` in its working directory (`standalone_data` tests what the file keeps).
//! It must work with RabbitMQ and Redis unreachable, run an `@every 1s` job every second, expose moving
//! counters on `/metrics`, and exit 0 on SIGTERM within its grace period. And the producer
//! library on the memory ports: it publishes, and releases the lease on cancel.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::Utc;
use nix::sys::signal::Signal;

use crate::support::producer_process::{LEADER, WAIT};
use crate::support::{TestEnv, eventually, scoped};

/// A port that was free a moment ago.
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// Keys the job's command wrote, one per run.
fn keys(env: &TestEnv) -> Vec<String> {
    std::fs::read_to_string(env.dir.join("runs.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The value of an unlabelled-or-labelled counter line in Prometheus text.
fn counter(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub(crate) async fn scrape(port: u16) -> Option<String> {
    let resp = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .ok()?;
    resp.text().await.ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn standalone_runs_every_second_without_services_and_stops_on_sigterm() {
    scoped("standalone_every_second", |env| async move {
        let config = env.write_config(
            "cronq.toml",
            r#"
[[job]]
name = "tick"
schedule = "@every 1s"
command = ["/bin/sh", "-c", "echo \"$CRONQ_KEY\" >> runs.txt"]
"#,
        );
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let pid = {
            // Unreachable services: standalone must not need them.
            let mut cmd = env.cronq();
            cmd.env("CRONQ_AMQP_URL", "amqp://guest:guest@127.0.0.1:1/%2f")
                .env("CRONQ_REDIS_URL", "redis://127.0.0.1:1")
                .args(["standalone", "--config"])
                .arg(&config)
                .args(["--grace", "5s", "--admin-addr", &addr]);
            env.spawn_command("standalone", cmd)
        };

        // Counters move while it runs.
        let first = eventually(
            Duration::from_secs(15),
            "a first successful attempt in /metrics",
            || async {
                let m = scrape(port).await?;
                let n = counter(
                    &m,
                    "cronq_attempts_total{job=\"tick\",outcome=\"succeeded\"}",
                );
                (n >= 1.0).then_some(n)
            },
        )
        .await;
        let later = eventually(
            Duration::from_secs(15),
            "the success counter to grow",
            || async {
                let m = scrape(port).await?;
                let n = counter(
                    &m,
                    "cronq_attempts_total{job=\"tick\",outcome=\"succeeded\"}",
                );
                (n >= first + 2.0).then_some(m)
            },
        )
        .await;
        assert!(counter(&later, "cronq_occurrences_published_total{job=\"tick\"}") >= first + 2.0);
        assert!(counter(&later, "cronq_occurrences_expected_total{job=\"tick\"}") >= first + 2.0);
        assert!(
            counter(&later, "cronq_attempt_duration_seconds_count") >= first + 2.0,
            "{later}"
        );
        assert!(later.contains("cronq_leader 1"), "{later}");

        // One run per second: distinct, consecutive keys.
        let runs = eventually(Duration::from_secs(15), "four runs", || async {
            let k = keys(&env);
            (k.len() >= 4).then_some(k)
        })
        .await;
        let unique: BTreeSet<&String> = runs.iter().collect();
        assert_eq!(unique.len(), runs.len(), "a key ran twice: {runs:?}");
        let seconds: Vec<i64> = runs
            .iter()
            .map(|k| {
                let at = k.strip_prefix("tick@").expect("key of job tick");
                chrono::DateTime::parse_from_rfc3339(at)
                    .expect("RFC 3339")
                    .timestamp()
            })
            .collect();
        for pair in seconds.windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                1,
                "runs are not one per second: {runs:?}"
            );
        }

        // SIGTERM: exit 0 well within the grace period.
        let stopping = Instant::now();
        env.signal(pid, Signal::SIGTERM);
        let code = env.wait(pid, Duration::from_secs(10));
        assert_eq!(code, Some(0), "standalone log:\n{}", env.log("standalone"));
        // Its stderr went to a file: plain text, no colour codes.
        let log = env.log("standalone");
        assert!(log.contains("INFO") && !log.contains('\u{1b}'), "{log}");
        assert!(
            stopping.elapsed() < Duration::from_secs(6),
            "took {:?} to stop",
            stopping.elapsed()
        );
    })
    .await;
}

/// The README's first command: the shipped example in a standalone, as a newcomer runs it.
/// For 25 s everything succeeds but the job that fails on purpose, whose occurrences end in
/// the dead-letter queue; the report job, triggered, succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_config_runs_clean_but_for_its_intended_failure() {
    scoped("standalone_example", |env| async move {
        let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cronq.example.toml");
        let data = env.dir.join("example.db");
        let data = data.to_str().expect("a UTF-8 path");
        let pid = env.spawn(
            "standalone",
            &[
                "standalone",
                "--config",
                example,
                "--data",
                data,
                "--grace",
                "5s",
            ],
        );
        let started = Instant::now();
        // The standalone creates its data file at start; the trigger goes in once it has.
        eventually(
            Duration::from_secs(15),
            "the report job triggered",
            || async {
                let out = env.run(&[
                    "trigger",
                    "nightly-report",
                    "--config",
                    example,
                    "--data",
                    data,
                ]);
                out.status.success().then_some(())
            },
        )
        .await;
        let letters = eventually(
            Duration::from_secs(40),
            "the failing job's dead letter",
            || async {
                let out = env.run(&["dlq", "list", "--json", "--data", data]);
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
                (v["count"].as_u64() >= Some(1)).then_some(v)
            },
        )
        .await;
        if let Some(rest) = Duration::from_secs(25).checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        env.signal(pid, Signal::SIGTERM);
        assert_eq!(
            env.wait(pid, Duration::from_secs(15)),
            Some(0),
            "{}",
            env.log("standalone")
        );

        let out = env.run(&["dlq", "list", "--json", "--data", data]);
        let letters_now: serde_json::Value = serde_json::from_slice(&out.stdout).expect("dlq JSON");
        for l in letters_now["letters"].as_array().expect("letters") {
            assert_eq!(
                l["job"], "fails-on-purpose",
                "an unintended dead letter: {l}\n{letters}"
            );
        }
        let out = env.run(&["runs", "--json", "--limit", "1000", "--data", data]);
        let runs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runs JSON");
        let runs = runs["runs"].as_array().expect("runs");
        let of = |job: &str, outcome: &str| {
            runs.iter()
                .filter(|r| {
                    r["key"]
                        .as_str()
                        .is_some_and(|k| k.starts_with(&format!("{job}@")))
                        && r["outcome"] == outcome
                })
                .count()
        };
        assert!(of("hello", "succeeded") >= 4, "{runs:?}");
        assert_eq!(of("nightly-report", "succeeded"), 1, "{runs:?}");
        assert!(
            of("fails-on-purpose", "retrying") >= 1 && of("fails-on-purpose", "failed") >= 1,
            "{runs:?}"
        );
        for r in runs {
            let key = r["key"].as_str().unwrap_or_default();
            assert!(
                r["outcome"] == "succeeded" || key.starts_with("fails-on-purpose@"),
                "only the job that fails on purpose fails: {r}"
            );
        }
        // A run that succeeds is told at the default log level (info), with its job.
        let log = env.log("standalone");
        assert!(
            log.lines()
                .any(|l| l.contains("attempt succeeded") && l.contains("nightly-report")),
            "{log}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn standalone_lets_a_running_attempt_finish_on_sigterm() {
    scoped("standalone_grace", |env| async move {
        let config = env.write_config(
            "cronq.toml",
            r#"
[[job]]
name = "slow"
schedule = "@every 1s"
overlap = "skip"
command = ["/bin/sh", "-c", "echo start >> runs.txt; sleep 2; echo \"$CRONQ_KEY\" >> done.txt"]
"#,
        );
        let pid = env.spawn(
            "standalone",
            &[
                "standalone",
                "--config",
                config.to_str().unwrap(),
                "--grace",
                "10s",
            ],
        );
        eventually(Duration::from_secs(15), "an attempt to start", || async {
            (!keys(&env).is_empty()).then_some(())
        })
        .await;
        env.signal(pid, Signal::SIGTERM);
        let code = env.wait(pid, Duration::from_secs(15));
        assert_eq!(code, Some(0), "standalone log:\n{}", env.log("standalone"));
        let done = std::fs::read_to_string(env.dir.join("done.txt")).unwrap_or_default();
        assert!(
            !done.trim().is_empty(),
            "the running attempt was not let finish"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_process_producer_on_memory_ports_publishes_and_releases_on_cancel() {
    use std::sync::Arc;

    use cronq_memory::MemoryBroker;
    use cronq_memory::MemoryLease;
    use cronq_producer::Producer;
    use cronq_shared::config::Config;
    use cronq_shared::control::Control;
    use cronq_shared::lease::Lease;
    use cronq_shared::names::QueueName;
    use tokio_util::sync::CancellationToken;

    let toml = format!("{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\n");
    let config = Config::from_toml(&toml, std::path::Path::new("memory.toml")).unwrap();
    let broker = MemoryBroker::new();
    let lease = MemoryLease::new();
    let control = Control::new(cronq_memory::MemoryControl::new(&lease));
    // No reloader: the config sender is dropped at once, which must not upset the leader.
    let (_, config_rx) = tokio::sync::watch::channel(Arc::new(config));
    let producer = Producer::new(
        Arc::new(broker.clone()),
        Arc::new(lease.clone()),
        control.clone(),
        config_rx,
        "memory-1",
    );
    let token = CancellationToken::new();
    let running = tokio::spawn(producer.run(token.clone()));
    let queue = QueueName::new("default").unwrap();
    eventually(WAIT, "two published occurrences", || async {
        (broker.ready(&queue).unwrap_or(0) >= 2).then_some(())
    })
    .await;
    let cursor =
        control.cursors().await.unwrap()[&cronq_shared::names::JobName::new("tick").unwrap()];
    assert!(Utc::now() - cursor < chrono::TimeDelta::seconds(5));
    assert_eq!(lease.holder().await.unwrap().unwrap().instance, "memory-1");
    token.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(
        lease.holder().await.unwrap(),
        None,
        "the lease is released on shutdown"
    );
}

/// The README's walk-through: the example's failing job dead-lettered, "fixed" in the file,
/// the running standalone reloaded with SIGHUP, and `dlq replay` runs the letter again
/// under its key, with the fixed command: it succeeds and the queue is empty.
#[tokio::test(flavor = "multi_thread")]
async fn the_readme_walk_through_fixes_and_replays_the_failing_job() {
    scoped("standalone_walk_through", |env| async move {
        let example = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/cronq.example.toml"
        ))
        .expect("the example config");
        let config = env.write_config("cronq.toml", &example);
        let config = config.to_str().expect("a UTF-8 path");
        let data = env.dir.join("cronq.db");
        let data = data.to_str().expect("a UTF-8 path");
        let pid = env.spawn(
            "standalone",
            &[
                "standalone",
                "--config",
                config,
                "--data",
                data,
                "--grace",
                "5s",
            ],
        );
        let letters = |env: &crate::support::TestEnv| -> Option<serde_json::Value> {
            let out = env.run(&["dlq", "list", "--json", "--data", data]);
            serde_json::from_slice(&out.stdout).ok()
        };
        let dead = eventually(
            Duration::from_secs(45),
            "the failing job's dead letter",
            || async {
                let v = letters(&env)?;
                let key = v["letters"]
                    .as_array()?
                    .iter()
                    .find(|l| l["job"] == "fails-on-purpose")?["key"]
                    .as_str()?
                    .to_owned();
                Some(key)
            },
        )
        .await;

        // "Fix" it as the example's comment says, and reload the running standalone.
        let fixed = example.replace(
            "see its comment in the example config' >&2; exit 1\"]",
            "see its comment in the example config' >&2; exit 0\"]",
        );
        assert_ne!(
            fixed, example,
            "the example's failing command is where the README says"
        );
        std::fs::write(config, &fixed).expect("the fixed config");
        env.signal(pid, Signal::SIGHUP);
        eventually(Duration::from_secs(10), "the reload", || async {
            env.log("standalone")
                .contains("config reloaded")
                .then_some(())
        })
        .await;

        let out = env.run(&[
            "dlq",
            "replay",
            "--job",
            "fails-on-purpose",
            "--data",
            data,
            "--config",
            config,
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eventually(
            Duration::from_secs(20),
            "the replayed letter's success",
            || async {
                let out = env.run(&[
                    "runs",
                    "--json",
                    "--job",
                    "fails-on-purpose",
                    "--data",
                    data,
                ]);
                let runs: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
                runs["runs"]
                    .as_array()?
                    .iter()
                    .any(|r| r["key"] == dead.as_str() && r["outcome"] == "succeeded")
                    .then_some(())
            },
        )
        .await;
        // Every later occurrence succeeds too: none of the job is dead-lettered again.
        tokio::time::sleep(Duration::from_secs(21)).await;
        let left: Vec<serde_json::Value> = letters(&env)
            .and_then(|v| v["letters"].as_array().cloned())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
        env.signal(pid, Signal::SIGTERM);
        assert_eq!(
            env.wait(pid, Duration::from_secs(15)),
            Some(0),
            "{}",
            env.log("standalone")
        );
    })
    .await;
}

/// `cronq runs --key K --output` shows what each attempt printed, kept with its run, and
/// `--json` gives it as each run's `output`.
#[tokio::test(flavor = "multi_thread")]
async fn runs_output_shows_what_an_attempt_printed() {
    scoped("standalone_output", |env| async move {
        let config = env.write_config(
            "cronq.toml",
            r#"
[[job]]
name = "talky"
schedule = "@every 1s"
command = ["sh", "-c", "echo \"report for $CRONQ_KEY\"; echo 'disk almost full' >&2"]
"#,
        );
        let config = config.to_str().expect("a UTF-8 path");
        let data = env.dir.join("cronq.db");
        let data = data.to_str().expect("a UTF-8 path");
        let pid = env.spawn("standalone", &["standalone", "--config", config, "--data", data]);
        let key = eventually(Duration::from_secs(20), "a run of talky", || async {
            let out = env.run(&["runs", "--json", "--job", "talky", "--limit", "1", "--data", data]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            Some(v["runs"][0]["key"].as_str()?.to_owned())
        })
        .await;
        let out = env.run(&["runs", "--key", &key, "--output", "--data", data]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            text.contains(&format!("== {key} attempt 1 (succeeded)\n-- stdout\nreport for {key}\n-- stderr\ndisk almost full\n")),
            "{text}"
        );
        let out = env.run(&["runs", "--key", &key, "--output", "--json", "--data", data]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runs JSON");
        assert_eq!(v["runs"].as_array().map(Vec::len), Some(1), "{v}");
        assert_eq!(v["runs"][0]["output"]["stdout"], format!("report for {key}\n"));
        assert_eq!(v["runs"][0]["output"]["stderr"], "disk almost full\n");
        // Without --output, the JSON is as before; a malformed key is a usage error.
        let out = env.run(&["runs", "--key", &key, "--json", "--data", data]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runs JSON");
        assert!(v["runs"][0].get("output").is_none(), "{v}");
        let out = env.run(&["runs", "--key", "talky-yesterday", "--data", data]);
        assert_eq!(out.status.code(), Some(2));
        env.signal(pid, Signal::SIGTERM);
        assert_eq!(env.wait(pid, Duration::from_secs(15)), Some(0), "{}", env.log("standalone"));
    })
    .await;
}
