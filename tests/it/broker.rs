//! The queue port's behaviour, written once as generic suites over `B: Broker` and run
//! against both the in-memory broker and RabbitMQ (one namespace per test).

// Test helpers outside #[test] fns: clippy's allow-unwrap-in-tests does not cover them.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, BrokerError, DeadLetter, Outgoing};
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::QueueName;
use tokio_util::sync::CancellationToken;

use crate::support::TestEnv;
use crate::support::backends::{Backend, on_every_backend};
use crate::support::deliveries::{WAIT, declare, key_of, next};
use crate::support::occurrences::{occurrence, outgoing, queue};
use crate::support::ports;

fn letter(q: &QueueName, i: u32, reason: &str) -> DeadLetter {
    let occ = occurrence("dead", i);
    DeadLetter {
        key: Some(occ.key.to_string()),
        job: Some(occ.job.to_string()),
        queue: Some(q.clone()),
        attempts: 3,
        reason: reason.to_owned(),
        last_error: Some(format!("exit status {i}")),
        dead_lettered_at: DateTime::parse_from_rfc3339("2026-11-29T10:00:00.123Z")
            .unwrap()
            .with_timezone(&Utc)
            + chrono::Duration::seconds(i.into()),
        body: occ.encode(),
    }
}

/// Fields that survive a trip through any dead-letter queue, for comparisons.
fn summary(l: &DeadLetter) -> (Option<String>, String, u32, Option<String>) {
    (
        l.key.clone(),
        l.reason.clone(),
        l.attempts,
        l.last_error.clone(),
    )
}

// ---------------------------------------------------------------------------------------
// Generic suites
// ---------------------------------------------------------------------------------------

pub async fn round_trip_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let out = outgoing(q, "round-trip", 1);
    broker.publish(std::slice::from_ref(&out)).await.unwrap();
    let token = CancellationToken::new();
    let mut rx = broker
        .consume(std::slice::from_ref(q), 4, token.clone())
        .await
        .unwrap();
    let d = next(&mut rx).await;
    assert_eq!(&d.queue, q);
    assert!(!d.redelivered);
    assert_eq!(Occurrence::decode(&d.body).unwrap(), out.occurrence);
    d.acker.ack().await.unwrap();
    token.cancel();
}

on_every_backend!(round_trip, "brk-round-trip");

async fn round_trip(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    round_trip_suite(&broker.port, &broker.queue).await;
    broker.close().await;
}

pub async fn batch_exactly_once_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let batch: Vec<Outgoing> = (0..1000).map(|i| outgoing(q, "batch", i)).collect();
    broker.publish(&batch).await.unwrap();
    let token = CancellationToken::new();
    let mut rx = broker
        .consume(std::slice::from_ref(q), 50, token.clone())
        .await
        .unwrap();
    let mut seen: HashMap<String, u32> = HashMap::new();
    while seen.len() < 1000 {
        let d = next(&mut rx).await;
        assert!(
            !d.redelivered,
            "nothing was requeued, yet {} came back",
            key_of(&d)
        );
        *seen.entry(key_of(&d)).or_default() += 1;
        d.acker.ack().await.unwrap();
    }
    assert!(seen.values().all(|n| *n == 1), "duplicates: {seen:?}");
    let expected: BTreeSet<String> = batch.iter().map(|o| o.occurrence.key.to_string()).collect();
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), expected);
    token.cancel();
}

on_every_backend!(batch_exactly_once, "brk-batch");

async fn batch_exactly_once(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    batch_exactly_once_suite(&broker.port, &broker.queue).await;
    broker.close().await;
}

pub async fn requeue_redelivers_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    broker.publish(&[outgoing(q, "requeue", 1)]).await.unwrap();
    let token = CancellationToken::new();
    let mut rx = broker
        .consume(std::slice::from_ref(q), 1, token.clone())
        .await
        .unwrap();
    let first = next(&mut rx).await;
    assert!(!first.redelivered);
    first.acker.requeue().await.unwrap();
    let second = next(&mut rx).await;
    assert!(second.redelivered);
    assert_eq!(key_of(&second), key_of(&first));
    second.acker.ack().await.unwrap();
    token.cancel();
}

on_every_backend!(requeue_redelivers, "brk-requeue");

