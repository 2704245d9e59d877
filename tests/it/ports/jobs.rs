//! The runtime job store (`JobStore`): revisions numbered per job across deletes,
//! compare-and-set writes (a stale one changes nothing), a version that moves on every
//! write, concurrent writers of which exactly one wins; on every backend.

use std::sync::Arc;

use cronq_shared::jobs::{Changes, Expect, JobStore, Written, current};
use cronq_shared::names::JobName;

use crate::support::backends::{Backend, on_every_backend};
use crate::support::{TestEnv, ports};

const A1: &str = "name = \"a\"\nschedule = \"@every 1s\"\nhandler = \"h\"\n";
const A2: &str = "name = \"a\"\nschedule = \"@every 2s\"\nhandler = \"h\"\n";

/// `x` and `y` are two processes' handles on one store.
async fn job_store_suite(x: Arc<dyn JobStore>, y: Arc<dyn JobStore>) {
    let a = JobName::new("a").unwrap();
    let b = JobName::new("b").unwrap();
    assert!(x.list().await.unwrap().is_empty());
    assert!(x.history(&a).await.unwrap().is_empty());
    let v0 = x.version().await.unwrap();

    // Create only: expect absent.
    assert_eq!(
        x.write(&a, Some(A1), "alice", Expect::Revision(0))
            .await
            .unwrap(),
        Written::Done(1)
    );
    assert_eq!(
        y.write(&a, Some(A2), "bob", Expect::Revision(0))
            .await
            .unwrap(),
        Written::Stale { current: 1 },
        "a second create is stale"
    );
    let v1 = y.version().await.unwrap();
    assert!(v1 > v0, "a write moves the version: {v0} -> {v1}");
    // Update against the current revision; a stale one changes nothing.
    assert_eq!(
        y.write(&a, Some(A2), "bob", Expect::Revision(1))
            .await
            .unwrap(),
        Written::Done(2)
    );
    assert_eq!(
        x.write(&a, Some(A1), "alice", Expect::Revision(1))
            .await
            .unwrap(),
        Written::Stale { current: 2 }
    );
    let now = current(&*x, &a).await.unwrap().unwrap();
    assert_eq!(
        (now.revision, now.spec.as_deref(), now.by.as_str()),
        (2, Some(A2), "bob")
    );
    assert!(y.version().await.unwrap() > v1);

    // Deleting: absent jobs are stale; the numbering goes on after a delete.
    assert_eq!(
        x.write(&b, None, "alice", Expect::Any).await.unwrap(),
        Written::Stale { current: 0 }
    );
    assert_eq!(
        x.write(&a, None, "alice", Expect::Revision(2))
            .await
            .unwrap(),
        Written::Done(3)
    );
    assert!(
        y.list().await.unwrap().is_empty(),
        "a deleted job is not listed"
    );
    assert!(current(&*y, &a).await.unwrap().is_none());
    assert_eq!(
        y.write(&a, Some(A1), "carol", Expect::Revision(0))
            .await
            .unwrap(),
        Written::Done(4),
        "re-created after a delete, numbering continues"
    );
    assert_eq!(
        x.write(
            &b,
            Some("name = \"b\"\nschedule = \"@hourly\"\nhandler = \"h\"\n"),
            "d",
            Expect::Any
        )
        .await
        .unwrap(),
        Written::Done(1)
    );
    let listed: Vec<(String, u64)> = x
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.name, r.revision))
        .collect();
    let mut listed = listed;
    listed.sort();
    assert_eq!(listed, [("a".to_owned(), 4), ("b".to_owned(), 1)]);
    let history: Vec<(u64, bool, String)> = y
        .history(&a)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.revision, r.spec.is_some(), r.by))
        .collect();
    assert_eq!(
        history,
        [
            (1, true, "alice".to_owned()),
            (2, true, "bob".to_owned()),
            (3, false, "alice".to_owned()),
            (4, true, "carol".to_owned()),
        ]
    );

    // Concurrent writers expecting the same revision: exactly one wins.
    let writes = (0..8).map(|i| {
        let s = if i % 2 == 0 { x.clone() } else { y.clone() };
        let a = a.clone();
        async move {
            s.write(&a, Some(A2), &format!("w{i}"), Expect::Revision(4))
                .await
                .unwrap()
        }
    });
    let results = futures_join_all(writes).await;
    let won = results.iter().filter(|r| **r == Written::Done(5)).count();
    let lost = results
        .iter()
        .filter(|r| **r == Written::Stale { current: 5 })
        .count();
    assert_eq!((won, lost), (1, 7), "{results:?}");

    // The change log: each job written after a version, once, at its current revision
    // (`None`: deleted), and the version that brings a reader to.
    let revisions = |c: &Changes| {
        let mut got: Vec<(String, Option<u64>)> = c
            .jobs
            .iter()
            .map(|(n, r)| (n.clone(), r.as_ref().map(|r| r.revision)))
            .collect();
        got.sort();
        got
    };
    let all = y
        .changes(v0)
        .await
        .unwrap()
        .expect("a log back to the start");
    assert_eq!(
        revisions(&all),
        [("a".to_owned(), Some(5)), ("b".to_owned(), Some(1))]
    );
    let v = x.version().await.unwrap();
    assert_eq!(all.version, v);
    let none = y.changes(v).await.unwrap().expect("a log back to now");
    assert_eq!((none.version, none.jobs.len()), (v, 0));
    let c = JobName::new("c").unwrap();
    let c1 = "name = \"c\"\nschedule = \"@daily\"\nhandler = \"h\"\n";
    x.write(&b, None, "alice", Expect::Any).await.unwrap();
    x.write(&c, Some(c1), "d", Expect::Revision(0))
        .await
        .unwrap();
    x.write(&c, Some(A1), "d", Expect::Revision(1))
        .await
        .unwrap();
    let since = y.changes(v).await.unwrap().expect("a log back to v");
    assert_eq!(
        revisions(&since),
        [("b".to_owned(), None), ("c".to_owned(), Some(2))]
    );
    assert_eq!(since.version, y.version().await.unwrap());
    let c_now = since.jobs.iter().find(|(n, _)| n == "c").unwrap();
    assert_eq!(c_now.1.as_ref().unwrap().spec.as_deref(), Some(A1));
    assert!(
        y.changes(since.version + 1_000).await.unwrap().is_none(),
        "a version the store never had: read the whole list"
    );
}

