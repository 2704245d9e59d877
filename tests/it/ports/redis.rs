//! What the ledger does on Redis beyond its contract: a record stays a compact hash for its
//! whole retention, a claim stored by an older consumer is still reaped, and calls made
//! together go out in one script call, each answered alone, even when its caller gave up.

use std::time::Duration;

use cronq_redis::RedisLedger;
use cronq_shared::config::Overlap;
use cronq_shared::ledger::{
    Cancel, Cancelled, Claim, ClaimOutcome, End, ExecutionLease, FollowUp, Heartbeat, Ledger,
    Settle, State, cancelled_by, claim_token,
};
use cronq_shared::names::{Names, Namespace};
use cronq_shared::runlog::Run;

use crate::support::occurrences::{LONG, claim, claimed, end, run_of};
use crate::support::ports::redis_ledger;
use crate::support::{TestEnv, eventually, redis_url, scoped};

/// How long a test waits for a lapsed lease to be reaped.
const WAIT: Duration = Duration::from_secs(10);

/// The test's Redis ledger, a connection of its own to look at (or break) the keys the
/// ledger writes, and the names of those keys.
async fn ledger_and_keys(env: &TestEnv) -> (RedisLedger, cronq_redis::RedisConn, Names) {
    (
        redis_ledger(env).await,
        cronq_redis::connect(&redis_url()).await.unwrap(),
        Names::new(&Namespace::new(&env.namespace).unwrap()),
    )
}

/// The stored message lives apart from the record, so a record stays a small
/// listpack-encoded hash for its whole retention (one long field would turn it into a
/// hashtable, about 3x the memory, even after the field is deleted), and the message is
/// kept exactly while a reaper may need it.
#[tokio::test]
async fn ledger_redis_records_stay_compact() {
    scoped("ledger_redis_records_stay_compact", |env| async move {
        let (ledger, mut conn, names) = ledger_and_keys(&env).await;
        let c = claim("compact", 1, 1, Overlap::Allow, LONG);
        let key = c.key.to_string();
        let (record, body) = (
            names.redis_key(&["occ", &key]),
            names.redis_key(&["occbody", &key]),
        );
        let encoding = |conn: &mut cronq_redis::RedisConn| {
            let mut conn = conn.clone();
            let record = record.clone();
            async move {
                redis::cmd("OBJECT")
                    .arg("ENCODING")
                    .arg(&record)
                    .query_async::<String>(&mut conn)
                    .await
                    .unwrap()
            }
        };
        let stored = |conn: &mut cronq_redis::RedisConn| {
            let mut conn = conn.clone();
            let body = body.clone();
            async move {
                redis::cmd("GET")
                    .arg(&body)
                    .query_async::<Option<Vec<u8>>>(&mut conn)
                    .await
                    .unwrap()
            }
        };

        let lease = claimed(&ledger, &c).await;
        assert_eq!(encoding(&mut conn).await, "listpack");
        assert_eq!(
            stored(&mut conn).await,
            Some(c.body.clone()),
            "kept while running"
        );

        let retry = claim("compact", 1, 2, Overlap::Allow, LONG);
        let retrying = End {
            next: Some(FollowUp {
                attempt: 2,
                body: retry.body.clone(),
                within: LONG,
            }),
            error: Some("boom".into()),
            ..end(State::Retrying)
        };
        assert!(ledger.complete(&lease, &retrying).await.unwrap().recorded);
        assert_eq!(
            stored(&mut conn).await,
            Some(retry.body.clone()),
            "the follow-up"
        );

        let lease = claimed(&ledger, &retry).await;
        assert!(
            ledger
                .complete(&lease, &end(State::Succeeded))
                .await
                .unwrap()
                .recorded
        );
        assert_eq!(stored(&mut conn).await, None, "dropped once terminal");
        assert_eq!(encoding(&mut conn).await, "listpack");
    })
    .await;
}

