//! `cronq producer` processes under a test's namespace: start them on an `@every 1s` job,
//! find the leader and a job's cursor in Redis, wait for the cursor to move, and stop them
//! all and take what they published off the `default` queue.

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
    let conn = env.amqp().await;
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

/// Stops every producer gracefully and returns the queue's contents.
pub async fn stop_and_drain(env: &TestEnv, pids: &[u32]) -> Vec<Occurrence> {
    for pid in pids {
        env.signal(*pid, Signal::SIGCONT);
        env.signal(*pid, Signal::SIGTERM);
    }
    for pid in pids {
        env.wait(*pid, Duration::from_secs(10));
    }
    drain(env).await
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
