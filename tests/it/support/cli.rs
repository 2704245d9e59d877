//! The `cronq` command line as the operations tests drive it: run a command and assert
//! its exit code, parse its `--json` output, and jobs whose command records the key of
//! every run in the test's directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::TestEnv;
use super::producer_process::LEADER;

/// How long to wait for runs of processes.
pub const WAIT: Duration = Duration::from_secs(60);

/// A job whose handler appends its key to `<dir>/<name>.ran`.
pub fn job(env: &TestEnv, name: &str, schedule: &str, extra: &str) -> String {
    let ran = env.dir.join(format!("{name}.ran"));
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n{extra}\ncommand = [\"sh\", \"-c\", \"echo $CRONQ_KEY >> {}\"]\n",
        ran.display()
    )
}

/// Writes `cronq.toml` with the short leader lease and `jobs`; returns its path.
pub fn config(env: &TestEnv, jobs: &str) -> String {
    env.track_queue("default");
    env.write_config("cronq.toml", &format!("{LEADER}\n{jobs}"))
        .to_string_lossy()
        .into_owned()
}

/// The keys a job's handler recorded, in order.
pub fn ran(env: &TestEnv, name: &str) -> Vec<String> {
    read_lines(&env.dir.join(format!("{name}.ran")))
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Counts per key, failing on none.
pub fn counts(keys: &[String]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for k in keys {
        *out.entry(k.clone()).or_insert(0) += 1;
    }
    out
}

/// The scheduled instant of a `JOB@TIME` key.
pub fn at(key: &str) -> DateTime<Utc> {
    key.split_once('@').unwrap().1.parse().unwrap()
}

/// Starts `cronq consumer` with a 3 s lease, logging to `<id>.log`.
pub fn start_consumer(env: &TestEnv, config: &str, id: &str) -> u32 {
    env.spawn(
        id,
        &[
            "consumer",
            "--config",
            config,
            "--consumer-id",
            id,
            "--lease",
            "3s",
        ],
    )
}

/// Runs `cronq ARGS`, asserting exit 0, and returns stdout.
pub fn ok(env: &TestEnv, args: &[&str]) -> String {
    let out = env.run(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "cronq {args:?}: {}",
        describe(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `cronq ARGS --json`-style commands and parses stdout as one JSON document.
pub fn json(env: &TestEnv, args: &[&str]) -> Value {
    let text = ok(env, args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("cronq {args:?}: not JSON ({e}): {text}"))
}

/// Runs `cronq ARGS`, asserting exit `code`, and returns stderr.
pub fn fails(env: &TestEnv, code: i32, args: &[&str]) -> String {
    let out = env.run(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "cronq {args:?}: {}",
        describe(&out)
    );
    String::from_utf8(out.stderr).unwrap()
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
