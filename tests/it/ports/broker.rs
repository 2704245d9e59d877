//! The queue port's contract (`Broker`): publish and consume, requeue and redelivery,
//! delays, dead letters and their replay, refusals and cancellation, and sealing with a
//! keyring, on every backend.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, BrokerError, DeadLetter, Outgoing, Pick};
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::QueueName;
use cronq_shared::signing::{KeySource, Keyring};

use crate::support::TestEnv;
use crate::support::backends::{Backend, on_every_backend};
use crate::support::deliveries::{WAIT, declare, key_of, next, subscribe};
use crate::support::occurrences::{occurrence, outgoing, queue};
use crate::support::ports;

/// One test per backend of a suite `async fn(&impl Broker, &QueueName)`: on that backend's
/// queue port and its test queue, closed afterwards.
macro_rules! broker_suite {
    ($test:ident, $short:literal, $suite:ident) => {
        on_every_backend!($test, $short);

        async fn $test(backend: Backend, env: TestEnv) {
            let broker = ports::broker(backend, &env).await;
            $suite(&broker.port, &broker.queue).await;
            broker.close().await;
        }
    };
}

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

pub async fn round_trip_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let out = outgoing(q, "round-trip", 1);
    broker.publish(std::slice::from_ref(&out)).await.unwrap();
    let (mut rx, token) = subscribe(broker, q, 4).await;
    let d = next(&mut rx).await;
    assert_eq!(&d.queue, q);
    assert!(!d.redelivered);
    assert_eq!(Occurrence::decode(&d.body).unwrap(), out.occurrence);
    d.acker.ack().await.unwrap();
    token.cancel();
}

broker_suite!(round_trip, "brk-round-trip", round_trip_suite);

pub async fn batch_exactly_once_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let batch: Vec<Outgoing> = (0..1000).map(|i| outgoing(q, "batch", i)).collect();
    broker.publish(&batch).await.unwrap();
    let (mut rx, token) = subscribe(broker, q, 50).await;
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

broker_suite!(batch_exactly_once, "brk-batch", batch_exactly_once_suite);

pub async fn requeue_redelivers_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    broker.publish(&[outgoing(q, "requeue", 1)]).await.unwrap();
    let (mut rx, token) = subscribe(broker, q, 1).await;
    let first = next(&mut rx).await;
    assert!(!first.redelivered);
    first.acker.requeue().await.unwrap();
    let second = next(&mut rx).await;
    assert!(second.redelivered);
    assert_eq!(key_of(&second), key_of(&first));
    second.acker.ack().await.unwrap();
    token.cancel();
}

broker_suite!(requeue_redelivers, "brk-requeue", requeue_redelivers_suite);

pub async fn dropped_delivery_is_requeued_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    broker.publish(&[outgoing(q, "dropped", 1)]).await.unwrap();
    let (mut rx, token) = subscribe(broker, q, 1).await;
    let first = next(&mut rx).await;
    let key = key_of(&first);
    drop(first); // a consumer that lost track of it, as if its channel closed
    let again = next(&mut rx).await;
    assert!(again.redelivered);
    assert_eq!(key_of(&again), key);
    again.acker.ack().await.unwrap();
    token.cancel();
}

broker_suite!(
    dropped_delivery_is_requeued,
    "brk-dropped",
    dropped_delivery_is_requeued_suite
);

/// Acks of later deliveries never settle an earlier one still unsettled (RabbitMQ coalesces
/// acks into one `multiple` ack over the settled prefix of delivery tags): with the
/// prefetch window full, acking all but the first lets a new message in, and the first,
/// dropped afterwards, comes back.
pub async fn later_acks_leave_an_earlier_delivery_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let batch: Vec<Outgoing> = (1..=4).map(|i| outgoing(q, "prefix", i)).collect();
    broker.publish(&batch).await.unwrap();
    let (mut rx, token) = subscribe(broker, q, 4).await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(next(&mut rx).await);
    }
    let keys: Vec<String> = got.iter().map(key_of).collect();
    let expected: Vec<String> = batch.iter().map(|o| o.occurrence.key.to_string()).collect();
    assert_eq!(keys, expected, "delivered in order");
    let mut got = got.into_iter();
    let first = got.next().unwrap();
    for d in got {
        d.acker.ack().await.unwrap();
    }
    // The window (4) is full until the broker has the three acks.
    let fifth = outgoing(q, "prefix", 5);
    broker.publish(std::slice::from_ref(&fifth)).await.unwrap();
    let after = next(&mut rx).await;
    assert_eq!(key_of(&after), fifth.occurrence.key.to_string());
    drop(first); // requeued
    let again = next(&mut rx).await;
    assert!(again.redelivered);
    assert_eq!(
        key_of(&again),
        expected[0],
        "the unsettled delivery came back"
    );
    again.acker.ack().await.unwrap();
    after.acker.ack().await.unwrap();
    token.cancel();
}