async fn requeue_redelivers(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    requeue_redelivers_suite(&broker.port, &broker.queue).await;
    broker.close().await;
}

pub async fn dropped_delivery_is_requeued_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    broker.publish(&[outgoing(q, "dropped", 1)]).await.unwrap();
    let token = CancellationToken::new();
    let mut rx = broker
        .consume(std::slice::from_ref(q), 1, token.clone())
        .await
        .unwrap();
    let first = next(&mut rx).await;
    let key = key_of(&first);
    drop(first); // a consumer that lost track of it, as if its channel closed
    let again = next(&mut rx).await;
    assert!(again.redelivered);
    assert_eq!(key_of(&again), key);
    again.acker.ack().await.unwrap();
    token.cancel();
}

on_every_backend!(dropped_delivery_is_requeued, "brk-dropped");

async fn dropped_delivery_is_requeued(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    dropped_delivery_is_requeued_suite(&broker.port, &broker.queue).await;
    broker.close().await;
}

pub async fn delayed_publish_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let delay = Duration::from_millis(1500);
    let mut late = outgoing(q, "delayed", 1);
    late.delay = delay;
    let token = CancellationToken::new();
    let mut rx = broker
        .consume(std::slice::from_ref(q), 4, token.clone())
        .await
        .unwrap();
    let sent = Instant::now();
    broker
        .publish(&[late.clone(), outgoing(q, "delayed", 2)])
        .await
        .unwrap();
    let first = next(&mut rx).await;
    assert_eq!(
        key_of(&first),
        outgoing(q, "delayed", 2).occurrence.key.to_string()
    );
    first.acker.ack().await.unwrap();
    let second = next(&mut rx).await;
    assert!(
        sent.elapsed() >= delay,
        "arrived after {:?}",
        sent.elapsed()
    );
    assert_eq!(key_of(&second), late.occurrence.key.to_string());
    second.acker.ack().await.unwrap();
    token.cancel();
}

on_every_backend!(delayed_publish, "brk-delayed");

async fn delayed_publish(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    delayed_publish_suite(&broker.port, &broker.queue).await;
    broker.close().await;
}

pub async fn dead_letters_listed_in_order_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let letters: Vec<DeadLetter> = (0..30)
        .map(|i| letter(q, i, if i % 2 == 0 { "failed" } else { "unknown job" }))
        .collect();
    for l in &letters {
        broker.dead_letter(l).await.unwrap();
    }
    let first = broker.dead_letters().await.unwrap();
    assert_eq!(first, letters);
    let second = broker.dead_letters().await.unwrap();
    assert_eq!(
        second, letters,
        "listing consumed or reordered the dead letters"
    );
}

on_every_backend!(dead_letters_listed_in_order, "brk-dlq-list");

async fn dead_letters_listed_in_order(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    dead_letters_listed_in_order_suite(&broker.port, &broker.queue).await;
    broker.close().await;
}

pub async fn replay_selected_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let letters: Vec<DeadLetter> = (0..8).map(|i| letter(q, i, "failed")).collect();
    for l in &letters {
        broker.dead_letter(l).await.unwrap();
    }
    let chosen: BTreeSet<String> = [1, 3, 4, 7]
        .iter()
        .map(|i| letters[*i].key.clone().unwrap())
        .collect();
    let replayed = broker
        .replay(&|l: &DeadLetter| {
            let key = l.key.as_ref()?;
            chosen.contains(key).then(|| {
                let mut occ = Occurrence::decode(&l.body).unwrap();
                occ.trigger = Trigger::Replay;
                Outgoing {
                    queue: q.clone(),
                    occurrence: occ,
                    delay: Duration::ZERO,
                }
            })
        })
        .await
        .unwrap();
    assert_eq!(replayed, 4);
    let left: Vec<_> = broker
        .dead_letters()
        .await
        .unwrap()
        .iter()
        .map(summary)
        .collect();
    let expected: Vec<_> = [0, 2, 5, 6].iter().map(|i| summary(&letters[*i])).collect();
    assert_eq!(left, expected);
    let token = CancellationToken::new();
    let mut rx = broker
        .consume(std::slice::from_ref(q), 4, token.clone())
        .await
        .unwrap();
    let mut got = BTreeSet::new();
    for _ in 0..4 {
        let d = next(&mut rx).await;
        let occ = Occurrence::decode(&d.body).unwrap();
        assert_eq!(occ.trigger, Trigger::Replay);
        got.insert(occ.key.to_string());
        d.acker.ack().await.unwrap();
    }
    assert_eq!(got, chosen);
    token.cancel();
}

