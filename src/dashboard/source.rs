//! Where the dashboard reads and changes the state: the stores and the queue of a fleet
//! (Redis and RabbitMQ) or of a standalone's data file, opened the way the operations
//! commands open them (`crate::ops::lookup`).
//!
//! Invariant: nothing here holds a secret it shows: the config is shown through
//! `super::pages` and `super::api`, which print a handler's URL and header values by origin
//! only (`cronq_shared::config::Secret`).

use std::sync::Arc;

use cronq_backends::{Deployment, Stores};
use cronq_shared::broker::{Broker, Depth};
use cronq_shared::config::Config;
use cronq_shared::names::QueueName;
use cronq_shared::signing::Keyring;
use tokio::sync::watch;

use crate::settings::Target;

/// Everything the dashboard works on.
#[derive(Clone)]
pub struct Source {
    /// The config file's config the jobs come from, as it is now ([`Source::config`]).
    config: watch::Receiver<Arc<Config>>,
    /// The stores: control (pauses, requests), run log, lease, ledger.
    pub stores: Stores,
    /// The queue port, for the dead letters and the queues' depths.
    pub broker: Arc<dyn Broker>,
    /// The signing keys (a replay re-seals what it republishes).
    pub keyring: Option<Arc<Keyring>>,
    /// Whether the run log finds one job's runs by an index (a data file) rather than by
    /// reading the whole history (Redis).
    pub runs_indexed: bool,
    /// What the stores are, for messages: `Redis`, `the data file`.
    pub store_name: &'static str,
    /// What the queue is, for messages: `RabbitMQ`, `the data file`.
    pub queue_name: &'static str,
    /// Where the state is, for the page footer: `namespace "cronq"`, `data file /x.db`.
    pub place: String,
}

/// One queue's row on the fleet page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueDepth {
    /// The logical queue (`default`), or `dead letters`.
    pub queue: String,
    /// Ready messages, when known.
    pub messages: Option<u64>,
    /// Subscribed consumers, when known (RabbitMQ only).
    pub consumers: Option<u64>,
}

impl Source {
    /// The dashboard's source: `deployment`, the ports of `target`, showing the config
    /// file's config as `config` has it at each request: a standalone's reloads (`cronq
    /// standalone --dashboard-addr`), the recorded config of the target (`cronq dashboard`).
    pub fn of(
        config: watch::Receiver<Arc<Config>>,
        deployment: Deployment,
        target: &Target,
    ) -> Self {
        let Deployment { broker, stores } = deployment;
        let (keyring, runs_indexed, store_name, place) = match target {
            Target::Fleet(endpoints) => (
                endpoints.keyring.clone(),
                false,
                "Redis",
                format!(
                    "namespace {:?} on RabbitMQ and Redis",
                    endpoints.namespace.as_str()
                ),
            ),
            Target::Data { path, keyring, .. } => (
                keyring.clone(),
                true,
                "the data file",
                format!("data file {}", path.display()),
            ),
            Target::Memory { keyring } => (
                keyring.clone(),
                false,
                "the standalone's memory",
                "a standalone in memory".to_owned(),
            ),
        };
        Self {
            config,
            stores,
            broker,
            keyring,
            runs_indexed,
            store_name,
            queue_name: match target {
                Target::Fleet(_) => "RabbitMQ",
                Target::Data { .. } | Target::Memory { .. } => store_name,
            },
            place,
        }
    }

    /// The config file's config as it is now, without the runtime jobs (the dashboard's
    /// views merge them: `super::view`). A snapshot: another reload or record does not
    /// change it.
    pub fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
    }

    /// A receiver of the config file's config, for a part that follows it.
    pub fn config_feed(&self) -> watch::Receiver<Arc<Config>> {
        self.config.clone()
    }

    /// The depth of each logical queue of the config, then of the dead-letter queue.
    ///
    /// # Errors
    /// A message naming the queue's service when it cannot be read.
    pub async fn depths(&self) -> Result<(Vec<QueueDepth>, Option<u64>), String> {
        let logical: Vec<QueueName> = self.config().queues().into_iter().collect();
        // Bounded like every other read: a broker that hangs would otherwise hold the whole
        // refresh (the store's reads too) until its connection gives up.
        let depths = super::read::within(self.broker.depths(&logical)).await?;
        let mut rows: Vec<QueueDepth> = logical
            .iter()
            .zip(&depths.queues)
            .map(|(q, d)| row(q.as_str(), *d))
            .collect();
        // A broker that does not count its dead letters apart: count them by listing them.
        let dlq = match depths.dead_letters {
            Some(d) => {
                rows.push(row("dead letters", d));
                d.messages
            }
            None => Some(self.dead_letter_count().await?),
        };
        Ok((rows, dlq))
    }

    async fn dead_letter_count(&self) -> Result<u64, String> {
        cronq_shared::broker::bounded("count dead letters", self.broker.dead_letters())
            .await
            .map(|l| cronq_shared::broker::fold_copies(&l).len() as u64)
            .map_err(|e| format!("{:#}", anyhow::Error::new(e)))
    }
}

fn row(queue: &str, depth: Depth) -> QueueDepth {
    QueueDepth {
        queue: queue.to_owned(),
        messages: depth.messages,
        consumers: depth.consumers,
    }
}
