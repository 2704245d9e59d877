//! The RabbitMQ topology of one namespace, declared idempotently: what exists, with which
//! arguments and why. Names come from [`Names`] only.
//!
//! ```text
//! publish ──rk=q──▶ ns.occurrences (direct) ──▶ ns.q.<q> (quorum, delivery limit) ──┐
//! delayed ──rk=q──▶ ns.delayed (headers) ──cronq-delayed-ms──▶ ns.delayed.<d>ms     │
//!                  (quorum, TTL d) expired, at-least-once ──▶ ns.occurrences ◀────────┘
//! dead_letter() and delivery limit ──▶ ns.dlx (fanout) ──▶ ns.dlq (quorum)
//! ```
//!
//! Every queue is a quorum queue of [`Replication::size`] members, replicated across a
//! cluster's nodes (`docs/ha.md`).
//!
//! Invariant: every object is durable and declared with the same arguments by every
//! process, so a redeclare never fails with `PRECONDITION_FAILED` between cronq versions
//! that agree on this file and run under the same `CRONQ_AMQP_QUORUM_SIZE`; a queue found
//! with other arguments is used as it is (see [`Replication`]).

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ExchangeKind};

use cronq_shared::broker::BrokerError;
use cronq_shared::names::{Names, QueueName};

/// Deliveries of one message before a quorum queue dead-letters it instead of requeueing
/// it again: a poison message that crashes consumers ends in the dead-letter queue, never
/// requeued forever (G5). Set explicitly: RabbitMQ 4 defaults to 20, 3.x to unlimited.
/// <https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling>
pub const DELIVERY_LIMIT: i32 = 10;

/// The header the delay exchange routes on (headers exchanges ignore `x-` names). Not the
/// `cronq-delay-ms` of the classic delay queues of earlier versions, so those get no new
/// messages while they drain.
pub const DELAY_HEADER: &str = "cronq-delayed-ms";

/// Every delay a delay queue can have: [`quantize_delay`]'s steps up to `max`, for tearing
/// a namespace down (delay queues do not expire on their own, see [`Declare::delay_queue`]).
pub fn delay_steps(max: Duration) -> impl Iterator<Item = Duration> {
    let ms = Duration::from_millis;
    (1..10)
        .map(move |i| ms(i * 100))
        .chain((1..=max.as_secs()).map(Duration::from_secs))
}

/// Occurrence headers set on every published message.
pub const HEADER_JOB: &str = "x-cronq-job";
/// See [`HEADER_JOB`].
pub const HEADER_SCHEDULED_AT: &str = "x-cronq-scheduled-at";
/// See [`HEADER_JOB`].
pub const HEADER_ATTEMPT: &str = "x-cronq-attempt";
/// Dead-letter headers set by [`Broker::dead_letter`](cronq_shared::broker::Broker::dead_letter).
pub const HEADER_REASON: &str = "x-cronq-reason";
/// See [`HEADER_REASON`].
pub const HEADER_ERROR: &str = "x-cronq-error";
/// See [`HEADER_REASON`].
pub const HEADER_ATTEMPTS: &str = "x-cronq-attempts";
/// See [`HEADER_REASON`].
pub const HEADER_QUEUE: &str = "x-cronq-queue";
/// See [`HEADER_REASON`].
pub const HEADER_DEAD_LETTERED_AT: &str = "x-cronq-dead-lettered-at";

/// Rounds a delay up to the granularity of delay queues: 100 ms below one second, whole
/// seconds above. One queue exists per distinct delay, so jittered delays must not each
/// make their own; rounding up keeps "never before its delay".
pub fn quantize_delay(delay: Duration) -> Duration {
    let ms = delay.as_millis();
    let step = if ms < 1000 { 100 } else { 1000 };
    let rounded = ms.div_ceil(step) * step;
    Duration::from_millis(u64::try_from(rounded).unwrap_or(u64::MAX))
}

