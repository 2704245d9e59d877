//! cronq's stores on Redis Sentinel (`redis+sentinel://`): they work through the Sentinel
//! URL, the connection follows the master across a planned switch (the watch) and a
//! demoted master (`READONLY`), and `CRONQ_REDIS_MIN_REPLICAS` makes every write the
//! guarantees rest on wait for that many replicas, or fail saying so, and a write that
//! failed so is safe to try again.

use std::time::{Duration, Instant};

use chrono::Utc;
use cronq_redis::{RedisConn, RedisControl, RedisLease, RedisLedger, RedisRunLog};
use cronq_shared::config::Overlap;
use cronq_shared::control::{Commit, Control, ControlError};
use cronq_shared::lease::{Lease, LeaseError};
use cronq_shared::ledger::{ClaimOutcome, Heartbeat, Ledger, Settle, State};
use cronq_shared::names::JobName;
use cronq_shared::runlog::{Outcome, Run, RunLog};
use cronq_shared::store::{StoreError, Unreplicated};

use crate::support::ha::{FOLLOW_WITHIN, HaEnv, hgetall_on, scoped};
use crate::support::occurrences::{LONG, claim, claimed, end, run_of};
use crate::support::{eventually, until};

/// The ledger and its run log under the test's namespace, on `conn`.
fn ports(conn: &RedisConn, env: &HaEnv) -> (RedisLedger, RedisRunLog) {
    let history = RedisRunLog::new(conn.clone(), &env.names, LONG);
    (
        RedisLedger::new(conn.clone(), env.names.clone(), history.clone()),
        history,
    )
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// Every store works through a Sentinel URL, on the node the sentinels name master.
#[tokio::test]
async fn ha_stores_work_through_a_sentinel_url() {
    scoped("ha_stores", |env| async move {
        let conn = cronq_redis::connect(&env.ha.sentinel_url).await.unwrap();
        assert_eq!(conn.master(), Some(addr(env.ha.master_port())));
        let (ledger, history) = ports(&conn, &env);

        let c = claim("stores", 1, 1, Overlap::Skip, LONG);
        let lease = claimed(&ledger, &c).await;
        assert_eq!(
            ledger.heartbeat(&lease, LONG).await.unwrap(),
            Heartbeat::Held
        );
        let done = cronq_shared::ledger::End {
            run: Some(run_of(&c)),
            ..end(State::Succeeded)
        };
        assert!(ledger.complete(&lease, &done).await.unwrap().recorded);
        assert_eq!(
            ledger.record(&c.key).await.unwrap().map(|r| r.state),
            Some(State::Succeeded)
        );
        assert_eq!(history.list(None, 10).await.unwrap().len(), 1);

        let leader = RedisLease::new(conn.clone(), &env.names);
        let term = leader
            .acquire("a", LONG)
            .await
            .unwrap()
            .expect("a free lease");
        assert!(leader.renew(&term, LONG).await.unwrap());
        assert_eq!(
            leader.holder().await.unwrap().map(|h| h.epoch),
            Some(term.epoch)
        );
        let control = Control::new(RedisControl::new(conn.clone(), &env.names));
        let job = JobName::new("stores").unwrap();
        let commit = Commit {
            cursors: vec![(job.clone(), Utc::now())],
            settle: vec![],
        };
        control.commit(&term, &commit).await.unwrap();
        assert!(control.cursors().await.unwrap().contains_key(&job));
        control.pause(&job, None).await.unwrap();
        assert!(control.paused().await.unwrap().contains_key(&job));
        assert!(control.resume(&job).await.unwrap());
        assert!(leader.release(&term).await.unwrap());
    })
    .await;
}

/// After a planned switch (`SENTINEL FAILOVER`) the connection follows the new master by
/// itself, and writes reach it within seconds. Nothing fails on the way: the old master
/// keeps taking writes until Sentinel demotes it about 10 s later (and then drops them), so
/// only the connection's watch of the sentinels can tell.
#[tokio::test]
async fn ha_follows_the_master_after_a_planned_failover() {
    scoped("ha_failover", |env| async move {
        env.heal().await;
        let conn = cronq_redis::connect(&env.ha.sentinel_url)
            .await
            .unwrap();
        let (ledger, _) = ports(&conn, &env);
        let old = addr(env.ha.master_port());
        assert_eq!(conn.master().as_deref(), Some(old.as_str()));
        claimed(&ledger, &claim("failover", 0, 1, Overlap::Allow, LONG)).await;

        let started = Instant::now();
        env.ha.failover().await;
        // Write all along, a fresh key each time, until a write succeeds on another master.
        let mut i = 1;
        let (new, key) = loop {
            let c = claim("failover", i, 1, Overlap::Allow, LONG);
            i += 1;
            let wrote = ledger.claim(&c).await;
            let now = conn.master().unwrap();
            if now != old && matches!(wrote, Ok(ClaimOutcome::Claimed { .. })) {
                break (now, c.key);
            }
            assert!(
                started.elapsed() < FOLLOW_WITHIN,
                "still on {now} {FOLLOW_WITHIN:?} after SENTINEL FAILOVER (the sentinels name {:?}); last write: {wrote:?}",
                env.ha.named_master().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!(
            "followed the master from {old} to {new} {:?} after SENTINEL FAILOVER",
            started.elapsed()
        );
        assert_eq!(env.ha.named_master().await.as_deref(), Some(new.as_str()));
        assert_eq!(conn.master_changes(), 1);
        // That write is on the new master itself.
        let record = hgetall_on(
            &env.ha,
            port_of(&new),
            &env.key(&["occ", &key.to_string()]),
        )
        .await;
        assert_eq!(record.get("state").map(String::as_str), Some("running"));
    })
    .await;
}

/// The loss the HA soak found (docs/reliability.md): claims acknowledged around a plain
/// `SENTINEL FAILOVER` (no pause first) are all on the new master afterwards. A consumer
/// acks a delivery once its claim is recorded, so a claim lost this way is an occurrence
/// nothing runs again. Sentinel promotes a replica before it tells the old master and the
/// other replica to follow it; the old master takes writes meanwhile, which the other
/// replica acknowledges and drops when it resynchronises. The switch barrier (every
/// replica in sync awaited, `replicas.rs`) makes those writes fail instead: they are tried
/// again on the new master. With and without `CRONQ_REDIS_MIN_REPLICAS`.
async fn a_plain_switch_loses_no_acknowledged_claim(test: &str, min_replicas: u32) {
    scoped(test, move |env| async move {
        env.heal().await;
        let conn = cronq_redis::connect(&env.ha.sentinel_url)
            .await
            .unwrap()
            .with_min_replicas(min_replicas);
        let (ledger, _) = ports(&conn, &env);
        let old = addr(env.ha.master_port());
        let started = Instant::now();
        let (mut acknowledged, mut refused) = (Vec::new(), 0);
        let mut switched: Option<Instant> = None;
        let mut followed: Option<Instant> = None;
        // Sentinel sometimes takes the request and switches nothing (right after a replica
        // restarted, as on a freshly started harness): asked again after 15 s, up to 3 times.
        let (mut asked, mut asks) = (None::<Instant>, 0u32);
        // The time from the switch to the first claim acknowledged on the new master.
        let mut held = None;
        // Claim a fresh key every few milliseconds from before the switch until 2 s after the
        // connection followed the new master.
        for i in 0.. {
            if switched.is_none() && started.elapsed() >= Duration::from_millis(500) {
                env.ha.failover().await;
                switched = Some(Instant::now());
                (asked, asks) = (switched, 1);
            }
            if followed.is_none()
                && asks < 3
                && asked.is_some_and(|at| at.elapsed() >= Duration::from_secs(15))
            {
                eprintln!("SENTINEL FAILOVER {asks}: still on {old} after 15 s, asking again");
                env.ha.failover().await;
                switched = Some(Instant::now());
                (asked, asks) = (switched, asks + 1);
            }
            let c = claim("switch", i, 1, Overlap::Allow, LONG);
            match ledger.claim(&c).await {
                Ok(ClaimOutcome::Claimed { .. }) => {
                    acknowledged.push(c.key.to_string());
                    if held.is_none() && followed.is_some() {
                        held = switched.map(|at| at.elapsed());
                    }
                }
                other => {
                    assert!(other.is_err(), "a fresh key: {other:?}");
                    refused += 1;
                }
            }
            if followed.is_none() && conn.master().as_deref() != Some(old.as_str()) {
                followed = Some(Instant::now());
            }
            if followed.is_some_and(|at| at.elapsed() > Duration::from_secs(2)) {
                break;
            }
            assert!(
                started.elapsed() < FOLLOW_WITHIN * 2 + Duration::from_secs(15) * asks,
                "still on {old} {:?} after the first of {asks} switch requests",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Healthy again: the old master is a replica of the new one, resynchronised from it,
        // so whatever only it and the other replica had is gone by now.
        env.heal().await;
        let mut master = env.ha.node(env.ha.master_port()).await;
        let mut lost = Vec::new();
        for key in &acknowledged {
            let exists: bool = redis::cmd("EXISTS")
                .arg(env.key(&["occ", key]))
                .query_async(&mut master)
                .await
                .unwrap();
            if !exists {
                lost.push(key.as_str());
            }
        }
        eprintln!(
            "plain switch, CRONQ_REDIS_MIN_REPLICAS={min_replicas}: {} claims acknowledged, \
             {refused} refused (tried again by a consumer), {} lost; followed after {:?}, \
             first claim on the new master after {held:?}",
            acknowledged.len(),
            lost.len(),
            followed.zip(switched).map(|(f, s)| f - s),
        );
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged claims are not on the new master, the first: {:?}",
            lost.len(),
            acknowledged.len(),
            &lost[..lost.len().min(5)]
        );
        assert!(acknowledged.len() >= 20, "too few claims to show anything");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ha_a_plain_switch_loses_no_acknowledged_claim() {
    a_plain_switch_loses_no_acknowledged_claim("ha_switch_claims", 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ha_a_plain_switch_loses_no_acknowledged_claim_with_min_replicas() {
    a_plain_switch_loses_no_acknowledged_claim("ha_switch_claims_n1", 1).await;
}

/// What the switch barrier costs while a replica is down: a killed replica is not awaited
/// once the connection's watch saw it gone (the master no longer lists it and it does not
/// answer `ROLE`), so guarded writes fail for about a second or two, then go on with the
/// other replica alone; the replica started again is awaited again once in sync.
#[tokio::test(flavor = "multi_thread")]
async fn ha_a_replica_killed_stops_guarded_writes_for_seconds_only() {
    scoped("ha_replica_down", |env| async move {
        env.heal().await;
        let conn = cronq_redis::connect(&env.ha.sentinel_url)
            .await
            .unwrap()
            .with_min_replicas(1);
        let (ledger, _) = ports(&conn, &env);
        let dead = env.ha.replica_ports()[0];
        let ha = env.ha.clone();
        tokio::task::spawn_blocking(move || ha.kill_redis(dead))
            .await
            .unwrap();
        let killed = Instant::now();
        let (mut refused, mut last_refused) = (0, None);
        let mut ok_after = 0;
        // Claim until 50 claims in a row were acknowledged after the kill.
        for i in 0.. {
            let c = claim("replica-down", i, 1, Overlap::Allow, LONG);
            match ledger.claim(&c).await {
                Ok(ClaimOutcome::Claimed { .. }) => ok_after += 1,
                other => {
                    assert!(other.is_err(), "a fresh key: {other:?}");
                    refused += 1;
                    ok_after = 0;
                    last_refused = Some(killed.elapsed());
                }
            }
            if ok_after >= 50 {
                break;
            }
            assert!(
                killed.elapsed() < FOLLOW_WITHIN,
                "guarded writes still fail {:?} after a replica was killed",
                killed.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        eprintln!(
            "a replica killed: {refused} claims refused, the last {last_refused:?} after the kill"
        );
        env.heal().await;
    })
    .await;
}

/// A `READONLY` answer (the master was demoted) makes the connection look for the master
/// at once. With the watch off, the connection stays on the old master through a planned
/// switch: its writes succeed there (and are gone once it is demoted, which is why the
/// watch exists); the first write after the demotion fails with `READONLY` and is not
/// replayed, and the next one reaches the new master.
#[tokio::test]
async fn ha_readonly_answer_moves_the_connection_to_the_new_master() {
    scoped("ha_readonly", |env| async move {
        env.heal().await;
        let conn = cronq_redis::connect_with(&env.ha.sentinel_url, None)
            .await
            .unwrap();
        let (ledger, _) = ports(&conn, &env);
        let old_port = env.ha.master_port();
        let old = addr(old_port);
        env.ha.failover().await;
        let new = eventually(
            FOLLOW_WITHIN,
            "the sentinels to name a new master",
            || async { env.ha.named_master().await.filter(|m| *m != old) },
        )
        .await;

        // Unwatched, the connection is still on the old master, which still takes writes.
        let stale = claim("readonly", 1, 1, Overlap::Allow, LONG);
        claimed(&ledger, &stale).await;
        assert_eq!(conn.master().as_deref(), Some(old.as_str()));

        // Demote it as Sentinel will, behind the connection's back.
        let mut node = env.ha.node(old_port).await;
        let (host, port) = new.split_once(':').unwrap();
        let () = redis::cmd("REPLICAOF")
            .arg(host)
            .arg(port)
            .query_async(&mut node)
            .await
            .unwrap();

        let c = claim("readonly", 2, 1, Overlap::Allow, LONG);
        let err = ledger
            .claim(&c)
            .await
            .expect_err("a write to a demoted master fails");
        let kind = match &err {
            StoreError::Command { source, .. } => source
                .downcast_ref::<redis::RedisError>()
                .map(redis::RedisError::kind),
            _ => None,
        };
        assert_eq!(
            kind,
            Some(redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)),
            "{err:?}"
        );
        // Not replayed: the caller tries again, and that write lands on the new master.
        let started = Instant::now();
        let lease = loop {
            match ledger.claim(&c).await {
                Ok(ClaimOutcome::Claimed { lease, .. }) => break lease,
                other => assert!(
                    started.elapsed() < FOLLOW_WITHIN,
                    "still on {:?} after READONLY; last write: {other:?}",
                    conn.master()
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!(
            "followed the master from {old} to {new} {:?} after READONLY",
            started.elapsed()
        );
        assert_eq!(conn.master().as_deref(), Some(new.as_str()));
        assert!(
            ledger
                .complete(&lease, &end(State::Succeeded))
                .await
                .unwrap()
                .recorded
        );
        // The write the old master took after the switch is not on the new one.
        let lost = hgetall_on(
            &env.ha,
            port_of(&new),
            &env.key(&["occ", &stale.key.to_string()]),
        )
        .await;
        assert!(lost.is_empty(), "{lost:?}");
    })
    .await;
}

#[track_caller]
fn assert_unreplicated(barrier: &Unreplicated, acknowledged: u32, required: u32) {
    assert_eq!(
        (barrier.acknowledged, barrier.required),
        (acknowledged, required)
    );
    let text = barrier.to_string();
    assert!(
        text.starts_with(&format!(
            "Redis write reached {acknowledged} of the {required} replicas CRONQ_REDIS_MIN_REPLICAS requires within 1000 ms"
        )),
        "{text}"
    );
}

#[track_caller]
fn assert_store_unreplicated<T: std::fmt::Debug>(
    res: Result<T, StoreError>,
    acknowledged: u32,
    required: u32,
) {
    match res {
        Err(StoreError::Unreplicated(barrier)) => {
            assert_unreplicated(&barrier, acknowledged, required);
        }
        other => panic!("expected a write short of replicas, got {other:?}"),
    }
}

#[track_caller]
fn assert_lease_unreplicated<T: std::fmt::Debug>(
    res: Result<T, LeaseError>,
    op: &str,
    acknowledged: u32,
    required: u32,
) {
    match &res {
        Err(err @ LeaseError::Unreplicated { op: o, barrier }) => {
            assert_eq!(*o, op);
            assert_unreplicated(barrier, acknowledged, required);
            assert!(
                err.to_string().starts_with(&format!(
                    "leader lease {op} not confirmed: Redis write reached"
                )),
                "{err}"
            );
        }
        other => panic!("expected a lease {op} short of replicas, got {other:?}"),
    }
}

#[track_caller]
fn assert_control_unreplicated<T: std::fmt::Debug>(
    res: Result<T, ControlError>,
    op: &str,
    acknowledged: u32,
    required: u32,
) {
    match &res {
        Err(ControlError::Unreplicated { op: o, barrier }) => {
            assert_eq!(*o, op);
            assert_unreplicated(barrier, acknowledged, required);
        }
        other => panic!("expected a control {op} short of replicas, got {other:?}"),
    }
}

/// With more replicas required than there are, every guarded write fails with an error
/// that says how many acknowledged, how many were required, and names
/// `CRONQ_REDIS_MIN_REPLICAS`; reads still work.
#[tokio::test]
async fn ha_more_replicas_required_than_exist_fails_every_guarded_write() {
    scoped("ha_too_few", |env| async move {
        env.heal().await;
        let replicas = u32::try_from(env.ha.redis_ports.len() - 1).unwrap();
        let required = replicas + 1;
        let plain = cronq_redis::connect(&env.ha.sentinel_url).await.unwrap();
        let strict = plain.clone().with_min_replicas(required);
        let (ledger, history) = ports(&strict, &env);
        let (setup, _) = ports(&plain, &env);

        // The ledger: claim, heartbeat, end, settle, dead-letter replay.
        let c = claim("strict", 1, 1, Overlap::Skip, LONG);
        assert_store_unreplicated(ledger.claim(&c).await, replicas, required);
        let lease = claimed(&setup, &claim("strict", 2, 1, Overlap::Allow, LONG)).await;
        assert_store_unreplicated(ledger.heartbeat(&lease, LONG).await, replicas, required);
        assert_store_unreplicated(
            ledger.complete(&lease, &end(State::Succeeded)).await,
            replicas,
            required,
        );
        let missed = claim("strict", 3, 1, Overlap::Allow, LONG);
        let settle = Settle {
            key: missed.key.clone(),
            job: missed.job.clone(),
            attempt: 1,
            state: State::Missed,
            error: None,
            retention: LONG,
            run: None,
        };
        assert_store_unreplicated(ledger.settle(&settle).await, replicas, required);
        let failed = claim("strict", 4, 1, Overlap::Allow, LONG);
        let failed_lease = claimed(&setup, &failed).await;
        setup
            .complete(&failed_lease, &end(State::Failed))
            .await
            .unwrap();
        assert_store_unreplicated(ledger.admit_replay(&failed.key).await, replicas, required);

        // The leader lease: acquire, renew, release.
        let leader = RedisLease::new(strict.clone(), &env.names);
        let short = Duration::from_millis(500);
        assert_lease_unreplicated(
            leader.acquire("a", short).await,
            "acquire",
            replicas,
            required,
        );
        // That acquisition is on the master all the same (a barrier undoes nothing): wait
        // for it to lapse, then take the lease without the barrier.
        let term = eventually(
            Duration::from_secs(5),
            "the unconfirmed lease to lapse",
            || {
                let setup = RedisLease::new(plain.clone(), &env.names);
                async move { setup.acquire("b", LONG).await.unwrap() }
            },
        )
        .await;
        assert_lease_unreplicated(leader.renew(&term, LONG).await, "renew", replicas, required);

        // The control store: the fenced commit, pauses, requests.
        let control = Control::new(RedisControl::new(strict.clone(), &env.names));
        let job = JobName::new("strict").unwrap();
        let commit = Commit {
            cursors: vec![(job.clone(), Utc::now())],
            settle: vec![],
        };
        assert_control_unreplicated(
            control.commit(&term, &commit).await,
            "commit",
            replicas,
            required,
        );
        assert_control_unreplicated(control.pause(&job, None).await, "pause", replicas, required);
        assert_control_unreplicated(control.resume(&job).await, "resume", replicas, required);
        assert_control_unreplicated(
            control.request_trigger(&job, None).await,
            "submit request",
            replicas,
            required,
        );

        assert_lease_unreplicated(leader.release(&term).await, "release", replicas, required);

        // Reads wait for nothing.
        assert_eq!(
            ledger.record(&c.key).await.unwrap().map(|r| r.state),
            Some(State::Running),
            "the claim is on the master, unconfirmed"
        );
        assert_eq!(
            leader.holder().await.unwrap(),
            None,
            "the release is on the master, unconfirmed"
        );
        assert!(control.paused().await.unwrap().is_empty());
        assert!(control.cursors().await.unwrap().contains_key(&job));
        assert_eq!(control.pending().await.unwrap().len(), 1);
        history.list(None, 10).await.unwrap();
    })
    .await;
}

/// A write short of replicas ran on the master all the same, and its caller tries it again
/// (the consumer its claim and its end, the leader its renewal and its commit): each is
/// safe to run twice. Here the tries that fail ask for one replica more than there are,
/// and the tries again, as many as there are.
#[tokio::test]
async fn ha_a_write_short_of_replicas_is_safe_to_try_again() {
    scoped("ha_try_again", |env| async move {
        env.heal().await;
        let replicas = u32::try_from(env.ha.redis_ports.len() - 1).unwrap();
        let conn = cronq_redis::connect(&env.ha.sentinel_url).await.unwrap();
        let short = conn.clone().with_min_replicas(replicas + 1);
        let enough = conn.clone().with_min_replicas(replicas);
        let (failing, _) = ports(&short, &env);
        let (ledger, history) = ports(&enough, &env);

        // The same claim (one delivery, one token) is granted to its second try, not taken
        // for a duplicate that nobody would run until its lease lapsed.
        let c = claim("again", 1, 1, Overlap::Skip, LONG);
        assert_store_unreplicated(failing.claim(&c).await, replicas, replicas + 1);
        let lease = match ledger.claim(&c).await.unwrap() {
            ClaimOutcome::Claimed { lease, takeover } => {
                assert!(!takeover);
                lease
            }
            other => panic!("the claim tried again: {other:?}"),
        };
        assert_store_unreplicated(
            failing.heartbeat(&lease, LONG).await,
            replicas,
            replicas + 1,
        );
        assert_eq!(
            ledger.heartbeat(&lease, LONG).await.unwrap(),
            Heartbeat::Held
        );
        // The same end: recorded once, one run in the history, not a second one as lost.
        let done = cronq_shared::ledger::End {
            run: Some(run_of(&c)),
            ..end(State::Succeeded)
        };
        assert_store_unreplicated(
            failing.complete(&lease, &done).await,
            replicas,
            replicas + 1,
        );
        assert!(ledger.complete(&lease, &done).await.unwrap().recorded);
        let runs = history.list(None, 10).await.unwrap();
        assert_eq!(
            runs.iter().map(|r| r.outcome).collect::<Vec<_>>(),
            [Outcome::Succeeded]
        );
        // A settle tried again finds its own record: not recorded twice (the consumer acks).
        let missed = claim("again", 2, 1, Overlap::Allow, LONG);
        let settle = Settle {
            key: missed.key.clone(),
            job: missed.job.clone(),
            attempt: 1,
            state: State::Missed,
            error: None,
            retention: LONG,
            run: Some(Run {
                outcome: Outcome::Missed,
                ..run_of(&missed)
            }),
        };
        assert_store_unreplicated(failing.settle(&settle).await, replicas, replicas + 1);
        assert!(!ledger.settle(&settle).await.unwrap().recorded);
        assert_eq!(history.list(None, 10).await.unwrap().len(), 2);

        // The leader: a renewal and a fenced commit tried again.
        let leader = RedisLease::new(enough.clone(), &env.names);
        let term = leader
            .acquire("a", LONG)
            .await
            .unwrap()
            .expect("a free lease");
        let unconfirmed = RedisLease::new(short.clone(), &env.names);
        assert_lease_unreplicated(
            unconfirmed.renew(&term, LONG).await,
            "renew",
            replicas,
            replicas + 1,
        );
        assert!(leader.renew(&term, LONG).await.unwrap());
        let job = JobName::new("again").unwrap();
        let at = Utc::now();
        let commit = Commit {
            cursors: vec![(job.clone(), at)],
            settle: vec![],
        };
        let control = Control::new(RedisControl::new(enough.clone(), &env.names));
        let failing_control = Control::new(RedisControl::new(short.clone(), &env.names));
        assert_control_unreplicated(
            failing_control.commit(&term, &commit).await,
            "commit",
            replicas,
            replicas + 1,
        );
        control.commit(&term, &commit).await.unwrap();
        assert_eq!(
            control
                .cursors()
                .await
                .unwrap()
                .get(&job)
                .map(chrono::DateTime::timestamp_millis),
            Some(at.timestamp_millis())
        );
    })
    .await;
}

/// With `CRONQ_REDIS_MIN_REPLICAS=1` each guarded write is on a replica when it returns:
/// with one of the two replicas killed, every write is already on the other one; asking for
/// two then fails, one of two acknowledged.
#[tokio::test]
async fn ha_each_write_is_on_a_replica_when_it_returns() {
    scoped("ha_on_replica", |env| async move {
        env.heal().await;
        let replicas = env.ha.replica_ports();
        let (dead, alive) = (replicas[0], replicas[1]);
        env.ha.kill_redis(dead);
        // Until the master has seen its replica go, it lists it in sync, and a connection
        // that reads that list awaits both replicas until its next watch tick.
        let master = env.ha.node(env.ha.master_port()).await;
        until(
            FOLLOW_WITHIN,
            "the master to drop the killed replica",
            || {
                let mut master = master.clone();
                async move {
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query_async(&mut master)
                        .await
                        .map_err(|e| e.to_string())?;
                    if info.contains("connected_slaves:1\r\n") {
                        Ok(())
                    } else {
                        Err(info)
                    }
                }
            },
        )
        .await;
        let conn = cronq_redis::connect(&env.ha.sentinel_url)
            .await
            .unwrap()
            .with_min_replicas(1);
        let (ledger, _) = ports(&conn, &env);
        for i in 0..20 {
            let c = claim("replicated", i, 1, Overlap::Allow, LONG);
            let lease = claimed(&ledger, &c).await;
            let key = env.key(&["occ", &c.key.to_string()]);
            let record = hgetall_on(&env.ha, alive, &key).await;
            assert_eq!(
                record.get("state").map(String::as_str),
                Some("running"),
                "{i}"
            );
            assert!(
                ledger
                    .complete(&lease, &end(State::Succeeded))
                    .await
                    .unwrap()
                    .recorded
            );
            let record = hgetall_on(&env.ha, alive, &key).await;
            assert_eq!(
                record.get("state").map(String::as_str),
                Some("succeeded"),
                "{i}"
            );
        }
        let leader = RedisLease::new(conn.clone(), &env.names);
        let term = leader
            .acquire("a", LONG)
            .await
            .unwrap()
            .expect("a free lease");
        let mut node = env.ha.node(alive).await;
        let on_replica: Option<String> = redis::cmd("GET")
            .arg(env.key(&["leader"]))
            .query_async(&mut node)
            .await
            .unwrap();
        assert_eq!(on_replica, Some(term.value()));

        let (both, _) = ports(&conn.clone().with_min_replicas(2), &env);
        let c = claim("replicated", 99, 1, Overlap::Allow, LONG);
        assert_store_unreplicated(both.claim(&c).await, 1, 2);
    })
    .await;
}

/// The command line takes the Sentinel URL and `--redis-min-replicas`
/// (`CRONQ_REDIS_MIN_REPLICAS`) as the stores do.
#[tokio::test]
async fn ha_commands_take_the_sentinel_url_and_min_replicas() {
    scoped("ha_cli", |env| async move {
        let dir = std::env::temp_dir().join(&env.namespace);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("cronq.toml");
        std::fs::write(
            &config,
            "[[job]]\nname = \"nightly\"\nschedule = \"0 3 * * *\"\ncommand = [\"true\"]\n",
        )
        .unwrap();
        let replicas = env.ha.redis_ports.len() - 1;
        let cronq = |min_replicas: usize| {
            std::process::Command::new(env!("CARGO_BIN_EXE_cronq"))
                .env("CRONQ_NAMESPACE", &env.namespace)
                .env("CRONQ_REDIS_URL", &env.ha.sentinel_url)
                .env("CRONQ_REDIS_MIN_REPLICAS", min_replicas.to_string())
                .env_remove("CRONQ_CONFIG")
                .args(["pause", "nightly", "--config"])
                .arg(&config)
                .output()
                .unwrap()
        };
        let out = cronq(replicas + 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "control store pause not confirmed: Redis write reached {replicas} of the {} replicas CRONQ_REDIS_MIN_REPLICAS requires",
                replicas + 1
            )),
            "{err}"
        );
        let out = cronq(replicas);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut master = env.ha.node(env.ha.master_port()).await;
        let paused: bool = redis::cmd("HEXISTS")
            .arg(env.key(&["paused"]))
            .arg("nightly")
            .query_async(&mut master)
            .await
            .unwrap();
        assert!(paused);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}
