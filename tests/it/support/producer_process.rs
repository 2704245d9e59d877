//! `cronq producer` processes under a test's namespace: start them on an `@every 1s` job,
//! find the leader and a job's cursor in Redis, wait for the cursor to move, and stop them
//! all and take what they published off the `default` queue.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::Utc;
use cronq_shared::message::Occurrence;
use lapin::options::BasicGetOptions;
use nix::sys::signal::Signal;
use redis::AsyncCommands;

use super::{TestEnv, eventually};

/// A short leader lease, so that a standby takes over within seconds.
pub const LEADER: &str = "[leader]\nlease = \"3s\"\nrenew_deadline = \"2s\"\nretry = \"500ms\"\n";

/// The lease of [`LEADER`].
pub const LEASE: Duration = Duration::from_secs(3);

/// How long to wait for a leader or a cursor.
pub const WAIT: Duration = Duration::from_secs(20);

/// Writes `cronq.toml`: [`LEADER`] and the `@every 1s` job `tick` with `catchup`.
pub fn tick_config(env: &TestEnv, catchup: &str) -> String {
    env.track_queue("default");
    let toml = format!(
        "{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncatchup = \"{catchup}\"\n"
    );
    env.write_config("cronq.toml", &toml)
        .to_string_lossy()
        .into_owned()
}

/// Starts `cronq producer --config CONFIG`, logging to `<log>.log`.
pub fn producer(env: &TestEnv, log: &str, config: &str) -> u32 {
    env.spawn(log, &["producer", "--config", config])
}

/// The current leader's epoch and process id, from the lease in Redis.
pub async fn leader(env: &TestEnv) -> Option<(u64, u32)> {
    let mut conn = env.redis().await;
    let value: Option<String> = conn.get(format!("{}:leader", env.namespace)).await.unwrap();
    let value = value?;
    let mut parts = value.splitn(3, ' ');
    let epoch = parts.next()?.parse().ok()?;
    let instance = parts.nth(1)?;
    // instance = HOST-PID-RAND
    let pid = instance.rsplit('-').nth(1)?.parse().ok()?;
    Some((epoch, pid))
}

/// Waits for a leader whose epoch is above `newer_than`.
pub async fn wait_leader(env: &TestEnv, newer_than: u64) -> (u64, u32) {
    eventually(WAIT, "a leader", || async {
        leader(env).await.filter(|(e, _)| *e > newer_than)
    })
    .await
}

/// The job's cursor (unix ms) in Redis.
pub async fn cursor(env: &TestEnv, job: &str) -> Option<i64> {
    let mut conn = env.redis().await;
    conn.hget(format!("{}:cursor", env.namespace), job)
        .await
        .unwrap()
}

/// Waits until `job`'s cursor is at least `secs` seconds past where it is now.
pub async fn advance(env: &TestEnv, job: &str, secs: i64) -> i64 {
    let start = eventually(WAIT, "a first cursor", || cursor(env, job)).await;
    eventually(WAIT, "the cursor to advance", || async {
        cursor(env, job).await.filter(|c| *c >= start + secs * 1000)
    })
    .await
}

/// Takes every message off the namespace's `default` queue.
pub async fn drain(env: &TestEnv) -> Vec<Occurrence> {
    drain_over(env, env.amqp().await).await
}

/// Takes every message off the namespace's `default` queue, through the broker at `url`.
pub async fn drain_at(env: &TestEnv, url: &str) -> Vec<Occurrence> {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("cannot reach RabbitMQ at {url}: {e}"));
    drain_over(env, conn).await
}

async fn drain_over(env: &TestEnv, conn: lapin::Connection) -> Vec<Occurrence> {
    let ch = conn.create_channel().await.unwrap();
    let queue = format!("{}.q.default", env.namespace);
    let mut out = Vec::new();
    while let Some(msg) = ch
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        out.push(Occurrence::decode(&msg.delivery.data).unwrap());
    }
    let _ = conn.close(200, "drained".into()).await;
    out
}