/// A rolling upgrade: a claim written by a consumer from before the body moved to its own
/// key (the body a field of the record) whose owner died is still handed back, body and
/// all, by today's reaper.
#[tokio::test]
async fn ledger_redis_reaps_a_claim_stored_by_an_older_consumer() {
    scoped("ledger_redis_reaps_old_claim", |env| async move {
        let (ledger, mut conn, names) = ledger_and_keys(&env).await;
        let c = claim("upgrade", 1, 1, Overlap::Allow, LONG);
        let key = c.key.to_string();
        // The old layout, with a lease that ran out a second ago.
        let () = redis::pipe()
            .cmd("HSET")
            .arg(names.redis_key(&["occ", &key]))
            .arg(&[
                ("state", "running"),
                ("attempt", "1"),
                ("next", "1"),
                ("token", "old-owner"),
                ("job", c.job.as_str()),
                ("queue", c.queue.as_str()),
                ("lease_until", "1"),
                ("cancel", "0"),
                ("exclusive", "0"),
            ])
            .ignore()
            .cmd("HSET")
            .arg(names.redis_key(&["occ", &key]))
            .arg("body")
            .arg(&c.body[..])
            .ignore()
            .cmd("ZADD")
            .arg(names.redis_key(&["leases"]))
            .arg(1)
            .arg(&key)
            .ignore()
            .query_async(&mut conn)
            .await
            .unwrap();
        let orphans = ledger.reap(10, LONG).await.unwrap();
        assert_eq!(orphans.len(), 1, "{orphans:?}");
        assert_eq!(orphans[0].key, key);
        assert_eq!(orphans[0].queue, c.queue.as_str());
        assert_eq!(orphans[0].body, c.body, "the body from the record itself");
    })
    .await;
}

