//! The consumer's errors.

use cronq_shared::broker::BrokerError;

/// Why the consumer could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--queues` names a queue no job of the config uses.
    #[error("unknown queue {queue:?} in --queues: the config's queues are {known}")]
    UnknownQueue {
        /// The unknown name.
        queue: String,
        /// The config's queues, comma-separated.
        known: String,
    },
    /// The broker could not be reached.
    #[error("cannot connect to the message broker")]
    Connect(#[source] BrokerError),
    /// The broker refused to declare or subscribe.
    #[error("cannot subscribe to the job queues")]
    Broker(#[source] BrokerError),
    /// The broker ended the subscription although no shutdown was asked for.
    #[error("the broker ended the subscription unexpectedly; restart the consumer")]
    SubscriptionEnded,
}
