//! `cronq producer` as processes: failover, crash, connection loss, stale leaders, clean
//! handover and config reload, asserted on what reaches the queue and on the cursor in
//! Redis. Each test has its own namespace and a short lease.

// Test helpers are part of the tests: an unwrap that fails is a failing test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronq_shared::message::Trigger;
use nix::sys::signal::Signal;

use crate::support::producer_process::{
    LEADER, LEASE, WAIT, advance, cursor, leader, mid_second, producer, stop_and_drain,
    tick_config, wait_leader,
};
use crate::support::published::{
    assert_contiguous, assert_triggers_and_backfill, keys, seconds_once,
};
use crate::support::{TestEnv, eventually, scoped};

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

#[tokio::test(flavor = "multi_thread")]
async fn killed_leader_is_caught_up_completely_with_catchup_all() {
    scoped("prod-kill-all", |env| async move {
        let config = tick_config(&env, "all");
        let a = producer(&env, "a", &config);
        let (epoch, pid) = wait_leader(&env, 0).await;
        let b = producer(&env, "b", &config);
        advance(&env, "tick", 3).await;
        mid_second().await;
        env.signal(pid, Signal::SIGKILL);
        let killed = Instant::now();
        let (next, _) = wait_leader(&env, epoch).await;
        assert!(next > epoch);
        assert!(
            killed.elapsed() < LEASE + Duration::from_secs(3),
            "the standby takes over about one lease after the kill, took {:?}",
            killed.elapsed()
        );
        advance(&env, "tick", 3).await;
        let msgs = stop_and_drain(&env, &[a, b]).await;
        let seconds = seconds_once(&msgs, "tick");
        assert_contiguous(&seconds, &msgs);
        assert!(
            seconds.values().any(|t| *t == Trigger::Catchup),
            "the new leader caught up the seconds of the outage: {:?}",
            keys(&msgs)
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_leader_loses_all_but_the_latest_with_catchup_latest() {
    scoped("prod-kill-latest", |env| async move {
        let config = tick_config(&env, "latest");
        let a = producer(&env, "a", &config);
        let (epoch, pid) = wait_leader(&env, 0).await;
        let b = producer(&env, "b", &config);
        advance(&env, "tick", 3).await;
        mid_second().await;
        env.signal(pid, Signal::SIGKILL);
        wait_leader(&env, epoch).await;
        advance(&env, "tick", 3).await;
        let msgs = stop_and_drain(&env, &[a, b]).await;
        let seconds = seconds_once(&msgs, "tick");
        let list: Vec<(i64, Trigger)> = seconds.iter().map(|(s, t)| (*s, *t)).collect();
        let gaps: Vec<usize> = (1..list.len())
            .filter(|&i| list[i].0 - list[i - 1].0 > 1)
            .collect();
        assert_eq!(gaps.len(), 1, "exactly one outage gap: {list:?}");
        let after = list[gaps[0]];
        assert_eq!(
            after.1,
            Trigger::Catchup,
            "the second after the gap is the one caught up: {list:?}"
        );
        let catchups = list.iter().filter(|(_, t)| *t == Trigger::Catchup).count();
        assert_eq!(catchups, 1, "only the latest missed second: {list:?}");
    })
    .await;
}

/// Closes the AMQP connections of process `pid` (only this test's, not the whole broker's).
fn close_amqp_connections_of(pid: u32) -> usize {
    let ss = Command::new("ss")
        .args(["-tnpH", "( dport = :5672 )"])
        .output()
        .expect("run ss");
    let mark = format!("pid={pid},");
    let ports: Vec<String> = String::from_utf8_lossy(&ss.stdout)
        .lines()
        .filter(|l| l.contains(&mark))
        .filter_map(|l| {
            l.split_whitespace()
                .nth(3)?
                .rsplit(':')
                .next()
                .map(str::to_owned)
        })
        .collect();
    let list = Command::new("rabbitmqctl")
        .args(["list_connections", "pid", "peer_port", "-q"])
        .output()
        .expect("run rabbitmqctl (is RabbitMQ installed locally?)");
    let mut closed = 0;
    for line in String::from_utf8_lossy(&list.stdout).lines() {
        let mut cols = line.split('\t');
        let (Some(conn), Some(port)) = (cols.next(), cols.next()) else {
            continue;
        };
        if ports.iter().any(|p| p == port.trim()) {
            let out = Command::new("rabbitmqctl")
                .args(["close_connection", conn, "test: connection drop"])
                .output()
                .expect("run rabbitmqctl");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            closed += 1;
        }
    }
    closed
}

/// Kills the Redis connections of this namespace's producers (found by client name).
async fn kill_redis_connections(env: &TestEnv) -> usize {
    let mut conn = env.redis().await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mark = format!("name=cronq-producer:{}:", env.namespace);
    let mut killed = 0;
    for line in list.lines().filter(|l| l.contains(&mark)) {
        let id = line
            .split(' ')
            .find_map(|f| f.strip_prefix("id="))
            .unwrap()
            .to_owned();
        let n: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(&id)
            .query_async(&mut conn)
            .await
            .unwrap_or(0);
        killed += usize::try_from(n).unwrap_or(0);
    }
    killed
}

#[tokio::test(flavor = "multi_thread")]
async fn dropped_connections_lose_nothing_and_duplicate_nothing() {
    scoped("prod-drops", |env| async move {
        let config = tick_config(&env, "all");
        let a = producer(&env, "a", &config);
        let b = producer(&env, "b", &config);
        let (_, pid) = wait_leader(&env, 0).await;
        advance(&env, "tick", 2).await;
        mid_second().await;
        let closed = tokio::task::spawn_blocking(move || close_amqp_connections_of(pid))
            .await
            .unwrap();
        assert!(closed >= 1, "the leader had an AMQP connection");
        advance(&env, "tick", 3).await;
        mid_second().await;
        let killed = eventually(WAIT, "a named producer connection", || async {
            let n = kill_redis_connections(&env).await;
            (n > 0).then_some(n)
        })
        .await;
        assert!(killed >= 1);
        advance(&env, "tick", 3).await;
        let msgs = stop_and_drain(&env, &[a, b]).await;
        let seconds = seconds_once(&msgs, "tick");
        assert_contiguous(&seconds, &msgs);
        assert!(seconds.len() >= 8, "{:?}", keys(&msgs));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_leader_cannot_move_the_cursor() {
    scoped("prod-stale", |env| async move {
        let config = tick_config(&env, "all");
        let a = producer(&env, "a", &config);
        let (epoch, old) = wait_leader(&env, 0).await;
        let b = producer(&env, "b", &config);
        advance(&env, "tick", 2).await;
        env.signal(old, Signal::SIGSTOP);
        let (_, new) = wait_leader(&env, epoch).await;
        assert_ne!(new, old);
        let before = advance(&env, "tick", 2).await;
        env.signal(old, Signal::SIGCONT);
        let (old_log, _) = if old == a { ("a", b) } else { ("b", a) };
        // Watch the cursor while the stale leader wakes up and notices.
        let mut last = before;
        let woke = Instant::now();
        loop {
            let now = cursor(&env, "tick").await.unwrap();
            assert!(now >= last, "the cursor moved back from {last} to {now}");
            last = now;
            if env.log(old_log).contains("lost leadership")
                && woke.elapsed() > Duration::from_secs(2)
            {
                break;
            }
            assert!(
                woke.elapsed() < WAIT,
                "the stale leader never noticed:\n{}",
                env.log(old_log)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (still, pid) = leader(&env).await.unwrap();
        assert!(still > epoch && pid == new, "the new leader still leads");
        advance(&env, "tick", 1).await;
        let msgs = stop_and_drain(&env, &[a, b]).await;
        let mut distinct: BTreeMap<i64, usize> = BTreeMap::new();
        for m in msgs.iter().filter(|m| m.job.as_str() == "tick") {
            *distinct.entry(m.scheduled_at.timestamp()).or_default() += 1;
        }
        let (first, last) = (
            *distinct.keys().next().unwrap(),
            *distinct.keys().last().unwrap(),
        );
        let missing: Vec<i64> = (first..=last)
            .filter(|s| !distinct.contains_key(s))
            .collect();
        assert!(missing.is_empty(), "missing {missing:?}");
        let final_cursor =
            DateTime::from_timestamp_millis(cursor(&env, "tick").await.unwrap()).unwrap();
        assert!(
            final_cursor.timestamp() >= last,
            "cursor {final_cursor} covers every published second"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_hands_over_within_one_retry() {
    scoped("prod-handover", |env| async move {
        let config = tick_config(&env, "all");
        let a = producer(&env, "a", &config);
        let (epoch, pid) = wait_leader(&env, 0).await;
        let b = producer(&env, "b", &config);
        advance(&env, "tick", 2).await;
        let sent = Instant::now();
        env.signal(pid, Signal::SIGTERM);
        let (next, new) = wait_leader(&env, epoch).await;
        let took = sent.elapsed();
        assert!(next > epoch && new != pid);
        assert!(
            took < LEASE,
            "handed over after {took:?}: the lease was released, not left to expire"
        );
        assert_eq!(
            env.wait(pid, Duration::from_secs(10)),
            Some(0),
            "graceful stop exits 0"
        );
        advance(&env, "tick", 2).await;
        let msgs = stop_and_drain(&env, &[a, b]).await;
        let seconds = seconds_once(&msgs, "tick");
        assert_contiguous(&seconds, &msgs);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_adds_a_job_and_an_invalid_file_keeps_the_old_config() {
    scoped("prod-reload", |env| async move {
        let config = tick_config(&env, "all");
        let a = producer(&env, "a", &config);
        wait_leader(&env, 0).await;
        advance(&env, "tick", 1).await;
        let two = format!(
            "{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\n\n[[job]]\nname = \"tock\"\nschedule = \"@every 1s\"\n"
        );
        env.write_config("cronq.toml", &two);
        env.signal(a, Signal::SIGHUP);
        advance(&env, "tock", 2).await;

        env.write_config("cronq.toml", "[[job]]\nname = \"tick\"\nschedule = \"61 * * * *\"\n");
        env.signal(a, Signal::SIGHUP);
        eventually(WAIT, "the reload to be rejected", || async {
            env.log("a").contains("config reload rejected").then_some(())
        })
        .await;
        // Both jobs keep running under the old config.
        advance(&env, "tock", 2).await;
        advance(&env, "tick", 1).await;
        let msgs = stop_and_drain(&env, &[a]).await;
        let tock = seconds_once(&msgs, "tock");
        assert!(tock.len() >= 3, "{:?}", keys(&msgs));
        assert_contiguous(&tock, &msgs);
        assert_contiguous(&seconds_once(&msgs, "tick"), &msgs);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_leader_carries_out_pause_trigger_and_backfill_requests() {
    use cronq_shared::control::Control;
    use cronq_shared::names::{JobName, Names, Namespace};

    scoped("prod-requests", |env| async move {
        env.track_queue("default");
        let toml = format!(
            "{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\n\n[[job]]\nname = \"yearly\"\nschedule = \"0 0 1 1 *\"\npayload = {{ from = \"config\" }}\n"
        );
        let config = env.write_config("cronq.toml", &toml).to_string_lossy().into_owned();
        let a = producer(&env, "a", &config);
        wait_leader(&env, 0).await;
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let redis = cronq_redis::connect(&crate::support::redis_url()).await.unwrap();
        let control = Control::new(cronq_redis::RedisControl::new(redis, &names));
        let (tick, yearly) = (JobName::new("tick").unwrap(), JobName::new("yearly").unwrap());

        // Two triggers in the same second are both honoured, each under its own key.
        let k1 = control.request_trigger(&yearly, None).await.unwrap();
        let k2 = control
            .request_trigger(&yearly, Some(serde_json::json!({"from": "cli"})))
            .await
            .unwrap();
        let (from, to) = ("2020-01-01T00:00:00Z".parse().unwrap(), "2022-01-01T00:00:00Z".parse().unwrap());
        control.request_backfill(&yearly, from, to).await.unwrap();
        eventually(WAIT, "the requests to be settled", || async {
            control.pending().await.unwrap().is_empty().then_some(())
        })
        .await;

        advance(&env, "tick", 1).await;
        control.pause(&tick, Some("test".into())).await.unwrap();
        eventually(WAIT, "the pause to be seen", || async {
            env.log("a").contains("job paused").then_some(())
        })
        .await;
        let paused_at = cursor(&env, "tick").await.unwrap();
        let resumed_at = advance(&env, "tick", 2).await;
        assert!(control.resume(&tick).await.unwrap());
        eventually(WAIT, "the resume to be seen", || async {
            env.log("a").contains("job resumed").then_some(())
        })
        .await;
        advance(&env, "tick", 2).await;

        let msgs = stop_and_drain(&env, &[a]).await;
        assert_triggers_and_backfill(&msgs, &k1, &k2);
        let ticks = seconds_once(&msgs, "tick");
        let during: Vec<i64> = ticks
            .keys()
            .copied()
            .filter(|s| *s * 1000 > paused_at && *s * 1000 <= resumed_at)
            .collect();
        assert!(during.is_empty(), "published while paused: {during:?}");
        assert!(
            ticks.keys().any(|s| *s * 1000 > resumed_at),
            "publishing restarts after resume"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_process_producer_on_memory_ports_publishes_and_releases_on_cancel() {
    use std::sync::Arc;

    use cronq_memory::MemoryBroker;
    use cronq_memory::MemoryLease;
    use cronq_producer::Producer;
    use cronq_shared::config::Config;
    use cronq_shared::control::Control;
    use cronq_shared::lease::Lease;
    use cronq_shared::names::QueueName;
    use tokio_util::sync::CancellationToken;

    let toml = format!("{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\n");
    let config = Config::from_toml(&toml, std::path::Path::new("memory.toml")).unwrap();
    let broker = MemoryBroker::new();
    let lease = MemoryLease::new();
    let control = Control::new(cronq_memory::MemoryControl::new(&lease));
    // No reloader: the config sender is dropped at once, which must not upset the leader.
    let (_, config_rx) = tokio::sync::watch::channel(Arc::new(config));
    let producer = Producer::new(
        Arc::new(broker.clone()),
        Arc::new(lease.clone()),
        control.clone(),
        config_rx,
        "memory-1",
    );
    let token = CancellationToken::new();
    let running = tokio::spawn(producer.run(token.clone()));
    let queue = QueueName::new("default").unwrap();
    eventually(WAIT, "two published occurrences", || async {
        (broker.ready(&queue).unwrap_or(0) >= 2).then_some(())
    })
    .await;
    let cursor =
        control.cursors().await.unwrap()[&cronq_shared::names::JobName::new("tick").unwrap()];
    assert!(Utc::now() - cursor < chrono::TimeDelta::seconds(5));
    assert_eq!(lease.holder().await.unwrap().unwrap().instance, "memory-1");
    token.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(
        lease.holder().await.unwrap(),
        None,
        "the lease is released on shutdown"
    );
}
