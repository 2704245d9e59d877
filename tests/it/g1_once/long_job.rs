//! A job that runs past the broker's `consumer_timeout` runs once: the consumer acked it
//! when it claimed it, so the broker has nothing to redeliver.

use std::process::Command;
use std::time::Duration;

use cronq_shared::runlog::Outcome;

use crate::support::consumer_process::{WAIT, consumer_args, lines, publish, runs, started};
use crate::support::occurrences::occurrence;
use crate::support::{eventually, scoped};
use crate::support::{free_addr, metrics_page};

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
        let metrics = metrics_page(&admin).await.unwrap();
        assert!(
            metrics.contains(r#"cronq_attempts_total{job="long",outcome="succeeded"} 1"#),
            "{metrics}"
        );
        assert!(metrics.contains("cronq_redeliveries_total 0\n"), "{metrics}");
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
