//! One benchmark run's isolated world: a fresh namespace `bench-<random hex>` on the real
//! RabbitMQ and Redis, and its clean-up.
//!
//! Owns: the namespace, the service URLs and deleting everything the run created (queues,
//! exchanges, `ns:*` Redis keys), whether the run succeeded or not.

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use cronq_rabbitmq::topology;
use cronq_shared::endpoints::{
    DEFAULT_AMQP_URL, DEFAULT_QUORUM_SIZE, DEFAULT_REDIS_URL, Endpoints, Tls,
};
use cronq_shared::names::{Names, Namespace, QueueName};
use cronq_shared::signing::Keyring;
use lapin::{Connection, ConnectionProperties};

/// One run's namespace on the live services.
#[derive(Debug)]
pub struct BenchEnv {
    /// Where the services are, with the run's namespace.
    pub endpoints: Endpoints,
    /// Logical queues to delete at the end.
    queues: Mutex<Vec<QueueName>>,
    /// Raw broker queues (baselines) to delete at the end.
    raw_queues: Mutex<Vec<String>>,
}

impl BenchEnv {
    /// A fresh namespace `bench-<8 hex>` on the services of `CRONQ_AMQP_URL` and
    /// `CRONQ_REDIS_URL` (local defaults).
    pub fn new() -> anyhow::Result<Self> {
        let namespace = Namespace::new(format!("bench-{:08x}", rand::random::<u32>()))
            .context("while naming the bench namespace")?;
        Ok(Self {
            endpoints: Endpoints {
                amqp_url: std::env::var("CRONQ_AMQP_URL")
                    .unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned()),
                amqp_quorum_size: DEFAULT_QUORUM_SIZE,
                redis_url: std::env::var("CRONQ_REDIS_URL")
                    .unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned()),
                redis_min_replicas: match std::env::var("CRONQ_REDIS_MIN_REPLICAS") {
                    Ok(n) => n.parse().context("CRONQ_REDIS_MIN_REPLICAS")?,
                    Err(_) => 0,
                },
                namespace,
                keyring: Keyring::from_variable()?.map(Arc::new),
                tls: Tls::default(),
            },
            queues: Mutex::default(),
            raw_queues: Mutex::default(),
        })
    }

    /// The namespace's names.
    pub fn names(&self) -> Names {
        self.endpoints.names()
    }

    /// The namespace as text (for `CRONQ_NAMESPACE` of child processes).
    pub fn namespace(&self) -> &str {
        self.endpoints.namespace.as_str()
    }

    /// Remembers a logical queue to delete at the end (once, however often it is named).
    pub fn track_queue(&self, queue: &QueueName) {
        let mut queues = self
            .queues
            .lock()
            .expect("bench queue list lock is never poisoned");
        if !queues.contains(queue) {
            queues.push(queue.clone());
        }
    }

    /// A raw (baseline) broker queue name in this namespace, deleted at the end.
    pub fn raw_queue(&self, what: &str) -> String {
        let name = format!("{}.bench.{what}", self.namespace());
        self.raw_queues
            .lock()
            .expect("bench queue list lock is never poisoned")
            .push(name.clone());
        name
    }

    /// Opens a plain lapin connection (baselines, observers): to the first node when
    /// CRONQ_AMQP_URL lists a cluster's nodes.
    pub async fn amqp(&self) -> anyhow::Result<Connection> {
        let first = self
            .endpoints
            .amqp_url
            .split(',')
            .next()
            .unwrap_or_default();
        Connection::connect(first.trim(), ConnectionProperties::default())
            .await
            .context("while connecting to RabbitMQ (is it running on CRONQ_AMQP_URL?)")
    }

    /// Deletes every queue, exchange and Redis key of the namespace. Best effort: a
    /// failure is printed, never fatal, so a run's result is not lost to its clean-up.
    pub async fn cleanup(&self) {
        if let Err(err) = self.cleanup_inner().await {
            eprintln!(
                "cronq-bench: clean-up of namespace {} incomplete: {err:#}",
                self.namespace()
            );
        }
    }

    /// Deletes the namespace's Redis keys only (for a bench that declared nothing on the
    /// broker); a failure is printed, as in [`BenchEnv::cleanup`].
    pub async fn cleanup_redis(&self) {
        if let Err(err) = self.cleanup_keys().await {
            eprintln!(
                "cronq-bench: clean-up of namespace {} incomplete: {err:#}",
                self.namespace()
            );
        }
    }

    async fn cleanup_inner(&self) -> anyhow::Result<()> {
        self.cleanup_keys().await?;
        let names = self.names();
        let amqp = self.amqp().await?;
        let ch = amqp.create_channel().await?;
        let queues = self
            .queues
            .lock()
            .expect("bench queue list lock is never poisoned")
            .clone();
        let raw = self
            .raw_queues
            .lock()
            .expect("bench queue list lock is never poisoned")
            .clone();
        topology::delete_namespace(&ch, &names, &queues, raw).await;
        let _ = amqp.close(200, "bench done".into()).await;
        Ok(())
    }

    async fn cleanup_keys(&self) -> anyhow::Result<()> {
        let names = self.names();
        let mut conn = cronq_redis::connect(&self.endpoints.redis_url).await?;
        let pattern = names.redis_pattern();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(5000)
                .query_async(&mut conn)
                .await
                .context("while scanning the namespace's Redis keys")?;
            if !keys.is_empty() {
                let _: () = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await
                    .context("while deleting the namespace's Redis keys")?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(())
    }
}
