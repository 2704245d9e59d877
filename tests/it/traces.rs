//! OpenTelemetry traces through real processes (`docs/observability.md`, "Traces"): with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a receiver inside the test, one occurrence is
//! one trace: the leader's `cronq.publish` span, and the consumer's `cronq.claim`,
//! `cronq.execute` and `cronq.end` spans of it, the command seeing a `TRACEPARENT` of that
//! trace (under `cronq.execute`). On RabbitMQ and Redis with a `cronq producer` and a
//! `cronq consumer`, and on a SQLite data file with one `cronq standalone` whose spans
//! leave only at its exit (the exporter is flushed on SIGTERM). Without the variables, or
//! with `OTEL_TRACES_EXPORTER=none`, nothing is exported and a command gets no
//! `TRACEPARENT`, not even one the consumer itself was started with. And on every backend,
//! with in-process consumers that do not trace: a command, an http handler and a Rust
//! handler get the message's own `traceparent` as it came, and none for a malformed one.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cronq_consumer::Handlers;
use cronq_shared::message::Occurrence;
use cronq_shared::names::JobName;
use nix::sys::signal::Signal;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::consumer_process::consumer_args;
use crate::support::data_file::LEADER;
use crate::support::fleet::Fleet;
use crate::support::occurrences::occurrence;
use crate::support::otlp::{Receiver, Span};
use crate::support::{TestEnv, eventually, scoped, until};

/// How long a run, or a span, may take to show.
const WAIT: Duration = Duration::from_secs(15);

/// A `traceparent` no run of cronq's makes: what a consumer started inside another trace
/// would have in its own environment.
const FOREIGN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The `@every 1s` job `traced`, whose command appends `KEY TRACEPARENT` to `seen`.
fn config(env: &TestEnv, seen: &Path) -> String {
    env.track_queue("default");
    let script = format!("echo \"$CRONQ_KEY $TRACEPARENT\" >> '{}'", seen.display());
    let toml = format!(
        "{LEADER}\n[[job]]\nname = \"traced\"\nschedule = \"@every 1s\"\nmax_attempts = 1\ncommand = {}\n",
        crate::support::deployment::argv(&["/bin/sh", "-c", &script])
    );
    env.write_config("cronq.toml", &toml)
        .to_string_lossy()
        .into_owned()
}

/// `cronq` with no `OTEL_*` variable of the test's own environment, and `vars` set.
fn cronq(env: &TestEnv, vars: &[(&str, &str)]) -> Command {
    let mut cmd = env.cronq();
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("OTEL_")) {
        cmd.env_remove(name);
    }
    cmd.env("TRACEPARENT", FOREIGN);
    for (name, value) in vars {
        cmd.env(name, value);
    }
    cmd
}

/// The variables pointing a process at `receiver`, named `service`, batching for `delay`
/// milliseconds.
fn traced<'a>(receiver: &'a Receiver, service: &'a str, delay: &'a str) -> [(&'a str, &'a str); 3] {
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("OTEL_SERVICE_NAME", service),
        ("OTEL_BSP_SCHEDULE_DELAY", delay),
    ]
}

/// Each run the command recorded: its key and the `TRACEPARENT` it saw (empty if none).
fn seen(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (key, tp) = line.split_once(' ').unwrap_or((line, ""));
            (key.to_owned(), tp.trim().to_owned())
        })
        .collect()
}

/// The first run whose command saw a `TRACEPARENT`.
async fn first_traced_run(path: &Path) -> (String, String) {
    eventually(WAIT, "a run of the command with a TRACEPARENT", || async {
        seen(path).into_iter().find(|(_, tp)| !tp.is_empty())
    })
    .await
}

/// The spans of one occurrence's first attempt.
struct Trace {
    publish: Span,
    claim: Span,
    execute: Span,
    end: Span,
}

/// The publish span and the consumer's spans of attempt 1 of `key`, once all arrived.
fn spans_of(spans: &[Span], key: &str) -> Result<Trace, String> {
    let of = |name: &str| {
        spans
            .iter()
            .find(|s| {
                s.name == name && s.attr("cronq.key") == key && s.attr("cronq.attempt") == "1"
            })
            .cloned()
            .ok_or_else(|| {
                let names: Vec<String> = spans
                    .iter()
                    .map(|s| format!("{} {} {}", s.name, s.attr("cronq.key"), s.trace_id))
                    .collect();
                format!(
                    "no {name} span of {key} yet; received:\n{}",
                    names.join("\n")
                )
            })
    };
    Ok(Trace {
        publish: of("cronq.publish")?,
        claim: of("cronq.claim")?,
        execute: of("cronq.execute")?,
        end: of("cronq.end")?,
    })
}

