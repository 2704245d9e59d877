//! The fencing token reaches every kind of handler (`CRONQ_FENCE` for a command, the
//! `X-Cronq-Fence` header for http, `cronq_consumer::Context` for Rust) and grows from one
//! attempt of a job to the next, on every backend, with in-process consumers.

use std::sync::{Arc, Mutex};

use cronq_consumer::{Context, Handlers};
use cronq_shared::names::JobName;
use cronq_shared::runlog::Outcome;

use crate::support::TestEnv;
use crate::support::backends::{Backend, on_every_backend};
use crate::support::fleet::Fleet;
use crate::support::occurrences::occurrence;

async fn every_handler_gets_a_growing_fence(backend: Backend, env: TestEnv) {
    use axum::routing::post;
    let headers: Arc<Mutex<Vec<u64>>> = Arc::default();
    let h = headers.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |req: axum::http::HeaderMap| {
            let h = h.clone();
            async move {
                let fence = req["x-cronq-fence"].to_str().unwrap().parse().unwrap();
                h.lock().unwrap().push(fence);
                "fine"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let out = env.dir.join("fences");
    let toml = format!(
        r#"
[[job]]
name = "cmd"
schedule = "@every 1s"
overlap = "queue"
command = ["sh", "-c", "echo $CRONQ_FENCE >> {}"]

[[job]]
name = "hook"
schedule = "@every 1s"
overlap = "queue"
http = {{ url = "http://{addr}/hook" }}

[[job]]
name = "rusty"
schedule = "@every 1s"
overlap = "queue"
"#,
        out.display()
    );
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let s = seen.clone();
    let mut handlers = Handlers::new();
    handlers.register(JobName::new("rusty").unwrap(), move |_occ, _token| {
        let s = s.clone();
        async move {
            let fence = Context::current().expect("a handler's context").fence;
            s.lock().unwrap().push(fence);
            Ok::<(), String>(())
        }
    });
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", handlers, 2).await;
    for job in ["cmd", "hook", "rusty"] {
        // One after the other (overlap `queue`): each claims once the other ended, so the
        // fences a handler sees, in the order it ran them, grow.
        fleet
            .publish([occurrence(job, 1), occurrence(job, 2)])
            .await;
        let runs = fleet.settled(job, 2).await;
        assert!(
            runs.iter().all(|r| r.outcome == Outcome::Succeeded),
            "{runs:?}"
        );
    }
    let command: Vec<u64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    for (what, fences) in [
        ("command", command),
        ("http", headers.lock().unwrap().clone()),
        ("rust", seen.lock().unwrap().clone()),
    ] {
        assert_eq!(fences.len(), 2, "{what}: {fences:?}");
        assert!(
            fences[0] >= 1 && fences[1] > fences[0],
            "{what}: {fences:?}"
        );
    }
    assert_eq!(Context::current(), None, "outside a handler");
    fleet.stop().await;
    server.abort();
}

on_every_backend!(every_handler_gets_a_growing_fence, "consumer_fence");