/// Claims and ends made together go to Redis in one script call (`ledger/batch.rs`), and
/// each is answered as if it had been alone: a duplicate within the same call is a
/// duplicate, and a call that Redis refuses (its record key holds a string, or its job's
/// fence counter a hash) fails alone while the others of its call are granted and recorded.
/// The claims are held, as a consumer's of an `allow` job are: the most common claim,
/// which `claim.lua` makes without its framing.
#[tokio::test]
async fn ledger_redis_calls_made_together_answer_each_alone() {
    scoped("ledger_redis_calls_together", |env| async move {
        let (ledger, mut conn, names) = ledger_and_keys(&env).await;
        let claim = |job: &str, i| Claim {
            held: true,
            ..claim(job, i, 1, Overlap::Allow, LONG)
        };
        let bad = claim("together", 99);
        let () = redis::cmd("SET")
            .arg(names.redis_key(&["occ", &bad.key.to_string()]))
            .arg("not a record")
            .query_async(&mut conn)
            .await
            .unwrap();
        let fenceless = claim("fenceless", 1);
        let () = redis::cmd("HSET")
            .arg(names.redis_key(&["fence", "fenceless"]))
            .arg("not")
            .arg("a counter")
            .query_async(&mut conn)
            .await
            .unwrap();
        let good: Vec<_> = (1..=16).map(|i| claim("together", i)).collect();
        let twice = claim("together", 1);

        // Polled in one task: every claim joins the batch the first one opened.
        let mut answers = futures_util::future::join_all(
            good.iter()
                .chain([&twice, &bad, &fenceless])
                .map(|c| ledger.claim(c)),
        )
        .await;
        for refused in answers.split_off(17) {
            assert!(refused.is_err(), "{refused:?}");
        }
        let granted: Vec<_> = answers
            .iter()
            .filter_map(|a| match a.as_ref().unwrap() {
                ClaimOutcome::Claimed { lease, .. } => Some(lease.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(granted.len(), 16, "{answers:?}");
        assert!(
            matches!(
                answers[16].as_ref().unwrap(),
                ClaimOutcome::Duplicate {
                    state: State::Running,
                    ..
                }
            ),
            "{:?}",
            answers[16]
        );

        // Their ends in one call too: half of them successes with their runs (a held claim's
        // end, which `complete.lua` makes from fewer arguments), half without, after a
        // success of the first claim under another token (fenced: appended as lost), and
        // with a success whose record key holds a string.
        let with_run = |c: &Claim| End {
            run: Some(Run {
                published_at: None,
                ..run_of(c)
            }),
            ..end(State::Succeeded)
        };
        let stranger = ExecutionLease {
            token: claim_token(),
            ..granted[0].clone()
        };
        let refused = ExecutionLease {
            key: bad.key.clone(),
            ..granted[0].clone()
        };
        let mut ends: Vec<_> = granted
            .iter()
            .zip(&good)
            .enumerate()
            .map(|(i, (lease, c))| {
                let end = if i % 2 == 0 {
                    with_run(c)
                } else {
                    end(State::Succeeded)
                };
                (lease, end)
            })
            .collect();
        ends.insert(0, (&stranger, with_run(&good[0])));
        ends.push((&refused, with_run(&bad)));
        let mut ended =
            futures_util::future::join_all(ends.iter().map(|(l, e)| ledger.complete(l, e))).await;
        assert!(ended.pop().unwrap().is_err(), "{ended:?}");
        let recorded: Vec<_> = ended.iter().map(|e| e.as_ref().unwrap().recorded).collect();
        assert!(!recorded[0], "fenced: {recorded:?}");
        assert!(recorded[1..].iter().all(|r| *r), "{recorded:?}");
        for c in &good {
            let record = ledger.record(&c.key).await.unwrap().unwrap();
            assert_eq!(record.state, State::Succeeded, "{}", c.key);
        }
        let runs: usize = redis::cmd("XLEN")
            .arg(names.redis_key(&["runs"]))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(runs, 8 + 1, "the runs given, and the fenced one as lost");
        // Each entry is its own run's, whatever follows it in the call: none was given a
        // time of publication.
        let entries: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(names.redis_key(&["runs"]))
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .unwrap();
        for entry in &entries.ids {
            assert!(!entry.map.contains_key("published_at"), "{:?}", entry.map);
            assert_eq!(entry.get::<String>("consumer").as_deref(), Some("test"));
        }
    })
    .await;
}

/// A caller that gives up while its claim waits in a batch not yet sent (`ledger/batch.rs`:
/// at shutdown) leaves the claim in it: the batch goes out whole, the claim sent with it is
/// answered, and the given-up claim holds its occurrence (another delivery of it is a
/// duplicate) until its lease lapses, when the reaper hands it out once, message and all,
/// for a delivery that takes it over: nothing runs twice, nothing is lost.
#[tokio::test]
async fn ledger_redis_a_claim_given_up_in_its_batch_lapses_to_the_reaper() {
    scoped("ledger_redis_given_up", |env| async move {
        let ledger = redis_ledger(&env).await;
        let lease = Duration::from_secs(3);
        let given_up = claim("given-up", 1, 1, Overlap::Allow, lease);
        let sent_with_it = claim("given-up", 2, 1, Overlap::Allow, LONG);
        {
            let mut first = Box::pin(ledger.claim(&given_up));
            let mut second = Box::pin(ledger.claim(&sent_with_it));
            // One poll each in this one task: both join the batch the first one opened,
            // which is sent once this task yields (a current-thread runtime).
            assert!(futures_util::poll!(&mut first).is_pending());
            assert!(futures_util::poll!(&mut second).is_pending());
            drop(first);
            let answer = second.await.unwrap();
            assert!(matches!(answer, ClaimOutcome::Claimed { .. }), "{answer:?}");
        }
        let redelivered = Claim {
            token: claim_token(),
            ..given_up.clone()
        };
        // Within its lease (3 s; a claim and a reap, the reap's script maybe loaded first).
        let answer = ledger.claim(&redelivered).await.unwrap();
        assert!(
            matches!(
                answer,
                ClaimOutcome::Duplicate {
                    state: State::Running,
                    ..
                }
            ),
            "the given-up claim was sent with its batch: {answer:?}"
        );
        assert!(
            ledger.reap(10, LONG).await.unwrap().is_empty(),
            "nothing to reap before the lease lapses"
        );
        // Past it.
        let orphans = eventually(WAIT, "the given-up claim to be reaped", || async {
            Some(ledger.reap(10, LONG).await.unwrap()).filter(|o| !o.is_empty())
        })
        .await;
        assert_eq!(orphans.len(), 1, "{orphans:?}");
        assert_eq!(orphans[0].key, given_up.key.to_string());
        assert_eq!(orphans[0].body, given_up.body);
        match ledger.claim(&redelivered).await.unwrap() {
            ClaimOutcome::Claimed { takeover, .. } => assert!(takeover),
            other => panic!("the reaped occurrence is not claimable: {other:?}"),
        }
    })
    .await;
}

/// Command `cmd` on the record of `c`, answered as a `T`.
async fn on_record<T: redis::FromRedisValue>(
    conn: &cronq_redis::RedisConn,
    names: &Names,
    cmd: &str,
    c: &Claim,
) -> T {
    redis::cmd(cmd)
        .arg(names.redis_key(&["occ", &c.key.to_string()]))
        .query_async(&mut conn.clone())
        .await
        .unwrap()
}

/// A held claim's new record is one string (`ledger/record.lua`), and its success keeps it
/// one. Every other script reads it as the hash it stands for, made a hash first with the
/// expiry it has: a replay, a second delivery of its message, a renewal, an end other than
/// the held success, a settle, an operator's cancel. Each answers as it would have on the hash.
#[tokio::test]
async fn ledger_redis_a_held_record_is_one_string_read_as_its_hash() {
    scoped("ledger_redis_held_string", |env| async move {
        let (ledger, conn, names) = ledger_and_keys(&env).await;
        let held = |i| Claim {
            held: true,
            ..claim("held-string", i, 1, Overlap::Allow, LONG)
        };
        let kind = |c| on_record::<String>(&conn, &names, "TYPE", c);
        let expiry = |c| on_record::<i64>(&conn, &names, "PTTL", c);
        let runs = || {
            let mut conn = conn.clone();
            let key = names.redis_key(&["runs"]);
            async move {
                redis::cmd("XLEN")
                    .arg(key)
                    .query_async::<usize>(&mut conn)
                    .await
                    .unwrap()
            }
        };
        // Ends `lease` of `c` with its success and its run: recorded?
        let succeed = |lease: &ExecutionLease, c: &Claim| {
            let (ledger, lease) = (&ledger, lease.clone());
            let end = End {
                run: Some(run_of(c)),
                ..end(State::Succeeded)
            };
            async move { ledger.complete(&lease, &end).await.unwrap().recorded }
        };
        let retention = i64::try_from(LONG.as_millis()).unwrap();

        // Claimed and ended by its success: a string throughout.
        let ended = held(1);
        let lease = claimed(&ledger, &ended).await;
        assert!(lease.held);
        assert_eq!(kind(&ended).await, "string");
        let record = ledger.record(&ended.key).await.unwrap().unwrap();
        assert_eq!((record.state, record.attempt), (State::Running, 1));
        assert!(succeed(&lease, &ended).await);
        assert_eq!(kind(&ended).await, "string");
        let record = ledger.record(&ended.key).await.unwrap().unwrap();
        assert_eq!(
            (record.state, record.attempt, record.error),
            (State::Succeeded, 1, None)
        );
        let left = expiry(&ended).await;
        assert!(0 < left && left <= retention, "{left} ms");
        // A replay of a success is refused (G1), read off the string.
        assert_eq!(
            ledger.admit_replay(&ended.key).await.unwrap(),
            Some(State::Succeeded)
        );
        assert_eq!(kind(&ended).await, "hash");
        // The same end again: recorded, nothing appended.
        assert!(succeed(&lease, &ended).await);
        assert_eq!(runs().await, 1);
        // Its message delivered again: a duplicate of its success, the expiry kept.
        let again = Claim {
            token: claim_token(),
            ..ended.clone()
        };
        match ledger.claim(&again).await.unwrap() {
            ClaimOutcome::Duplicate {
                state: State::Succeeded,
                ..
            } => {}
            other => panic!("a second delivery of a success: {other:?}"),
        }
        let kept = expiry(&ended).await;
        assert!(0 < kept && kept <= left, "{kept} ms, {left} ms before");

        // Renewed before its end: the hash of the fields the string stood for, its lease
        // renewed; its end then goes the general way, as any end of a hash.
        let renewed = held(2);
        let lease = claimed(&ledger, &renewed).await;
        let before: String = on_record(&conn, &names, "GET", &renewed).await;
        let before: Vec<&str> = before.split('\n').collect();
        assert_eq!(before.len(), 9, "{before:?}");
        assert_eq!(
            ledger.heartbeat(&lease, LONG).await.unwrap(),
            Heartbeat::Held
        );
        assert_eq!(kind(&renewed).await, "hash");
        let left = expiry(&renewed).await;
        assert!(0 < left && left <= retention, "{left} ms");
        let fields: std::collections::HashMap<String, String> =
            on_record(&conn, &names, "HGETALL", &renewed).await;
        let field = |name: &str| fields.get(name).map(String::as_str);
        assert_eq!(fields.len(), 11, "{fields:?}");
        assert_eq!(field("state"), Some("running"));
        assert_eq!(field("updated"), Some(before[1]));
        assert_eq!(field("fence"), Some(lease.fence.to_string().as_str()));
        assert_eq!(field("attempt"), Some("1"));
        assert_eq!(field("next"), Some("1"));
        assert_eq!(field("job"), Some("held-string"));
        assert_eq!(field("queue"), Some("default"));
        assert_eq!(
            field("sched"),
            Some(renewed.scheduled_at.timestamp_millis().to_string().as_str())
        );
        assert_eq!(field("token"), Some(lease.token.as_str()));
        assert_eq!(field("held"), Some("1"));
        let renewed_until: i64 = field("lease_until").unwrap().parse().unwrap();
        assert!(
            renewed_until >= before[6].parse::<i64>().unwrap(),
            "{renewed_until} against {before:?}"
        );
        assert!(succeed(&lease, &renewed).await);
        let record = ledger.record(&renewed.key).await.unwrap().unwrap();
        assert_eq!(record.state, State::Succeeded);
        assert_eq!(runs().await, 2);

        // Settled as missed while it runs under a live lease: left as it is.
        let cancelled = held(3);
        let lease = claimed(&ledger, &cancelled).await;
        let missed = Settle {
            key: cancelled.key.clone(),
            job: cancelled.job.clone(),
            attempt: 1,
            state: State::Missed,
            error: None,
            retention: LONG,
            run: None,
        };
        assert!(!ledger.settle(&missed).await.unwrap().recorded);
        assert_eq!(kind(&cancelled).await, "hash");
        let record = ledger.record(&cancelled.key).await.unwrap().unwrap();
        assert_eq!(record.state, State::Running);
        // Cancelled by an operator while it runs: asked to stop, which its renewal tells.
        let cancel = Cancel {
            key: cancelled.key.clone(),
            who: "ops".into(),
        };
        assert_eq!(ledger.cancel(&cancel).await.unwrap(), Cancelled::Stopping);
        assert_eq!(kind(&cancelled).await, "hash");
        assert!(matches!(
            ledger.heartbeat(&lease, LONG).await.unwrap(),
            Heartbeat::CancelRequested { by } if by == cancelled_by("ops")
        ));
    })
    .await;
}
