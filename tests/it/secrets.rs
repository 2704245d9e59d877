//! Secrets of an `http` handler out of the config file (docs/config.md, "Secrets"): its
//! URL from a file (credentials, a token in the path and one in the query) and header
//! values from the environment and from a file reach the request, and no output shows
//! them: not a process log (failed attempts included), not `check`, `jobs --json`, `runs
//! --json`, `dlq list --json`, `next`, nor `/metrics`. A variable that is not set is a
//! config error naming the job and the field.
//!
//! Through real processes on every deployment: `cronq standalone` in memory and on a data
//! file, and a fleet.
//!
//! The passwords of a RabbitMQ node list (`CRONQ_AMQP_URL=a,b,c`) show nowhere either: not
//! in a fleet's logs while it skips the nodes that are down, nor in the error of a command
//! that reaches none of them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::deployment::{Data, Deployment, LEADER, Options, Running};
use crate::support::{TestEnv, amqp_url, eventually, ports, scoped};

/// Secret values; each must reach the server and show nowhere else.
const HEADER_FROM_ENV: &str = "hdr-from-env-7f3a91";
const HEADER_FROM_FILE: &str = "hdr-from-file-c2d8e4";
const URL_PASSWORD: &str = "url-password-5b6e02";
const PATH_TOKEN: &str = "path-token-9a41cd";
const QUERY_TOKEN: &str = "query-token-e07b33";

const SECRETS: [&str; 5] = [
    HEADER_FROM_ENV,
    HEADER_FROM_FILE,
    URL_PASSWORD,
    PATH_TOKEN,
    QUERY_TOKEN,
];

/// The config the commands of the test read.
const CONFIG_COPY: &str = "secrets.toml";

/// What the server saw: each request's `X-Env` and `X-File` headers, basic auth and URI.
type Seen = Arc<Mutex<Vec<(String, String, String, String)>>>;