on_every_backend!(replay_selected, "brk-replay");

async fn replay_selected(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    replay_selected_suite(&broker.port, &broker.queue).await;
    broker.close().await;
}

pub async fn unroutable_is_an_error_suite<B: Broker>(
    broker: &B,
    q: &QueueName,
    nowhere: &QueueName,
) {
    declare(broker, &[q]).await;
    let out = outgoing(nowhere, "unroutable", 1);
    let err = broker
        .publish(&[outgoing(q, "routable", 1), out.clone()])
        .await
        .unwrap_err();
    match err {
        BrokerError::NotConfirmed { key, .. } => assert_eq!(key, out.occurrence.key.to_string()),
        other => panic!("expected NotConfirmed, got {other:?}"),
    }
    // A delayed message for a queue nobody declared is refused too, not lost later.
    let mut late = outgoing(nowhere, "unroutable", 2);
    late.delay = Duration::from_millis(1500);
    match broker
        .publish(std::slice::from_ref(&late))
        .await
        .unwrap_err()
    {
        BrokerError::NotConfirmed { key, .. } => assert_eq!(key, late.occurrence.key.to_string()),
        other => panic!("expected NotConfirmed, got {other:?}"),
    }
}

on_every_backend!(unroutable_is_an_error, "brk-unroutable");

async fn unroutable_is_an_error(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    unroutable_is_an_error_suite(&broker.port, &broker.queue, &queue("nowhere")).await;
    broker.close().await;
}

pub async fn consume_stops_on_cancel_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let token = CancellationToken::new();
    let mut rx = broker
        .consume(std::slice::from_ref(q), 2, token.clone())
        .await
        .unwrap();
    broker.publish(&[outgoing(q, "cancel", 1)]).await.unwrap();
    let d = next(&mut rx).await;
    token.cancel();
    // Settling after cancel still works: the delivery is not lost with the subscription.
    d.acker.ack().await.unwrap();
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(d) = rx.recv().await {
            drop(d);
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the receiver did not close after the token was cancelled"
    );
    // Messages published afterwards stay in the queue for the next subscriber.
    broker.publish(&[outgoing(q, "cancel", 2)]).await.unwrap();
    let token = CancellationToken::new();
    let mut rx = broker
        .consume(std::slice::from_ref(q), 2, token.clone())
        .await
        .unwrap();
    let d = next(&mut rx).await;
    assert_eq!(
        key_of(&d),
        outgoing(q, "cancel", 2).occurrence.key.to_string()
    );
    d.acker.ack().await.unwrap();
    token.cancel();
    let ended = tokio::time::timeout(WAIT, rx.recv()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the second receiver did not close after cancel"
    );
}

on_every_backend!(consume_stops_on_cancel, "brk-cancel");

async fn consume_stops_on_cancel(backend: Backend, env: TestEnv) {
    let broker = ports::broker(backend, &env).await;
    consume_stops_on_cancel_suite(&broker.port, &broker.queue).await;
    broker.close().await;
}

// ---------------------------------------------------------------------------------------
// In-memory backend
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// RabbitMQ backend
// ---------------------------------------------------------------------------------------

mod amqp {
    use std::sync::{Arc, Mutex};

    use cronq_rabbitmq::AmqpBroker;
    use cronq_rabbitmq::topology::{DELIVERY_LIMIT, quantize_delay};
    use cronq_shared::names::{Names, Namespace};
    use lapin::options::BasicGetOptions;
    use lapin::types::AMQPValue;

    use super::*;
    use crate::support::rabbitmq::{run, with_raw_channel};
    use crate::support::{amqp_url, eventually};

