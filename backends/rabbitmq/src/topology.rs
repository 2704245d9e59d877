//! The RabbitMQ topology of one namespace, declared idempotently: what exists, with which
//! arguments and why. Names come from [`Names`] only.
//!
//! ```text
//! publish ──rk=q──▶ ns.occurrences (direct) ──▶ ns.q.<q> (quorum, delivery limit) ──┐
//! delayed ──rk=q──▶ ns.delayed (headers) ──cronq-delayed-ms──▶ ns.delayed.<d>ms     │
//!                  (quorum, TTL d) expired, at-least-once ──▶ ns.occurrences ◀────────┘
//! dead_letter() and delivery limit ──▶ ns.dlx (fanout) ──▶ ns.dlq (classic)
//! ```
//!
//! Invariant: every object is durable and declared with the same arguments by every
//! process, so a redeclare never fails with `PRECONDITION_FAILED` between cronq versions
//! that agree on this file.

use std::time::Duration;

use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, ExchangeKind};

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
/// a namespace down (delay queues do not expire on their own, see [`declare_delay_queue`]).
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
/// Dead-letter headers set by [`cronq_shared::broker::Broker::dead_letter`].
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

/// Declares the namespace-wide objects: the main exchange, the delay exchange, the
/// dead-letter exchange and the dead-letter queue bound to it.
///
/// # Errors
/// [`BrokerError::Protocol`] when the broker refuses a declaration (the channel is then
/// closed: use a dedicated one).
pub async fn declare_base(ch: &Channel, names: &Names) -> Result<(), BrokerError> {
    exchange(ch, names.exchange(), ExchangeKind::Direct).await?;
    exchange(ch, names.delay_exchange(), ExchangeKind::Headers).await?;
    exchange(ch, names.dead_letter_exchange(), ExchangeKind::Fanout).await?;
    // Classic, not quorum: listing walks it with basic.get and requeues everything by
    // closing the channel, and a classic queue puts requeued messages back in their
    // original positions, so the order is kept (checked by the broker tests).
    let dlq = short("declare dead-letter queue", names.dead_letter_queue())?;
    ch.queue_declare(dlq.clone(), durable(), FieldTable::default())
        .await
        .map_err(failed("declare dead-letter queue"))?;
    ch.queue_bind(
        dlq,
        short("bind dead-letter queue", names.dead_letter_exchange())?,
        ShortString::from(""),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(failed("bind dead-letter queue"))
}

/// Deletes what [`declare_base`] and [`declare_queue`] declared in a namespace for the
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

/// Declares the quorum queue of one logical queue and binds it to the main exchange.
///
/// # Errors
/// As [`declare_base`].
pub async fn declare_queue(
    ch: &Channel,
    names: &Names,
    queue: &QueueName,
) -> Result<(), BrokerError> {
    let name = short("declare queue", names.queue(queue))?;
    let args = table(vec![
        // Replicated and durable; needed for the delivery limit.
        ("x-queue-type", text("quorum")),
        ("x-delivery-limit", AMQPValue::LongInt(DELIVERY_LIMIT)),
        ("x-dead-letter-exchange", text(names.dead_letter_exchange())),
        // The broker removes a poison message only once the dead-letter queue has it
        // (needs `x-overflow=reject-publish`). https://www.rabbitmq.com/docs/quorum-queues#dead-lettering
        ("x-dead-letter-strategy", text("at-least-once")),
        ("x-overflow", text("reject-publish")),
    ]);
    ch.queue_declare(name.clone(), durable(), args)
        .await
        .map_err(failed("declare queue"))?;
    ch.queue_bind(
        name,
        short("bind queue", names.exchange())?,
        short("bind queue", queue.as_str())?,
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(failed("bind queue"))
}

/// Checks that the queue of a logical queue exists, without creating it (a passive
/// declare). `Ok(false)` when it does not; the channel is then closed by the broker.
///
/// # Errors
/// [`BrokerError::Protocol`] for any other failure.
pub async fn queue_exists(
    ch: &Channel,
    names: &Names,
    queue: &QueueName,
) -> Result<bool, BrokerError> {
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    match ch
        .queue_declare(
            short("check queue", names.queue(queue))?,
            options,
            FieldTable::default(),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(failed("check queue")(e)),
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

/// Declares the delay queue of one (quantized) delay and binds it to the delay exchange.
///
/// A quorum queue with at-least-once dead-lettering (RabbitMQ 3.10 or later): an expired
/// message leaves the delay queue only once the main exchange's queue has confirmed it, so
/// a retry or a jittered publish survives a broker restart or a lost connection in between
/// (classic dead-lettering is at-most-once). No `x-expires`: a quorum queue expires by
/// time since it was declared, whatever it holds and however often it is redeclared
/// (checked on RabbitMQ 3.10: its messages went with it), so delay queues stay, one small
/// queue per distinct delay.
/// <https://www.rabbitmq.com/docs/quorum-queues#dead-lettering>
///
/// # Errors
/// As [`declare_base`].
pub async fn declare_delay_queue(
    ch: &Channel,
    names: &Names,
    delay: Duration,
) -> Result<(), BrokerError> {
    let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    let name = short("declare delay queue", names.delay_queue(delay))?;
    let args = table(vec![
        ("x-queue-type", text("quorum")),
        // Per-queue TTL expires messages at the head in FIFO order, and every message in
        // this queue has the same TTL, so none waits behind a longer one.
        ("x-message-ttl", AMQPValue::LongLongInt(ms)),
        // No x-dead-letter-routing-key: the expired message keeps its routing key (the
        // logical queue). https://www.rabbitmq.com/docs/dlx#routing
        ("x-dead-letter-exchange", text(names.exchange())),
        ("x-dead-letter-strategy", text("at-least-once")),
        // Required by at-least-once dead-lettering.
        ("x-overflow", text("reject-publish")),
    ]);
    ch.queue_declare(name.clone(), durable(), args)
        .await
        .map_err(failed("declare delay queue"))?;
    ch.queue_bind(
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