/// A [`ShortString`] that refuses (instead of panicking on) values over 255 bytes.
///
/// # Errors
/// [`BrokerError::Protocol`] naming `what` when the value is too long.
pub fn short(what: &'static str, value: impl Into<String>) -> Result<ShortString, BrokerError> {
    ShortString::try_new(value).map_err(|e| BrokerError::Protocol {
        op: what,
        source: Box::new(e),
    })
}

fn text(value: impl Into<String>) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value.into()))
}

fn table(entries: Vec<(&'static str, AMQPValue)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(ShortString::from(k), v);
    }
    t
}

fn failed(op: &'static str) -> impl FnOnce(lapin::Error) -> BrokerError {
    move |e| BrokerError::Protocol {
        op,
        source: Box::new(e),
    }
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

async fn exchange(ch: &Channel, name: String, kind: ExchangeKind) -> Result<(), BrokerError> {
    let options = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(
        short("declare exchange", name)?,
        kind,
        options,
        FieldTable::default(),
    )
    .await
    .map_err(failed("declare exchange"))
}

/// How a namespace's queues replicate: every queue is a quorum queue of `size` members
/// (`x-quorum-initial-group-size`), kept across the cluster's nodes.
///
/// RabbitMQ checks that argument when a queue is declared again, so a queue that already
/// exists with other arguments (declared by an earlier cronq, before the dead-letter queue
/// was replicated or the size was set, or under another size) would refuse every
/// declaration: such a queue is used as it is, and a warning says so, once per process.
#[derive(Debug)]
pub struct Replication {
    size: u16,
    /// The queues found with other arguments, checked passively from then on.
    kept: Mutex<HashSet<String>>,
}

impl Replication {
    /// Quorum queues of `size` members (at least 1).
    pub fn new(size: u16) -> Self {
        Self {
            size: size.max(1),
            kept: Mutex::default(),
        }
    }

    /// The members of each quorum queue.
    pub fn size(&self) -> u16 {
        self.size
    }
}

impl Default for Replication {
    fn default() -> Self {
        Self::new(cronq_shared::endpoints::DEFAULT_QUORUM_SIZE)
    }
}

/// Whether an error is the broker refusing a declaration over an argument the queue
/// already has with another value (`406 PRECONDITION_FAILED - inequivalent arg`).
fn is_inequivalent(e: &lapin::Error) -> bool {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => {
            amqp.get_id() == 406 && amqp.get_message().as_str().contains("inequivalent arg")
        }
        _ => false,
    }
}

/// One round of declarations on a connection, on a channel of its own (reopened after the
/// broker closes it over a queue that exists with other arguments).
pub struct Declare<'c> {
    conn: &'c Connection,
    ch: Channel,
    replication: &'c Replication,
}

impl<'c> Declare<'c> {
    /// A declaring channel on `conn`.
    ///
    /// # Errors
    /// [`BrokerError::Protocol`] when no channel can be opened.
    pub async fn open(
        conn: &'c Connection,
        replication: &'c Replication,
    ) -> Result<Self, BrokerError> {
        let ch = conn
            .create_channel()
            .await
            .map_err(failed("open a channel to declare"))?;
        Ok(Self {
            conn,
            ch,
            replication,
        })
    }

    /// Closes the declaring channel.
    pub async fn close(self) {
        let _ = self.ch.close(200, ShortString::from("declared")).await;
    }

    async fn reopen(&mut self) -> Result<(), BrokerError> {
        self.ch = self
            .conn
            .create_channel()
            .await
            .map_err(failed("open a channel to declare"))?;
        Ok(())
    }