async fn futures_join_all<F: std::future::Future<Output = Written> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<Written> {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

on_every_backend!(job_store, "job_store");

async fn job_store(backend: Backend, env: TestEnv) {
    let (x, y) = ports::job_stores(backend, &env).await;
    job_store_suite(x, y).await;
}

/// The recorded config loads: none at first; a load of the newest text replaces it and
/// keeps its first load's time; another text goes first; at most `KEEP` stay; what one
/// handle records the other reads, text and all; the newest's digest reads alone, as the
/// newest record has it.
async fn config_records_suite(x: Arc<dyn JobStore>, y: Arc<dyn JobStore>) {
    use chrono::{DateTime, Utc};
    use cronq_shared::recorded::{ConfigRecord, KEEP};
    let at = |s: i64| DateTime::<Utc>::from_timestamp(1_800_000_000 + s, 0).unwrap();
    let record = |digest: &str, s: i64, by: &str| ConfigRecord {
        path: "/etc/cronq/cronq.toml".into(),
        digest: digest.into(),
        since: at(s),
        at: at(s),
        by: by.into(),
        jobs: 2,
        text: format!(
            "[[job]]\nname = \"{digest}\"\nschedule = \"@every 1s\"\n# \"quoted\" / slash\n"
        ),
    };
    assert!(x.config_records(10).await.unwrap().is_empty());
    assert_eq!(x.config_digest().await.unwrap(), None);
    x.record_config(&record("one", 1, "p1")).await.unwrap();
    assert_eq!(y.config_digest().await.unwrap().as_deref(), Some("one"));
    y.record_config(&record("one", 5, "p2")).await.unwrap();
    assert_eq!(x.config_digest().await.unwrap().as_deref(), Some("one"));
    let list = x.config_records(10).await.unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(
        (list[0].since, list[0].at, list[0].by.as_str()),
        (at(1), at(5), "p2"),
        "a load of the same text keeps its first load's time"
    );
    assert_eq!(list[0].text, record("one", 1, "p1").text);
    y.record_config(&record("two", 9, "p2")).await.unwrap();
    let digests = |l: Vec<ConfigRecord>| l.into_iter().map(|r| r.digest).collect::<Vec<_>>();
    assert_eq!(digests(x.config_records(10).await.unwrap()), ["two", "one"]);
    assert_eq!(digests(x.config_records(1).await.unwrap()), ["two"]);
    assert_eq!(x.config_digest().await.unwrap().as_deref(), Some("two"));
    for i in 0..KEEP + 3 {
        x.record_config(&record(&format!("d{i}"), 10 + i as i64, "p1"))
            .await
            .unwrap();
    }
    let list = y.config_records(100).await.unwrap();
    assert_eq!(list.len(), KEEP);
    assert_eq!(list[0].digest, format!("d{}", KEEP + 2));
    assert_eq!(
        x.config_digest().await.unwrap(),
        Some(format!("d{}", KEEP + 2))
    );
}

on_every_backend!(config_records, "config_records");

async fn config_records(backend: Backend, env: TestEnv) {
    let (x, y) = ports::job_stores(backend, &env).await;
    config_records_suite(x, y).await;
}
