//! A malformed message, one for an unknown job or one without a handler is dead-lettered
//! with its reason and the consumer carries on (on every backend); a message that keeps
//! coming back is dead-lettered by RabbitMQ's delivery limit.

use std::collections::BTreeSet;
use std::time::Duration;

use cronq_rabbitmq::topology::DELIVERY_LIMIT;
use cronq_shared::broker::Broker;
use cronq_shared::message::Occurrence;
use tokio_util::sync::CancellationToken;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::deliveries::declare;
use crate::support::fleet::{Fleet, WAIT, recording};
use crate::support::occurrences::{occurrence, outgoing};
use crate::support::rabbitmq::run;
use crate::support::{TestEnv, eventually};

async fn rejects_malformed_and_unknown_messages_and_stays_up(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "work"
schedule = "@every 1s"

[[job]]
name = "orphan"
schedule = "@every 1s"
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let (handlers, seen) = recording(Duration::from_millis(10));
    fleet.start("c1", handlers, 2).await;
    // A body that is not an occurrence, straight onto the queue.
    fleet.publish_raw("default", b"{not json").await;
    fleet
        .publish([occurrence("ghost", 1), occurrence("orphan", 1)])
        .await;
    let letters = eventually(WAIT, "three dead letters", || async {
        Some(fleet.broker.dead_letters().await.unwrap()).filter(|l| l.len() == 3)
    })
    .await;
    let reasons: BTreeSet<_> = letters.iter().map(|l| l.reason.clone()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("malformed: message is not a cronq occurrence")),
        "{reasons:?}"
    );
    assert!(
        reasons.contains("unknown job ghost: it is not in this consumer's config"),
        "{reasons:?}"
    );
    assert!(
        reasons.contains("no handler registered for job orphan"),
        "{reasons:?}"
    );
    // Still alive: a good occurrence runs.
    fleet.publish([occurrence("work", 1)]).await;
    fleet.settled("work", 1).await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    fleet.stop().await;
}

on_every_backend!(
    rejects_malformed_and_unknown_messages_and_stays_up,
    "consumer_reject"
);

#[tokio::test]
async fn poison_message_is_dead_lettered_by_the_delivery_limit() {
    run("brk-poison", |b, q| async move {
        declare(&b, &[&q]).await;
        let out = outgoing(&q, "poison", 1);
        b.publish(std::slice::from_ref(&out)).await.unwrap();
        let token = CancellationToken::new();
        let mut rx = b
            .consume(std::slice::from_ref(&q), 1, token.clone())
            .await
            .unwrap();
        let mut deliveries = 0;
        let letters = loop {
            let letters = b.dead_letters().await.unwrap();
            if !letters.is_empty() {
                break letters;
            }
            match tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
                Ok(Some(d)) => {
                    deliveries += 1;
                    assert!(deliveries <= DELIVERY_LIMIT + 1, "requeued past the limit");
                    d.acker.requeue().await.unwrap();
                }
                Ok(None) => panic!("subscription ended"),
                Err(_) => {}
            }
        };
        token.cancel();
        assert_eq!(letters.len(), 1, "{letters:?}");
        let l = &letters[0];
        assert_eq!(l.reason, "delivery limit reached in queue a");
        assert_eq!(l.queue, Some(q.clone()));
        assert_eq!(l.key, Some(out.occurrence.key.to_string()));
        assert_eq!(l.job.as_deref(), Some("poison"));
        assert_eq!(Occurrence::decode(&l.body).unwrap(), out.occurrence);
        eprintln!(
            "poison: {deliveries} deliveries, attempts recorded {}",
            l.attempts
        );
    })
    .await;
}