broker_suite!(
    later_acks_leave_an_earlier_delivery,
    "brk-prefix",
    later_acks_leave_an_earlier_delivery_suite
);

/// An ack with nothing after it is not held for good: with the prefetch window full,
/// acking the first delivery alone (RabbitMQ holds a settled prefix shorter than the
/// window for a few ms, waiting for the acks that follow it) lets a new message in.
pub async fn a_lone_ack_reopens_the_window_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let batch: Vec<Outgoing> = (1..=4).map(|i| outgoing(q, "lone", i)).collect();
    broker.publish(&batch).await.unwrap();
    let (mut rx, token) = subscribe(broker, q, 4).await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(next(&mut rx).await);
    }
    let mut got = got.into_iter();
    got.next().unwrap().acker.ack().await.unwrap();
    let fifth = outgoing(q, "lone", 5);
    broker.publish(std::slice::from_ref(&fifth)).await.unwrap();
    let after = next(&mut rx).await;
    assert_eq!(key_of(&after), fifth.occurrence.key.to_string());
    for d in got.chain([after]) {
        d.acker.ack().await.unwrap();
    }
    token.cancel();
}

broker_suite!(
    a_lone_ack_reopens_the_window,
    "brk-lone-ack",
    a_lone_ack_reopens_the_window_suite
);

/// A batch made ready ahead goes out stamped with the instant given when it is published,
/// each confirm timed; published again (as the leader's retry does once the first try
/// took what was built ahead), it goes out again, stamped anew.
pub async fn ready_publish_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let batch: Vec<Outgoing> = (0..3).map(|i| outgoing(q, "ready", i)).collect();
    let ready = broker.ready(batch.clone());
    assert_eq!(ready.messages().len(), 3);
    let (mut rx, token) = subscribe(broker, q, 8).await;
    for at in ["2026-11-29T10:00:00.001Z", "2026-11-29T10:00:02.5Z"] {
        let at: DateTime<Utc> = at.parse().unwrap();
        let before = Utc::now();
        let confirmed = broker.publish_ready(&ready, at).await.unwrap();
        assert_eq!(confirmed.len(), 3);
        assert!(
            confirmed.iter().all(|c| *c >= before && *c <= Utc::now()),
            "{confirmed:?}"
        );
        for expected in &batch {
            let d = next(&mut rx).await;
            let mut stamped = expected.occurrence.clone();
            stamped.published_at = at;
            assert_eq!(Occurrence::decode(&d.body).unwrap(), stamped);
            d.acker.ack().await.unwrap();
        }
    }
    token.cancel();
}

broker_suite!(ready_publish, "brk-ready", ready_publish_suite);

pub async fn delayed_publish_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let delay = Duration::from_millis(1500);
    let mut late = outgoing(q, "delayed", 1);
    late.delay = delay;
    let (mut rx, token) = subscribe(broker, q, 4).await;
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

broker_suite!(delayed_publish, "brk-delayed", delayed_publish_suite);

