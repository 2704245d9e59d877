//! `cronq consumer` processes under a test's namespace: their arguments, waiting for one
//! to start, publishing an occurrence to them, and reading the runs they recorded.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cronq_rabbitmq::AmqpBroker;
use cronq_redis::RedisRunLog;
use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::message::Occurrence;
use cronq_shared::names::{JobName, Names, Namespace, QueueName};
use cronq_shared::runlog::{Outcome, Run, RunLog};

use super::{TestEnv, amqp_url, eventually, redis_url};

/// How long to wait for a consumer or a run.
pub const WAIT: Duration = Duration::from_secs(60);

/// Publishes `occ` to the namespace's `default` queue.
pub async fn publish(env: &TestEnv, occ: Occurrence) {
    let names = Names::new(&Namespace::new(&env.namespace).unwrap());
    let broker = AmqpBroker::connect(&amqp_url(), names).await.unwrap();
    let queue = QueueName::new("default").unwrap();
    broker
        .declare(&[queue.clone()].into_iter().collect())
        .await
        .unwrap();
    broker
        .publish(&[Outgoing {
            queue,
            occurrence: occ,
            delay: Duration::ZERO,
        }])
        .await
        .unwrap();
    broker.close().await;
}

/// The runs of `job` in the run log, newest first.
pub async fn runs(env: &TestEnv, job: &str) -> Vec<Run> {
    let conn = cronq_redis::connect(&redis_url()).await.unwrap();
    let names = Names::new(&Namespace::new(&env.namespace).unwrap());
    RedisRunLog::new(conn, &names, Duration::from_secs(3600))
        .list(Some(&JobName::new(job).unwrap()), 100)
        .await
        .unwrap()
}

/// Waits for the first runs of `job` in the run log (`what` names the wait); newest first.
pub async fn first_runs(env: &TestEnv, job: &str, what: &str) -> Vec<Run> {
    eventually(WAIT, what, || async {
        let r = runs(env, job).await;
        (!r.is_empty()).then_some(r)
    })
    .await
}

/// Asserts that the runs of one occurrence, `done`, are those of a claim taken over: a
/// success by `taker`, the attempt of `owner` recorded as lost, and no other success
/// (`context` is shown with a failure).
pub fn assert_taken_over(done: &[Run], owner: &str, taker: &str, context: &str) {
    let outcomes: Vec<_> = done
        .iter()
        .map(|r| (r.consumer.as_str(), r.outcome))
        .collect();
    assert!(
        outcomes.contains(&(taker, Outcome::Succeeded)),
        "{outcomes:?}"
    );
    let successes = done
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded)
        .count();
    assert_eq!(successes, 1, "{outcomes:?}");
    assert!(
        outcomes.contains(&(owner, Outcome::Lost)),
        "{outcomes:?}\n{context}"
    );
}

/// The config of a job `slow` of `overlap` on the queue `default` (tracked), whose run
/// appends its attempt to the file it returns beside the config, then sleeps `secs`.
pub fn slow_job(env: &TestEnv, overlap: &str, secs: u32) -> (PathBuf, PathBuf) {
    env.track_queue("default");
    let starts = env.dir.join("starts");
    let config = env.write_config(
        "cronq.toml",
        &format!(
            r#"
[[job]]
name = "slow"
schedule = "@every 1s"
overlap = "{overlap}"
command = ["sh", "-c", "echo $CRONQ_ATTEMPT >> {}; sleep {secs}"]
"#,
            starts.display()
        ),
    );
    (config, starts)
}

/// How many lines the file at `path` has (0 if it does not exist).
pub fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

/// Waits until the consumer logging to `<log>.log` has started.
pub async fn started(env: &TestEnv, log: &str) {
    eventually(WAIT, &format!("consumer {log} to start"), || async {
        env.log(log).contains("consumer started").then_some(())
    })
    .await;
}

/// The arguments of `cronq consumer` with `config`, consumer id `id` and lease `lease`.
pub fn consumer_args<'a>(config: &'a str, id: &'a str, lease: &'a str) -> Vec<&'a str> {
    vec![
        "consumer",
        "--config",
        config,
        "--consumer-id",
        id,
        "--lease",
        lease,
    ]
}
