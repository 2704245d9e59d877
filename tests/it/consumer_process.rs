//! The real `cronq consumer` binary: crash safety (SIGKILL mid-job), long jobs past the
//! broker's `consumer_timeout`, graceful shutdown, and usage errors.

use std::process::Command;
use std::time::Duration;

use cronq_shared::runlog::Outcome;
use nix::sys::signal::Signal;

use crate::support::consumer_process::{WAIT, consumer_args, lines, publish, runs, started};
use crate::support::free_addr;
use crate::support::occurrences::occurrence;
use crate::support::{eventually, scoped};

#[tokio::test]
async fn consumer_sigkill_mid_job_runs_once_elsewhere_after_the_lease() {
    scoped("consumer_kill", |env| async move {
        env.track_queue("default");
        let starts = env.dir.join("starts");
        let config = env.write_config(
            "cronq.toml",
            &format!(
                r#"
[[job]]
name = "slow"
schedule = "@every 1s"
command = ["sh", "-c", "echo $CRONQ_ATTEMPT >> {}; sleep 3"]
"#,
                starts.display()
            ),
        );
        let config = config.to_str().unwrap();
        let a = env.spawn("a", &consumer_args(config, "a", "2s"));
        started(&env, "a").await;
        publish(&env, occurrence("slow", 1)).await;
        eventually(WAIT, "consumer a to start the job", || async {
            (lines(&starts) == 1).then_some(())
        })
        .await;
        env.spawn("b", &consumer_args(config, "b", "2s"));
        started(&env, "b").await;
        env.signal(a, Signal::SIGKILL);
        let done = eventually(WAIT, "a completed run", || async {
            let r = runs(&env, "slow").await;
            (!r.is_empty()).then_some(r)
        })
        .await;
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(done[0].outcome, Outcome::Succeeded);
        assert_eq!(done[0].consumer, "b");
        assert_eq!(done[0].attempt, 1, "same attempt, run again");
        assert_eq!(lines(&starts), 2, "started by a, then once by b");
    })
    .await;
}

/// Sets a RabbitMQ application setting now and restores it when dropped, even on panic.
struct BrokerSetting {
    key: &'static str,
    restore: &'static str,
}

impl BrokerSetting {
    fn set(key: &'static str, value: &str, restore: &'static str) -> Self {
        rabbitmqctl_set(key, value);
        Self { key, restore }
    }
}

fn rabbitmqctl_set(key: &str, value: &str) {
    let status = Command::new("rabbitmqctl")
        .args([
            "eval",
            &format!("application:set_env(rabbit, {key}, {value})."),
        ])
        .output()
        .expect("rabbitmqctl runs (the test needs the local RabbitMQ's CLI)");
    assert!(
        status.status.success(),
        "rabbitmqctl set_env {key} failed: {status:?}"
    );
}

impl Drop for BrokerSetting {
    fn drop(&mut self) {
        rabbitmqctl_set(self.key, self.restore);
    }
}

