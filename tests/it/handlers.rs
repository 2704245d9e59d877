//! How a consumer runs each kind of handler: a command gets the occurrence in its
//! environment and payload on stdin, and a timeout kills its whole process group; an HTTP
//! handler's answer is the outcome; a panicking Rust handler is a failed attempt. On every
//! backend, with in-process consumers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cronq_consumer::Handlers;
use cronq_shared::message::Occurrence;
use cronq_shared::names::JobName;
use cronq_shared::runlog::Outcome;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::fleet::{Fleet, WAIT, recording};
use crate::support::occurrences::occurrence;
use crate::support::{TestEnv, eventually};

async fn command_timeout_kills_the_whole_process_group(backend: Backend, env: TestEnv) {
    let pidfile = env.dir.join("grandchild.pid");
    let toml = format!(
        r#"
[[job]]
name = "hang"
schedule = "@every 1s"
timeout = "1s"
max_attempts = 1
command = ["sh", "-c", "sleep 60 & echo $! > {}; wait"]
"#,
        pidfile.display()
    );
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    fleet.publish([occurrence("hang", 1)]).await;
    let runs = fleet.settled("hang", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Failed);
    assert!(
        runs[0]
            .error
            .as_deref()
            .unwrap()
            .starts_with("timed out after 1s"),
        "{runs:?}"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(WAIT, "the grandchild `sleep 60` to be killed", || async {
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "));
        gone.then_some(())
    })
    .await;
    fleet.stop().await;
}

on_every_backend!(
    command_timeout_kills_the_whole_process_group,
    "consumer_timeout"
);

async fn command_gets_env_and_payload(backend: Backend, env: TestEnv) {
    let out = env.dir.join("out.txt");
    let toml = format!(
        r#"
[[job]]
name = "envy"
schedule = "@every 1s"
timezone = "Asia/Shanghai"
payload = {{ region = "cn" }}
command = ["sh", "-c", "echo $CRONQ_JOB $CRONQ_KEY $CRONQ_ATTEMPT $CRONQ_SCHEDULED_AT > {0}; cat >> {0}"]
"#,
        out.display()
    );
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    let mut occ = occurrence("envy", 1);
    occ.scheduled_local = occ
        .scheduled_at
        .with_timezone(&chrono_tz::Asia::Shanghai)
        .fixed_offset();
    occ.payload = serde_json::json!({"region": "cn"});
    fleet.publish([occ]).await;
    let runs = fleet.settled("envy", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Succeeded, "{runs:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text,
        "envy envy@2026-11-29T00:00:01Z 1 2026-11-29T08:00:01+08:00\n{\"region\":\"cn\"}"
    );
    fleet.stop().await;
}

on_every_backend!(command_gets_env_and_payload, "consumer_env");

/// Each attempt's output is kept with its run: a command's stdout and stderr (a successful
/// run's too), their last 64 KiB when longer, the job's `env` values masked.
async fn outputs_are_kept_with_their_runs(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "talky"
schedule = "@every 1s"
env = { API_TOKEN = "s3cr3t-value" }
command = ["sh", "-c", "echo \"calling with $API_TOKEN\"; echo 'a warning' >&2"]

[[job]]
name = "loud"
schedule = "@every 1s"
max_attempts = 1
command = ["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x; echo; echo END; exit 3"]
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    fleet
        .publish([occurrence("talky", 1), occurrence("loud", 1)])
        .await;
    let talky = fleet.settled("talky", 1).await;
    assert_eq!(talky[0].outcome, Outcome::Succeeded, "{talky:?}");
    let kept = fleet.runlog.outputs(&talky[0].key).await.unwrap();
    let output = &kept[&1];
    assert_eq!(output.stdout, "calling with ***\n", "{output:?}");
    assert_eq!(output.stderr, "a warning\n");
    assert!(!output.truncated);

    let loud = fleet.settled("loud", 1).await;
    assert_eq!(loud[0].outcome, Outcome::Failed, "{loud:?}");
    let kept = fleet.runlog.outputs(&loud[0].key).await.unwrap();
    let output = &kept[&1];
    assert_eq!(
        output.stdout.len(),
        cronq_shared::runlog::DEFAULT_OUTPUT_LIMIT
    );
    assert!(
        output.stdout.ends_with("xxx\nEND\n"),
        "{:?}",
        &output.stdout[output.stdout.len() - 20..]
    );
    assert!(output.truncated && output.stderr.is_empty());
    // The error is the stdout's last 4 KiB (stderr is empty), as before.
    let error = loud[0].error.as_deref().unwrap_or_default();
    assert!(
        error.ends_with("xxx\nEND") && error.len() < 4200,
        "{}",
        error.len()
    );
    // An occurrence that was not run has no output.
    assert!(
        fleet
            .runlog
            .outputs(&occurrence("talky", 2).key)
            .await
            .unwrap()
            .is_empty()
    );
    fleet.stop().await;
}

on_every_backend!(outputs_are_kept_with_their_runs, "consumer_outputs");

async fn http_handler_success_and_failure(backend: Backend, env: TestEnv) {
    use axum::routing::post;
    let bodies: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let b = bodies.clone();
    let app = axum::Router::new()
        .route(
            "/ok",
            post(move |body: axum::body::Bytes| {
                let b = b.clone();
                async move {
                    b.lock()
                        .unwrap()
                        .push(serde_json::from_slice(&body).unwrap());
                    "fine"
                }
            }),
        )
        .route(
            "/fail",
            post(|| async { (axum::http::StatusCode::SERVICE_UNAVAILABLE, "try later") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let toml = format!(
        r#"
[[job]]
name = "hook-ok"
schedule = "@every 1s"
http = {{ url = "http://{addr}/ok", headers = {{ "X-Token" = "t" }} }}

[[job]]
name = "hook-fail"
schedule = "@every 1s"
max_attempts = 1
http = {{ url = "http://{addr}/fail" }}

[[job]]
name = "hook-refused"
schedule = "@every 1s"
max_attempts = 1
http = {{ url = "http://127.0.0.1:1/x" }}
"#
    );
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", Handlers::new(), 2).await;
    fleet
        .publish([
            occurrence("hook-ok", 1),
            occurrence("hook-fail", 1),
            occurrence("hook-refused", 1),
        ])
        .await;
    let ok = fleet.settled("hook-ok", 1).await;
    assert_eq!(ok[0].outcome, Outcome::Succeeded, "{ok:?}");
    let kept = fleet.runlog.outputs(&ok[0].key).await.unwrap();
    assert_eq!(
        (kept[&1].http_status, kept[&1].http_body.as_str()),
        (Some(200), "fine")
    );
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(body["kind"], "occurrence.v1");
    assert_eq!(body["key"], occurrence("hook-ok", 1).key.to_string());
    let failed = fleet.settled("hook-fail", 1).await;
    assert_eq!(failed[0].outcome, Outcome::Failed);
    let kept = fleet.runlog.outputs(&failed[0].key).await.unwrap();
    assert_eq!(
        (kept[&1].http_status, kept[&1].http_body.as_str()),
        (Some(503), "try later")
    );
    assert_eq!(
        failed[0].error.as_deref(),
        Some(
            format!("POST http://{addr}/fail answered 503 Service Unavailable: try later").as_str()
        )
    );
    // A request that never got an answer says why, not only "error sending request".
    let refused = fleet.settled("hook-refused", 1).await;
    let error = refused[0].error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("POST http://127.0.0.1:1/x failed: error sending request")
            && error.contains("Connection refused"),
        "{error}"
    );
    server.abort();
    fleet.stop().await;
}

on_every_backend!(http_handler_success_and_failure, "consumer_http");

async fn panicking_rust_handler_is_a_failed_attempt(backend: Backend, env: TestEnv) {
    let toml = r#"
[[job]]
name = "boom"
schedule = "@every 1s"
max_attempts = 1

[[job]]
name = "work"
schedule = "@every 1s"
"#;
    let mut fleet = Fleet::new(backend, &env, toml).await;
    let (mut handlers, seen) = recording(Duration::from_millis(10));
    handlers.register(
        JobName::new("boom").unwrap(),
        |_occ: Occurrence, _t| async move {
            if true {
                panic!("kaboom");
            }
            Ok::<(), String>(())
        },
    );
    fleet.start("c1", handlers, 2).await;
    fleet.publish([occurrence("boom", 1)]).await;
    let runs = fleet.settled("boom", 1).await;
    assert_eq!(runs[0].outcome, Outcome::Failed);
    assert_eq!(runs[0].error.as_deref(), Some("handler panicked: kaboom"));
    fleet.publish([occurrence("work", 1)]).await;
    fleet.settled("work", 1).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "the consumer carried on");
    fleet.stop().await;
}

on_every_backend!(panicking_rust_handler_is_a_failed_attempt, "consumer_panic");

/// A handler registered in Rust under a handler name runs every job that names it
/// (`handler = "NAME"`), with its payload; a `[handlers.NAME]` of the config runs the jobs
/// that name it.
async fn named_handlers_run_the_jobs_that_name_them(backend: Backend, env: TestEnv) {
    let out = env.dir.join("named.txt");
    let toml = format!(
        r#"
[handlers.shell]
command = ["sh", "-c", "echo $CRONQ_JOB >> {0}"]

[[job]]
name = "by-config"
schedule = "@every 1s"
handler = "shell"

[[job]]
name = "by-rust-1"
schedule = "@every 1s"
handler = "rusty"
payload = {{ n = 1 }}

[[job]]
name = "by-rust-2"
schedule = "@every 1s"
handler = "rusty"
payload = {{ n = 2 }}
"#,
        out.display()
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut handlers = Handlers::new();
    let s = seen.clone();
    handlers.register_named("rusty", move |occ: Occurrence, _token| {
        let s = s.clone();
        async move {
            s.lock()
                .unwrap()
                .push((occ.job.to_string(), occ.payload["n"].clone()));
            Ok::<(), String>(())
        }
    });
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", handlers, 2).await;
    let with = |job: &str, n: u32| {
        let mut occ = occurrence(job, 1);
        occ.payload = serde_json::json!({ "n": n });
        occ
    };
    fleet
        .publish([
            occurrence("by-config", 1),
            with("by-rust-1", 1),
            with("by-rust-2", 2),
        ])
        .await;
    for job in ["by-config", "by-rust-1", "by-rust-2"] {
        let runs = fleet.settled(job, 1).await;
        assert_eq!(runs[0].outcome, Outcome::Succeeded, "{job}: {runs:?}");
    }
    let mut got = seen.lock().unwrap().clone();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [
            ("by-rust-1".to_owned(), serde_json::json!(1)),
            ("by-rust-2".to_owned(), serde_json::json!(2)),
        ]
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "by-config\n");
    fleet.stop().await;
}

on_every_backend!(named_handlers_run_the_jobs_that_name_them, "named_handlers");
