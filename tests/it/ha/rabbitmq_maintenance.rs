//! Planned RabbitMQ maintenance under a running fleet: `rabbitmq-upgrade drain` of the node
//! the leader publishes through (its client connections closed, its quorum queue leaders
//! moved away, then `revive`), and a quorum queue leader transfer of the job queue
//! (`rabbit_quorum_queue:transfer_leadership`, what a drain does per queue; RabbitMQ 3.10
//! has no CLI command for one queue). Every second of the window runs exactly once; each
//! prints how long the publish paused (the latest publish after the maintenance began,
//! from its scheduled second to its confirm, as the producers logged it).

use std::time::{Duration, Instant};

use chrono::Utc;

use super::{HaFleet, Redis, publish_pause};
use crate::support::ha::{self, PHASE};
use crate::support::until;

#[tokio::test(flavor = "multi_thread")]
async fn drained_node_of_the_leader_loses_and_doubles_nothing() {
    let ha = ha::ha();
    ha.heal();
    crate::support::scoped("ha-rmq-drain", |env| async move {
        let fleet = HaFleet::start(&env, &ha, Redis::Shared).await;
        let (node, _) = fleet.leader_node(&env, &ha);
        let began = Utc::now();
        let started = Instant::now();
        ha.run(&["upgrade", &node.to_string(), "drain"]);
        let drained_in = started.elapsed();
        // The drained node leads no queue and serves no client.
        let queues = ha.run(&["queues", &node.to_string()]);
        assert!(
            !queues.lines().any(|l| l.starts_with(&env.namespace)),
            "node {node} still leads: {queues}"
        );
        fleet.resumed(began).await;
        assert_ne!(
            fleet.leader_node(&env, &ha).0,
            node,
            "the leader publishes through another node"
        );
        ha.run(&["upgrade", &node.to_string(), "revive"]);
        let (pause, key) = publish_pause(&env, began);
        let report = fleet.settle().await;
        report.assert_once_each();
        eprintln!(
            "node {node} drained in {drained_in:?}: the latest publish after it was {pause} ms \
             after its second ({key}); {} seconds exactly once",
            report.expected.len()
        );
        ha.heal();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn job_queue_leader_transfer_loses_and_doubles_nothing() {
    let ha = ha::ha();
    ha.heal();
    crate::support::scoped("ha-rmq-transfer", |env| async move {
        let fleet = HaFleet::start(&env, &ha, Redis::Shared).await;
        let queue = format!("{}.q.default", env.namespace);
        let from = until(PHASE, "the job queue's leader", || async {
            ha.queue_leader(&queue)
                .ok_or_else(|| ha.ctl(1, &["list_queues", "name", "leader"]))
        })
        .await;
        let to = from % 3 + 1;
        let began = Utc::now();
        let started = Instant::now();
        let out = ha
            .transfer_leadership(&queue, from, to)
            .expect("rabbit_quorum_queue:transfer_leadership");
        assert!(out.contains("migrated"), "transfer_leadership: {out}");
        until(PHASE, "the job queue led by the new node", || async {
            match ha.queue_leader(&queue) {
                Some(n) if n == to => Ok(()),
                other => Err(format!("leader {other:?}")),
            }
        })
        .await;
        let moved_in = started.elapsed();
        fleet.resumed(began).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (pause, key) = publish_pause(&env, began);
        let report = fleet.settle().await;
        report.assert_once_each();
        eprintln!(
            "job queue leader moved from node {from} to {to} in {moved_in:?} ({}): the latest \
             publish after it was {pause} ms after its second ({key}); {} seconds exactly once",
            out.trim(),
            report.expected.len()
        );
        ha.heal();
    })
    .await;
}
