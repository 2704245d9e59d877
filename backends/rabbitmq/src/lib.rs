//! cronq's queue port ([`cronq_shared::broker::Broker`]) on RabbitMQ, through lapin.
//!
//! - [`broker`]: [`AmqpBroker`]: a supervised connection, confirmed publishes, consumers
//!   that resubscribe, the dead-letter queue.
//! - [`topology`]: what is declared in a namespace (quorum queues, delay and dead-letter
//!   queues), with which arguments and why.
//! - [`headers`]: the AMQP properties and headers of occurrences and dead letters.

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

pub mod broker;
pub mod headers;
pub mod topology;

pub use broker::AmqpBroker;
