//! Alerts through real processes, on a fleet (RabbitMQ and Redis) and on a standalone's
//! data file: a failing job gives one grouped alert per sink (a signed webhook, a Slack
//! post, an email over STARTTLS with AUTH) and a resolved one after the fix; a run that
//! runs past `sla.max_duration` is told while it runs, a missed one when it is missed;
//! a queue that no consumer serves and an occurrence not started within
//! `sla.start_within` are told; a fleet where no producer leads is told (after twice the
//! lease, at least 10 s, not before) and resolved when one leads; and a webhook that
//! answers only after 10 s delays no job's run.

use std::time::Duration;

use chrono::Utc;
use cronq_shared::runlog::Outcome;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::support::alert_sinks::{HookServer, Received, SMTP_PASSWORD, SmtpServer};
use crate::support::backends::Backend;
use crate::support::deployment::{Deployment, LEADER, Options, Running, argv};
use crate::support::{TestEnv, scoped, until};

const SECRET: &str = "hook-secret";

/// The notices posted to `/hook` of `kind` and `status`.
fn notices(hooks: &HookServer, kind: &str, status: &str) -> Vec<Value> {
    hooks
        .posts("/hook")
        .iter()
        .map(Received::json)
        .filter(|n| n["kind"] == kind && n["status"] == status)
        .collect()
}

/// How many of `job`'s history entries ended `outcome`.
async fn ended(running: &Running, job: &str, outcome: Outcome) -> usize {
    running
        .entries(job)
        .await
        .iter()
        .filter(|e| e.outcome == outcome)
        .count()
}

/// Waits up to `within` for the first notices of `kind` and `status`; on timeout the test
/// fails with every process's last log lines.
async fn told(
    hooks: &HookServer,
    running: &Running,
    kind: &str,
    status: &str,
    within: Duration,
) -> Vec<Value> {
    until(within, &format!("a {status} {kind} notice"), || async {
        let n = notices(hooks, kind, status);
        if n.is_empty() {
            Err(running.logs())
        } else {
            Ok(n)
        }
    })
    .await
}

/// The webhook's signature checked as a receiver would, with HMAC-SHA-256 of
/// `TIMESTAMP.BODY`.
fn check_signature(post: &Received) {
    let stamp = post.headers["x-cronq-timestamp"].to_str().unwrap();
    let sig = post.headers["x-cronq-signature"].to_str().unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{stamp}.").as_bytes());
    mac.update(&post.body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sig, format!("sha256={hex}"), "the signature of {post:?}");
    let age = Utc::now().timestamp() - stamp.parse::<i64>().unwrap();
    assert!((0..120).contains(&age), "a fresh timestamp: {stamp}");
}

