//! TLS for real, on the harness of `scripts/tls` (a RabbitMQ node with AMQPS, Redis servers
//! that speak only TLS, certificates made for the run): a fleet of `cronq producer` ×2 and
//! `cronq consumer` ×2 on `amqps://` (a node that requires client certificates) and
//! `rediss://` with `CRONQ_TLS_CA_FILE` and a client certificate runs every second of an
//! `@every 1s` job exactly once; a server certificate from another CA, or for another host
//! name, is refused (exit 1, naming the service and saying why and what to do); RabbitMQ
//! and a Redis that require a client certificate refuse a process without one and serve
//! one with `CRONQ_TLS_CERT_FILE` and `CRONQ_TLS_KEY_FILE`; a TLS file that cannot be used
//! is exit 2, naming the variable and the file.

use std::future::Future;
use std::time::Duration;

use cronq_shared::runlog::Outcome;

use crate::support::cli::ok;
use crate::support::deployment::{Deployment, LEADER, Options, Running, argv};
use crate::support::history;
use crate::support::tls::{Harness, harness};
use crate::support::{TestEnv, scoped, until};

/// The job of the fleet test.
const JOB: &str = "tick";

/// How long the fleet may take to run its first seconds, then to settle.
const PHASE: Duration = Duration::from_secs(60);

/// Runs `body` on the harness under a fresh namespace; its queues and keys there are
/// deleted even when `body` panics.
async fn on_harness<F, Fut>(test: &str, body: F)
where
    F: FnOnce(TestEnv, Harness) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let tls = harness();
    scoped(test, move |env| async move {
        env.clean_broker_too(&tls.amqp_plain_url, Some(&tls.node));
        let outcome = tokio::spawn(body(env.clone(), tls.clone())).await;
        env.kill_children();
        tls.delete_keys(&env.namespace).await;
        if let Err(err) = outcome {
            std::panic::resume_unwind(err.into_panic());
        }
    })
    .await;
}

