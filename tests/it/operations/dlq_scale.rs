//! `cronq dlq list` at 10,000 letters: every letter listed once, in order, none consumed;
//! prints how long each of 3 listings took (docs/benchmarks-notebook.md). Slow to fill, so run on
//! demand: `cargo nextest run -p cronq --test it --run-ignored only -E
//! 'test(/dlq_list_at_10000/)' --no-capture`; `CRONQ_LIST_BIN` names another `cronq`
//! binary to time (an older build, for a before/after figure).

use std::time::{Duration, Instant};

use chrono::Utc;
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::{Broker, DeadLetter};
use cronq_shared::names::{Names, Namespace, QueueName};
use futures_util::future::try_join_all;

use crate::support::occurrences::occurrence;
use crate::support::{amqp_url, scoped};

const LETTERS: u32 = 10_000;

#[tokio::test]
#[ignore = "fills the dead-letter queue with 10,000 letters; a measurement, run on demand"]
async fn dlq_list_at_10000_letters() {
    scoped("ops_dlq_scale", |env| async move {
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let amqp = AmqpBroker::connect(&amqp_url(), names).await.unwrap();
        amqp.declare(&Default::default()).await.unwrap();
        let start = Utc::now();
        let letters: Vec<DeadLetter> = (0..LETTERS)
            .map(|i| {
                let occ = occurrence("bulk", i);
                DeadLetter {
                    key: Some(occ.key.to_string()),
                    job: Some(occ.job.to_string()),
                    queue: Some(QueueName::new("default").unwrap()),
                    attempts: 3,
                    reason: "failed".into(),
                    last_error: Some(format!("exit status {}", i % 7)),
                    dead_lettered_at: start + chrono::Duration::milliseconds(i.into()),
                    body: occ.encode(),
                }
            })
            .collect();
        for chunk in letters.chunks(200) {
            try_join_all(chunk.iter().map(|l| amqp.dead_letter(l)))
                .await
                .unwrap();
        }
        let bin = std::env::var_os("CRONQ_LIST_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_cronq").into());
        let mut took: Vec<Duration> = Vec::new();
        for _ in 0..3 {
            // The test's environment (namespace, URLs), on the binary being timed.
            let with_env = env.cronq();
            let mut list = std::process::Command::new(&bin);
            for (k, v) in with_env.get_envs() {
                match v {
                    Some(v) => list.env(k, v),
                    None => list.env_remove(k),
                };
            }
            list.current_dir(&env.dir).args(["dlq", "list", "--json"]);
            let t = Instant::now();
            let out = list.output().expect("run cronq dlq list");
            took.push(t.elapsed());
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let listed = doc["letters"].as_array().unwrap();
            assert_eq!(listed.len(), LETTERS as usize, "every letter, once");
            for (l, expected) in listed.iter().zip(&letters) {
                assert_eq!(l["key"].as_str(), expected.key.as_deref(), "oldest first");
            }
        }
        took.sort();
        eprintln!(
            "dlq list at {LETTERS} letters ({}): min {:.2} s, median {:.2} s, max {:.2} s",
            std::path::Path::new(&bin).display(),
            took[0].as_secs_f64(),
            took[1].as_secs_f64(),
            took[2].as_secs_f64()
        );
        amqp.close().await;
    })
    .await;
}
