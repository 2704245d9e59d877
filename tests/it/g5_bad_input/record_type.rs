//! An occurrence whose record in Redis is a key the consumer cannot read (a string that is
//! no record): what a consumer from before the held claim's string record meets in a newer
//! consumer's most common record during a rolling upgrade (docs/operations.md, "Upgrading").
//! Its claim is answered `WRONGTYPE`; the consumer runs nothing and dead-letters nothing:
//! it holds the delivery, trying the claim again, and gives it back to the queue when it
//! stops. Once the record reads (here: the key removed), a consumer runs it once.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::cli::json;
use crate::support::consumer_process::{
    WAIT, consumer_args, first_runs, lines, publish, slow_job, started,
};
use crate::support::occurrences::occurrence;
use crate::support::{eventually, rabbitmq, scoped};

#[tokio::test]
async fn a_record_of_the_wrong_type_holds_its_delivery_runs_nothing_and_gives_it_back() {
    scoped("record_type", |env| async move {
        let (config, starts) = slow_job(&env, "allow", 0);
        let config = config.to_str().unwrap();
        let occ = occurrence("slow", 1);
        let record = env.names().redis_key(&["occ", occ.key.as_str()]);
        let mut redis = env.redis().await;
        let () = redis::cmd("SET")
            .arg(&record)
            .arg("not a record")
            .arg("PX")
            .arg(600_000)
            .query_async(&mut redis)
            .await
            .unwrap();

        let a = env.spawn("a", &consumer_args(config, "a", "3s"));
        started(&env, "a").await;
        publish(&env, occ.clone()).await;
        let refused = |log: &str| {
            log.lines()
                .filter(|l| l.contains(occ.key.as_str()) && l.contains("WRONGTYPE"))
                .count()
        };
        // Tried 0.5 s, then 1 s after the first refusal: three claims at least.
        let deadline = std::time::Instant::now() + WAIT;
        while refused(&env.log("a")) < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "a's claim refused three times:\n{}",
                env.log("a")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The warning says why, and what to do.
        let log = env.log("a");
        let line = log.lines().find(|l| l.contains("WRONGTYPE")).unwrap();
        assert!(
            line.contains("the idempotency store did not take the claim")
                && line.contains("a key this cronq cannot read")
                && line.contains("upgraded together"),
            "{line}"
        );
        assert_eq!(lines(&starts), 0, "nothing ran");
        let (ready, _) = rabbitmq::queue_counts(&env.names(), "default").await;
        assert_eq!(ready, 0, "a holds the delivery");
        let dlq = json(&env, &["dlq", "list", "--json"]);
        assert_eq!(dlq["count"], 0, "nothing dead-lettered: {dlq}");

        env.signal(a, Signal::SIGTERM);
        assert!(
            env.wait(a, Duration::from_secs(15)).is_some(),
            "a stopped:\n{}",
            env.log("a")
        );
        // Given back once a stopped; looked for until then, as the broker may count it a
        // moment after the process is gone.
        eventually(WAIT, "the delivery given back to the queue", || async {
            let (ready, _) = rabbitmq::queue_counts(&env.names(), "default").await;
            (ready == 1).then_some(())
        })
        .await;
        assert_eq!(lines(&starts), 0, "nothing ran");

        let () = redis::cmd("DEL")
            .arg(&record)
            .query_async(&mut redis)
            .await
            .unwrap();
        env.spawn("b", &consumer_args(config, "b", "3s"));
        started(&env, "b").await;
        let done = first_runs(&env, "slow", "b's run").await;
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(done[0].consumer, "b", "{done:?}");
        assert_eq!(lines(&starts), 1, "ran once");
    })
    .await;
}
