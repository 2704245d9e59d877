//! The memory a leading `cronq producer` of one job holds of its own, pinned: the anonymous
//! memory of the process (its heap, its threads' stacks, lapin's buffers), read from
//! /proc once it has published for two seconds. Unlike the time figures of
//! `docs/benchmarks.md`, this does not move with the machine's load, so a regression fails
//! here rather than go unnoticed in a bench. The heap per job is pinned apart
//! (`producer/tests/memory.rs`).
//!
//! What it caught: each AMQP connection of lapin keeps two buffers of 32 frames, 8 MiB at
//! the broker's 128 KiB frames; the producer opens two (one for herds), and asks for 32 KiB
//! frames since it only publishes (`AmqpBroker::connect_publisher`).

use crate::support::procfs::kb_field;
use crate::support::producer_process::{
    LEADER, advance, producer, stop, stop_and_drain, tick_config, wait_leader,
};
use crate::support::scoped;

/// The anonymous memory a leading producer of one job may hold. Measured at 4.5 MiB
/// (release) and 6.8 MiB (the debug build the tests run) with 32 KiB frames; 22.2 MiB with
/// the broker's 128 KiB frames (6 MiB more for each of its two connections).
const PRODUCER_BUDGET: u64 = 10 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread")]
async fn a_leading_producer_of_one_job_holds_its_memory_budget() {
    scoped("footprint", |env| async move {
        let config = tick_config(&env, "none");
        // Two runtime workers whatever the machine: each worker's stack and allocator
        // arena count in the total, and the budget was measured with two.
        let mut cmd = env.cronq();
        cmd.args(["producer", "--config", &config])
            .env("TOKIO_WORKER_THREADS", "2");
        let pid = env.spawn_command("producer", cmd);
        wait_leader(&env, 0).await;
        // Publishing: both of its connections are open (the take-over opens the herds').
        advance(&env, "tick", 2).await;
        let held = kb_field(pid, "smaps_rollup", "Anonymous:");
        stop(&env, &[pid]);
        assert!(
            held <= PRODUCER_BUDGET,
            "a leading producer of one job holds {:.1} MiB of anonymous memory, over its \
             budget of {:.1} MiB",
            held as f64 / 1048576.0,
            PRODUCER_BUDGET as f64 / 1048576.0
        );
        eprintln!(
            "a leading producer of one job: {:.1} MiB anonymous",
            held as f64 / 1048576.0
        );
    })
    .await;
}

/// The producer's smaller frames carry a message larger than a frame whole (G2): a
/// payload of 96 KiB travels as several body frames and is published, and decoded, intact.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_larger_than_the_producers_frames_is_published_whole() {
    scoped("footprint-big", |env| async move {
        env.track_queue("default");
        let blob = "x".repeat(96 * 1024);
        let toml = format!(
            "{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncatchup = \"none\"\npayload = {{ blob = \"{blob}\" }}\n"
        );
        let config = env.write_config("cronq.toml", &toml);
        let config = config.to_string_lossy().into_owned();
        let pid = producer(&env, "producer", &config);
        wait_leader(&env, 0).await;
        advance(&env, "tick", 2).await;
        let msgs = stop_and_drain(&env, &[pid]).await;
        assert!(msgs.len() >= 2, "{} messages", msgs.len());
        for m in &msgs {
            assert_eq!(m.payload["blob"].as_str(), Some(blob.as_str()), "{}", m.key);
        }
    })
    .await;
}