#[tokio::test]
async fn consumer_long_job_outlives_the_broker_consumer_timeout_and_runs_once() {
    scoped("consumer_long", |env| async move {
        // Broker-global: a 5 s delivery timeout, checked every second (default: 30 min,
        // checked every minute). Channels read the timeout when they open, so set it first.
        let _timeout = BrokerSetting::set("consumer_timeout", "5000", "1800000");
        let _tick = BrokerSetting::set("channel_tick_interval", "1000", "60000");
        // Control: a plain consumer that holds a delivery unacked has its channel closed
        // by the broker within the test, so the setting is really in force.
        let control = env.amqp().await;
        let ctl = control.create_channel().await.unwrap();
        let q = ctl
            .queue_declare(
                "".into(),
                lapin::options::QueueDeclareOptions {
                    exclusive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .unwrap();
        ctl.basic_publish(
            "".into(),
            q.name().clone(),
            Default::default(),
            b"hold me",
            Default::default(),
        )
        .await
        .unwrap();
        let mut held = ctl
            .basic_consume(
                q.name().clone(),
                "control".into(),
                Default::default(),
                Default::default(),
            )
            .await
            .unwrap();
        let _delivery = futures_util::StreamExt::next(&mut held).await.unwrap().unwrap();
        env.track_queue("default");
        let starts = env.dir.join("starts");
        let config = env.write_config(
            "cronq.toml",
            &format!(
                r#"
[[job]]
name = "long"
schedule = "@every 1s"
timeout = "1m"
command = ["sh", "-c", "echo start >> {}; sleep 9"]
"#,
                starts.display()
            ),
        );
        let admin = free_addr();
        let mut args = consumer_args(config.to_str().unwrap(), "c", "2s");
        args.extend(["--admin-addr", admin.as_str()]);
        env.spawn("c", &args);
        started(&env, "c").await;
        publish(&env, occurrence("long", 1)).await;
        let done = eventually(WAIT, "the long job to complete", || async {
            let r = runs(&env, "long").await;
            (!r.is_empty()).then_some(r)
        })
        .await;
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(done[0].outcome, Outcome::Succeeded);
        assert!(done[0].duration >= Duration::from_secs(9));
        assert_eq!(lines(&starts), 1, "exactly one run");
        let log = env.log("c");
        assert!(
            !log.contains("WARN") && !log.contains("ERROR"),
            "channel trouble:\n{log}"
        );
        // The broker never redelivered it (a closed channel would have), nothing was a dup.
        let metrics = reqwest::get(format!("http://{admin}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains(r#"cronq_attempts_total{job="long",outcome="succeeded"} 1"#),
            "{metrics}"
        );
        assert!(!metrics.contains("cronq_redeliveries_total"), "{metrics}");
        assert!(
            !metrics.contains("cronq_duplicates_acked_total"),
            "{metrics}"
        );
        assert!(
            !ctl.status().connected(),
            "the control channel holding a delivery for 9 s was not closed: the lowered consumer_timeout was not in force"
        );
        let _ = control.close(200, "test done".into()).await;
    })
    .await;
}

#[tokio::test]
async fn consumer_sigterm_releases_the_running_job_to_run_again_at_once() {
    scoped("consumer_term", |env| async move {
        env.track_queue("default");
        let starts = env.dir.join("starts");
        let config = env.write_config(
            "cronq.toml",
            &format!(
                r#"
[[job]]
name = "stubborn"
schedule = "@every 1s"
command = ["sh", "-c", "echo x >> {0}; [ $(wc -l < {0}) -ge 2 ] || sleep 60"]
"#,
                starts.display()
            ),
        );
        let config = config.to_str().unwrap();
        // Default 30 s lease: a rerun within the test's wait comes from the release, not
        // from the lease lapsing.
        let mut args = consumer_args(config, "a", "30s");
        args.extend(["--grace", "1s"]);
        let a = env.spawn("a", &args);
        started(&env, "a").await;
        publish(&env, occurrence("stubborn", 1)).await;
        eventually(WAIT, "consumer a to start the job", || async {
            (lines(&starts) == 1).then_some(())
        })
        .await;
        env.signal(a, Signal::SIGTERM);
        assert_eq!(
            env.wait(a, WAIT),
            Some(0),
            "graceful exit:\n{}",
            env.log("a")
        );
        env.spawn("b", &consumer_args(config, "b", "30s"));
        let done = eventually(
            Duration::from_secs(20),
            "b to run the released job",
            || async {
                let r = runs(&env, "stubborn").await;
                r.iter()
                    .any(|r| r.outcome == Outcome::Succeeded)
                    .then_some(r)
            },
        )
        .await;
        let outcomes: Vec<_> = done
            .iter()
            .rev()
            .map(|r| (r.consumer.as_str(), r.outcome))
            .collect();
        assert_eq!(
            outcomes,
            [("a", Outcome::Interrupted), ("b", Outcome::Succeeded)]
        );
    })
    .await;
}

#[tokio::test]
async fn consumer_unknown_queue_is_a_usage_error() {
    scoped("consumer_queues", |env| async move {
        let config = env.write_config(
            "cronq.toml",
            r#"
[[job]]
name = "a"
schedule = "@every 1s"
command = ["true"]

[[job]]
name = "b"
schedule = "@every 1s"
queue = "reports"
command = ["true"]
"#,
        );
        let out = env.run(&[
            "consumer",
            "--config",
            config.to_str().unwrap(),
            "--queues",
            "reports,nope",
        ]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "cronq: unknown queue \"nope\" in --queues: the config's queues are default, reports\n"
        );
    })
    .await;
}
