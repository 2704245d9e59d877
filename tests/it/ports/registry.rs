//! The fleet registry (`Registry`): records that lapse, per-job digests stored once per
//! config, per-minute counters; on every backend.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use cronq_shared::names::JobName;
use cronq_shared::registry::digest::JobDigest;
use cronq_shared::registry::{Beat, Counter, Registry, Role, Serves};

use crate::support::backends::{Backend, on_every_backend};
use crate::support::{TestEnv, eventually, ports};

fn beat(instance: &str, role: Role, digest: &str) -> Beat {
    let now = Utc::now();
    Beat {
        instance: instance.to_owned(),
        role,
        host: "h".to_owned(),
        pid: 1,
        version: "0".to_owned(),
        started_at: now,
        last_seen: now,
        digest: digest.to_owned(),
        jobs: 2,
        leading_since: None,
        serves: (role == Role::Consumer).then(|| Serves {
            queues: Some(vec!["default".to_owned()]),
            handlers: vec!["report".to_owned()],
            jobs: Vec::new(),
        }),
        running: Vec::new(),
    }
}

/// `a` and `b` are two processes' handles on one registry.
async fn registry_suite(a: Arc<dyn Registry>, b: Arc<dyn Registry>) {
    assert!(b.instances().await.unwrap().is_empty());
    a.report(&beat("p-1", Role::Producer, "d1"), Duration::from_secs(30))
        .await
        .unwrap();
    b.report(
        &beat("c-1", Role::Consumer, "d2"),
        Duration::from_millis(600),
    )
    .await
    .unwrap();
    let seen: Vec<String> = a
        .instances()
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.instance)
        .collect();
    assert_eq!(seen, ["c-1", "p-1"], "both alive, in instance order");
    let served: Vec<Option<Serves>> = a
        .instances()
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.serves)
        .collect();
    assert_eq!(
        served,
        [beat("c-1", Role::Consumer, "").serves, None],
        "what a consumer serves comes back as reported"
    );
    eventually(Duration::from_secs(5), "the short record to lapse", || {
        let a = a.clone();
        async move {
            let ids: Vec<String> = a
                .instances()
                .await
                .unwrap()
                .into_iter()
                .map(|b| b.instance)
                .collect();
            (ids == ["p-1"]).then_some(())
        }
    })
    .await;
    b.leave("p-1").await.unwrap();
    assert!(a.instances().await.unwrap().is_empty(), "left at once");

    let digest = |hex: &str| JobDigest::parse(hex).unwrap();
    let jobs = vec![
        (JobName::new("y").unwrap(), digest(&"2".repeat(32))),
        (JobName::new("x").unwrap(), digest(&"1".repeat(32))),
    ];
    assert_eq!(b.digests("d1").await.unwrap(), None);
    a.put_digests("d1", &jobs, Duration::from_secs(60))
        .await
        .unwrap();
    // Stored once: a second writer of the same digest changes nothing.
    b.put_digests("d1", &jobs[..1], Duration::from_secs(60))
        .await
        .unwrap();
    let read = b.digests("d1").await.unwrap().expect("stored");
    // Sorted by name, whatever order they were written in.
    assert_eq!(&read[..], &[jobs[1].clone(), jobs[0].clone()]);

    a.count(Counter::Published, 100, 3).await.unwrap();
    b.count(Counter::Published, 100, 2).await.unwrap();
    b.count(Counter::Published, 101, 1).await.unwrap();
    a.count(Counter::Executed, 101, 4).await.unwrap();
    assert_eq!(b.counted(Counter::Published, 100..=101).await.unwrap(), 6);
    assert_eq!(b.counted(Counter::Published, 101..=160).await.unwrap(), 1);
    assert_eq!(a.counted(Counter::Executed, 40..=101).await.unwrap(), 4);
    assert_eq!(a.counted(Counter::Executed, 102..=161).await.unwrap(), 0);
}

on_every_backend!(registry, "registry");

async fn registry(backend: Backend, env: TestEnv) {
    let (a, b) = ports::registries(backend, &env).await;
    registry_suite(a, b).await;
}
