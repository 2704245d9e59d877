//! A run dead-lettered twice is one dead run: a consumer killed after it dead-lettered a
//! run but before it acked the delivery leaves the run to another consumer, which
//! dead-letters it again, byte for byte. `cronq dlq list` lists it once with its copies,
//! and `cronq dlq replay` sends it back once and removes every copy.

use std::time::Duration;

use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::names::{Names, Namespace, QueueName};
use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use nix::sys::signal::Signal;

use crate::support::cli::{WAIT, json, ok, ran, start_consumer};
use crate::support::occurrences::occurrence;
use crate::support::producer_process::LEADER;
use crate::support::rabbitmq::passive;
use crate::support::{TestEnv, amqp_url, eventually, scoped};

/// Puts a byte-identical copy (body and properties) of the dead-letter queue's first
/// letter back into it, the way a second consumer dead-lettering the same run leaves it.
async fn copy_first_letter(env: &TestEnv, names: &Names) {
    let conn = env.amqp().await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let dlq = names.dead_letter_queue();
    let got = ch
        .basic_get(dlq.as_str().into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("a letter in the dead-letter queue");
    let confirm = ch
        .basic_publish(
            "".into(),
            dlq.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            &got.delivery.data,
            got.delivery.properties.clone(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(
        matches!(confirm, lapin::Confirmation::Ack(None)),
        "copy not routed"
    );
    // Closing the channel puts the original back, unacked.
    let _ = ch.close(200, "copied".into()).await;
    let _ = conn.close(200, "done".into()).await;
}

/// How many messages wait in the namespace's queue `default`.
async fn depth(env: &TestEnv) -> u32 {
    let conn = env.amqp().await;
    let ch = conn.create_channel().await.unwrap();
    let n = passive(&ch, &format!("{}.q.default", env.namespace))
        .await
        .unwrap()
        .message_count();
    let _ = conn.close(200, "done".into()).await;
    n
}

#[tokio::test]
async fn a_run_dead_lettered_twice_is_listed_once_and_replayed_once() {
    scoped("ops_dlq_copies", |env| async move {
        env.track_queue("default");
        let fixed = env.dir.join("fixed");
        let toml = format!(
            "{LEADER}\n[[job]]\nname = \"flaky\"\nschedule = \"0 0 1 1 *\"\nmax_attempts = 1\ncommand = [\"sh\", \"-c\", \"test -e {} || {{ echo not fixed >&2; exit 3; }}; echo $CRONQ_KEY >> {}\"]\n",
            fixed.display(),
            env.dir.join("flaky.ran").display()
        );
        let cfg = env.write_config("cronq.toml", &toml);
        let cfg = cfg.to_str().unwrap();
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let amqp = AmqpBroker::connect(&amqp_url(), names.clone()).await.unwrap();
        let queue = QueueName::new("default").unwrap();
        amqp.declare(&[queue.clone()].into_iter().collect()).await.unwrap();
        let consumer = start_consumer(&env, cfg, "c1");
        let occ = occurrence("flaky", 0);
        let key = occ.key.to_string();
        amqp.publish(&[Outgoing { queue, occurrence: occ, delay: Duration::ZERO }])
            .await
            .unwrap();
        eventually(WAIT, "the run to be dead-lettered", || async {
            (json(&env, &["dlq", "list", "--json"])["count"] == 1).then_some(())
        })
        .await;
        // Stopped, so the replayed message waits in its queue to be counted.
        env.signal(consumer, Signal::SIGTERM);
        assert!(env.wait(consumer, WAIT).is_some(), "the consumer stops");
        copy_first_letter(&env, &names).await;

        // The broker puts the original back when the copying channel closes, on its own
        // time: wait for both letters.
        let list = eventually(WAIT, "the original back beside its copy", || async {
            let list = json(&env, &["dlq", "list", "--json"]);
            (list["letters"][0]["copies"] == 2).then_some(list)
        })
        .await;
        assert_eq!(list["count"], 1, "one dead run: {list}");
        let letter = &list["letters"][0];
        assert_eq!(letter["key"], key.as_str());
        assert_eq!(letter["copies"], 2, "{list}");
        let table = ok(&env, &["dlq", "list"]);
        assert!(table.contains("COPIES") && table.contains("1 dead letter (2 letters"), "{table}");

        let dry = ok(&env, &["dlq", "replay", "--all", "--dry-run", "--config", cfg]);
        assert!(dry.contains("dry run: 1 of 1 selected letters would be replayed"), "{dry}");
        std::fs::write(&fixed, "").unwrap();
        let out = ok(&env, &["dlq", "replay", "--all", "--config", cfg]);
        assert!(out.contains("replayed 1 of 1 selected letters"), "{out}");
        assert_eq!(json(&env, &["dlq", "list", "--json"])["count"], 0, "every copy removed");
        assert_eq!(depth(&env).await, 1, "the dead run was sent back once");

        start_consumer(&env, cfg, "c2");
        eventually(WAIT, "the replayed run", || async { (!ran(&env, "flaky").is_empty()).then_some(()) })
            .await;
        eventually(WAIT, "its queue to drain", || async { (depth(&env).await == 0).then_some(()) }).await;
        let runs = json(&env, &["runs", "--job", "flaky", "--json"]);
        let outcomes: Vec<&str> = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes.iter().filter(|o| **o == "succeeded").count(), 1, "{runs}");
        assert_eq!(outcomes.len(), 2, "the failed run and its one replay: {runs}");
        assert_eq!(ran(&env, "flaky"), vec![key]);
        assert_eq!(json(&env, &["dlq", "list", "--json"])["count"], 0);
        amqp.close().await;
    })
    .await;
}