    /// Declares the replicated queue `name` with `args` (a quorum queue of the configured
    /// size), or, when it exists with other arguments, checks that it exists and uses it
    /// as it is (see [`Replication`]).
    async fn replicated(
        &mut self,
        op: &'static str,
        name: &ShortString,
        args: Vec<(&'static str, AMQPValue)>,
    ) -> Result<(), BrokerError> {
        let kept = self
            .replication
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name.as_str());
        if !kept {
            let mut args = table(args);
            args.insert(
                ShortString::from("x-quorum-initial-group-size"),
                AMQPValue::LongInt(i32::from(self.replication.size)),
            );
            match self.ch.queue_declare(name.clone(), durable(), args).await {
                Ok(_) => return Ok(()),
                Err(e) if is_inequivalent(&e) => {
                    tracing::warn!(
                        queue = name.as_str(),
                        error = %e,
                        "queue exists with other arguments (declared by an earlier cronq, or \
                         under another CRONQ_AMQP_QUORUM_SIZE): used as it is; docs/ha.md says \
                         how to replicate it",
                    );
                    self.replication
                        .kept
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(name.as_str().to_owned());
                    self.reopen().await?;
                }
                Err(e) => return Err(failed(op)(e)),
            }
        }
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        self.ch
            .queue_declare(name.clone(), passive, FieldTable::default())
            .await
            .map(drop)
            .map_err(failed(op))
    }

