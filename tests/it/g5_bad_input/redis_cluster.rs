//! A Redis Cluster node is refused at start: `cronq consumer` and `cronq producer` pointed at
//! a real one-node cluster-enabled `redis-server` (started and stopped by the test on a free
//! loopback port) exit 2 and say to use a single master with Sentinel instead.

use std::process::{Child, Command, Stdio};

use crate::standalone::free_port;
use crate::support::scoped;

/// A `redis-server --cluster-enabled yes` on a loopback port, killed on drop.
struct ClusterNode {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl ClusterNode {
    fn start(dir: &std::path::Path) -> Self {
        let port = free_port();
        let dir = dir.join(format!("cluster-{port}"));
        std::fs::create_dir_all(&dir).expect("cluster node dir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--cluster-enabled",
                "yes",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--cluster-config-file", "nodes.conf"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (apt-get install redis-server)");
        let node = Self { child, port, dir };
        let started = std::time::Instant::now();
        loop {
            let out = Command::new("redis-cli")
                .args(["-p", &port.to_string(), "INFO", "cluster"])
                .output()
                .expect("redis-cli runs");
            if String::from_utf8_lossy(&out.stdout).contains("cluster_enabled:1") {
                return node;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "the cluster-enabled redis-server on port {port} did not answer"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn a_redis_cluster_node_is_refused_at_start() {
    scoped("redis-cluster", |env| async move {
        let node = ClusterNode::start(&env.dir);
        let config = env.write_config(
            "cronq.toml",
            "[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\n",
        );
        let config = config.to_str().expect("utf-8 path");
        let url = format!("redis://127.0.0.1:{}", node.port);
        for (command, context) in [
            (
                "consumer",
                "while starting the consumer: cannot connect to the idempotency store",
            ),
            ("producer", "while connecting to Redis"),
        ] {
            let out = env
                .cronq()
                .env("CRONQ_REDIS_URL", &url)
                .args([command, "--config", config])
                .output()
                .expect("run cronq");
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().last().unwrap_or_default();
            let said = format!(
                ": Redis at redis://127.0.0.1:{} is a Redis Cluster node (cluster_enabled:1), \
                 which cronq does not support; point CRONQ_REDIS_URL at a single master \
                 instead, with replicas and Redis Sentinel for failover (redis+sentinel://, \
                 see docs/ha.md)",
                node.port
            );
            assert!(
                last.strip_prefix("cronq: ")
                    .and_then(|rest| rest.strip_prefix(context))
                    == Some(said.as_str()),
                "cronq {command}: {err}"
            );
            assert_eq!(out.status.code(), Some(2), "cronq {command}: {err}");
        }
    })
    .await;
}
