//! An in-process leader carries out control requests and config reloads: a paused job is
//! not published until resumed, triggers and a backfill are published once each, a job
//! added through the watch channel starts. On every backend.

use std::path::Path;
use std::sync::Arc;

use chrono::Utc;
use cronq_shared::config::Config;
use tokio::sync::watch;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::producers::{LEADER, WAIT, World, every_second, job};
use crate::support::published::{
    assert_contiguous, assert_triggers_and_backfill, keys, seconds_once,
};
use crate::support::{TestEnv, eventually};

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
