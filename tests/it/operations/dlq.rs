//! The dead-letter queue: `cronq dlq list` shows every letter without consuming it, and
//! `cronq dlq replay` runs each replayed letter once and loses none.
//!
//! The replay rules over a real ledger (on every backend, so the admission and the claim
//! that follows it cannot drift apart), and the
//! real binary replaying a failing job's letters after a fix, interrupted by SIGKILL and
//! run again, with every letter run exactly once successfully and none lost.

use std::time::Duration;

use chrono::Utc;
use cronq_consumer::replay::{self as ops, Plan, Selector};
use cronq_memory::MemoryBroker;
use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::{Broker, DeadLetter, Outgoing};
use cronq_shared::config::Config;
use cronq_shared::config::Overlap;
use cronq_shared::ledger::{Claim, ClaimOutcome, End, Ledger, State};
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::{JobName, Names, Namespace, QueueName};
use nix::sys::signal::Signal;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::cli::{WAIT, counts, json, ok, ran, start_consumer};
use crate::support::inspect::Inspect;
use crate::support::occurrences::occurrence;
use crate::support::ports;
use crate::support::producer_process::LEADER;
use crate::support::rabbitmq::passive;
use crate::support::{TestEnv, amqp_url, eventually, scoped};

fn letter(occ: &Occurrence, reason: &str) -> DeadLetter {
    DeadLetter {
        key: Some(occ.key.to_string()),
        job: Some(occ.job.to_string()),
        queue: Some(QueueName::new("default").unwrap()),
        attempts: 3,
        reason: reason.to_owned(),
        last_error: Some("exit status 3".into()),
        dead_lettered_at: Utc::now(),
        body: occ.encode(),
    }
}

fn garbage() -> DeadLetter {
    DeadLetter {
        key: None,
        job: None,
        queue: None,
        attempts: 0,
        reason: "malformed: test".into(),
        last_error: None,
        dead_lettered_at: Utc::now(),
        body: b"garbage".to_vec(),
    }
}

fn claim_of(occ: &Occurrence, attempt: u32) -> Claim {
    Claim {
        key: occ.key.clone(),
        job: occ.job.clone(),
        queue: QueueName::new("work").unwrap(),
        attempt,
        overlap: Overlap::Allow,
        max_concurrent: 1,
        pool: None,
        lease: Duration::from_secs(60),
        retention: Duration::from_secs(600),
        body: occ.encode(),
        scheduled_at: occ.scheduled_at,
        recheck: Duration::from_secs(60),
        consumer: "test".to_owned(),
        token: cronq_shared::ledger::claim_token(),
        held: false,
    }
}

/// Runs `occ` through the ledger as attempt `attempt` and ends it in `state`.
async fn ended(ledger: &dyn Ledger, occ: &Occurrence, attempt: u32, state: State) {
    let ClaimOutcome::Claimed { lease, .. } = ledger.claim(&claim_of(occ, attempt)).await.unwrap()
    else {
        panic!("claim of {}", occ.key);
    };
    let end = End {
        state: Some(state),
        error: None,
        retention: Duration::from_secs(600),
        next: None,
        run: None,
    };
    assert!(ledger.complete(&lease, &end).await.unwrap().recorded);
}

