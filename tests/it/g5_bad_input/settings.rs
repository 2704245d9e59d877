//! Bad connection settings are usage errors (exit 2) found before anything connects: a
//! `CRONQ_REDIS_URL` in none of the forms taken names the variable, the part that is wrong
//! and the form expected, never the credentials; a `CRONQ_REDIS_MIN_REPLICAS` that is not a
//! count names the flag; an unusable signing key names the variable or file and the key,
//! never the secret.
//!
//! These tests need no RabbitMQ or Redis.

use std::process::Output;

use crate::support::config_dir::{ConfigDir, stderr};

fn runs_with(test: &str, var: &str, value: &str) -> Output {
    runs_with_all(test, &[(var, value)])
}

fn runs_with_all(test: &str, vars: &[(&str, &str)]) -> Output {
    let dir = ConfigDir::new(test);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cronq"));
    cmd.env_remove("CRONQ_CONFIG")
        .env_remove("CRONQ_DATA")
        .env_remove("RUST_LOG")
        .env_remove("CRONQ_SIGNING_KEY")
        .env_remove("CRONQ_SIGNING_KEY_FILE")
        .envs(vars.iter().copied())
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

#[test]
fn unusable_signing_keys_are_usage_errors_that_never_show_a_secret() {
    let cases = [
        (
            "CRONQ_SIGNING_KEY",
            "k1:0123456789abcdef0123,k2:s3cret",
            "cronq: CRONQ_SIGNING_KEY, key \"k2\": the secret has 6 bytes, fewer than 16; generate one with `openssl rand -base64 32`\n",
        ),
        (
            "CRONQ_SIGNING_KEY",
            "s3cret-without-an-id-0123",
            "cronq: CRONQ_SIGNING_KEY, key 1: no ':' between the id and the secret; each key is ID:SECRET, the id of letters, digits, '_', '.' or '-' (at most 32)\n",
        ),
        (
            "CRONQ_SIGNING_KEY_FILE",
            "/nonexistent/cronq-keys",
            "cronq: --signing-key-file (CRONQ_SIGNING_KEY_FILE) /nonexistent/cronq-keys: cannot read it: No such file or directory (os error 2)\n",
        ),
    ];
    for (var, value, expected) in cases {
        let out = runs_with("bad-signing-key", var, value);
        assert_eq!(stderr(&out), expected, "{var}={value}");
        assert_eq!(out.status.code(), Some(2), "{var}={value}");
    }
    let dir = ConfigDir::new("key-file");
    let file = dir.dir.join("keys");
    std::fs::write(
        &file,
        "# keys\nk1:0123456789abcdef0123\nk1:s3cret-s3cret-s3cret\n",
    )
    .unwrap();
    // Readable by others: said (a warning), then the file's error.
    use std::os::unix::fs::PermissionsExt as _;
    let key_file = || {
        runs_with(
            "dup-signing-key",
            "CRONQ_SIGNING_KEY_FILE",
            file.to_str().unwrap(),
        )
    };
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = stderr(&key_file());
    assert!(
        err.contains("the signing key file is readable by its group or others: `chmod 600"),
        "{err}"
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = key_file();
    let err = stderr(&out);
    assert_eq!(
        err,
        format!(
            "cronq: CRONQ_SIGNING_KEY_FILE {}: key id \"k1\" is given twice; each key needs an id of its own\n",
            file.display()
        )
    );
    assert_eq!(out.status.code(), Some(2));
    let out = runs_with_all(
        "both-signing-keys",
        &[
            ("CRONQ_SIGNING_KEY", "k1:0123456789abcdef0123"),
            ("CRONQ_SIGNING_KEY_FILE", file.to_str().unwrap()),
        ],
    );
    let err = stderr(&out);
    assert!(
        err.starts_with("cronq: CRONQ_SIGNING_KEY and --signing-key-file (CRONQ_SIGNING_KEY_FILE)")
            && err.ends_with("are both set: keep one\n")
            && !err.contains("0123456789"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(2));
}
