//! The TLS harness of `scripts/tls`: a RabbitMQ node with AMQPS listeners and two Redis
//! servers that speak only TLS, with certificates made for the run (a CA, a server
//! certificate for `localhost` and 127.0.0.1 signed by it, a second CA that signed nothing
//! the servers present, a client certificate), started once per test run (`scripts/test`
//! does). Reached as 127.0.0.2, each server presents a certificate for another host name.
//!
//! Clean-up: the node's queues go through its plain listener (see
//! [`super::TestEnv::clean_broker_too`]); [`Harness::delete_keys`] deletes a namespace's keys
//! on the TLS Redis.

use std::path::PathBuf;

use cronq_shared::endpoints::Tls;

/// The harness, from the environment `scripts/tls` prints.
#[derive(Debug, Clone)]
pub struct Harness {
    certs: PathBuf,
    /// The node's Erlang name (`rabbitmqctl -n`).
    pub node: String,
    /// `amqps://…@127.0.0.1:5691`.
    pub amqp_url: String,
    /// The same listener reached as 127.0.0.2, which its certificate does not name.
    pub amqp_other_host_url: String,
    /// The node's plain listener, for clean-up.
    pub amqp_plain_url: String,
    /// `rediss://127.0.0.1:6396` (client certificates optional).
    pub redis_url: String,
    /// The same server reached as 127.0.0.2.
    pub redis_other_host_url: String,
    /// `rediss://127.0.0.1:6397`, which requires a client certificate.
    pub redis_client_auth_url: String,
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test runs on the TLS harness. Start it with \
             `eval \"$(scripts/tls)\"` (scripts/test does), then run the test again"
        )
    })
}

/// The harness.
///
/// # Panics
/// When its variables are unset: the test cannot run, and must not pass silently.
pub fn harness() -> Harness {
    // As the binary does: lapin and redis both use rustls, which cannot choose on its own.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    Harness {
        certs: PathBuf::from(var("CRONQ_TEST_TLS_CERTS")),
        node: var("CRONQ_TEST_TLS_NODE"),
        amqp_url: var("CRONQ_TEST_TLS_AMQP_URL"),
        amqp_other_host_url: var("CRONQ_TEST_TLS_AMQP_OTHER_HOST_URL"),
        amqp_plain_url: var("CRONQ_TEST_TLS_AMQP_PLAIN_URL"),
        redis_url: var("CRONQ_TEST_TLS_REDIS_URL"),
        redis_other_host_url: var("CRONQ_TEST_TLS_REDIS_OTHER_HOST_URL"),
        redis_client_auth_url: var("CRONQ_TEST_TLS_REDIS_CLIENT_AUTH_URL"),
    }
}

impl Harness {
    /// A file of the harness's certificates directory, as a string for an environment
    /// variable: `ca.pem`, `other-ca.pem`, `client.pem`, `client.key`.
    pub fn file(&self, name: &str) -> String {
        let path = self.certs.join(name);
        assert!(
            path.exists(),
            "{} is missing: restart the TLS harness (scripts/tls stop; eval \"$(scripts/tls)\")",
            path.display()
        );
        path.to_string_lossy().into_owned()
    }

    /// The TLS files of a process that trusts the harness's CA, without a client
    /// certificate.
    pub fn trusting(&self) -> Tls {
        let ca = self.file("ca.pem");
        cronq_tls::load(Some(ca.as_ref()), None, None).expect("the harness's CA file")
    }

    /// Deletes the keys of `namespace` on the TLS Redis (best effort: reported, not a
    /// panic, so that a test's own failure stays the one shown).
    pub async fn delete_keys(&self, namespace: &str) {
        let certs = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(self.file("ca.pem")).expect("the CA file")),
        };
        let client = redis::Client::build_with_tls(self.redis_url.as_str(), certs)
            .expect("a TLS Redis client");
        let mut conn = match client.get_multiplexed_async_connection().await {
            Ok(conn) => conn,
            Err(err) => {
                eprintln!("clean-up: cannot reach {}: {err}", self.redis_url);
                return;
            }
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{namespace}:*"))
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        }
    }
}