/// Stops every producer gracefully (a frozen one is thawed first) and waits for each.
pub fn stop(env: &TestEnv, pids: &[u32]) {
    for pid in pids {
        env.signal(*pid, Signal::SIGCONT);
        env.signal(*pid, Signal::SIGTERM);
    }
    for pid in pids {
        env.wait(*pid, Duration::from_secs(10));
    }
}

/// Stops every producer gracefully and returns the queue's contents.
pub async fn stop_and_drain(env: &TestEnv, pids: &[u32]) -> Vec<Occurrence> {
    stop(env, pids);
    drain(env).await
}

/// A job `name` on `schedule`, catching up every occurrence missed.
pub fn job(name: &str, schedule: &str) -> String {
    format!("[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\ncatchup = \"all\"\n")
}

/// Waits until the wall clock is `ms` milliseconds after an even second.
pub async fn at_even_second_plus(ms: std::ops::Range<i64>) {
    loop {
        let now = Utc::now();
        if ms.contains(&(now.timestamp() % 2 * 1_000 + i64::from(now.timestamp_subsec_millis()))) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the wall clock is in the middle of a second, away from a publish.
pub async fn mid_second() {
    loop {
        let ms = Utc::now().timestamp_subsec_millis();
        if (400..600).contains(&ms) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The seconds every herd job (named `herdN`, `herd` of them, `@every 2s`) was published
/// for: the same for each, none missing.
///
/// The test's own stop comes between herds on a machine that publishes one in well under
/// its 1.4 s to spare; on a slower or busier one it may come in the middle of the last
/// herd, whose rest is then left to a next leader the test does not start. So some jobs may
/// lack the last second the others have, and no more: the seconds are compared up to the
/// last one every job has, and that is at most one herd before the latest.
pub fn herd_seconds(msgs: &[Occurrence], herd: usize) -> Vec<i64> {
    let mut seconds: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
    for m in msgs.iter().filter(|m| m.job.as_str().starts_with("herd")) {
        seconds
            .entry(m.job.as_str())
            .or_default()
            .insert(m.scheduled_at.timestamp());
    }
    assert_eq!(seconds.len(), herd, "every herd job published");
    let ends = || seconds.values().filter_map(|at| at.last().copied());
    let (cut, latest) = (ends().min(), ends().max());
    if let (Some(cut), Some(latest)) = (cut, latest) {
        assert!(
            latest - cut <= 2,
            "herd jobs last published at {cut} and at {latest}: more than the last herd cut"
        );
    }
    let herd: Vec<Vec<i64>> = (0..herd)
        .map(|i| {
            seconds[format!("herd{i}").as_str()]
                .iter()
                .copied()
                .filter(|s| cut.is_none_or(|cut| *s <= cut))
                .collect()
        })
        .collect();
    for (i, at) in herd.iter().enumerate() {
        assert!(
            at.windows(2).all(|w| w[1] - w[0] == 2),
            "herd{i}: a second missing in {at:?}"
        );
        assert_eq!(at, &herd[0], "herd{i} and herd0 differ");
    }
    herd.into_iter().next().unwrap_or_default()
}

/// Asserts that the job `tick` (`@every 1s`) was published for every second from its first
/// to its last, and that the herd's seconds ([`herd_seconds`], at least `at_least` of them)
/// are among them.
pub fn assert_herd_beside_tick(msgs: &[Occurrence], herd: usize, at_least: usize) {
    let herd = herd_seconds(msgs, herd);
    let tick: Vec<i64> = msgs
        .iter()
        .filter(|m| m.job.as_str() == "tick")
        .map(|m| m.scheduled_at.timestamp())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        tick.windows(2).all(|w| w[1] - w[0] == 1),
        "tick: a second missing in {tick:?}"
    );
    assert!(
        herd.len() >= at_least && herd.iter().all(|s| tick.contains(s)),
        "the herd's seconds {herd:?} are among the tick's {tick:?}"
    );
}
