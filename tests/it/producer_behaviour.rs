//! The producer in process (`Producer::new(..).run(token)`): every second once, one leader
//! among two, failover with catch-up, pause and resume, trigger and backfill requests, and
//! a config reload through the watch channel.
//!
//! Every behaviour is written once as a plain async fn over a [`Backend`] and run twice:
//! `_memory` on the in-memory ports `cronq standalone` uses (the producers share one
//! `MemoryBroker`, `MemoryLease` and control store) and `_real` on RabbitMQ and Redis (each
//! producer with its own connections, as separate processes). What reaches the queue is
//! drained through the `Broker` port.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use chrono::Utc;
use cronq_producer::scheduler::PUBLISH_BATCH;
use cronq_shared::config::Config;
use tokio::sync::watch;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::producers::{LEADER, WAIT, World, every_second, job};
use crate::support::published::{
    assert_contiguous, assert_triggers_and_backfill, keys, seconds_once,
};
use crate::support::{TestEnv, eventually};

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

async fn cancelled_leader_hands_over_without_gap(backend: Backend, env: TestEnv) {
    let world = World::new(backend, &env).await;
    let (_tx, rx) = watch::channel(Arc::new(every_second(&["tick"], "all")));
    let mut standby = vec![
        world.start("a", rx.clone()).await,
        world.start("b", rx).await,
    ];
    let (epoch, first) = world.wait_leader(0).await;
    world.advance("tick", 2).await;
    let idx = standby.iter().position(|p| p.instance == first).unwrap();
    let leader = standby.remove(idx);
    leader.stop().await;
    let (next, second) = world.wait_leader(epoch).await;
    assert_ne!(second, first, "the standby took over");
    eventually(WAIT, "the new leader to publish", || async {
        world.seen().iter().any(|m| m.epoch == next).then_some(())
    })
    .await;
    world.advance("tick", 2).await;
    standby.pop().unwrap().stop().await;
    let msgs = world.finish();
    let epochs: BTreeSet<u64> = msgs.iter().map(|m| m.epoch).collect();
    assert_eq!(epochs, BTreeSet::from([epoch, next]), "{:?}", keys(&msgs));
    let seconds = seconds_once(&msgs, "tick");
    assert_contiguous(&seconds, &msgs);
}

on_every_backend!(
    cancelled_leader_hands_over_without_gap,
    "pb-handover",
    flavor = "multi_thread",
    worker_threads = 2
);

async fn pause_stops_and_resume_restarts(backend: Backend, env: TestEnv) {
    let world = World::new(backend, &env).await;
    let (_tx, rx) = watch::channel(Arc::new(every_second(&["tick", "tock"], "all")));
    let p = world.start("p1", rx).await;
    world.advance("tick", 1).await;
    let (tick, tock) = (job("tick"), job("tock"));
    assert!(world.control.paused().await.unwrap().is_empty());
    world
        .control
        .pause(&tick, Some("test".into()))
        .await
        .unwrap();
    // The leader reads pause flags before requests in each control poll: once this
    // request is carried out, the pause is known.
    world.control.request_trigger(&tock, None).await.unwrap();
    eventually(WAIT, "the request to be carried out", || async {
        world
            .control
            .pending()
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
    let known = Utc::now();
    world
        .reached("tock", known + chrono::TimeDelta::seconds(2))
        .await;
    let resumed = Utc::now();
    assert!(world.control.resume(&tick).await.unwrap());
    world.reached("tick", resumed).await;
    world.advance("tick", 1).await;
    p.stop().await;
    let msgs = world.finish();
    let ticks = seconds_once(&msgs, "tick");
    let during: Vec<i64> = ticks
        .keys()
        .copied()
        .filter(|s| *s > known.timestamp() && *s <= resumed.timestamp())
        .collect();
    assert!(during.is_empty(), "published while paused: {during:?}");
    assert!(
        ticks.keys().any(|s| *s >= resumed.timestamp()),
        "publishing restarts after resume"
    );
    assert_contiguous(&seconds_once(&msgs, "tock"), &msgs);
}

on_every_backend!(
    pause_stops_and_resume_restarts,
    "pb-pause",
    flavor = "multi_thread",
    worker_threads = 2
);

async fn trigger_and_backfill_requests_are_honoured(backend: Backend, env: TestEnv) {
    let world = World::new(backend, &env).await;
    let toml = format!(
        "{LEADER}\n[[job]]\nname = \"yearly\"\nschedule = \"0 0 1 1 *\"\npayload = {{ from = \"config\" }}\n"
    );
    let config = Config::from_toml(&toml, Path::new("cronq.toml")).unwrap();
    let (_tx, rx) = watch::channel(Arc::new(config));
    let p = world.start("p1", rx).await;
    world.wait_leader(0).await;
    let yearly = job("yearly");
    // Two triggers in the same second are both honoured, each under its own key.
    let k1 = world.control.request_trigger(&yearly, None).await.unwrap();
    let k2 = world
        .control
        .request_trigger(&yearly, Some(serde_json::json!({"from": "cli"})))
        .await
        .unwrap();
    assert_ne!(k1, k2);
    let from = "2020-01-01T00:00:00Z".parse().unwrap();
    let to = "2022-01-01T00:00:00Z".parse().unwrap();
    world
        .control
        .request_backfill(&yearly, from, to)
        .await
        .unwrap();
    eventually(WAIT, "the requests to be settled", || async {
        world
            .control
            .pending()
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
    eventually(WAIT, "five occurrences", || async {
        (world.seen().len() >= 5).then_some(())
    })
    .await;
    p.stop().await;
    let msgs = world.finish();
    assert_eq!(msgs.len(), 5, "{:?}", keys(&msgs));
    assert_triggers_and_backfill(&msgs, &k1, &k2);
}

on_every_backend!(
    trigger_and_backfill_requests_are_honoured,
    "pb-requests",
    flavor = "multi_thread",
    worker_threads = 2
);

async fn reload_through_the_watch_channel_adds_a_job(backend: Backend, env: TestEnv) {
    let world = World::new(backend, &env).await;
    let (tx, rx) = watch::channel(Arc::new(every_second(&["tick"], "all")));
    let p = world.start("p1", rx).await;
    world.advance("tick", 1).await;
    assert!(world.scheduled("tock").is_empty());
    tx.send(Arc::new(every_second(&["tick", "tock"], "all")))
        .unwrap();
    world.advance("tock", 3).await;
    world.advance("tick", 1).await;
    p.stop().await;
    let msgs = world.finish();
    let tock = seconds_once(&msgs, "tock");
    assert!(tock.len() >= 3, "{:?}", keys(&msgs));
    assert_contiguous(&tock, &msgs);
    assert_contiguous(&seconds_once(&msgs, "tick"), &msgs);
}

on_every_backend!(
    reload_through_the_watch_channel_adds_a_job,
    "pb-reload",
    flavor = "multi_thread",
    worker_threads = 2
);
