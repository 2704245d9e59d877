//! A copy of an occurrence delivered past its start deadline while the occurrence runs
//! elsewhere under a held claim (its delivery unacked, its record the one string of
//! `backends/redis/src/ledger/record.lua`): the copy is settled as missed, which a running
//! record under a live lease refuses, so the copy is acked without running or recording
//! anything; the settle made the string the hash it stands for, and the run goes on to its
//! one success.

use std::time::{Duration, Instant};

use chrono::Utc;
use cronq_shared::runlog::Outcome;
use nix::sys::signal::Signal;

use crate::support::consumer_process::{
    WAIT, consumer_args, lines, publish, runs, slow_job, started,
};
use crate::support::occurrences::occurrence;
use crate::support::ports::{record_type, redis_ledger};
use crate::support::{eventually, rabbitmq, scoped};

/// Waits, looking every 5 ms, until the file at `starts` has `n` lines.
async fn until_lines(starts: &std::path::Path, n: usize) {
    let deadline = Instant::now() + WAIT;
    while lines(starts) < n {
        assert!(Instant::now() < deadline, "{n} starts never came");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Consumer a (one attempt at a time, so a held delivery fills its prefetch) starts a 3 s
/// run and is stopped (SIGSTOP) at once, within its held window (a tenth of its 30 s
/// lease, a second at most: a start seen past it, on a slow machine, is let run and tried
/// again with another occurrence). Consumer b then gets the copy, whose message says its
/// deadline passed a second ago. Asserted: the record was a string until b's settle and a
/// hash with the same fields after it; b never starts the job; once a goes on (SIGCONT),
/// the occurrence has one run, a's success, and no `missed` entry.
#[tokio::test]
async fn a_late_copy_of_a_held_run_is_acked_without_running_and_the_run_succeeds_once() {
    scoped("late_copy", |env| async move {
        let (config, starts) = slow_job(&env, "allow", 3);
        let config = config.to_str().unwrap();
        let mut a_args = consumer_args(config, "a", "30s");
        a_args.extend(["--concurrency", "1"]);
        let a = env.spawn("a", &a_args);
        started(&env, "a").await;
        let ledger = redis_ledger(&env).await;

        let mut i = 1;
        let occ = loop {
            let occ = occurrence("slow", i);
            publish(&env, occ.clone()).await;
            until_lines(&starts, i as usize).await;
            env.signal(a, Signal::SIGSTOP);
            if record_type(&env, occ.key.as_str()).await == "string" {
                break occ;
            }
            env.signal(a, Signal::SIGCONT);
            eprintln!(
                "{}: its claim was kept before a was stopped; again",
                occ.key
            );
            assert!(i < 3, "three starts seen past the held window");
            eventually(WAIT, "the missed window's run to end", || async {
                let ended = runs(&env, "slow").await.iter().any(|r| r.key == occ.key);
                ended.then_some(())
            })
            .await;
            i += 1;
        };
        let key = occ.key.as_str();
        let held = ledger.fields(&occ.key).await.unwrap();
        assert_eq!(held.get("held").map(String::as_str), Some("1"), "{held:?}");
        assert_eq!(
            held.get("state").map(String::as_str),
            Some("running"),
            "{held:?}"
        );

        env.spawn("b", &consumer_args(config, "b", "30s"));
        started(&env, "b").await;
        let mut late = occ.clone();
        late.deadline = Some(Utc::now() - chrono::Duration::seconds(1));
        publish(&env, late).await;
        eventually(WAIT, "b's settle to read the record", || async {
            (record_type(&env, key).await == "hash").then_some(())
        })
        .await;
        assert_eq!(
            ledger.fields(&occ.key).await.unwrap(),
            held,
            "the hash holds what the string held, and the settle changed nothing"
        );
        eventually(WAIT, "the copy taken off the queue", || async {
            let (ready, _) = rabbitmq::queue_counts(&env.names(), "default").await;
            (ready == 0).then_some(())
        })
        .await;

        env.signal(a, Signal::SIGCONT);
        let done = eventually(WAIT, "the run to end", || async {
            let done: Vec<_> = runs(&env, "slow")
                .await
                .into_iter()
                .filter(|r| r.key == occ.key)
                .collect();
            (!done.is_empty()).then_some(done)
        })
        .await;
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(done[0].outcome, Outcome::Succeeded, "{done:?}");
        assert_eq!(done[0].consumer, "a", "{done:?}");
        // Nothing more within 2 s: the copy was acked, not put back.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let done = runs(&env, "slow").await;
        assert_eq!(
            done.iter().filter(|r| r.key == occ.key).count(),
            1,
            "one run of {key}: {done:?}"
        );
        assert_eq!(lines(&starts), i as usize, "b never started the job");
    })
    .await;
}
