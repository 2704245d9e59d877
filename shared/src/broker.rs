//! The queue port: what producers and consumers need from a message broker, as one small
//! trait with two implementations, `cronq-rabbitmq` (`AmqpBroker`, through lapin) and
//! `cronq-memory` (`MemoryBroker`, for `cronq standalone` and fast tests).
//!
//! Invariant: `publish` returns only after the broker confirmed every message of the
//! batch as routed and stored; an unroutable (returned) or nacked message is an error, never
//! a success (G2).
//!
//! Retries: a call retries by itself what may pass (a lost connection: reconnect, redo),
//! until it succeeds, is refused, or is dropped; its callers never retry it for that
//! (the table in [`crate::retry`]). A caller that cannot wait for ever bounds the call
//! with [`bounded`]; the leader bounds it by its leadership.
//!
//! Semantics both implementations share (one behaviour suite, `tests/it/broker.rs`):
//! per-queue FIFO; a requeued message comes back with `redelivered`; a delivery whose
//! [`Acker`] is dropped unsettled is requeued; `consume` declares the queues it serves;
//! prefetch 0 means "no limit" (capped at 1024); delayed messages never arrive before
//! their delay; the dead-letter queue lists oldest first and listing does not consume it.
//! RabbitMQ also dead-letters by itself a message delivered more than its queues'
//! delivery limit (`cronq_rabbitmq::topology::DELIVERY_LIMIT`; a poison message), with the
//! reason `delivery limit reached in queue Q`.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::message::Occurrence;
use crate::names::QueueName;
use crate::signing::Keyring;

/// Receiver buffer and in-flight bound of a subscription whose prefetch is 0
/// ("unlimited", as in AMQP): the receiver channel needs a bound, and no consumer runs
/// more jobs than this at once.
const UNLIMITED_PREFETCH: usize = 1024;

/// How long [`bounded`] lets one broker call go on retrying: long enough to ride over a
/// broker restart or a cluster node failing over, short enough that a consumer falls back
/// (requeue, lease lapse, reaper) and a command exits instead of hanging.
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// Runs one broker call `op` (named in the error) for at most [`CALL_DEADLINE`]: the
/// bound of a caller that cannot wait for ever. Not a retry: the call retries by itself.
///
/// # Errors
/// The call's error, or [`BrokerError::GaveUp`] when it was still retrying at the deadline
/// (the broker logged each failure as it retried).
///
/// # Cancel safety
/// As cancel-safe as `call`.
pub async fn bounded<T>(
    op: &'static str,
    call: impl Future<Output = Result<T, BrokerError>>,
) -> Result<T, BrokerError> {
    tokio::time::timeout(CALL_DEADLINE, call)
        .await
        .unwrap_or(Err(BrokerError::GaveUp {
            op,
            after: CALL_DEADLINE,
        }))
}

/// How many unsettled deliveries a subscription with `prefetch` may hold, on either
/// backend.
pub fn in_flight_limit(prefetch: u16) -> usize {
    if prefetch == 0 {
        UNLIMITED_PREFETCH
    } else {
        usize::from(prefetch)
    }
}

/// One message to publish.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The logical queue it goes to.
    pub queue: QueueName,
    /// The occurrence.
    pub occurrence: Occurrence,
    /// Hold it broker-side this long before it becomes deliverable (retry backoff); zero
    /// for immediate delivery.
    pub delay: Duration,
}

impl Outgoing {
    /// The body to publish: the occurrence encoded, sealed when a keyring is given (the
    /// one rule every backend applies, so a signing deployment signs every message).
    pub fn body(&self, keyring: Option<&Keyring>) -> Vec<u8> {
        crate::signing::seal_with(keyring, self.occurrence.encode())
    }
}

/// A received message; settle it with [`Delivery::acker`].
pub struct Delivery {
    /// The logical queue it came from.
    pub queue: QueueName,
    /// The raw body (decode with [`Occurrence::decode`]).
    pub body: Vec<u8>,
    /// The broker says it was delivered before.
    pub redelivered: bool,
    /// Acknowledges or requeues this delivery.
    pub acker: Box<dyn Acker>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("queue", &self.queue)
            .field("bytes", &self.body.len())
            .field("redelivered", &self.redelivered)
            .finish()
    }
}

/// Settles one delivery.
#[async_trait]
pub trait Acker: Send + Sync {
    /// Removes the message from its queue for good.
    ///
    /// # Errors
    /// When the channel it came on is gone; the broker then redelivers it.
    async fn ack(&self) -> Result<(), BrokerError>;
    /// Gives the message back to its queue for another delivery.
    ///
    /// # Errors
    /// As [`Acker::ack`].
    async fn requeue(&self) -> Result<(), BrokerError>;
}

