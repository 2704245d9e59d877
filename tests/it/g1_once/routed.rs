//! Two consumers routed apart, for the tests that take one consumer's link to Redis away
//! (`late_claim`, `stalled_renewal`): a reaches Redis through a proxy the test owns and
//! serves the queue `default`, where the test publishes; the job under test's own queue is
//! `slow`, which only b serves, and where the reaper republishes what it takes over. So the
//! first delivery goes to a and the second to b, whatever the broker's round robin.

use std::path::{Path, PathBuf};

use cronq_shared::runlog::{Outcome, Run};

use crate::support::TestEnv;
use crate::support::consumer_process::{consumer_args, started};
use crate::support::proxy::{Link, Proxy};

/// The config: `job` (on `slow`, overlap `skip`: its claim keeps the message for the
/// reaper, one attempt) notes `CRONQ_FENCE` at each start in the file returned beside the
/// config, then runs the shell's `then` (`{starts}` in it names that file); `other` only
/// gives a its queue `default`.
pub(super) fn config(env: &TestEnv, job: &str, then: &str) -> (PathBuf, PathBuf) {
    env.track_queue("default");
    env.track_queue("slow");
    let starts = env.dir.join("starts");
    let then = then.replace("{starts}", &starts.display().to_string());
    let config = env.write_config(
        "cronq.toml",
        &format!(
            r#"
[[job]]
name = "{job}"
schedule = "0 0 1 1 *"
queue = "slow"
overlap = "skip"
max_attempts = 1
command = ["sh", "-c", "echo $CRONQ_FENCE >> {}; {then}"]

[[job]]
name = "other"
schedule = "0 0 1 1 *"
command = ["true"]
"#,
            starts.display()
        ),
    );
    (config, starts)
}

/// The fences the starts noted in `path`.
pub(super) fn fences(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Starts a (serving `default`, its Redis link through the proxy returned, logging JSON)
/// and b (serving `slow`), each with `config` and `lease`, and waits until both run.
pub(super) async fn start(env: &TestEnv, config: &Path, lease: &str) -> Proxy {
    let config = config.to_str().unwrap();
    let (proxy, through) = Proxy::before(Link::Redis).await;
    let mut a = env.cronq();
    a.env(Link::Redis.var(), &through)
        .args(["--log-format", "json"])
        .args(consumer_args(config, "a", lease))
        .args(["--queues", "default"]);
    env.spawn_command("a", a);
    let mut b_args = consumer_args(config, "b", lease);
    b_args.extend(["--queues", "slow"]);
    env.spawn("b", &b_args);
    started(env, "a").await;
    started(env, "b").await;
    proxy
}

/// Asserts that `runs`, those of the occurrence under test, are a's success alone, and
/// that its handler started once (`starts` starts noted).
pub(super) fn assert_ran_once_on_a(env: &TestEnv, runs: &[Run], starts: usize) {
    let outcomes: Vec<_> = runs
        .iter()
        .map(|r| (r.consumer.as_str(), r.outcome))
        .collect();
    assert_eq!(outcomes, [("a", Outcome::Succeeded)], "{}", env.log("a"));
    assert_eq!(starts, 1, "{}", env.log("b"));
}