/// Asserts that `key` is one trace: the publish span its root (kind producer, from
/// `producer`), the claim (kind consumer), execute and end spans (from `consumer`, by
/// `instance`) its children, with their attributes; and that `traceparent`, what the
/// command saw, names the execute span of that trace.
fn assert_one_trace(
    t: &Trace,
    key: &str,
    traceparent: &str,
    producer: &str,
    consumer: &str,
    instance: &str,
) {
    let trace_id = &t.publish.trace_id;
    for span in [&t.claim, &t.execute, &t.end] {
        assert_eq!(
            &span.trace_id, trace_id,
            "{} of {key} in another trace: {span:?}",
            span.name
        );
        assert_eq!(
            span.parent_span_id, t.publish.span_id,
            "{} of {key} not under the publish span: {span:?}",
            span.name
        );
        assert_eq!(span.service, consumer, "{span:?}");
        assert_eq!(span.attr("cronq.job"), "traced", "{span:?}");
        assert_eq!(span.attr("cronq.queue"), "default", "{span:?}");
        if instance.is_empty() {
            assert!(!span.attr("cronq.consumer").is_empty(), "{span:?}");
        } else {
            assert_eq!(span.attr("cronq.consumer"), instance, "{span:?}");
        }
    }
    let p = &t.publish;
    assert!(
        p.parent_span_id.is_empty(),
        "the publish span is the root: {p:?}"
    );
    assert_eq!(p.kind, 4, "the publish span is of kind producer: {p:?}");
    assert_eq!(p.service, producer, "{p:?}");
    assert_eq!(p.attr("cronq.job"), "traced", "{p:?}");
    assert_eq!(p.attr("cronq.queue"), "default", "{p:?}");
    assert_eq!(p.attr("cronq.trigger"), "schedule", "{p:?}");
    assert_eq!(p.status, 1, "the publish was confirmed: {p:?}");
    assert_eq!(
        t.claim.kind, 5,
        "the claim span is of kind consumer: {:?}",
        t.claim
    );
    assert_eq!(t.claim.attr("cronq.claim"), "claimed", "{:?}", t.claim);
    assert_eq!(
        t.execute.status, 1,
        "the command succeeded: {:?}",
        t.execute
    );
    assert_eq!(t.end.attr("cronq.outcome"), "succeeded", "{:?}", t.end);
    assert_eq!(
        traceparent,
        format!("00-{trace_id}-{}-01", t.execute.span_id),
        "the command's TRACEPARENT names the execute span of the occurrence's trace"
    );
}