    #[tokio::test]
    async fn published_messages_carry_properties() {
        run("brk-props", |b, q| async move {
            declare(&b, &[&q]).await;
            let out = outgoing(&q, "props", 7);
            b.publish(std::slice::from_ref(&out)).await.unwrap();
            let queue_name = b.names().queue(&q);
            let msg = with_raw_channel("the message in its queue", |ch| {
                let queue_name = queue_name.clone();
                async move {
                    // Without ack: closing the channel puts it back.
                    ch.basic_get(
                        queue_name.as_str().into(),
                        BasicGetOptions { no_ack: false },
                    )
                    .await
                    .map(|m| m.map(|m| m.delivery))
                }
            })
            .await;
            let props = &msg.properties;
            let key = out.occurrence.key.to_string();
            assert_eq!(*props.delivery_mode(), Some(2));
            assert_eq!(
                props.message_id().as_ref().map(|m| m.to_string()),
                Some(key)
            );
            assert_eq!(
                props
                    .content_type()
                    .as_ref()
                    .map(|m| m.to_string())
                    .as_deref(),
                Some("application/json")
            );
            let headers = props.headers().clone().unwrap();
            let text = |k: &str| match headers.inner().get(k) {
                Some(AMQPValue::LongString(s)) => s.to_string(),
                other => panic!("header {k}: {other:?}"),
            };
            assert_eq!(text("x-cronq-job"), "props");
            assert_eq!(text("x-cronq-scheduled-at"), "2026-11-29T00:00:07Z");
            assert_eq!(
                headers.inner().get("x-cronq-attempt"),
                Some(&AMQPValue::LongLongInt(1))
            );
        })
        .await;
    }

