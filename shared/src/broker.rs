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

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
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

/// A batch made ready for the wire ahead of its publishing ([`Broker::ready`]), so that
/// when its instant comes only stamping `published_at` and sending are left: the leader
/// builds the batch due at its next fire while it waits for it
/// (`producer/src/scheduler.rs`).
pub struct Ready {
    messages: Vec<Outgoing>,
    /// What the broker built ahead, in its own form, until its first publish takes it;
    /// `None` when it built nothing.
    wire: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Ready {
    /// `messages` with nothing built ahead: they are encoded when published.
    pub fn plain(messages: Vec<Outgoing>) -> Self {
        Self {
            messages,
            wire: Mutex::new(None),
        }
    }

    /// `messages` with what a broker built ahead for them, which only it reads
    /// ([`Ready::take_wire`]).
    pub fn with_wire<W: Any + Send>(messages: Vec<Outgoing>, wire: W) -> Self {
        Self {
            messages,
            wire: Mutex::new(Some(Box::new(wire))),
        }
    }

    /// The messages (their `published_at` as built; the publish stamps its own).
    pub fn messages(&self) -> &[Outgoing] {
        &self.messages
    }

    /// What was built ahead, if it was built as a `W` and no publish took it yet (a
    /// publish tried again builds its messages anew).
    pub fn take_wire<W: Any>(&self) -> Option<W> {
        let mut wire = self.wire.lock().unwrap_or_else(PoisonError::into_inner);
        match wire.take()?.downcast::<W>() {
            Ok(built) => Some(*built),
            Err(other) => {
                *wire = Some(other);
                None
            }
        }
    }

    /// The messages published at `at`.
    pub fn stamped(&self, at: DateTime<Utc>) -> Vec<Outgoing> {
        let mut messages = self.messages.clone();
        for m in &mut messages {
            m.occurrence.published_at = at;
        }
        messages
    }
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("messages", &self.messages.len())
            .finish_non_exhaustive()
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

/// One dead run: a dead letter and how many copies of it the dead-letter queue holds.
///
/// A consumer killed or frozen after it dead-lettered a run but before it acked the
/// delivery leaves the run to another consumer, which dead-letters it again: the queue
/// then holds two letters for one dead run (docs/reliability.md). Letters with the same
/// key, the same attempts and the same reason are copies; a letter without a key (a body
/// that did not decode) is a copy only of a letter with the same body.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    /// The oldest of the copies.
    pub letter: DeadLetter,
    /// How many letters the queue holds for this run (at least 1).
    pub copies: usize,
}

/// Folds copies of one dead run into one [`Folded`], keeping the order of the first copy
/// of each (oldest first, as [`Broker::dead_letters`] lists them).
pub fn fold_copies(letters: &[DeadLetter]) -> Vec<Folded> {
    let mut folded: Vec<Folded> = Vec::new();
    let mut seen: HashMap<DeadRun, usize> = HashMap::new();
    for letter in letters {
        let id = DeadRun::of(letter);
        if let Some(&i) = seen.get(&id) {
            folded[i].copies += 1;
            continue;
        }
        seen.insert(id, folded.len());
        folded.push(Folded {
            letter: letter.clone(),
            copies: 1,
        });
    }
    folded
}

/// What makes two dead letters copies of one dead run (see [`Folded`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeadRun {
    /// The key, or, for a letter without one, its body.
    of: Result<String, Vec<u8>>,
    attempts: u32,
    reason: String,
}

impl DeadRun {
    /// The dead run `letter` is a copy of.
    pub fn of(letter: &DeadLetter) -> Self {
        Self {
            of: letter.key.clone().ok_or_else(|| letter.body.clone()),
            attempts: letter.attempts,
            reason: letter.reason.clone(),
        }
    }
}

/// What a replay does with one dead letter (see [`Broker::replay`]).
#[derive(Debug, Clone)]
pub enum Pick {
    /// Leave it in the dead-letter queue.
    Keep,
    /// Publish this, and remove the letter once the publish was confirmed.
    Replay(Box<Outgoing>),
    /// Remove it without publishing anything: a copy (see [`Folded`]) of a letter this
    /// replay already replayed, confirmed.
    Remove,
}

/// How full one queue is, as far as its broker can tell ([`Broker::depths`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// Messages ready for delivery (not those delivered and unsettled); `None` when the
    /// queue was never declared.
    pub messages: Option<u64>,
    /// Consumers subscribed to it; `None` where the broker does not count them.
    pub consumers: Option<u64>,
}

/// The depths of the queues asked for ([`Broker::depths`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Depths {
    /// One per queue asked for, in order; empty when the broker cannot tell a queue's
    /// depth.
    pub queues: Vec<Depth>,
    /// The dead-letter queue's depth in letters, copies included, when the broker counts
    /// it without listing it; `None` when only [`Broker::dead_letters`] tells.
    pub dead_letters: Option<Depth>,
}

