//! What RabbitMQ says of a namespace's queues without touching their messages: how many
//! are ready and how many consumers subscribe ([`Broker::depths`], for the dashboard's
//! fleet page).
//!
//! Invariant: read-only: a passive declare never creates a queue; a missing queue (the
//! broker's 404 closes the channel) is `None`, not an error.

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

use super::AmqpBroker;
use super::failure::lapin_failure;
use crate::topology::short;
use cronq_shared::broker::{BrokerError, Depth};

impl AmqpBroker {
    /// Each of `queues` (full broker names, such as `Names::queue`), in order: its depth,
    /// with neither count known when it was never declared. One attempt, no retry: a
    /// caller that polls asks again.
    ///
    /// # Errors
    /// [`BrokerError`] when the broker cannot be reached.
    pub(super) async fn depths_by_name(
        &self,
        queues: &[String],
    ) -> Result<Vec<Depth>, BrokerError> {
        let link = self.link().await.map_err(|f| f.error)?;
        let mut ch = link.channel().await.map_err(|f| f.error)?;
        let mut out = Vec::with_capacity(queues.len());
        for queue in queues {
            let name = short("inspect a queue", queue.clone())?;
            let passive = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            match ch.queue_declare(name, passive, FieldTable::default()).await {
                Ok(q) => out.push(Depth {
                    messages: Some(u64::from(q.message_count())),
                    consumers: Some(u64::from(q.consumer_count())),
                }),
                // A missing queue closes the channel with 404 while the connection stays.
                Err(_) if link.is_open() => {
                    out.push(Depth::default());
                    ch = link.channel().await.map_err(|f| f.error)?;
                }
                Err(e) => return Err(lapin_failure("inspect a queue")(e).error),
            }
        }
        let _ = ch.close(200, "inspected".into()).await;
        Ok(out)
    }
}