/// `cronq ARGS` with the environment `vars` (over the test's defaults), which must fail
/// with exit `code`; its stderr.
fn failing(env: &TestEnv, vars: &[(&str, &str)], code: i32, args: &[&str]) -> String {
    let out = env
        .cronq()
        .envs(vars.iter().copied())
        .args(args)
        .output()
        .expect("run cronq");
    assert_eq!(
        out.status.code(),
        Some(code),
        "cronq {args:?} with {vars:?}: stdout {}\nstderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).expect("UTF-8 stderr")
}

/// The error line of a failed command: its last line of stderr that is the command's own
/// (`cronq: ...`). lapin's I/O thread may log the refused handshake after it, as a line of
/// its own.
fn error_line(stderr: &str) -> &str {
    stderr
        .lines()
        .rev()
        .find(|line| line.starts_with("cronq: "))
        .or_else(|| stderr.lines().last())
        .unwrap_or_default()
}

fn assert_starts_with(line: &str, prefix: &str) {
    assert!(
        line.starts_with(prefix),
        "expected a line starting with\n  {prefix}\ngot\n  {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_over_tls_runs_every_second_once() {
    on_harness("tls-fleet", |env, tls| async move {
        let toml = format!(
            "{LEADER}
[[job]]
name = \"{JOB}\"
schedule = \"@every 1s\"
catchup = \"all\"
overlap = \"allow\"
command = {}
",
            argv(&["true"])
        );
        let options = Options {
            amqp_url: Some(tls.amqp_url.clone()),
            redis_url: Some(tls.redis_url.clone()),
            // The node requires a client certificate: every process gives one.
            env: vec![
                ("CRONQ_TLS_CA_FILE", tls.file("ca.pem")),
                ("CRONQ_TLS_CERT_FILE", tls.file("client.pem")),
                ("CRONQ_TLS_KEY_FILE", tls.file("client.key")),
            ],
            tls: tls.trusting(),
            ..Options::default()
        };
        let running = Running::start_with(Deployment::Fleet, &env, &toml, options).await;
        running
            .until_succeeded(JOB, 4, PHASE, "four seconds to run over TLS")
            .await;
        running.stop_producing().await;
        let published = running.published(JOB);
        let (expected, entries) = until(PHASE, "every second to settle", || async {
            let entries = running.entries(JOB).await;
            let mut seen = published.clone();
            seen.extend(entries.iter().map(|e| e.key.clone()));
            let expected = history::ticks(JOB, &seen, 1);
            let problems = history::problems(&expected, &entries);
            if problems.is_empty() {
                Ok((expected, entries))
            } else {
                Err(format!("{problems:#?}\n{}", running.logs()))
            }
        })
        .await;
        assert!(expected.len() >= 4, "{expected:?}");
        for key in &expected {
            let successes = entries
                .iter()
                .filter(|e| &e.key == key && e.outcome == Outcome::Succeeded)
                .count();
            assert_eq!(successes, 1, "{key}: {entries:#?}\n{}", running.logs());
        }
        // Every process reached both services over TLS.
        for log in ["producer-1", "producer-2", "consumer-1", "consumer-2"] {
            let text = env.log(log);
            assert!(
                text.contains("connected to the broker")
                    && text.contains("amqps://***@127.0.0.1:5691"),
                "{log} did not connect over amqps://:\n{}",
                running.logs()
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused() {
    on_harness("tls-other-ca", |env, tls| async move {
        let other = tls.file("other-ca.pem");
        // Trusting only another CA, and trusting the system's roots (no file).
        for ca in [Some(other.as_str()), None] {
            let mut vars = vec![("CRONQ_AMQP_URL", tls.amqp_url.as_str())];
            vars.extend(ca.map(|ca| ("CRONQ_TLS_CA_FILE", ca)));
            let err = failing(&env, &vars, 1, &["dlq", "list"]);
            assert_starts_with(
                error_line(&err),
                "cronq: while connecting to RabbitMQ: TLS with RabbitMQ at amqps://***@127.0.0.1:5691/%2f failed: \
                 the server's certificate is signed by an unknown authority: set CRONQ_TLS_CA_FILE to the CA that signed it: ",
            );
            assert!(!err.contains("guest:guest"), "{err}");
            let mut vars = vec![("CRONQ_REDIS_URL", tls.redis_url.as_str())];
            vars.extend(ca.map(|ca| ("CRONQ_TLS_CA_FILE", ca)));
            let err = failing(&env, &vars, 1, &["runs"]);
            assert_starts_with(
                error_line(&err),
                "cronq: while connecting to Redis: TLS with Redis at rediss://127.0.0.1:6396 failed: \
                 the server's certificate is signed by an unknown authority: set CRONQ_TLS_CA_FILE to the CA that signed it: ",
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_server_certificate_for_another_host_name_is_refused() {
    on_harness("tls-other-host", |env, tls| async move {
        let ca = tls.file("ca.pem");
        let err = failing(
            &env,
            &[
                ("CRONQ_AMQP_URL", &tls.amqp_other_host_url),
                ("CRONQ_TLS_CA_FILE", &ca),
            ],
            1,
            &["dlq", "list"],
        );
        assert_starts_with(
            error_line(&err),
            "cronq: while connecting to RabbitMQ: TLS with RabbitMQ at amqps://***@127.0.0.2:5691/%2f failed: \
             the server's certificate is for another host name: connect with a host name (or address) the certificate names: ",
        );
        let err = failing(
            &env,
            &[
                ("CRONQ_REDIS_URL", &tls.redis_other_host_url),
                ("CRONQ_TLS_CA_FILE", &ca),
            ],
            1,
            &["runs"],
        );
        assert_starts_with(
            error_line(&err),
            "cronq: while connecting to Redis: TLS with Redis at rediss://127.0.0.2:6396 failed: \
             the server's certificate is for another host name: connect with a host name (or address) the certificate names: ",
        );
    })
    .await;
}

#[tokio::test]
async fn a_server_that_requires_a_client_certificate_gets_the_one_configured() {
    on_harness("tls-client-cert", |env, tls| async move {
        let ca = tls.file("ca.pem");
        let amqp = tls.amqp_url.as_str();
        let err = failing(
            &env,
            &[("CRONQ_AMQP_URL", amqp), ("CRONQ_TLS_CA_FILE", &ca)],
            1,
            &["dlq", "list"],
        );
        assert_starts_with(
            error_line(&err),
            "cronq: while connecting to RabbitMQ: TLS with RabbitMQ at amqps://***@127.0.0.1:5691/%2f failed: \
             the server requires a client certificate: set CRONQ_TLS_CERT_FILE and CRONQ_TLS_KEY_FILE: ",
        );
        let out = env
            .cronq()
            .env("CRONQ_AMQP_URL", amqp)
            .args(["--tls-ca-file", &ca])
            .args(["--tls-cert-file", &tls.file("client.pem")])
            .args(["--tls-key-file", &tls.file("client.key")])
            .args(["dlq", "list", "--json"])
            .output()
            .expect("run cronq");
        assert_eq!(
            out.status.code(),
            Some(0),
            "RabbitMQ with the client certificate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = tls.redis_client_auth_url.as_str();
        let err = failing(
            &env,
            &[("CRONQ_REDIS_URL", url), ("CRONQ_TLS_CA_FILE", &ca)],
            1,
            &["runs"],
        );
        assert_starts_with(
            error_line(&err),
            "cronq: while connecting to Redis: TLS with Redis at rediss://127.0.0.1:6397 failed: \
             the server requires a client certificate: set CRONQ_TLS_CERT_FILE and CRONQ_TLS_KEY_FILE: ",
        );
        let out = env
            .cronq()
            .env("CRONQ_REDIS_URL", url)
            .args(["--tls-ca-file", &ca])
            .args(["--tls-cert-file", &tls.file("client.pem")])
            .args(["--tls-key-file", &tls.file("client.key")])
            .args(["runs", "--json"])
            .output()
            .expect("run cronq");
        assert_eq!(
            out.status.code(),
            Some(0),
            "with the client certificate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let runs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(runs, serde_json::json!({ "runs": [] }));
    })
    .await;
}

#[tokio::test]
async fn a_tls_file_that_cannot_be_used_is_a_usage_error() {
    on_harness("tls-files", |env, tls| async move {
        let err = failing(
            &env,
            &[("CRONQ_TLS_CA_FILE", "/nonexistent/ca.pem")],
            2,
            &["runs"],
        );
        assert_eq!(
            error_line(&err),
            "cronq: CRONQ_TLS_CA_FILE: /nonexistent/ca.pem: cannot read the file; set it to a PEM file of the CA certificates that signed the servers' certificates: No such file or directory (os error 2)"
        );
        // A key is not a certificate.
        let key = tls.file("client.key");
        let err = failing(&env, &[("CRONQ_TLS_CA_FILE", &key)], 2, &["runs"]);
        assert_eq!(
            error_line(&err),
            format!(
                "cronq: CRONQ_TLS_CA_FILE: {key}: holds no certificate (a PEM block -----BEGIN CERTIFICATE-----); set it to a PEM file of the CA certificates that signed the servers' certificates"
            )
        );
        let err = failing(
            &env,
            &[("CRONQ_TLS_CERT_FILE", &tls.file("client.pem"))],
            2,
            &["runs"],
        );
        assert_eq!(
            error_line(&err),
            "cronq: CRONQ_TLS_CERT_FILE is set without CRONQ_TLS_KEY_FILE: set both (the client certificate and its private key, PEM files) or neither"
        );
        // The plain services ignore the files.
        ok(&env, &["--tls-ca-file", &tls.file("ca.pem"), "runs"]);
    })
    .await;
}
