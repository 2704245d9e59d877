//! Bad connection settings are usage errors (exit 2) found before anything connects: a
//! `CRONQ_REDIS_URL` in none of the forms taken names the variable, the part that is wrong
//! and the form expected, never the credentials; a `CRONQ_REDIS_MIN_REPLICAS` that is not a
//! count names the flag.
//!
//! These tests need no RabbitMQ or Redis.

use std::process::Output;

use crate::support::config_dir::{ConfigDir, stderr};

fn runs_with(test: &str, var: &str, value: &str) -> Output {
    let dir = ConfigDir::new(test);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cronq"));
    cmd.env_remove("CRONQ_CONFIG")
        .env_remove("CRONQ_DATA")
        .env_remove("RUST_LOG")
        .env(var, value)
        .arg("runs")
        .current_dir(&dir.dir);
    cmd.output().expect("run cronq")
}

#[test]
fn malformed_sentinel_url_is_a_usage_error() {
    let out = runs_with(
        "bad-sentinel-url",
        "CRONQ_REDIS_URL",
        "redis+sentinel://app:s3cret@h1:26379,h2:x/cronq-ha",
    );
    assert_eq!(
        stderr(&out),
        "cronq: CRONQ_REDIS_URL: sentinel 2 (\"h2:x\"): the port is not a number from 1 to 65535; \
         expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB] \
         (rediss+sentinel:// for TLS)\n"
    );
    assert_eq!(out.status.code(), Some(2));

    let out = runs_with(
        "no-master-name",
        "CRONQ_REDIS_URL",
        "rediss+sentinel://:s3cret@h1:26379",
    );
    let err = stderr(&out);
    assert!(
        err.starts_with("cronq: CRONQ_REDIS_URL: no master name after the sentinels; expected"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn unknown_redis_scheme_is_a_usage_error() {
    let out = runs_with("bad-redis-scheme", "CRONQ_REDIS_URL", "http://u:s3cret@h:1");
    let err = stderr(&out);
    assert!(
        err.starts_with("cronq: CRONQ_REDIS_URL: unknown scheme \"http\"; expected redis://"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn min_replicas_must_be_a_count() {
    let out = runs_with("bad-min-replicas", "CRONQ_REDIS_MIN_REPLICAS", "one");
    let err = stderr(&out);
    assert!(
        err.contains("invalid value 'one' for '--redis-min-replicas <N>'"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(2));
}
