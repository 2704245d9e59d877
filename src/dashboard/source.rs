//! Where the dashboard reads and changes the state: the stores and the queue of a fleet
//! (Redis and RabbitMQ) or of a standalone's data file, opened the way the operations
//! commands open them (`crate::ops::lookup`).
//!
//! Invariant: nothing here holds a secret it shows: the config is shown through
//! `super::pages` and `super::api`, which print a handler's URL and header values by origin
//! only (`cronq_shared::config::Secret`).

use std::sync::Arc;

use cronq_backends::{SqliteBroker, Stores};
use cronq_rabbitmq::AmqpBroker;
use cronq_rabbitmq::broker::Depth;
use cronq_shared::broker::Broker;
use cronq_shared::config::Config;
use cronq_shared::names::{Names, QueueName};
use cronq_shared::signing::Keyring;

/// How the queue is reached, for what the port does not say (queue depths).
#[derive(Clone)]
pub enum Queues {
    /// RabbitMQ.
    Amqp(AmqpBroker),
    /// A standalone's data file.
    File(SqliteBroker),
    /// A standalone in memory: depths are not known.
    Memory,
}

/// Everything the dashboard works on.
#[derive(Clone)]
pub struct Source {
    /// The config the jobs come from (the file given to the dashboard).
    pub config: Arc<Config>,
    /// The stores: control (pauses, requests), run log, lease, ledger.
    pub stores: Stores,
    /// The queue port, for the dead letters.
    pub broker: Arc<dyn Broker>,
    /// The same queue, for its depths.
    pub queues: Queues,
    /// The signing keys (a replay re-seals what it republishes).
    pub keyring: Option<Arc<Keyring>>,
    /// The namespace's names (queue names for RabbitMQ).
    pub names: Names,
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
    /// The depth of each logical queue of the config, then of the dead-letter queue.
    ///
    /// # Errors
    /// A message naming the queue's service when it cannot be read.
    pub async fn depths(&self) -> Result<(Vec<QueueDepth>, Option<u64>), String> {
        let logical: Vec<QueueName> = self.config.queues().into_iter().collect();
        match &self.queues {
            Queues::Amqp(amqp) => {
                let mut names: Vec<String> = logical.iter().map(|q| self.names.queue(q)).collect();
                names.push(self.names.dead_letter_queue());
                // Bounded like every other read: a RabbitMQ that hangs would otherwise hold
                // the whole refresh (the Redis reads too) until the connection's heartbeat
                // gives up.
                let depths = super::read::within(amqp.depths(&names)).await?;
                let mut rows: Vec<QueueDepth> = logical
                    .iter()
                    .zip(&depths)
                    .map(|(q, d)| row(q.as_str(), *d))
                    .collect();
                let dlq = depths
                    .last()
                    .copied()
                    .flatten()
                    .map(|d| u64::from(d.messages));
                rows.push(row("dead letters", depths.last().copied().flatten()));
                Ok((rows, dlq))
            }
            Queues::File(file) => {
                let mut rows = Vec::new();
                for q in &logical {
                    let ready = file
                        .ready(q)
                        .await
                        .map_err(|e| format!("{:#}", anyhow::Error::new(e)))?;
                    rows.push(QueueDepth {
                        queue: q.to_string(),
                        messages: ready.map(|n| n as u64),
                        consumers: None,
                    });
                }
                let dlq = self.dead_letter_count().await?;
                Ok((rows, Some(dlq)))
            }
            Queues::Memory => {
                let dlq = self.dead_letter_count().await?;
                Ok((Vec::new(), Some(dlq)))
            }
        }
    }

    async fn dead_letter_count(&self) -> Result<u64, String> {
        cronq_shared::broker::bounded("count dead letters", self.broker.dead_letters())
            .await
            .map(|l| cronq_shared::broker::fold_copies(&l).len() as u64)
            .map_err(|e| format!("{:#}", anyhow::Error::new(e)))
    }
}

fn row(queue: &str, depth: Option<Depth>) -> QueueDepth {
    QueueDepth {
        queue: queue.to_owned(),
        messages: depth.map(|d| u64::from(d.messages)),
        consumers: depth.map(|d| u64::from(d.consumers)),
    }
}