async fn failing_then_fixed(backend: Backend, env: TestEnv) {
    let hooks = HookServer::start(Duration::ZERO).await;
    let smtp = SmtpServer::start(&env).await;
    let broken = env.dir.join("broken");
    std::fs::write(&broken, "").unwrap();
    let check = format!("test ! -e '{}'", broken.display());
    let config = format!(
        r#"{LEADER}
[[job]]
name = "flaky"
schedule = "@every 1s"
command = {}
max_attempts = 1
timeout = "5s"

[[alert]]
name = "hook"
kind = "webhook"
url = "http://{addr}/hook"
secret = {{ env = "CRONQ_TEST_ALERT_SECRET" }}
repeat_interval = "1h"
dashboard_url = "http://dash.example/"

[[alert]]
name = "mail"
kind = "email"
smtp = "{smtp}"
from = "cronq@example.com"
to = ["ops@example.com", "oncall@example.com"]
username = "cronq"
password = {{ env = "CRONQ_TEST_SMTP_PASSWORD" }}
ca_file = "{ca}"
events = ["dead_lettered"]

[[alert]]
kind = "slack"
url = "http://{addr}/slack"
events = ["dead_lettered"]
"#,
        argv(&["/bin/sh", "-c", &check]),
        addr = hooks.addr,
        smtp = smtp.host_port,
        ca = smtp.ca_file,
    );
    let options = Options {
        env: vec![
            ("CRONQ_TEST_ALERT_SECRET", SECRET.into()),
            ("CRONQ_TEST_SMTP_PASSWORD", SMTP_PASSWORD.into()),
        ],
        ..Options::default()
    };
    let running = Running::start_with(Deployment::on(backend), &env, &config, options).await;
    until(Duration::from_secs(30), "three dead letters", || async {
        let failed = ended(&running, "flaky", Outcome::Failed).await;
        if failed >= 3 {
            Ok(())
        } else {
            Err(running.logs())
        }
    })
    .await;
    // A tick for the leader to read the last of them, and for the sends.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let firing = notices(&hooks, "dead_lettered", "firing");
    assert_eq!(
        firing.len(),
        1,
        "one notice for the group: {firing:?}\n{}",
        running.logs()
    );
    let first = &firing[0];
    assert_eq!(first["job"], "flaky");
    assert_eq!(first["count"], 1);
    assert!(
        first["subject"].as_str().unwrap().starts_with("flaky@"),
        "{first}"
    );
    assert!(
        first["summary"].as_str().unwrap().contains("dead-lettered"),
        "{first}"
    );
    assert_eq!(first["link"], "http://dash.example/jobs/flaky");
    for post in hooks.posts("/hook") {
        check_signature(&post);
    }
    let slack = hooks.posts("/slack");
    assert_eq!(slack.len(), 1, "{slack:?}");
    let text = slack[0].json()["text"].as_str().unwrap().to_owned();
    assert!(text.contains("FIRING dead_lettered: job flaky"), "{text}");
    let mails = until(Duration::from_secs(10), "the email", || async {
        let m = smtp.messages();
        if m.len() == 1 {
            Ok(m)
        } else {
            Err(format!("{m:?}"))
        }
    })
    .await;
    assert!(
        mails[0].starts_with("X-Tls: yes"),
        "sent over STARTTLS: {}",
        mails[0]
    );
    assert!(
        mails[0].contains("X-Rcpt: ops@example.com,oncall@example.com"),
        "{}",
        mails[0]
    );
    assert!(
        mails[0].contains("Subject: [cronq] FIRING dead_lettered: job flaky"),
        "{}",
        mails[0]
    );

    // The fix: the next success resolves the group, once, counting every failure.
    std::fs::remove_file(&broken).unwrap();
    let resolved = told(
        &hooks,
        &running,
        "dead_lettered",
        "resolved",
        Duration::from_secs(20),
    )
    .await;
    let failed = ended(&running, "flaky", Outcome::Failed).await;
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(
        resolved[0]["count"].as_u64().unwrap() as usize,
        failed,
        "{resolved:?}"
    );
    assert!(
        resolved[0]["summary"]
            .as_str()
            .unwrap()
            .contains("succeeded"),
        "{resolved:?}"
    );
    until(Duration::from_secs(10), "the resolved email", || async {
        let m = smtp.messages();
        if m.len() == 2 && m[1].contains("Subject: [cronq] RESOLVED dead_lettered: job flaky") {
            Ok(())
        } else {
            Err(format!("{m:?}"))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        notices(&hooks, "dead_lettered", "firing").len(),
        1,
        "no repeat within the hour"
    );
    assert_eq!(hooks.posts("/slack").len(), 2, "firing, then resolved");
}

#[tokio::test]
async fn a_failing_job_alerts_once_per_group_then_resolves_on_a_fleet() {
    scoped("alerts-fail-real", |env| {
        failing_then_fixed(Backend::Real, env)
    })
    .await;
}

#[tokio::test]
async fn a_failing_job_alerts_once_per_group_then_resolves_on_a_data_file() {
    scoped("alerts-fail-sqlite", |env| {
        failing_then_fixed(Backend::Sqlite, env)
    })
    .await;
}

async fn breaches(backend: Backend, env: TestEnv) {
    let hooks = HookServer::start(Duration::ZERO).await;
    let slow = argv(&["/bin/sh", "-c", "sleep 4"]);
    let mut config = format!(
        r#"{LEADER}
[[job]]
name = "slow"
schedule = "@every 1s"
command = {slow}
timeout = "10s"
sla = {{ max_duration = "1s" }}

[[job]]
name = "jam"
schedule = "@every 1s"
command = {slow}
overlap = "queue"
deadline = "1s"
timeout = "10s"

[[alert]]
kind = "webhook"
url = "http://{addr}/hook"
"#,
        addr = hooks.addr,
    );
    let mut options = Options::default();
    if backend == Backend::Real {
        // A queue no consumer serves, and a job on it that must start within a second.
        config.push_str(
            "\n[[job]]\nname = \"stranded\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\nqueue = \"nobody\"\nsla = { start_within = \"1s\" }\n",
        );
        options.consumer_args = vec!["--queues", "default"];
        env.track_queue("nobody");
    }
    let running = Running::start_with(Deployment::on(backend), &env, &config, options).await;

    let long = told(
        &hooks,
        &running,
        "too_long",
        "firing",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(long[0]["job"], "slow");
    assert!(
        long[0]["summary"]
            .as_str()
            .unwrap()
            .contains("has been running for"),
        "told while it runs, not after: {long:?}"
    );
    let missed = told(
        &hooks,
        &running,
        "missed",
        "firing",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(missed[0]["job"], "jam", "{missed:?}");

    if backend == Backend::Real {
        let unserved = told(
            &hooks,
            &running,
            "no_consumer",
            "firing",
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(unserved.len(), 1, "{unserved:?}");
        assert_eq!(unserved[0]["subject"], "queue nobody", "{unserved:?}");
        let late = until(Duration::from_secs(30), "a late_start notice", || async {
            let n = notices(&hooks, "late_start", "firing");
            if n.iter().any(|n| n["job"] == "stranded") {
                Ok(n)
            } else {
                Err(running.logs())
            }
        })
        .await;
        let stranded: Vec<_> = late.iter().filter(|n| n["job"] == "stranded").collect();
        assert_eq!(stranded.len(), 1, "grouped: {late:?}");
        assert!(
            stranded[0]["summary"]
                .as_str()
                .unwrap()
                .contains("not started"),
            "{stranded:?}"
        );
    }
    // Grouped: a job and kind is told again only after a success resolved it (`jam`
    // succeeds between its misses), however often it happened meanwhile (how many events
    // one notice stands for is the failing-job test's).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let misses = ended(&running, "jam", Outcome::Missed).await;
    for kind in ["too_long", "missed"] {
        let told: Vec<String> = hooks
            .posts("/hook")
            .iter()
            .map(Received::json)
            .filter(|n| n["kind"] == kind)
            .map(|n| n["status"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            told.iter().step_by(2).all(|s| s == "firing")
                && told.iter().skip(1).step_by(2).all(|s| s == "resolved"),
            "{kind}: firing, then resolved before the next firing: {told:?}"
        );
        assert!(misses >= 1 || kind != "missed");
    }
}

#[tokio::test]
async fn sla_breaches_and_misses_alert_on_a_fleet() {
    scoped("alerts-sla-real", |env| breaches(Backend::Real, env)).await;
}

#[tokio::test]
async fn sla_breaches_and_misses_alert_on_a_data_file() {
    scoped("alerts-sla-sqlite", |env| breaches(Backend::Sqlite, env)).await;
}

/// A webhook that answers only after 10 s, told of every failed attempt: the other job
/// runs every second on time meanwhile.
#[tokio::test]
async fn a_slow_webhook_delays_no_run() {
    scoped("alerts-slow-hook", |env| async move {
        let hooks = HookServer::start(Duration::from_secs(10)).await;
        let config = format!(
            r#"{LEADER}
[[job]]
name = "boom"
schedule = "@every 1s"
command = ["/bin/sh", "-c", "exit 1"]
max_attempts = 1

[[job]]
name = "tick"
schedule = "@every 1s"
command = ["true"]

[[alert]]
kind = "webhook"
url = "http://{addr}/hook"
events = ["all"]
repeat_interval = "1s"
timeout = "30s"
"#,
            addr = hooks.addr,
        );
        let running = Running::start(Deployment::Fleet, &env, &config).await;
        let first = until(
            Duration::from_secs(30),
            "the webhook's first request",
            || async {
                hooks
                    .posts("/hook")
                    .first()
                    .map(|p| p.at)
                    .ok_or_else(|| running.logs())
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(12)).await;
        let window = first..first + chrono::TimeDelta::seconds(10);
        let ticks: Vec<_> = running
            .entries("tick")
            .await
            .into_iter()
            .filter(|e| e.at.is_some_and(|at| window.contains(&at)))
            .collect();
        assert!(
            ticks.len() >= 9,
            "tick ran every second while the webhook hung: {ticks:?}"
        );
        for e in &ticks {
            assert_eq!(e.outcome, Outcome::Succeeded, "{e:?}");
            let scheduled = e.key.parse::<cronq_shared::key::OccurrenceKey>().unwrap();
            let late = e.at.unwrap() - scheduled.scheduled_at().unwrap();
            assert!(
                late < chrono::TimeDelta::milliseconds(1500),
                "{} started {late} late while the webhook hung",
                e.key
            );
        }
        assert!(
            hooks.posts("/hook").len() <= 3,
            "one request at a time to the slow sink: {}",
            hooks.posts("/hook").len()
        );
    })
    .await;
}

/// A producer that cannot lead (its lease writes wait for a replica the Redis of the tests
/// does not have, so they are never confirmed, though the lease key is written) is the
/// fleet's only producer: `no_leader` is told after `no_leader_after` (10 s here), not
/// before, by that standby; once a second producer leads, the first resolves it.
#[tokio::test]
async fn a_fleet_with_no_leader_is_told_then_resolved() {
    scoped("alerts-no-leader", |env| async move {
        let hooks = HookServer::start(Duration::ZERO).await;
        let config = env.write_config(
            "cronq.toml",
            &format!(
                r#"{LEADER}
[[job]]
name = "tick"
schedule = "@every 1s"
command = ["true"]

[[alert]]
kind = "webhook"
url = "http://{addr}/hook"
events = ["no_leader"]
repeat_interval = "1s"
"#,
                addr = hooks.addr,
            ),
        );
        let config = config.to_string_lossy().into_owned();
        let mut stuck = env.cronq();
        stuck
            .env("CRONQ_REDIS_MIN_REPLICAS", "1")
            .args(["producer", "--config", &config]);
        let started = tokio::time::Instant::now();
        let stuck_pid = env.spawn_command("stuck", stuck);
        let no_leader = |status: &'static str| {
            let hooks = &hooks;
            let env = &env;
            async move {
                until(
                    Duration::from_secs(40),
                    &format!("a {status} no_leader notice"),
                    || async {
                        let n = notices(hooks, "no_leader", status);
                        if n.is_empty() {
                            Err(env.log("stuck"))
                        } else {
                            Ok(n)
                        }
                    },
                )
                .await
            }
        };
        // Before the threshold: nothing, though the process tries (and writes the lease
        // key) every second.
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(hooks.posts("/hook").len(), 0, "told before 10 s");
        let fired = no_leader("firing").await;
        let after = started.elapsed();
        assert!(after >= Duration::from_secs(10), "told after {after:?}");
        assert_eq!(fired.len(), 1, "{fired:?}");
        // The stuck producer's lease key comes and goes (written at each try, expiring
        // between them): told either way, as the key held by a producer that does not
        // lead, or as no key at all.
        let summary = fired[0]["summary"].as_str().unwrap_or_default();
        assert!(summary.contains("nothing is being scheduled"), "{summary}");
        assert!(
            env.log("stuck").contains("not confirmed"),
            "{}",
            env.log("stuck")
        );

        // Frozen, the stuck producer cannot write the lease key while another takes it;
        // woken once that one leads, it sees a leader and resolves what it told.
        env.signal(stuck_pid, nix::sys::signal::Signal::SIGSTOP);
        env.spawn("leader", &["producer", "--config", &config]);
        until(
            Duration::from_secs(30),
            "the second producer leading",
            || async {
                if env.log("leader").contains("became leader") {
                    Ok(())
                } else {
                    Err(env.log("leader"))
                }
            },
        )
        .await;
        env.signal(stuck_pid, nix::sys::signal::Signal::SIGCONT);
        let resolved = no_leader("resolved").await;
        assert_eq!(resolved.len(), 1, "{resolved:?}");
        assert!(
            resolved[0].to_string().contains(" leads (epoch "),
            "{resolved:?}"
        );
        assert_eq!(notices(&hooks, "no_leader", "firing").len(), 1);
    })
    .await;
}