/// A server that answers 500 to every other request (so that failed attempts, and their
/// errors, show in the outputs) and records what it got.
async fn server() -> (String, Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/sync/{token}",
        post(move |headers: HeaderMap, uri: axum::http::Uri| {
            let s = s.clone();
            async move {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                let mut seen = s.lock().unwrap();
                seen.push((
                    header("x-env"),
                    header("x-file"),
                    header("authorization"),
                    uri.to_string(),
                ));
                if seen.len() % 2 == 1 {
                    (StatusCode::INTERNAL_SERVER_ERROR, "not now")
                } else {
                    (StatusCode::OK, "done")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen, task)
}

/// Every process log of the test, whole.
fn process_logs(env: &TestEnv) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(&env.dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            all.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    all
}

/// Everything cronq printed about the deployment: every process log, the operations
/// commands' output (those that reach its state), and `/metrics`.
async fn every_output(kind: Deployment, env: &TestEnv, running: &Running) -> String {
    let mut all = process_logs(env);
    let mut commands: Vec<Vec<&str>> = vec![vec!["check"], vec!["next", "--count", "2"]];
    let data = ports::data_file(env);
    let data = data.to_str().unwrap();
    let on_state: &[&[&str]] = &[
        &["jobs", "--json"],
        &["runs", "--json"],
        &["dlq", "list", "--json"],
    ];
    match kind {
        Deployment::Fleet => commands.extend(on_state.iter().map(|c| c.to_vec())),
        Deployment::Standalone(Data::File) => {
            commands.extend(on_state.iter().map(|c| [*c, &["--data", data]].concat()))
        }
        Deployment::Standalone(Data::Memory) => {}
    }
    for args in commands {
        let out = env
            .cronq()
            .env("SYNC_TOKEN", HEADER_FROM_ENV)
            .arg("--config")
            .arg(env.dir.join(CONFIG_COPY))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cronq {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        all.push_str(&String::from_utf8_lossy(&out.stdout));
        all.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    if let Some(metrics) = running.metrics().await {
        all.push_str(&metrics);
    }
    all
}

async fn secrets_reach_the_request_and_show_nowhere(backend: Backend, env: TestEnv) {
    let kind = Deployment::on(backend);
    let (addr, seen, server) = server().await;
    let url_file = env.dir.join("sync-url");
    std::fs::write(
        &url_file,
        format!("http://sync:{URL_PASSWORD}@{addr}/sync/{PATH_TOKEN}?k={QUERY_TOKEN}\n"),
    )
    .unwrap();
    let token_file = env.dir.join("sync-token");
    std::fs::write(&token_file, format!("{HEADER_FROM_FILE}\n")).unwrap();
    let toml = format!(
        r#"{LEADER}
[[job]]
name = "sync"
schedule = "@every 1s"
max_attempts = 2
backoff = "100ms"
http = {{ url = {{ file = "{}" }}, headers = {{ "X-Env" = {{ env = "SYNC_TOKEN" }}, "X-File" = {{ file = "{}" }} }} }}
"#,
        url_file.display(),
        token_file.display()
    );
    let options = Options {
        env: vec![("SYNC_TOKEN", HEADER_FROM_ENV.to_owned())],
        ..Options::default()
    };
    // The commands read a copy: a standalone's own config is emptied to stop it publishing.
    env.write_config(CONFIG_COPY, &toml);
    let running = Running::start_with(kind, &env, &toml, options).await;
    eventually(
        Duration::from_secs(30),
        "failed and succeeded requests",
        || async { (seen.lock().unwrap().len() >= 4).then_some(()) },
    )
    .await;
    running.stop_producing().await;
    let (env_header, file_header, auth, uri) = seen.lock().unwrap()[0].clone();
    assert_eq!(env_header, HEADER_FROM_ENV);
    assert_eq!(
        file_header, HEADER_FROM_FILE,
        "one trailing newline dropped"
    );
    assert!(!auth.is_empty(), "the URL's credentials went as basic auth");
    assert_eq!(uri, format!("/sync/{PATH_TOKEN}?k={QUERY_TOKEN}"));

    let all = every_output(kind, &env, &running).await;
    assert!(
        all.contains("answered 500 Internal Server Error"),
        "the failed attempts' errors are among the outputs:\n{all}"
    );
    for secret in SECRETS {
        assert!(!all.contains(secret), "{secret} shown:\n{all}");
    }
    // Basic auth's encoding of the URL's credentials shows nowhere either.
    let encoded = auth.trim_start_matches("Basic ");
    assert!(!all.contains(encoded), "{encoded} shown:\n{all}");

    // Without the variable, the config is refused, naming the job and the field.
    let out = env
        .cronq()
        .env_remove("SYNC_TOKEN")
        .arg("--config")
        .arg(env.dir.join(CONFIG_COPY))
        .arg("check")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "job \"sync\": http.headers.X-Env: the environment variable SYNC_TOKEN is not set"
        ),
        "{err}"
    );
    server.abort();
}

on_every_backend!(
    secrets_reach_the_request_and_show_nowhere,
    "secrets",
    flavor = "multi_thread"
);

/// Passwords of the nodes of a list that are down (nothing listens on their ports).
const DOWN_NODE_PASSWORDS: [&str; 2] = ["node2-password-41d7aa", "node3-password-8c02f5"];

/// A fleet given a node list of the shared broker and two nodes that are down runs its
/// job on the live node, and no process log (the skipped nodes logged at debug), no
/// operations command, and not the error of a command that reaches no node, shows a
/// password of the list; that error names every node, redacted.
#[tokio::test(flavor = "multi_thread")]
async fn node_list_passwords_show_nowhere() {
    scoped("secrets-node-list", |env| async move {
        let down = [
            format!("amqp://cronq:{}@127.0.0.1:9/%2f", DOWN_NODE_PASSWORDS[0]),
            format!("amqp://cronq:{}@127.0.0.1:11/%2f", DOWN_NODE_PASSWORDS[1]),
        ];
        let list = format!("{},{}", amqp_url(), down.join(","));
        let toml = format!(
            "{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\n"
        );
        env.write_config(CONFIG_COPY, &toml);
        let options = Options {
            amqp_url: Some(list.clone()),
            env: vec![(
                "RUST_LOG",
                format!(
                    "{},cronq_rabbitmq=debug",
                    crate::support::deployment::RUST_LOG
                ),
            )],
            ..Options::default()
        };
        let running = Running::start_with(Deployment::Fleet, &env, &toml, options).await;
        running
            .until_succeeded("tick", 2, Duration::from_secs(30), "runs on the live node")
            .await;
        running.stop_producing().await;

        let mut all = process_logs(&env);
        for args in [&["jobs", "--json"][..], &["dlq", "list", "--json"]] {
            let out = env
                .cronq()
                .env("CRONQ_AMQP_URL", &list)
                .arg("--config")
                .arg(env.dir.join(CONFIG_COPY))
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "cronq {args:?}: {out:?}");
            all.push_str(&String::from_utf8_lossy(&out.stdout));
            all.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        // Only nodes that are down: the command fails naming each, redacted.
        let out = env
            .cronq()
            .env("CRONQ_AMQP_URL", down.join(","))
            .arg("--config")
            .arg(env.dir.join(CONFIG_COPY))
            .args(["dlq", "list"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{err}");
        for port in [9, 11] {
            let shown = format!("amqp://***@127.0.0.1:{port}/%2f");
            assert!(err.contains(&shown), "{shown} not named: {err}");
        }
        all.push_str(&err);
        for password in DOWN_NODE_PASSWORDS {
            assert!(!all.contains(password), "{password} shown:\n{all}");
        }
    })
    .await;
}
