//! A broker restart loses no occurrence, neither one held back by overlap `queue`, nor one
//! waiting for a slot of its pool, nor a retry waiting for its backoff.
//!
//! A broker restart under load, on a RabbitMQ node of its own (`scripts/test-nodes`; the
//! shared broker on 5672 is never touched): 2 producers and 3 consumers, occurrences held
//! back by overlap `queue` or by a full pool, and retries waiting for their backoff while
//! the broker is down
//! (`rabbitmqctl stop_app`, 4 s, `start_app`). None may be lost.
//!
//! This is the only test that restarts the node: tests run in parallel, so another one
//! would have to go into this test fn.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use cronq_shared::runlog::Outcome;

use crate::support::deployment::{Deployment, LEADER, Options, Running, argv};
use crate::support::history::{self, Entry, Mark, Trace};
use crate::support::nodes;
use crate::support::{scoped, until};

/// How long each phase around the outage may take to show what it waits for.
const PHASE: Duration = Duration::from_secs(15);

/// How long the backlog may take to settle once publishing stopped.
const DRAIN: Duration = Duration::from_secs(35);

/// The jobs, all `@every 2s`.
const JOBS: [&str; 3] = ["queued", "flaky", "pooled"];

/// `queued` (overlap `queue`) runs 3 s every 2 s, so an occurrence is always held back
/// behind a running one. `flaky` fails the first attempt of each key (a marker file per
/// key) and succeeds on its retry 2 s later, so retries are always pending. `pooled`
/// (overlap `allow`, in a pool of 1) runs 3 s every 2 s, so a run always waits for the
/// pool's slot; it traces to `pool_trace`.
fn config(
    trace: &std::path::Path,
    markers: &std::path::Path,
    pool_trace: &std::path::Path,
) -> String {
    let flaky = format!(
        "m='{}'/\"$CRONQ_KEY\"; [ -e \"$m\" ] && exit 0; touch \"$m\"; echo first try fails >&2; exit 1",
        markers.display()
    );
    format!(
        "{LEADER}
[[job]]
name = \"queued\"
schedule = \"@every 2s\"
overlap = \"queue\"
max_attempts = 1
catchup = \"all\"
command = {}

[[job]]
name = \"flaky\"
schedule = \"@every 2s\"
overlap = \"allow\"
max_attempts = 3
backoff = \"2s\"
catchup = \"all\"
command = {}

[pools.one]
size = 1

[[job]]
name = \"pooled\"
schedule = \"@every 2s\"
overlap = \"allow\"
pool = \"one\"
max_attempts = 1
catchup = \"all\"
command = {}
",
        argv(&["sh", "-c", &history::traced_script(trace, "3")]),
        argv(&["sh", "-c", &flaky]),
        argv(&["sh", "-c", &history::traced_script(pool_trace, "3")]),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn held_back_and_retrying_occurrences_survive_a_broker_restart() {
    let node = nodes::restart_node();
    scoped("broker-restart", move |env| async move {
        env.clean_broker_too(&node.amqp_url, Some(&node.name));
        let trace = env.dir.join("trace");
        let markers = env.dir.join("markers");
        let pool_trace = env.dir.join("pool-trace");
        std::fs::create_dir_all(&markers).unwrap();
        let options = Options {
            amqp_url: Some(node.amqp_url.clone()),
            consumers: 3,
            ..Options::default()
        };
        let running = Running::start_with(
            Deployment::Fleet,
            &env,
            &config(&trace, &markers, &pool_trace),
            options,
        )
        .await;
        until(
            PHASE,
            "an occurrence held back and a retry pending",
            || async {
                let retrying = running
                    .entries("flaky")
                    .await
                    .iter()
                    .any(|e| e.outcome == Outcome::Retrying);
                let held = running.published("queued").len() >= 2
                    && !Trace::read(&trace).open().is_empty();
                let pooled = running.published("pooled").len() >= 2
                    && !Trace::read(&pool_trace).open().is_empty();
                if retrying && held && pooled {
                    Ok(())
                } else {
                    Err(running.logs())
                }
            },
        )
        .await;

        let outage = node.stop_app();
        let stopped_at = Utc::now();
        tokio::time::sleep(Duration::from_secs(4)).await;
        let down = outage.end();
        let restarted_at = Utc::now();
        eprintln!("broker down for {down:?}");
        // Publishing resumes: ticks of both jobs at least 4 s after the restart.
        let resumed = restarted_at.timestamp() + 4;
        until(PHASE, "publishing to resume after the restart", || async {
            let after = |job| {
                running
                    .published(job)
                    .iter()
                    .any(|k| history::scheduled(k) >= resumed)
            };
            if JOBS.iter().all(|j| after(j)) {
                Ok(())
            } else {
                Err(running.logs())
            }
        })
        .await;
        running.stop_producing().await;

        let mut expected = BTreeMap::new();
        for job in JOBS {
            let published = running.published(job);
            let ticks = history::ticks(job, &published, 2);
            let gaps: Vec<&String> = ticks.iter().filter(|k| !published.contains(*k)).collect();
            assert!(
                gaps.is_empty(),
                "{job}: ticks never published: {gaps:?}\n{}",
                running.logs()
            );
            expected.insert(job, ticks);
        }
        let describe = |entries: &BTreeMap<&str, Vec<Entry>>, trace: &Trace| {
            JOBS.iter()
                .map(|j| {
                    format!(
                        "{j}: {:#?}\n{}",
                        history::problems(&expected[j], &entries[j]),
                        history::describe(&expected[j], &entries[j], trace)
                    )
                })
                .collect::<String>()
        };
        let (entries, t) = until(DRAIN, "every occurrence to settle", || async {
            let mut entries = BTreeMap::new();
            for job in JOBS {
                entries.insert(job, running.entries(job).await);
            }
            let t = Trace::read(&trace);
            let settled = JOBS
                .iter()
                .all(|j| history::problems(&expected[j], &entries[j]).is_empty());
            if settled && t.open().is_empty() && Trace::read(&pool_trace).open().is_empty() {
                Ok((entries, t))
            } else {
                Err(format!("{}{}", describe(&entries, &t), running.logs()))
            }
        })
        .await;
        let context = describe(&entries, &t);

        let queued = history::terminal(&entries["queued"]);
        for key in &expected["queued"] {
            assert_eq!(queued[key].outcome, Outcome::Succeeded, "{key}\n{context}");
            assert_eq!(t.count(Mark::Start, key), 1, "{key}\n{context}");
        }
        assert!(
            t.max_concurrency() <= 1,
            "two queued runs overlapped\n{}",
            t.render()
        );

        let pool_t = Trace::read(&pool_trace);
        let pooled = history::terminal(&entries["pooled"]);
        for key in &expected["pooled"] {
            assert_eq!(pooled[key].outcome, Outcome::Succeeded, "{key}\n{context}");
            assert_eq!(pool_t.count(Mark::Start, key), 1, "{key}\n{context}");
        }
        assert!(
            pool_t.max_concurrency() <= 1,
            "two runs of the pool of 1 overlapped\n{}",
            pool_t.render()
        );

        let flaky = history::terminal(&entries["flaky"]);
        let by_key = history::by_key(&entries["flaky"]);
        for key in &expected["flaky"] {
            assert_eq!(flaky[key].outcome, Outcome::Succeeded, "{key}\n{context}");
            assert!(
                by_key[key.as_str()]
                    .iter()
                    .any(|e| e.outcome == Outcome::Retrying && e.attempt == Some(1)),
                "{key}: its failed first attempt is not in the history\n{context}"
            );
        }
        // The outage really caught a retry waiting for its 2 s backoff.
        let backoff = chrono::Duration::seconds(2);
        let pending_through_outage = entries["flaky"].iter().any(|e| {
            e.outcome == Outcome::Retrying
                && e.at
                    .is_some_and(|at| at + backoff >= stopped_at && at + backoff <= restarted_at)
        });
        assert!(
            pending_through_outage,
            "no retry was due during the outage ({stopped_at} to {restarted_at})\n{context}"
        );
    })
    .await;
}
