//! The alert sinks' far ends for the alert tests: an HTTP server that keeps every webhook
//! and Slack post it receives (optionally answering only after a delay), and an SMTP
//! server (`smtp_sink.py`, aiosmtpd in the virtual environment `.ci/run` makes) that
//! requires STARTTLS with the TLS harness's `localhost` certificate and AUTH, and keeps
//! every message.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use chrono::{DateTime, Utc};

use super::{TestEnv, free_addr, repo_path, tls};

/// One request a sink server received.
#[derive(Debug, Clone)]
pub struct Received {
    /// `/hook` or `/slack`.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: DateTime<Utc>,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// An HTTP server on 127.0.0.1 keeping what is posted to `/hook` and `/slack`; stops with
/// the test's runtime.
#[derive(Clone)]
pub struct HookServer {
    pub addr: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl HookServer {
    /// Answers 200 after `delay`.
    pub async fn start(delay: Duration) -> Self {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let keep = |path: &'static str| {
            let received = received.clone();
            post(move |headers: HeaderMap, body: Bytes| {
                let received = received.clone();
                async move {
                    received.lock().unwrap().push(Received {
                        path: path.to_owned(),
                        headers,
                        body,
                        at: Utc::now(),
                    });
                    tokio::time::sleep(delay).await;
                    "ok"
                }
            })
        };
        let app = axum::Router::new()
            .route("/hook", keep("/hook"))
            .route("/slack", keep("/slack"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, received }
    }

    /// What was posted to `path` so far.
    pub fn posts(&self, path: &str) -> Vec<Received> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

/// Where `.ci/run` installs aiosmtpd.
const PYTHON: &str = "/opt/cronq-ci/venv/bin/python";

/// The SMTP server of one test.
pub struct SmtpServer {
    /// `localhost:PORT`.
    pub host_port: String,
    /// The CA that signed its certificate.
    pub ca_file: String,
    dir: PathBuf,
}

/// The password the SMTP server takes.
pub const SMTP_PASSWORD: &str = "alert-test-password";

impl SmtpServer {
    /// Starts it, killed at the test's clean-up.
    pub async fn start(env: &TestEnv) -> Self {
        let harness = tls::harness();
        let python = std::env::var("CRONQ_TEST_PYTHON").unwrap_or_else(|_| PYTHON.into());
        let dir = env.dir.join("smtp");
        std::fs::create_dir_all(&dir).unwrap();
        let addr = free_addr();
        let port = addr.rsplit(':').next().unwrap().to_owned();
        let mut cmd = Command::new(&python);
        cmd.arg(repo_path("tests/it/support/smtp_sink.py"))
            .args([
                &port,
                &harness.file("server.pem"),
                &harness.file("server.key"),
            ])
            .arg(&dir)
            .arg(SMTP_PASSWORD)
            .stdin(Stdio::null());
        env.spawn_command("smtp", cmd);
        super::eventually(
            Duration::from_secs(20),
            "the SMTP server to listen",
            || async { std::net::TcpStream::connect(&addr).ok().map(|_| ()) },
        )
        .await;
        Self {
            host_port: format!("localhost:{port}"),
            ca_file: harness.file("ca.pem"),
            dir,
        }
    }

    /// The messages received so far, in order.
    pub fn messages(&self) -> Vec<String> {
        let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| {
                let path = e.ok()?.path();
                let n = path
                    .file_name()?
                    .to_str()?
                    .strip_suffix(".eml")?
                    .parse()
                    .ok()?;
                Some((n, path))
            })
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|(_, p)| std::fs::read_to_string(p).unwrap())
            .collect()
    }
}