/// A message in the dead-letter queue, with why it is there.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The occurrence key, when the body had one.
    pub key: Option<String>,
    /// The job, when the body had one.
    pub job: Option<String>,
    /// The logical queue it came from, when known.
    pub queue: Option<QueueName>,
    /// Attempts made before it was dead-lettered.
    pub attempts: u32,
    /// Why: `failed`, `malformed: …`, `unknown job`, or, when the broker dead-lettered it,
    /// `delivery limit reached in queue Q`.
    pub reason: String,
    /// The last attempt's error, if any.
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub dead_lettered_at: DateTime<Utc>,
    /// The original body.
    pub body: Vec<u8>,
}

/// What went wrong talking to the broker.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Could not connect, or the connection broke.
    #[error(
        "cannot reach the message broker at {url}: is RabbitMQ running? (start it with `rabbitmq-server -detached`, or set CRONQ_AMQP_URL)"
    )]
    Connect {
        /// The redacted URL.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The TLS handshake with the broker failed for a reason the operator must fix.
    #[error("TLS with RabbitMQ at {url} failed: {refusal}")]
    Tls {
        /// The redacted URL.
        url: String,
        /// Why, and what to do.
        refusal: crate::endpoints::TlsRefusal,
        /// The TLS error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A protocol operation failed.
    #[error("broker operation {op} failed")]
    Protocol {
        /// Which operation.
        op: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The broker nacked a publish, or returned it as unroutable.
    #[error("broker did not accept message {key}: {reason}")]
    NotConfirmed {
        /// The occurrence key.
        key: String,
        /// `nacked`, `unroutable (312 NO_ROUTE)`, …
        reason: String,
    },
    /// The broker (or the in-memory queue) is shut down.
    #[error("broker is closed")]
    Closed,
    /// A [`bounded`] call was still failing and retrying at its deadline.
    #[error(
        "broker operation {op} gave up after retrying for {}s; the warnings logged before say why",
        .after.as_secs()
    )]
    GaveUp {
        /// Which operation.
        op: &'static str,
        /// How long it retried.
        after: Duration,
    },
}

/// The queue port.
#[async_trait]
pub trait Broker: Send + Sync + 'static {
    /// Declares, idempotently, the exchange, the dead-letter queue and one queue per
    /// logical queue name.
    ///
    /// # Errors
    /// [`BrokerError`] when the broker refuses or cannot be reached.
    async fn declare(&self, queues: &BTreeSet<QueueName>) -> Result<(), BrokerError>;

    /// Publishes every message (persistent, `message_id` = key) and waits for the broker's
    /// confirm of each; pipelined, not one round trip per message.
    ///
    /// # Errors
    /// [`BrokerError::NotConfirmed`] for a nacked or returned message; nothing is known
    /// about the others, so a caller that tries again sends the whole batch (consumers
    /// deduplicate).
    async fn publish(&self, batch: &[Outgoing]) -> Result<(), BrokerError>;

    /// Subscribes to `queues` (declaring them) with at most `prefetch` unsettled
    /// deliveries in all. Deliveries arrive on the receiver; the subscription survives
    /// reconnects and ends (the receiver closes) when `token` is cancelled. Deliveries
    /// already handed out stay settleable after that; one dropped unsettled is requeued.
    ///
    /// # Errors
    /// [`BrokerError`] when the first subscription fails.
    async fn consume(
        &self,
        queues: &[QueueName],
        prefetch: u16,
        token: CancellationToken,
    ) -> Result<mpsc::Receiver<Delivery>, BrokerError>;

    /// Puts a letter on the dead-letter queue, confirmed.
    ///
    /// # Errors
    /// As [`Broker::publish`].
    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), BrokerError>;

    /// Lists the dead-letter queue, oldest first (by the time each was dead-lettered),
    /// without consuming it. (On RabbitMQ the letters are briefly held unacked while
    /// listing: a concurrent listing or replay may see fewer; its replicated dead-letter
    /// queue may hold them in another order afterwards, which the listing's order hides.)
    ///
    /// # Errors
    /// [`BrokerError`] when the broker cannot be read.
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, BrokerError>;

    /// For each dead letter, oldest first, `select` says whether to replay it and as what;
    /// each selected letter is removed from the dead-letter queue only after its
    /// republish was confirmed. The others stay, in order. Returns how many were replayed.
    ///
    /// # Errors
    /// [`BrokerError`]; letters not yet removed stay in the dead-letter queue.
    async fn replay(
        &self,
        select: &(dyn for<'l> Fn(&'l DeadLetter) -> Option<Outgoing> + Send + Sync),
    ) -> Result<usize, BrokerError>;
}
