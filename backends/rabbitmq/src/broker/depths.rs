//! What RabbitMQ says of a namespace's queues without touching their messages: how many
//! are ready and how many consumers subscribe, for the dashboard's fleet page.
//!
//! Invariant: read-only: a passive declare never creates a queue; a missing queue (the
//! broker's 404 closes the channel) is `None`, not an error.

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

use super::AmqpBroker;
use super::failure::lapin_failure;
use crate::topology::short;
use cronq_shared::broker::BrokerError;

/// One queue as RabbitMQ reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    /// Messages ready for delivery (not those delivered and unacked).
    pub messages: u32,
    /// Consumers subscribed to it.
    pub consumers: u32,
}

impl AmqpBroker {
    /// Each of `queues` (full broker names, such as `Names::queue`), in order: its depth,
    /// or `None` when it was never declared. One attempt, no retry: a caller that polls
    /// asks again.
    ///
    /// # Errors
    /// [`BrokerError`] when the broker cannot be reached.
    pub async fn depths(&self, queues: &[String]) -> Result<Vec<Option<Depth>>, BrokerError> {
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
                Ok(q) => out.push(Some(Depth {
                    messages: q.message_count(),
                    consumers: q.consumer_count(),
                })),
                // A missing queue closes the channel with 404 while the connection stays.
                Err(_) if link.is_open() => {
                    out.push(None);
                    ch = link.channel().await.map_err(|f| f.error)?;
                }
                Err(e) => return Err(lapin_failure("inspect a queue")(e).error),
            }
        }
        let _ = ch.close(200, "inspected".into()).await;
        Ok(out)
    }
}