/// With a keyring, every message the broker publishes is sealed by its signing key: at
/// once, made ready ahead, after a delay, and a replayed dead letter.
async fn sealed_publish(backend: Backend, env: TestEnv) {
    let ring = Keyring::parse("k2:0123456789abcdef0123", KeySource::Variable).unwrap();
    let broker = ports::signing_broker(backend, &env, Some(Arc::new(ring.clone()))).await;
    let (b, q) = (&broker.port, &broker.queue);
    declare(b, &[q]).await;
    let mut late = outgoing(q, "sealed", 2);
    late.delay = Duration::from_millis(1500);
    b.publish(&[outgoing(q, "sealed", 1), late]).await.unwrap();
    let ready = b.ready(vec![outgoing(q, "sealed", 4)]);
    b.publish_ready(&ready, Utc::now()).await.unwrap();
    b.dead_letter(&letter(q, 3, "failed")).await.unwrap();
    let replayed = b
        .replay(&|l: &DeadLetter| match Occurrence::decode(&l.body) {
            Ok(occurrence) => Pick::Replay(Box::new(Outgoing {
                queue: q.clone(),
                occurrence,
                delay: Duration::ZERO,
            })),
            Err(_) => Pick::Keep,
        })
        .await
        .unwrap();
    assert_eq!(replayed, 1);
    let (mut rx, token) = subscribe(b, q, 4).await;
    let mut keys = BTreeSet::new();
    for _ in 0..4 {
        let d = next(&mut rx).await;
        let inner = ring.open(&d.body).expect("sealed by the broker's key");
        keys.insert(Occurrence::decode(inner).unwrap().key.to_string());
        d.acker.ack().await.unwrap();
    }
    let expected: BTreeSet<String> = [("sealed", 1), ("sealed", 2), ("dead", 3), ("sealed", 4)]
        .iter()
        .map(|(job, i)| occurrence(job, *i).key.to_string())
        .collect();
    assert_eq!(keys, expected);
    token.cancel();
    broker.close().await;
}

on_every_backend!(sealed_publish, "brk-sealed");

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

broker_suite!(
    dead_letters_listed_in_order,
    "brk-dlq-list",
    dead_letters_listed_in_order_suite
);

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
            if !l.key.as_ref().is_some_and(|key| chosen.contains(key)) {
                return Pick::Keep;
            }
            let mut occ = Occurrence::decode(&l.body).unwrap();
            occ.trigger = Trigger::Replay;
            Pick::Replay(Box::new(Outgoing {
                queue: q.clone(),
                occurrence: occ,
                delay: Duration::ZERO,
            }))
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
    let (mut rx, token) = subscribe(broker, q, 4).await;
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

broker_suite!(replay_selected, "brk-replay", replay_selected_suite);

/// A copy of a dead run removed with [`Pick::Remove`] leaves the queue without being
/// published: each run goes back once.
pub async fn replay_removes_copies_suite<B: Broker>(broker: &B, q: &QueueName) {
    declare(broker, &[q]).await;
    let (a, b) = (letter(q, 0, "failed"), letter(q, 1, "failed"));
    let mut copy = a.clone();
    copy.dead_lettered_at += chrono::Duration::seconds(5);
    for l in [&a, &b, &copy] {
        broker.dead_letter(l).await.unwrap();
    }
    let seen = std::sync::Mutex::new(BTreeSet::new());
    let replayed = broker
        .replay(&|l: &DeadLetter| {
            if !seen.lock().unwrap().insert(l.key.clone()) {
                return Pick::Remove;
            }
            Pick::Replay(Box::new(Outgoing {
                queue: q.clone(),
                occurrence: Occurrence::decode(&l.body).unwrap(),
                delay: Duration::ZERO,
            }))
        })
        .await
        .unwrap();
    assert_eq!(replayed, 2);
    assert_eq!(broker.dead_letters().await.unwrap(), Vec::new());
    let (mut rx, token) = subscribe(broker, q, 4).await;
    let mut got = Vec::new();
    for _ in 0..2 {
        let d = next(&mut rx).await;
        got.push(key_of(&d));
        d.acker.ack().await.unwrap();
    }
    got.sort();
    assert_eq!(got, vec![a.key.clone().unwrap(), b.key.clone().unwrap()]);
    let extra = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await;
    assert!(
        !matches!(extra, Ok(Some(_))),
        "a removed copy was published too"
    );
    token.cancel();
}

broker_suite!(
    replay_removes_copies,
    "brk-replay-copies",
    replay_removes_copies_suite
);

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
    // Made ready ahead, it is refused when published.
    let ready = broker.ready(vec![outgoing(q, "routable", 2), out.clone()]);
    match broker.publish_ready(&ready, Utc::now()).await.unwrap_err() {
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
    let (mut rx, token) = subscribe(broker, q, 2).await;
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
    let (mut rx, token) = subscribe(broker, q, 2).await;
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

broker_suite!(
    consume_stops_on_cancel,
    "brk-cancel",
    consume_stops_on_cancel_suite
);
