//! One leader among producers publishes every second of a job once, no second missing,
//! however many jobs are due together: in process on every backend, and as two `cronq
//! producer` processes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cronq_producer::scheduler::PUBLISH_BATCH;
use cronq_shared::message::Trigger;
use tokio::sync::watch;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::producer_process::{
    advance, producer, stop_and_drain, tick_config, wait_leader,
};
use crate::support::producers::{World, every_second};
use crate::support::published::{assert_contiguous, keys, seconds_once};
use crate::support::{TestEnv, scoped};

async fn every_second_once(backend: Backend, env: TestEnv) {
    let world = World::new(backend, &env).await;
    let (_tx, rx) = watch::channel(Arc::new(every_second(&["tick"], "latest")));
    let p = world.start("p1", rx).await;
    world.advance("tick", 4).await;
    assert_eq!(world.leader().await.unwrap().1, "p1");
    p.stop().await;
    assert_eq!(world.leader().await, None, "released on shutdown");
    let msgs = world.finish();
    let seconds = seconds_once(&msgs, "tick");
    assert!(seconds.len() >= 4, "{:?}", keys(&msgs));
    assert_contiguous(&seconds, &msgs);
    assert!(
        msgs.iter().all(|m| m.key.to_string()
            == format!("tick@{}", m.scheduled_at.format("%Y-%m-%dT%H:%M:%SZ"))),
        "{:?}",
        keys(&msgs)
    );
    // A tick's messages are built ahead of its instant, but none goes out before it (the
    // stamp is taken right before publishing).
    let early: Vec<_> = msgs
        .iter()
        .filter(|m| m.published_at <= m.scheduled_at)
        .map(|m| (m.key.to_string(), m.published_at))
        .collect();
    assert!(
        early.is_empty(),
        "published at or before the instant: {early:?}"
    );
}

on_every_backend!(
    every_second_once,
    "pb-every",
    flavor = "multi_thread",
    worker_threads = 2
);

/// More jobs due in one second than one publish batch holds: all batches of a tick go out
/// at once and their cursors move together; every job is published each second, once.
async fn many_jobs_due_together(backend: Backend, env: TestEnv) {
    let jobs = 2 * PUBLISH_BATCH + PUBLISH_BATCH / 2;
    let names: Vec<String> = (0..jobs).map(|i| format!("j{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let world = World::new(backend, &env).await;
    let (_tx, rx) = watch::channel(Arc::new(every_second(&refs, "all")));
    let p = world.start("p1", rx).await;
    let last = names.last().unwrap();
    world.advance(last, 3).await;
    p.stop().await;
    let msgs = world.finish();
    // One job of each batch, the first and last of all included.
    for job in [&names[0], &names[PUBLISH_BATCH], last] {
        let seconds = seconds_once(&msgs, job);
        assert!(seconds.len() >= 3, "{job}: {seconds:?}");
        assert_contiguous(&seconds, &msgs);
    }
    let per_second: BTreeMap<i64, usize> = msgs.iter().fold(BTreeMap::new(), |mut count, m| {
        *count.entry(m.scheduled_at.timestamp()).or_default() += 1;
        count
    });
    let full = per_second.values().filter(|&&n| n == jobs).count();
    assert!(
        full >= 2,
        "seconds with every job published: {per_second:?}"
    );
    assert!(
        per_second.values().all(|&n| n <= jobs),
        "a second published more than once per job: {per_second:?}"
    );
}

on_every_backend!(
    many_jobs_due_together,
    "pb-many",
    flavor = "multi_thread",
    worker_threads = 2
);

async fn two_producers_one_leader(backend: Backend, env: TestEnv) {
    let world = World::new(backend, &env).await;
    let (_tx, rx) = watch::channel(Arc::new(every_second(&["tick"], "all")));
    let a = world.start("a", rx.clone()).await;
    let b = world.start("b", rx).await;
    let (epoch, leader) = world.wait_leader(0).await;
    world.advance("tick", 4).await;
    assert_eq!(
        world.leader().await,
        Some((epoch, leader.clone())),
        "one leader all along"
    );
    a.stop().await;
    b.stop().await;
    let msgs = world.finish();
    let epochs: BTreeSet<u64> = msgs.iter().map(|m| m.epoch).collect();
    assert_eq!(epochs, BTreeSet::from([epoch]), "only the leader published");
    let seconds = seconds_once(&msgs, "tick");
    assert!(seconds.len() >= 4, "{:?}", keys(&msgs));
    assert_contiguous(&seconds, &msgs);
}

on_every_backend!(
    two_producers_one_leader,
    "pb-two",
    flavor = "multi_thread",
    worker_threads = 2
);

#[tokio::test(flavor = "multi_thread")]
async fn two_producers_publish_every_second_once() {
    scoped("prod-two", |env| async move {
        let config = tick_config(&env, "all");
        let a = producer(&env, "a", &config);
        let b = producer(&env, "b", &config);
        wait_leader(&env, 0).await;
        advance(&env, "tick", 10).await;
        let msgs = stop_and_drain(&env, &[a, b]).await;
        let seconds = seconds_once(&msgs, "tick");
        assert!(seconds.len() >= 10, "{:?}", keys(&msgs));
        assert_contiguous(&seconds, &msgs);
        assert!(
            seconds.values().all(|t| *t == Trigger::Schedule),
            "one leader throughout: nothing to catch up"
        );
    })
    .await;
}