/// The replay rules on a memory broker over `records`: which letters go, which stay, and
/// that only a `failed` record is admitted, after which the replayed attempt 1 runs once.
async fn replay_rules_suite(records: impl Ledger + Inspect) {
    let config = Config::from_toml(
        "[[job]]\nname = \"flaky\"\nschedule = \"@every 1s\"\nqueue = \"work\"\n[[job]]\nname = \"other\"\nschedule = \"@every 1s\"\n",
        std::path::Path::new("mem.toml"),
    )
    .unwrap();
    let broker = MemoryBroker::new();
    let work = QueueName::new("work").unwrap();
    broker
        .declare(&[work.clone()].into_iter().collect())
        .await
        .unwrap();
    let (a, b, other, gone) = (
        occurrence("flaky", 1),
        occurrence("flaky", 2),
        occurrence("other", 3),
        occurrence("removed", 4),
    );
    let mut late = occurrence("flaky", 5);
    late.deadline = Some(late.scheduled_at);
    late.attempt = 3;
    for l in [
        letter(&a, "failed"),
        garbage(),
        letter(&other, "failed"),
        letter(&b, "failed"),
        letter(&gone, "unknown job"),
        letter(&late, "failed"),
    ] {
        broker.dead_letter(&l).await.unwrap();
    }
    ended(&records, &a, 3, State::Failed).await;
    ended(&records, &b, 1, State::Succeeded).await;
    ended(&records, &late, 3, State::Failed).await;
    let state = |occ: &Occurrence| {
        let key = occ.key.clone();
        let records = &records;
        async move { records.inspect(&key).await.map(|r| r.state) }
    };
    let flaky = Selector {
        job: Some(JobName::new("flaky").unwrap()),
        ..Selector::default()
    };

    // Nothing selected without a selector; a dry run changes nothing.
    let none = ops::replay(
        &broker,
        &records,
        &config,
        &Selector::default(),
        None,
        false,
    )
    .await
    .unwrap();
    assert!(none.entries.is_empty());
    let dry = ops::replay(&broker, &records, &config, &flaky, None, true)
        .await
        .unwrap();
    assert_eq!(dry.entries.len(), 3);
    assert!(dry.entries.iter().all(|e| e.plan == Plan::WouldReplay));
    assert_eq!(broker.dead_letters().await.unwrap().len(), 6);
    assert_eq!(state(&a).await, Some(State::Failed));

    let report = ops::replay(&broker, &records, &config, &flaky, None, false)
        .await
        .unwrap();
    assert_eq!(report.replayed, 3);
    assert!(
        report.entries.iter().all(|e| e.plan == Plan::Replayed),
        "{report:?}"
    );
    assert_eq!(state(&a).await, Some(State::Retrying), "failed is reset");
    assert_eq!(
        state(&b).await,
        Some(State::Succeeded),
        "succeeded never is"
    );
    // The others stay, in order.
    let left: Vec<_> = broker
        .dead_letters()
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.key)
        .collect();
    assert_eq!(
        left,
        vec![
            None,
            Some(other.key.to_string()),
            Some(gone.key.to_string())
        ]
    );
    // Replayed as trigger `replay`, attempt 1, no deadline, to the job's queue.
    let mut rx = broker
        .consume(&[work], 0, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let d = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        got.push(Occurrence::decode(&d.body).unwrap());
        d.acker.ack().await.unwrap();
    }
    assert_eq!(got[0].key, a.key);
    assert_eq!(got[2].key, late.key);
    // The admitted records take the replayed attempt 1 once; the succeeded one does not.
    for occ in [&a, &late] {
        let claim = claim_of(occ, 1);
        assert!(
            matches!(
                records.claim(&claim).await.unwrap(),
                ClaimOutcome::Claimed { .. }
            ),
            "{}",
            occ.key
        );
        // A second delivery of the replayed message: a claim of its own.
        assert!(matches!(
            records.claim(&claim_of(occ, 1)).await.unwrap(),
            ClaimOutcome::Duplicate { .. }
        ));
    }
    assert!(matches!(
        records.claim(&claim_of(&b, 1)).await.unwrap(),
        ClaimOutcome::Duplicate {
            state: State::Succeeded,
            ..
        }
    ));
    for occ in &got {
        assert_eq!(occ.trigger, Trigger::Replay);
        assert_eq!(occ.attempt, 1);
        assert_eq!(occ.deadline, None);
        assert_eq!(occ.last_error, None);
    }

    // A malformed body or a job gone from the config is kept and reported.
    let all = Selector {
        all: true,
        ..Selector::default()
    };
    let report = ops::replay(&broker, &records, &config, &all, None, false)
        .await
        .unwrap();
    assert_eq!(report.replayed, 1, "only `other`");
    let kept: Vec<_> = report
        .entries
        .iter()
        .filter_map(|e| match &e.plan {
            Plan::Kept(why) => Some(why.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(
        kept[0].starts_with("body is malformed: message is not a cronq occurrence"),
        "{kept:?}"
    );
    assert_eq!(kept[1], "job \"removed\" is no longer in mem.toml");
    assert_eq!(broker.dead_letters().await.unwrap().len(), 2);
}

on_every_backend!(replay_rules, "replay_rules");

async fn replay_rules(backend: Backend, env: TestEnv) {
    replay_rules_suite(ports::ledger(backend, &env).await).await;
}

const N: u32 = 200;

async fn broker(env: &TestEnv) -> AmqpBroker {
    let names = Names::new(&Namespace::new(&env.namespace).unwrap());
    AmqpBroker::connect(&amqp_url(), names).await.unwrap()
}

fn dlq_count(env: &TestEnv) -> u64 {
    json(env, &["dlq", "list", "--json"])["count"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn dlq_replay_interrupted_by_sigkill_and_run_again_runs_every_letter_once() {
    scoped("ops_replay", |env| async move {
        env.track_queue("default");
        let fixed = env.dir.join("fixed");
        let ran_file = env.dir.join("flaky.ran");
        let toml = format!(
            "{LEADER}\n[[job]]\nname = \"flaky\"\nschedule = \"0 0 1 1 *\"\nmax_attempts = 1\noverlap = \"allow\"\ncommand = [\"sh\", \"-c\", \"test -e {} || {{ echo not fixed >&2; exit 3; }}; echo $CRONQ_KEY >> {}\"]\n",
            fixed.display(),
            ran_file.display()
        );
        let cfg = env.write_config("cronq.toml", &toml).to_string_lossy().into_owned();
        let cfg = cfg.as_str();
        start_consumer(&env, cfg, "c");
        let amqp = broker(&env).await;
        amqp.dead_letter(&garbage()).await.unwrap();
        let queue = QueueName::new("default").unwrap();
        amqp.declare(&[queue.clone()].into_iter().collect()).await.unwrap();
        let batch: Vec<Outgoing> = (0..N)
            .map(|i| Outgoing { queue: queue.clone(), occurrence: occurrence("flaky", i), delay: Duration::ZERO })
            .collect();
        amqp.publish(&batch).await.unwrap();
        eventually(WAIT, "every occurrence to be dead-lettered", || async {
            (dlq_count(&env) == u64::from(N) + 1).then_some(())
        })
        .await;

        eprintln!("dead-lettered: {}", dlq_count(&env));
        // list: every field, without consuming.
        let list = json(&env, &["dlq", "list", "--json"]);
        let letters = list["letters"].as_array().unwrap();
        assert_eq!(letters[0]["reason"], "malformed: test");
        for l in &letters[1..] {
            assert_eq!(l["job"], "flaky");
            assert!(l["key"].as_str().unwrap().starts_with("flaky@2026-11-29T"));
            assert_eq!(l["attempts"], 1);
            assert!(l["reason"].is_string() && l["dead_lettered_at"].is_string(), "{l}");
            assert!(l["last_error"].as_str().unwrap().contains("not fixed"), "{l}");
        }
        let table = ok(&env, &["dlq", "list"]);
        assert!(table.contains("DEAD-LETTERED AT") && table.contains("not fixed"), "{table}");
        assert_eq!(dlq_count(&env), u64::from(N) + 1, "listing consumes nothing");

        // A dry run changes nothing.
        let dry = ok(&env, &["dlq", "replay", "--all", "--dry-run", "--config", cfg]);
        assert!(dry.contains("would replay") && dry.contains("kept: body is malformed"), "{dry}");
        assert_eq!(dlq_count(&env), u64::from(N) + 1);
        assert!(ran(&env, "flaky").is_empty());

        // Fix, replay, kill the replay mid-way, replay again.
        std::fs::write(&fixed, "").unwrap();
        let pid = env.spawn("replay1", &["dlq", "replay", "--all", "--config", cfg]);
        eventually(WAIT, "the first replay to get going", || async {
            (!ran(&env, "flaky").is_empty() || env.wait(pid, Duration::ZERO).is_some()).then_some(())
        })
        .await;
        env.signal(pid, Signal::SIGKILL);
        eprintln!("letters left after the killed replay: {}", dlq_count(&env));
        let out = ok(&env, &["dlq", "replay", "--job", "flaky", "--config", cfg]);
        assert!(out.contains("kept in the dead-letter queue"), "{out}");
        let c = eventually(WAIT, "every letter to run", || async {
            let c = counts(&ran(&env, "flaky"));
            (c.len() == N as usize).then_some(c)
        })
        .await;
        assert!(c.values().all(|n| *n == 1), "each letter ran once: {c:?}");
        let left = json(&env, &["dlq", "list", "--json"]);
        assert_eq!(left["count"], 1, "only the malformed letter stays: {left}");
        let runs = json(&env, &["runs", "--job", "flaky", "--limit", "1000", "--json"]);
        let ok_runs = runs["runs"].as_array().unwrap().iter().filter(|r| r["outcome"] == "succeeded").count();
        assert_eq!(ok_runs, N as usize);

        // A letter whose key already succeeded is replayed but never runs again (G1).
        let done = occurrence("flaky", 0);
        amqp.dead_letter(&letter(&done, "failed")).await.unwrap();
        let key = done.key.to_string();
        let out = ok(&env, &["dlq", "replay", "--key", &key, "--config", cfg]);
        assert!(out.contains("already succeeded"), "{out}");
        let conn = env.amqp().await;
        let ch = conn.create_channel().await.unwrap();
        let q = format!("{}.q.default", env.namespace);
        eventually(WAIT, "the duplicate to be consumed", || async {
            let depth = passive(&ch, &q).await.unwrap().message_count();
            (depth == 0).then_some(())
        })
        .await;
        assert_eq!(counts(&ran(&env, "flaky"))[&key], 1);

        // The same for a key whose first attempt succeeded while its claim was held: its
        // record is then the one string of a held claim (backends/redis/src/ledger/record.lua),
        // which the replay's admission makes the hash it stands for before reading it.
        let first_time = occurrence("flaky", N + 1);
        let key = first_time.key.to_string();
        let outgoing = Outgoing {
            queue: queue.clone(),
            occurrence: first_time.clone(),
            delay: Duration::ZERO,
        };
        amqp.publish(&[outgoing]).await.unwrap();
        let ledger = ports::redis_ledger(&env).await;
        eventually(WAIT, "the new occurrence to succeed", || async {
            let state = ledger.inspect(&first_time.key).await.map(|r| r.state);
            (state == Some(State::Succeeded)).then_some(())
        })
        .await;
        assert_eq!(ports::record_type(&env, &key).await, "string", "ended as a held claim");
        amqp.dead_letter(&letter(&first_time, "failed")).await.unwrap();
        let out = ok(&env, &["dlq", "replay", "--key", &key, "--config", cfg]);
        assert!(out.contains("already succeeded"), "{out}");
        assert_eq!(ports::record_type(&env, &key).await, "hash", "read as its hash");
        let state = ledger.inspect(&first_time.key).await.map(|r| r.state);
        assert_eq!(state, Some(State::Succeeded));
        eventually(WAIT, "the duplicate to be consumed", || async {
            let depth = passive(&ch, &q).await.unwrap().message_count();
            (depth == 0).then_some(())
        })
        .await;
        let _ = conn.close(200, "done".into()).await;
        assert_eq!(counts(&ran(&env, "flaky"))[&key], 1, "ran once");
        amqp.close().await;
    })
    .await;
}