    #[tokio::test]
    async fn connect_failure_names_the_redacted_url() {
        let names = Names::new(&Namespace::new("t-brk-unreachable").unwrap());
        let err = AmqpBroker::connect("amqp://guest:s3cret@127.0.0.1:1/%2f", names)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("amqp://***@127.0.0.1:1/%2f"), "{text}");
        assert!(text.contains("rabbitmq-server"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }

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

    #[tokio::test]
    async fn delay_queue_deleted_behind_the_cache_is_declared_again() {
        run("brk-delay-gone", |b, q| async move {
            declare(&b, &[&q]).await;
            let mut late = outgoing(&q, "delay-gone", 1);
            late.delay = Duration::from_millis(1500);
            b.publish(std::slice::from_ref(&late)).await.unwrap();
            let delay_queue = b.names().delay_queue(quantize_delay(late.delay));
            with_raw_channel("the delay queue deleted", |ch| {
                let delay_queue = delay_queue.clone();
                async move {
                    ch.queue_delete(delay_queue.as_str().into(), Default::default())
                        .await
                        .map(Some)
                }
            })
            .await;
            late.occurrence = occurrence("delay-gone", 2);
            b.publish(std::slice::from_ref(&late)).await.unwrap();
            let token = CancellationToken::new();
            let mut rx = b
                .consume(std::slice::from_ref(&q), 4, token.clone())
                .await
                .unwrap();
            let d = next(&mut rx).await;
            assert_eq!(key_of(&d), late.occurrence.key.to_string());
            d.acker.ack().await.unwrap();
            token.cancel();
        })
        .await;
    }

    #[tokio::test]
    async fn consume_resubscribes_after_a_broker_side_cancel() {
        run("brk-resubscribe", |b, q| async move {
            declare(&b, &[&q]).await;
            let token = CancellationToken::new();
            let mut rx = b
                .consume(std::slice::from_ref(&q), 4, token.clone())
                .await
                .unwrap();
            b.publish(&[outgoing(&q, "resubscribe", 1)]).await.unwrap();
            let d = next(&mut rx).await;
            d.acker.ack().await.unwrap();
            // Deleting the queue cancels the consumer broker-side (the channel stays open).
            let queue_name = b.names().queue(&q);
            with_raw_channel("the queue deleted", |ch| {
                let queue_name = queue_name.clone();
                async move {
                    ch.queue_delete(queue_name.as_str().into(), Default::default())
                        .await
                        .map(Some)
                }
            })
            .await;
            // The subscription declares the queue again and goes on feeding `rx`.
            // Publishing is refused until the queue exists again, so keep trying.
            let deadline = Instant::now() + WAIT;
            let mut n = 1;
            let d = loop {
                assert!(
                    Instant::now() < deadline,
                    "no delivery after re-subscribing"
                );
                n += 1;
                let _ = b.publish(&[outgoing(&q, "resubscribe", n)]).await;
                if let Ok(Some(d)) =
                    tokio::time::timeout(Duration::from_millis(200), rx.recv()).await
                {
                    break d;
                }
            };
            d.acker.ack().await.unwrap();
            token.cancel();
        })
        .await;
    }

    fn rabbitmqctl(args: &[&str]) {
        let out = std::process::Command::new("rabbitmqctl")
            .args(args)
            .output()
            .expect("run rabbitmqctl (is RabbitMQ installed locally?)");
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A private vhost for a test that closes every connection: `close_all_connections`
    /// acts per vhost, so the other tests (on `/`) keep their connections. Deleting the
    /// vhost deletes everything declared in it.
    struct Vhost {
        name: String,
        url: String,
    }

    impl Vhost {
        fn create(name: &str) -> Self {
            let base = amqp_url();
            let uri: lapin::uri::AMQPUri = base.parse().unwrap();
            let user = uri.authority.userinfo.username.clone();
            rabbitmqctl(&["add_vhost", name]);
            rabbitmqctl(&["set_permissions", "-p", name, &user, ".*", ".*", ".*"]);
            let (prefix, _) = base.split_once('?').unwrap_or((&base, ""));
            let (root, _) = prefix.rsplit_once('/').unwrap();
            Self {
                name: name.to_owned(),
                url: format!("{root}/{name}"),
            }
        }

        /// What an operator does: close every connection (of this vhost).
        fn close_all_connections(&self) {
            rabbitmqctl(&["close_all_connections", "-p", &self.name, "test"]);
        }
    }

    impl Drop for Vhost {
        fn drop(&mut self) {
            let _ = std::process::Command::new("rabbitmqctl")
                .args(["delete_vhost", &self.name])
                .output();
        }
    }

    #[tokio::test]
    async fn survives_closed_connections_without_loss() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("cronq_shared=debug,lapin=warn")
            .with_test_writer()
            .try_init();
        let vhost = Arc::new(Vhost::create(&format!(
            "t-brk-close-all-{:08x}",
            rand::random::<u32>()
        )));
        let v = vhost.clone();
        let body = tokio::spawn(async move {
            let names = Names::new(&Namespace::new("t-brk-close-all").unwrap());
            let b = AmqpBroker::connect(&v.url, names).await.unwrap();
            let q = queue("a");
            declare(&b, &[&q]).await;
            let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
            let token = CancellationToken::new();
            let mut rx = b
                .consume(std::slice::from_ref(&q), 20, token.clone())
                .await
                .unwrap();
            let counter = seen.clone();
            let consumer = tokio::spawn(async move {
                while let Some(d) = rx.recv().await {
                    *counter.lock().unwrap().entry(key_of(&d)).or_default() += 1;
                    // An ack on a channel that died is fine: the broker redelivers.
                    let _ = d.acker.ack().await;
                }
            });
            let mut published = BTreeSet::new();
            for round in 0..2 {
                let v = v.clone();
                let closer = std::thread::spawn(move || v.close_all_connections());
                let mut i = 0;
                // Publish before, while and after the connections are closed.
                while !closer.is_finished() || i < 20 {
                    let n = (round * 10_000 + i) * 5;
                    let batch: Vec<Outgoing> =
                        (n..n + 5).map(|k| outgoing(&q, "close-all", k)).collect();
                    b.publish(&batch)
                        .await
                        .unwrap_or_else(|e| panic!("publish: {e:?}"));
                    published.extend(batch.iter().map(|o| o.occurrence.key.to_string()));
                    i += 1;
                }
                closer.join().unwrap();
            }
            let total = published.len();
            eventually(
                Duration::from_secs(60),
                "every published message consumed",
                || {
                    let seen = seen.lock().unwrap();
                    let done = published.iter().all(|k| seen.contains_key(k));
                    async move { done.then_some(()) }
                },
            )
            .await;
            token.cancel();
            consumer.await.unwrap();
            b.close().await;
            let seen = seen.lock().unwrap();
            let duplicates: u32 = seen.values().map(|n| n - 1).sum();
            eprintln!(
                "close-all: {total} published, {} consumed, {duplicates} duplicates",
                seen.len()
            );
            assert!(seen.keys().all(|k| published.contains(k)));
        })
        .await;
        drop(vhost); // deletes the vhost with everything in it, even after a panic
        if let Err(err) = body {
            std::panic::resume_unwind(err.into_panic());
        }
    }
}
