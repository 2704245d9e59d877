//! The leader lease (`Lease`) and the control store it fences (`Control`): one holder,
//! growing epochs, expiry; cursors, pause flags and requests written by the current term
//! only; on every backend.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use cronq_shared::control::{Commit, Control, ControlError, RequestKind};
use cronq_shared::lease::{Lease, Term};
use cronq_shared::names::JobName;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::ports;
use crate::support::{TestEnv, eventually};

const TTL: Duration = Duration::from_secs(30);

fn job(name: &str) -> JobName {
    JobName::new(name).unwrap()
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// `a` and `b` are two producers' handles on one lease.
async fn lease_suite<L: Lease>(a: L, b: L) {
    assert_eq!(a.holder().await.unwrap(), None);
    let first = a
        .acquire("a", TTL)
        .await
        .unwrap()
        .expect("a free lease is acquired");
    assert!(first.epoch >= 1);
    assert_eq!(
        b.acquire("b", TTL).await.unwrap(),
        None,
        "a held lease is not acquired"
    );
    let holder = b.holder().await.unwrap().expect("someone holds it");
    assert_eq!((holder.epoch, holder.instance.as_str()), (first.epoch, "a"));
    assert!(holder.remaining <= TTL && holder.remaining > Duration::from_secs(20));

    assert!(a.renew(&first, TTL).await.unwrap());
    let forged = Term::new(first.epoch, "a");
    assert!(
        !b.renew(&forged, TTL).await.unwrap(),
        "another token cannot renew"
    );
    assert!(
        !b.release(&forged).await.unwrap(),
        "another token cannot release"
    );
    assert!(a.holder().await.unwrap().is_some());

    assert!(a.release(&first).await.unwrap());
    assert_eq!(b.holder().await.unwrap(), None, "released at once");
    assert!(
        !a.renew(&first, TTL).await.unwrap(),
        "a released term cannot renew"
    );

    let second = b.acquire("b", TTL).await.unwrap().expect("free again");
    assert!(second.epoch > first.epoch, "epochs only grow");
    assert!(!a.renew(&first, TTL).await.unwrap());
    assert!(
        !a.release(&first).await.unwrap(),
        "a stale term cannot release the new one"
    );
    assert!(b.release(&second).await.unwrap());

    // Expiry: a short lease disappears by itself, and the next holder gets a new epoch.
    let short = b
        .acquire("b", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    eventually(
        Duration::from_secs(5),
        "the short lease to expire",
        || async { a.holder().await.unwrap().is_none().then_some(()) },
    )
    .await;
    assert!(
        !b.renew(&short, TTL).await.unwrap(),
        "an expired term cannot renew"
    );
    let third = a.acquire("a", TTL).await.unwrap().unwrap();
    assert!(third.epoch > short.epoch);
    assert!(a.release(&third).await.unwrap());
}

on_every_backend!(lease, "lease");

/// The terms record: begun at take-over, alive at each renewal (in the renewal's own
/// write), not at the release; read by two handles alike, kept per retention.
async fn terms_suite<L: Lease>(a: L, b: L) {
    assert!(b.terms().await.unwrap().is_empty(), "nothing recorded yet");
    let first = a.acquire("a", TTL).await.unwrap().unwrap();
    assert!(a.renew(&first, TTL).await.unwrap());
    assert!(
        b.terms().await.unwrap().is_empty(),
        "a renewal records nothing before the term begins"
    );
    let start = Utc::now() - TimeDelta::milliseconds(5);
    let start = DateTime::<Utc>::from_timestamp_millis(start.timestamp_millis()).unwrap();
    let keep = Duration::from_secs(3600);
    a.begin(&first, start, keep).await.unwrap();
    let terms = b.terms().await.unwrap();
    assert_eq!(terms.len(), 1);
    let t = &terms[0];
    assert_eq!((t.epoch, t.instance.as_str()), (first.epoch, "a"));
    assert_eq!((t.start, t.alive), (start, start));

    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(a.renew(&first, TTL).await.unwrap());
    let renewed = b.terms().await.unwrap()[0].alive;
    assert!(
        renewed > start,
        "a renewal moves alive: {renewed} after {start}"
    );
    assert!(renewed <= Utc::now());
    let forged = Term::new(first.epoch, "a");
    assert!(!b.renew(&forged, TTL).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!b.renew(&forged, TTL).await.unwrap());
    assert_eq!(
        b.terms().await.unwrap()[0].alive,
        renewed,
        "a failed renewal does not"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(a.release(&first).await.unwrap());
    assert_eq!(
        b.terms().await.unwrap()[0].alive,
        renewed,
        "a release keeps the last renewal"
    );
    assert!(!a.renew(&first, TTL).await.unwrap());
    assert_eq!(b.terms().await.unwrap()[0].alive, renewed);

    // The next term, much later: the first, last alive more than `keep` before its start,
    // is dropped.
    let second = b.acquire("b", TTL).await.unwrap().unwrap();
    let later = start + TimeDelta::hours(2);
    b.begin(&second, later, keep).await.unwrap();
    let terms = a.terms().await.unwrap();
    assert_eq!(terms.len(), 1, "{terms:?}");
    assert_eq!(
        (terms[0].epoch, terms[0].instance.as_str(), terms[0].start),
        (second.epoch, "b", later)
    );
    // Within `keep`, both are kept, oldest first.
    b.release(&second).await.unwrap();
    let third = a.acquire("a", TTL).await.unwrap().unwrap();
    a.begin(&third, later + TimeDelta::minutes(1), keep)
        .await
        .unwrap();
    let epochs: Vec<u64> = b.terms().await.unwrap().iter().map(|t| t.epoch).collect();
    assert_eq!(epochs, [second.epoch, third.epoch]);
    assert!(a.release(&third).await.unwrap());
}

on_every_backend!(terms, "lease");

async fn terms(backend: Backend, env: TestEnv) {
    let (a, b) = ports::leases(backend, &env).await;
    terms_suite(a, b).await;
}

async fn lease(backend: Backend, env: TestEnv) {
    let (a, b) = ports::leases(backend, &env).await;
    lease_suite(a, b).await;
}

/// `control` is fenced by `lease`.
async fn control_suite<L: Lease>(lease: L, control: Control) {
    let j = job("j");
    assert!(control.cursors().await.unwrap().is_empty());
    let nobody = Term::new(1, "nobody");
    let write = Commit {
        cursors: vec![(j.clone(), at("2026-11-30T10:00:01Z"))],
        settle: vec![],
    };
    assert!(matches!(
        control.commit(&nobody, &write).await,
        Err(ControlError::NotLeader { .. })
    ));
    assert!(
        control.cursors().await.unwrap().is_empty(),
        "nothing written unfenced"
    );

    let term = lease.acquire("a", TTL).await.unwrap().unwrap();
    control.commit(&term, &write).await.unwrap();
    assert_eq!(
        control.cursors().await.unwrap().get(&j),
        Some(&at("2026-11-30T10:00:01Z"))
    );
    let back = Commit {
        cursors: vec![(j.clone(), at("2026-11-30T10:00:00Z"))],
        settle: vec![],
    };
    control.commit(&term, &back).await.unwrap();
    assert_eq!(
        control.cursors().await.unwrap()[&j],
        at("2026-11-30T10:00:01Z"),
        "a cursor never moves backwards"
    );
    let millis = at("2026-11-30T10:00:02.250Z");
    let forward = Commit {
        cursors: vec![(j.clone(), millis), (job("k"), at("2026-11-30T09:00:00Z"))],
        settle: vec![],
    };
    control.commit(&term, &forward).await.unwrap();
    let cursors = control.cursors().await.unwrap();
    assert_eq!((cursors[&j], cursors.len()), (millis, 2));

    // Pause flags.
    let done = control
        .pause(&j, Some("db migration".into()))
        .await
        .unwrap();
    assert_eq!(done.before, None);
    let paused = done.pause;
    assert!(control.paused().await.unwrap()[&j] == paused);
    assert_eq!(paused.note.as_deref(), Some("db migration"));
    assert!((Utc::now() - paused.since) < TimeDelta::seconds(60));
    // Paused again: the pause and its start are kept; a note given replaces the note.
    let again = control.pause(&j, None).await.unwrap();
    assert_eq!(
        (&again.pause, again.before.as_ref()),
        (&paused, Some(&paused))
    );
    let renoted = control.pause(&j, Some("day 2".into())).await.unwrap();
    assert_eq!(
        (renoted.pause.since, renoted.pause.note.as_deref()),
        (paused.since, Some("day 2"))
    );
    assert_eq!(control.paused().await.unwrap()[&j], renoted.pause);
    assert!(control.resume(&j).await.unwrap());
    assert!(
        !control.resume(&j).await.unwrap(),
        "resuming twice is a no-op"
    );
    assert!(control.paused().await.unwrap().is_empty());

    // Requests: several triggers in one second are all kept, each under its own key.
    let k1 = control.request_trigger(&j, None).await.unwrap();
    let k2 = control
        .request_trigger(&j, Some(serde_json::json!({"x": 1})))
        .await
        .unwrap();
    let k3 = control.request_trigger(&j, None).await.unwrap();
    assert!(k1 != k2 && k2 != k3 && k1 != k3);
    assert!(k1.to_string().starts_with("j@manual-"));
    let (from, to) = (at("2026-11-30T08:00:00Z"), at("2026-11-30T09:00:00Z"));
    assert!(matches!(
        control.request_backfill(&j, to, from).await,
        Err(ControlError::EmptyRange { .. })
    ));
    let backfill = control.request_backfill(&j, from, to).await.unwrap();
    let pending = control.pending().await.unwrap();
    assert_eq!(pending.len(), 4);
    let keys: Vec<String> = pending
        .iter()
        .filter_map(|r| match &r.kind {
            RequestKind::Trigger { key, .. } => Some(key.to_string()),
            RequestKind::Backfill { .. } => None,
        })
        .collect();
    for k in [&k1, &k2, &k3] {
        assert!(keys.contains(&k.to_string()), "{k} pending");
    }

    // Settling: only by the current term; progress replaces, done removes.
    let mut progress = pending.iter().find(|r| r.id == backfill).unwrap().clone();
    progress.kind = RequestKind::Backfill {
        from,
        to,
        done_through: Some(at("2026-11-30T08:30:00Z")),
    };
    let trigger_id = pending
        .iter()
        .find(|r| matches!(&r.kind, RequestKind::Trigger { key, .. } if *key == k1))
        .unwrap()
        .id
        .clone();
    let settle = Commit {
        cursors: vec![],
        settle: vec![
            (trigger_id.clone(), None),
            (backfill.clone(), Some(progress.clone())),
        ],
    };
    lease.release(&term).await.unwrap();
    let next = lease.acquire("b", TTL).await.unwrap().unwrap();
    assert!(matches!(
        control.commit(&term, &settle).await,
        Err(ControlError::NotLeader { .. })
    ));
    assert_eq!(
        control.pending().await.unwrap().len(),
        4,
        "a stale leader settles nothing"
    );
    let stale_cursor = Commit {
        cursors: vec![(j.clone(), at("2027-01-01T00:00:00Z"))],
        settle: vec![],
    };
    assert!(control.commit(&term, &stale_cursor).await.is_err());
    assert_eq!(
        control.cursors().await.unwrap()[&j],
        millis,
        "nor moves a cursor"
    );

    control.commit(&next, &settle).await.unwrap();
    let pending = control.pending().await.unwrap();
    assert_eq!(pending.len(), 3);
    assert!(pending.iter().all(|r| r.id != trigger_id));
    assert_eq!(
        pending.iter().find(|r| r.id == backfill).unwrap(),
        &progress
    );
    // A settled request is never re-created by a late progress update.
    let late = Commit {
        cursors: vec![],
        settle: vec![(trigger_id.clone(), Some(progress.clone()))],
    };
    control.commit(&next, &late).await.unwrap();
    assert_eq!(control.pending().await.unwrap().len(), 3);
    lease.release(&next).await.unwrap();
}

on_every_backend!(control, "control");

async fn control(backend: Backend, env: TestEnv) {
    let (lease, control) = ports::lease_and_control(backend, &env).await;
    control_suite(lease, control).await;
}
