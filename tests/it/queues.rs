//! A consumer serves only the queues it is given (on every backend), and `--queues` naming
//! a queue the config does not have is a usage error.

use std::time::Duration;

use cronq_consumer::{Handlers, Options};
use cronq_shared::broker::Outgoing;
use cronq_shared::names::QueueName;
use cronq_shared::runlog::Outcome;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::fleet::{Fleet, LEASE};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, scoped};

async fn serves_only_the_queues_it_is_given(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "work"
schedule = "@every 1s"

[[job]]
name = "report"
schedule = "@every 1s"
queue = "reports"
command = ["true"]
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let options = Options {
        queues: vec!["reports".into()],
        lease: LEASE,
        consumer_id: "r".into(),
        ..Options::default()
    };
    fleet.start_with(options, Handlers::new(), None).await;
    let reports = QueueName::new("reports").unwrap();
    fleet.publish([occurrence("work", 1)]).await;
    fleet
        .broker
        .publish(&[Outgoing {
            queue: reports,
            occurrence: occurrence("report", 1),
            delay: Duration::ZERO,
        }])
        .await
        .unwrap();
    let runs = fleet.settled("report", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Succeeded);
    fleet.halt().await;
    assert!(
        fleet.runs("work").await.is_empty(),
        "the default queue is not served"
    );
    assert_eq!(
        fleet.queued("default").await,
        1,
        "the default queue's message waits"
    );
    fleet.stop().await;
}

on_every_backend!(serves_only_the_queues_it_is_given, "consumer_queues");

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