    /// Declares the namespace-wide objects: the main exchange, the delay exchange, the
    /// dead-letter exchange and the dead-letter queue bound to it.
    ///
    /// # Errors
    /// [`BrokerError::Protocol`] when the broker refuses a declaration.
    pub async fn base(&mut self, names: &Names) -> Result<(), BrokerError> {
        exchange(&self.ch, names.exchange(), ExchangeKind::Direct).await?;
        exchange(&self.ch, names.delay_exchange(), ExchangeKind::Headers).await?;
        exchange(&self.ch, names.dead_letter_exchange(), ExchangeKind::Fanout).await?;
        // A quorum queue puts the messages a closed channel held back in their original
        // order, as `dead_letters` needs (listing walks it with basic.get and requeues
        // everything by closing the channel; checked by the broker tests). No delivery
        // limit and no dead-lettering of its own: a letter stays until replayed.
        let dlq = short("declare dead-letter queue", names.dead_letter_queue())?;
        self.replicated(
            "declare dead-letter queue",
            &dlq,
            vec![("x-queue-type", text("quorum"))],
        )
        .await?;
        self.ch
            .queue_bind(
                dlq,
                short("bind dead-letter queue", names.dead_letter_exchange())?,
                ShortString::from(""),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(failed("bind dead-letter queue"))
    }

    /// Declares the quorum queue of one logical queue and binds it to the main exchange.
    ///
    /// # Errors
    /// As [`Self::base`].
    pub async fn queue(&mut self, names: &Names, queue: &QueueName) -> Result<(), BrokerError> {
        let name = short("declare queue", names.queue(queue))?;
        let args = vec![
            // Replicated and durable; needed for the delivery limit.
            ("x-queue-type", text("quorum")),
            ("x-delivery-limit", AMQPValue::LongInt(DELIVERY_LIMIT)),
            ("x-dead-letter-exchange", text(names.dead_letter_exchange())),
            // The broker removes a poison message only once the dead-letter queue has it
            // (needs `x-overflow=reject-publish`). https://www.rabbitmq.com/docs/quorum-queues#dead-lettering
            ("x-dead-letter-strategy", text("at-least-once")),
            ("x-overflow", text("reject-publish")),
        ];
        self.replicated("declare queue", &name, args).await?;
        self.ch
            .queue_bind(
                name,
                short("bind queue", names.exchange())?,
                short("bind queue", queue.as_str())?,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(failed("bind queue"))
    }

    /// Declares the delay queue of one (quantized) delay and binds it to the delay
    /// exchange.
    ///
    /// A quorum queue with at-least-once dead-lettering (RabbitMQ 3.10 or later): an
    /// expired message leaves the delay queue only once the main exchange's queue has
    /// confirmed it, so a retry or a jittered publish survives a broker restart or a lost
    /// connection in between (classic dead-lettering is at-most-once). No `x-expires`: a
    /// quorum queue expires by time since it was declared, whatever it holds and however
    /// often it is redeclared (checked on RabbitMQ 3.10: its messages went with it), so
    /// delay queues stay, one small queue per distinct delay.
    /// <https://www.rabbitmq.com/docs/quorum-queues#dead-lettering>
    ///
    /// # Errors
    /// As [`Self::base`].
    pub async fn delay_queue(&mut self, names: &Names, delay: Duration) -> Result<(), BrokerError> {
        let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        let name = short("declare delay queue", names.delay_queue(delay))?;
        let args = vec![
            ("x-queue-type", text("quorum")),
            // Per-queue TTL expires messages at the head in FIFO order, and every message
            // in this queue has the same TTL, so none waits behind a longer one.
            ("x-message-ttl", AMQPValue::LongLongInt(ms)),
            // No x-dead-letter-routing-key: the expired message keeps its routing key (the
            // logical queue). https://www.rabbitmq.com/docs/dlx#routing
            ("x-dead-letter-exchange", text(names.exchange())),
            ("x-dead-letter-strategy", text("at-least-once")),
            // Required by at-least-once dead-lettering.
            ("x-overflow", text("reject-publish")),
        ];
        self.replicated("declare delay queue", &name, args).await?;
        self.ch
            .queue_bind(
                name,
                short("bind delay queue", names.delay_exchange())?,
                ShortString::from(""),
                QueueBindOptions::default(),
                table(vec![
                    ("x-match", text("all")),
                    (DELAY_HEADER, text(ms.to_string())),
                ]),
            )
            .await
            .map_err(failed("bind delay queue"))
    }

    /// Whether the queue of a logical queue exists, without creating it (a passive
    /// declare).
    ///
    /// # Errors
    /// [`BrokerError::Protocol`] for any failure but the queue's absence.
    pub async fn exists(&mut self, names: &Names, queue: &QueueName) -> Result<bool, BrokerError> {
        let options = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        match self
            .ch
            .queue_declare(
                short("check queue", names.queue(queue))?,
                options,
                FieldTable::default(),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => {
                // The broker closed the channel.
                self.reopen().await?;
                Ok(false)
            }
            Err(e) => Err(failed("check queue")(e)),
        }
    }
}

/// Deletes what [`Declare::base`] and [`Declare::queue`] declared in a namespace for the
/// logical `queues`, every delay queue of a delay up to [`TEARDOWN_DELAYS`], and the broker
/// queues named in `others`; best effort, a queue or exchange that is not there is
/// skipped (RabbitMQ answers a delete of a missing queue with success). For tearing a
/// namespace down (tests, benches).
pub async fn delete_namespace<'q>(
    ch: &Channel,
    names: &Names,
    queues: impl IntoIterator<Item = &'q QueueName>,
    others: impl IntoIterator<Item = String>,
) {
    let queues = queues
        .into_iter()
        .map(|q| names.queue(q))
        .chain([names.dead_letter_queue()])
        .chain(delay_steps(TEARDOWN_DELAYS).map(|d| names.delay_queue(d)))
        .chain(others);
    for q in queues {
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    for ex in [
        names.exchange(),
        names.dead_letter_exchange(),
        names.delay_exchange(),
    ] {
        let _ = ch
            .exchange_delete(ex.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
}

/// Whether an error is the broker's `404 NOT_FOUND` channel close.
pub fn is_not_found(e: &lapin::Error) -> bool {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => amqp.get_id() == 404,
        _ => false,
    }
}

/// The longest delay whose queue [`delete_namespace`] deletes.
pub const TEARDOWN_DELAYS: Duration = Duration::from_secs(120);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_up() {
        let ms = Duration::from_millis;
        assert_eq!(quantize_delay(ms(0)), ms(0));
        assert_eq!(quantize_delay(ms(1)), ms(100));
        assert_eq!(quantize_delay(ms(100)), ms(100));
        assert_eq!(quantize_delay(ms(999)), ms(1000));
        assert_eq!(quantize_delay(ms(1001)), ms(2000));
        assert_eq!(quantize_delay(ms(10_000)), ms(10_000));
    }

    #[test]
    fn long_names_are_refused_not_panicking() {
        assert!(short("x", "a".repeat(256)).is_err());
        assert!(short("x", "a".repeat(255)).is_ok());
    }
}