/// What went wrong talking to the broker.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Could not connect, or the connection broke.
    #[error("cannot reach the message broker at {url}: is {broker} running? ({hint})")]
    Connect {
        /// Which broker (`RabbitMQ`).
        broker: &'static str,
        /// The redacted URL.
        url: String,
        /// What to do, from the backend (how to start its broker, or the variable to set).
        hint: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The TLS handshake with the broker failed for a reason the operator must fix.
    #[error("TLS with {broker} at {url} failed: {refusal}")]
    Tls {
        /// Which broker (`RabbitMQ`).
        broker: &'static str,
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

    /// As [`Broker::publish`], and also says when each message's confirm arrived, in
    /// `batch`'s order (the producer's lateness metric is taken per message from these).
    /// By default every message gets the instant the whole batch was confirmed; a broker
    /// that sees each confirm arrive says so.
    ///
    /// # Errors
    /// As [`Broker::publish`].
    async fn publish_timed(&self, batch: &[Outgoing]) -> Result<Vec<DateTime<Utc>>, BrokerError> {
        self.publish(batch).await?;
        Ok(vec![Utc::now(); batch.len()])
    }

    /// Builds ahead of its publishing what publishing `messages` needs but their
    /// `published_at` (encoded bodies, message properties), for [`Broker::publish_ready`]
    /// to send later. By default nothing is built ahead. A message the broker could not
    /// take is left to be refused when published.
    fn ready(&self, messages: Vec<Outgoing>) -> Ready {
        Ready::plain(messages)
    }

    /// As [`Broker::publish_timed`] for a batch made [`Broker::ready`], each message
    /// published at `at`.
    ///
    /// # Errors
    /// As [`Broker::publish`].
    async fn publish_ready(
        &self,
        ready: &Ready,
        at: DateTime<Utc>,
    ) -> Result<Vec<DateTime<Utc>>, BrokerError> {
        self.publish_timed(&ready.stamped(at)).await
    }

    /// The same broker publishing over a connection of its own, if it has connections: for
    /// a herd (many messages due at one instant), so that the broker's flow control, which
    /// holds back a whole connection behind its backlog, does not hold back what this one
    /// publishes meanwhile. It takes what this broker's [`Broker::ready`] built, and shares
    /// its declarations and its [`Broker::close`]. By default (`None`) there is no other
    /// connection to take: the caller publishes a herd here too.
    fn apart(&self) -> Option<Arc<dyn Broker>> {
        None
    }

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

    /// For each dead letter, one at a time, `select` says what to do with it ([`Pick`]);
    /// a letter to replay is removed from the dead-letter queue only after its republish
    /// was confirmed, and `select` is asked about the next letter only after that (so a
    /// [`Pick::Remove`] never outruns the replay of its copy). The others stay. Returns
    /// how many were replayed (removed copies are not counted).
    ///
    /// # Errors
    /// [`BrokerError`]; letters not yet removed stay in the dead-letter queue.
    async fn replay(
        &self,
        select: &(dyn for<'l> Fn(&'l DeadLetter) -> Pick + Send + Sync),
    ) -> Result<usize, BrokerError>;

    /// How full each of `queues` is, and the dead-letter queue, read once (no retry: a
    /// caller that polls asks again). By default the broker tells nothing
    /// ([`Depths::default`]).
    ///
    /// # Errors
    /// [`BrokerError`] when the broker cannot be read.
    async fn depths(&self, queues: &[QueueName]) -> Result<Depths, BrokerError> {
        let _ = queues;
        Ok(Depths::default())
    }

    /// Closes the broker's connection, if it has one: unsettled deliveries return to their
    /// queues, subscriptions end, and later calls fail with [`BrokerError::Closed`]. Waits a
    /// bounded time for the broker's answer. By default there is nothing to close.
    async fn close(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(key: Option<&str>, attempts: u32, reason: &str, body: &[u8], at: i64) -> DeadLetter {
        DeadLetter {
            key: key.map(str::to_owned),
            job: key.map(|k| k.split('@').next().unwrap_or_default().to_owned()),
            queue: None,
            attempts,
            reason: reason.to_owned(),
            last_error: Some(format!("error {at}")),
            dead_lettered_at: DateTime::from_timestamp(at, 0).unwrap(),
            body: body.to_vec(),
        }
    }

    #[test]
    fn copies_of_one_run_fold_into_the_oldest() {
        let a = letter(Some("a@2026-01-01T00:00:00Z"), 3, "failed", b"1", 10);
        let b = letter(Some("b@2026-01-01T00:00:00Z"), 3, "failed", b"2", 11);
        // The copy a second consumer dead-lettered later: other time, other last error.
        let a2 = letter(Some("a@2026-01-01T00:00:00Z"), 3, "failed", b"1", 12);
        let folded = fold_copies(&[a.clone(), b.clone(), a2]);
        assert_eq!(
            folded,
            vec![
                Folded {
                    letter: a,
                    copies: 2
                },
                Folded {
                    letter: b,
                    copies: 1
                },
            ]
        );
    }

    #[test]
    fn other_attempts_or_reason_are_other_dead_runs() {
        let key = Some("a@2026-01-01T00:00:00Z");
        let letters = [
            letter(key, 3, "failed", b"1", 10),
            letter(key, 1, "failed", b"1", 11),
            letter(key, 3, "unknown job", b"1", 12),
            // A copy of the first.
            letter(key, 3, "failed", b"1", 13),
        ];
        let copies: Vec<usize> = fold_copies(&letters).iter().map(|f| f.copies).collect();
        assert_eq!(copies, vec![2, 1, 1]);
    }

    #[test]
    fn letters_without_a_key_fold_only_with_the_same_body() {
        let letters = [
            letter(None, 1, "malformed: not JSON", b"x", 10),
            letter(None, 1, "malformed: not JSON", b"y", 11),
            letter(None, 1, "malformed: not JSON", b"x", 12),
        ];
        let copies: Vec<usize> = fold_copies(&letters).iter().map(|f| f.copies).collect();
        assert_eq!(copies, vec![2, 1]);
    }

    #[test]
    fn nothing_folds_in_an_empty_queue() {
        assert!(fold_copies(&[]).is_empty());
    }
}