/// Waits for the trace of `key` and checks it (see [`assert_one_trace`]).
async fn one_trace(
    receiver: &Receiver,
    key: &str,
    tp: &str,
    producer: &str,
    consumer: &str,
    instance: &str,
) {
    let trace = until(WAIT, &format!("the spans of {key}"), || async {
        spans_of(&receiver.spans(), key)
    })
    .await;
    assert_one_trace(&trace, key, tp, producer, consumer, instance);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_occurrence_is_one_trace_from_the_leaders_publish_to_the_command_on_rabbitmq_and_redis()
{
    scoped("traces-real", |env| async move {
        let receiver = Receiver::start();
        let seen_file = env.dir.join("seen.txt");
        let config = config(&env, &seen_file);
        let mut producer = cronq(&env, &traced(&receiver, "cronq-producer", "100"));
        producer.args(["producer", "--config", &config]);
        env.spawn_command("producer", producer);
        let mut consumer = cronq(&env, &traced(&receiver, "cronq-consumer", "100"));
        consumer.args(consumer_args(&config, "c1", "5s"));
        env.spawn_command("consumer", consumer);

        let (key, tp) = first_traced_run(&seen_file).await;
        one_trace(
            &receiver,
            &key,
            &tp,
            "cronq-producer",
            "cronq-consumer",
            "c1",
        )
        .await;
        assert!(
            env.log("consumer")
                .contains("exporting traces over OTLP/HTTP"),
            "{}",
            env.log("consumer")
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_on_a_data_file_sends_its_spans_at_its_exit() {
    scoped("traces-sqlite", |env| async move {
        let receiver = Receiver::start();
        let seen_file = env.dir.join("seen.txt");
        let config = config(&env, &seen_file);
        let data = env.dir.join("cronq.db");
        // A batch delay of a minute: the spans leave only when the process ends.
        let mut cmd = cronq(&env, &traced(&receiver, "cronq-standalone", "60000"));
        cmd.env_remove("CRONQ_DATA")
            .args(["standalone", "--config", &config, "--data"])
            .arg(&data);
        let pid = env.spawn_command("standalone", cmd);

        let (key, tp) = first_traced_run(&seen_file).await;
        env.signal(pid, Signal::SIGTERM);
        assert_eq!(
            env.wait(pid, WAIT),
            Some(0),
            "standalone did not exit 0 on SIGTERM:\n{}",
            env.log("standalone")
        );
        // Sent before the process exited: no waiting now.
        let trace = spans_of(&receiver.spans(), &key)
            .unwrap_or_else(|e| panic!("{e}\nstandalone:\n{}", env.log("standalone")));
        assert_one_trace(
            &trace,
            &key,
            &tp,
            "cronq-standalone",
            "cronq-standalone",
            "",
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_otel_variables_nothing_is_exported_and_no_traceparent_is_set() {
    scoped("traces-off", |env| async move {
        let receiver = Receiver::start();
        let seen_file = env.dir.join("seen.txt");
        let config = config(&env, &seen_file);
        let runs = [
            ("plain", vec![]),
            (
                "exporter-none",
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
                    ("OTEL_TRACES_EXPORTER", "none"),
                    ("OTEL_BSP_SCHEDULE_DELAY", "100"),
                ],
            ),
        ];
        for (log, vars) in runs {
            let _ = std::fs::remove_file(&seen_file);
            let mut cmd = cronq(&env, &vars);
            cmd.args(["standalone", "--data", ":memory:", "--config", &config]);
            let pid = env.spawn_command(log, cmd);
            let ran = eventually(WAIT, "two runs of the command", || async {
                let ran = seen(&seen_file);
                (ran.len() >= 2).then_some(ran)
            })
            .await;
            env.signal(pid, Signal::SIGTERM);
            assert_eq!(env.wait(pid, WAIT), Some(0), "{log}:\n{}", env.log(log));
            for (key, tp) in &ran {
                assert_eq!(tp, "", "{log}: {key} ran with a TRACEPARENT");
            }
            assert!(
                !env.log(log).contains("exporting traces"),
                "{log}:\n{}",
                env.log(log)
            );
        }
        assert_eq!(receiver.requests(), 0, "{:?}", receiver.spans());
    })
    .await;
}

/// What each handler saw, by occurrence key: its `traceparent`, empty if none.
type Seen = Arc<Mutex<BTreeMap<String, String>>>;

async fn handlers_get_the_messages_own_traceparent(backend: Backend, env: TestEnv) {
    use axum::routing::post;
    let hooked: Seen = Arc::default();
    let h = hooked.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let h = h.clone();
                async move {
                    let occ = Occurrence::decode(&body).unwrap();
                    let tp = headers
                        .get("traceparent")
                        .map(|v| v.to_str().unwrap().to_owned());
                    h.lock()
                        .unwrap()
                        .insert(occ.key.to_string(), tp.unwrap_or_default());
                    "fine"
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let ran = env.dir.join("cmd.seen");
    let toml = format!(
        r#"
[[job]]
name = "hook"
schedule = "@every 1s"
overlap = "allow"
http = {{ url = "http://{addr}/hook" }}

[[job]]
name = "rust"
schedule = "@every 1s"
overlap = "allow"

[[job]]
name = "cmd"
schedule = "@every 1s"
overlap = "allow"
command = ["/bin/sh", "-c", "echo \"$CRONQ_KEY $TRACEPARENT\" >> '{}'"]
"#,
        ran.display()
    );
    let ruled: Seen = Arc::default();
    let r = ruled.clone();
    let mut handlers = Handlers::new();
    handlers.register(JobName::new("rust").unwrap(), move |occ: Occurrence, _t| {
        let r = r.clone();
        async move {
            r.lock()
                .unwrap()
                .insert(occ.key.to_string(), occ.traceparent.unwrap_or_default());
            Ok::<(), String>(())
        }
    });
    let mut fleet = Fleet::new(backend, &env, &toml).await;
    fleet.start("c1", handlers, 4).await;
    let malformed = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nX-Injected: yes";
    let mut expected = BTreeMap::new();
    let mut published = Vec::new();
    for job in ["hook", "rust", "cmd"] {
        for (i, tp) in [(1, FOREIGN), (2, malformed)] {
            let mut occ = occurrence(job, i);
            occ.traceparent = Some(tp.to_owned());
            let shown = if tp == FOREIGN { FOREIGN } else { "" };
            expected.insert(occ.key.to_string(), shown.to_owned());
            published.push(occ);
        }
    }
    fleet.publish(published).await;
    for job in ["hook", "rust", "cmd"] {
        fleet.settled(job, 2).await;
    }
    let mut got = hooked.lock().unwrap().clone();
    got.extend(ruled.lock().unwrap().clone());
    got.extend(seen(&ran));
    assert_eq!(got, expected, "what each handler saw, by key");
    server.abort();
}

on_every_backend!(handlers_get_the_messages_own_traceparent, "traces_handlers");
