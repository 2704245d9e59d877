//! RabbitMQ implementation of the queue port, on lapin.
//!
//! It owns one connection per [`AmqpBroker`] (a *link*), rebuilt on demand when it drops:
//! lapin's own auto-recovery does not retry a failed publish and can give up, so it is not
//! used. Every operation takes the current link; this is the one layer that retries
//! broker calls (`cronq_shared::retry`): a transient failure (the connection or channel
//! went away) reconnects and redoes the whole operation along [`RECONNECT`], until it
//! succeeds, is refused, or the caller drops it (callers bound it:
//! `cronq_shared::broker::bounded`, or the leader's leadership); `publish` resends the
//! whole batch (consumers deduplicate by key); `consume` re-subscribes after a reconnect
//! and keeps feeding the same receiver until its token is cancelled. The topology itself
//! is in [`super::topology`].
//!
//! Invariant: `publish` and `dead_letter` succeed only once the broker confirmed each
//! message with a plain ack: a returned (`Ack(Some(_))`) or nacked message is
//! [`BrokerError::NotConfirmed`]. A dead letter leaves the dead-letter queue only after
//! its replay was confirmed.

mod consume;
mod dead_letters;
mod depths;
mod failure;
mod link;
mod nodes;
mod settle;
mod tasks;

use std::collections::{BTreeSet, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lapin::options::BasicPublishOptions;
use lapin::types::ShortString;
use lapin::{BasicProperties, Confirmation};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use self::consume::{Connect, Feeder};
use self::dead_letters::{Collect, Replay, walk};
use self::failure::{Failure, broker_failure, chain, lapin_failure};
use self::link::Link;
use self::nodes::{Node, no_answer};
use self::tasks::Tasks;
use crate::headers::{dead_letter_properties, occurrence_properties};
use crate::topology::{Replication, quantize_delay, short};
use cronq_shared::broker::{
    Broker, BrokerError, DeadLetter, Delivery, Depths, Outgoing, Pick, Ready,
};
use cronq_shared::endpoints::{CONNECT_TIMEOUT, Tls};
use cronq_shared::message::{Encoded, Stamp};
use cronq_shared::names::{Names, QueueName};
use cronq_shared::retry::{GaveUp, retry};
use cronq_shared::signing::{Keyring, seal_with};

pub use self::link::RECONNECT;

/// The broker as its errors name it.
const RABBITMQ: &str = "RabbitMQ";

/// What to do when RabbitMQ cannot be reached: this backend's hint in
/// [`BrokerError::Connect`].
const START_HINT: &str = "start it with `rabbitmq-server -detached`, or set CRONQ_AMQP_URL";

/// [`BrokerError::Connect`]: RabbitMQ at `url` (redacted) cannot be reached, or the
/// connection broke, because of `source`.
fn unreachable(url: String, source: Box<dyn std::error::Error + Send + Sync>) -> BrokerError {
    BrokerError::Connect {
        broker: RABBITMQ,
        url,
        hint: START_HINT,
        source,
    }
}

/// With several nodes, how long a publish waits for its next confirm before it gives its
/// node up and goes to another (with one there is nowhere to go). A node in a minority
/// partition or in maintenance can keep a connection open and take messages without ever
/// confirming them; a healthy node confirms a batch of thousands within a second.
pub const CONFIRM_STALL: Duration = Duration::from_secs(5);

/// How long [`AmqpBroker::close`] waits for the broker's answer: a link that went silent
/// (a partition, a hung node) must not keep a stopping process alive; the broker returns
/// the deliveries of a connection it loses all the same.
pub const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// What a retried operation is about, for its log lines: the job and key of the one
/// occurrence it concerns, if it concerns one, and how many messages.
#[derive(Debug, Default)]
struct About<'a> {
    job: &'a str,
    key: &'a str,
    messages: usize,
}

/// A message ready to go on the wire.
struct Prepared {
    key: String,
    exchange: ShortString,
    routing_key: ShortString,
    body: Vec<u8>,
    properties: BasicProperties,
}

/// A message built ahead but for its `published_at` ([`Broker::ready`]).
struct Ahead {
    key: String,
    exchange: ShortString,
    routing_key: ShortString,
    body: Encoded,
    properties: BasicProperties,
}

impl Ahead {
    /// The message published at `at`, sealed when there is a keyring.
    fn into_prepared(self, at: &Stamp, keyring: Option<&Keyring>) -> Prepared {
        Prepared {
            key: self.key,
            exchange: self.exchange,
            routing_key: self.routing_key,
            body: seal_with(keyring, self.body.stamp(at)),
            properties: self.properties,
        }
    }
}

/// A RabbitMQ broker for one namespace. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct AmqpBroker {
    inner: Arc<Inner>,
    /// Seals every message published (`Outgoing::body`).
    keyring: Option<Arc<Keyring>>,
    /// Whether this handle works on the connection of its own ([`Broker::apart`]).
    apart: bool,
}

impl std::fmt::Debug for AmqpBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpBroker")
            .field("urls", &nodes::display(&self.inner.nodes))
            .field("namespace", self.inner.names.namespace())
            .field("keyring", &self.keyring)
            .finish()
    }
}

/// The current link, if any, and the node the next connection tries first.
struct Slot {
    link: Option<Arc<Link>>,
    next: usize,
}

struct Inner {
    /// The nodes, in this process's order.
    nodes: Vec<Node>,
    /// How its queues replicate.
    replication: Replication,
    closed: AtomicBool,
    names: Names,
    link: tokio::sync::Mutex<Slot>,
    /// The connection [`Broker::apart`] publishes on, opened at its first use.
    apart: tokio::sync::Mutex<Slot>,
    /// The delay queues this process has declared.
    delays: Mutex<HashSet<Duration>>,
    /// Logical queues known to exist (declared or checked).
    known: Mutex<HashSet<QueueName>>,
    /// Every task this broker spawned; [`AmqpBroker::close`] stops them.
    tasks: Tasks,
}

/// How [`AmqpBroker::open`] connects, beyond where to.
#[derive(Debug, Clone, Copy, Default)]
struct Opening {
    /// A refused connection (nothing listens on any node) ends the attempt at once
    /// instead of being retried: for one-shot commands.
    refusal_ends: bool,
    /// The frame size asked for when the URL sets no `frame_max` (`None`: the broker's).
    frame_max: Option<u32>,
}

impl AmqpBroker {
    /// Connects to RabbitMQ at `urls` (one URL, or the node URLs of a cluster separated by
    /// commas: the first live node of a random order), for the namespace of `names`,
    /// retrying with backoff for up to [`CONNECT_TIMEOUT`].
    ///
    /// # Errors
    /// [`BrokerError::Connect`] naming the redacted URL when it is not an AMQP URL (list),
    /// or when no node accepted a connection within [`CONNECT_TIMEOUT`].
    pub async fn connect(urls: &str, names: Names) -> Result<Self, BrokerError> {
        Self::connect_with(urls, names, Replication::default(), &Tls::default()).await
    }

    /// As [`Self::connect`], declaring its queues with `replication` (how many members each
    /// quorum queue has), and reaching an `amqps://` node with the TLS files of `tls`.
    ///
    /// # Errors
    /// As [`Self::connect`]; [`BrokerError::Tls`] at once (no retry) when a TLS handshake
    /// failed for a reason the operator must fix.
    pub async fn connect_with(
        urls: &str,
        names: Names,
        replication: Replication,
        tls: &Tls,
    ) -> Result<Self, BrokerError> {
        Self::open(urls, names, replication, tls, Opening::default()).await
    }

    /// As [`Self::connect_with`], for a process that only publishes and declares (the
    /// producer): unless the URL sets `frame_max`, its connections ask for frames of at
    /// most 32 KiB, which keeps lapin's buffers at 2 MiB a connection instead of 8
    /// (`broker/nodes.rs`). Not for a process that takes deliveries: a message's headers
    /// must fit in one frame of its connection.
    ///
    /// # Errors
    /// As [`Self::connect_with`].
    pub async fn connect_publisher(
        urls: &str,
        names: Names,
        replication: Replication,
        tls: &Tls,
    ) -> Result<Self, BrokerError> {
        let opening = Opening {
            frame_max: Some(nodes::PUBLISHER_FRAME_MAX),
            ..Opening::default()
        };
        Self::open(urls, names, replication, tls, opening).await
    }

    /// As [`Self::connect_with`], for a one-shot command: when every node refuses the
    /// connection (nothing listens), it fails at once rather than wait for a broker to
    /// start; other failures (a reset, a slow handshake) are retried as usual.
    ///
    /// # Errors
    /// As [`Self::connect_with`]; at once when every node refused.
    pub async fn connect_once(
        urls: &str,
        names: Names,
        replication: Replication,
        tls: &Tls,
    ) -> Result<Self, BrokerError> {
        let opening = Opening {
            refusal_ends: true,
            ..Opening::default()
        };
        Self::open(urls, names, replication, tls, opening).await
    }

    /// Connects, retrying with backoff within [`CONNECT_TIMEOUT`], as `opening` says.
    async fn open(
        urls: &str,
        names: Names,
        replication: Replication,
        tls: &Tls,
        opening: Opening,
    ) -> Result<Self, BrokerError> {
        let Opening {
            refusal_ends,
            frame_max,
        } = opening;
        let nodes = nodes::parse(urls, tls, frame_max)?;
        let started = Instant::now();
        let opened = retry(
            RECONNECT.within(CONNECT_TIMEOUT),
            &CancellationToken::new(),
            || async {
                let left = CONNECT_TIMEOUT.saturating_sub(started.elapsed());
                match tokio::time::timeout(left, nodes::open_first(&nodes, 0))
                    .await
                    .unwrap_or_else(|_| Err(no_answer(&nodes::display(&nodes), CONNECT_TIMEOUT)))
                {
                    Ok(link) => Ok(Ok(link)),
                    // A refused handshake is refused again: no retry.
                    Err(error @ BrokerError::Tls { .. }) => Ok(Err(error)),
                    Err(error) if refusal_ends && refused(&error) => Ok(Err(error)),
                    Err(error) => Err(error),
                }
            },
            |r| tracing::debug!(error = %r.error, "broker not reachable yet, retrying"),
        )
        .await
        .map_err(GaveUp::into_last)?;
        let (at, link) = opened?;
        tracing::info!(url = %nodes[at].redacted, namespace = %names.namespace(), "connected to the broker");
        Ok(Self {
            inner: Arc::new(Inner {
                nodes,
                replication,
                closed: AtomicBool::new(false),
                names,
                link: tokio::sync::Mutex::new(Slot {
                    link: Some(Arc::new(link)),
                    next: at,
                }),
                apart: tokio::sync::Mutex::new(Slot {
                    link: None,
                    next: at,
                }),
                delays: Mutex::default(),
                known: Mutex::default(),
                tasks: Tasks::default(),
            }),
            keyring: None,
            apart: false,
        })
    }

    /// This broker, sealing every message it publishes with `keyring` (when given).
    #[must_use]
    pub fn signing(mut self, keyring: Option<Arc<Keyring>>) -> Self {
        self.keyring = keyring;
        self
    }

    /// The names this broker uses.
    pub fn names(&self) -> &Names {
        &self.inner.names
    }

    /// Closes the connection; unsettled deliveries return to their queues, subscriptions
    /// end, and later calls fail with [`BrokerError::Closed`]. Waits at most
    /// [`CLOSE_DEADLINE`] for the broker's answer, then leaves the connection to be dropped.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let close = async {
            self.inner.tasks.close().await;
            for slot in [&self.inner.link, &self.inner.apart] {
                let link = slot.lock().await.link.take();
                if let Some(link) = link {
                    let _ = link
                        .connection
                        .close(200, ShortString::from("cronq closing"))
                        .await;
                }
            }
        };
        if tokio::time::timeout(CLOSE_DEADLINE, close).await.is_err() {
            tracing::warn!(
                elapsed_ms = CLOSE_DEADLINE.as_millis() as u64,
                "the broker did not answer the close: leaving the connection"
            );
        }
    }

    /// The current link of this handle's connection, or a new one when it is gone (one
    /// attempt on each node, from the one after the lost link's; callers back off).
    async fn link(&self) -> Result<Arc<Link>, Failure> {
        let slot = if self.apart {
            &self.inner.apart
        } else {
            &self.inner.link
        };
        let mut slot = slot.lock().await;
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Failure::fatal(BrokerError::Closed));
        }
        if let Some(link) = slot.link.as_ref().filter(|l| l.is_open()) {
            return Ok(link.clone());
        }
        let nodes = &self.inner.nodes;
        if let Some(lost) = slot.link.take() {
            tracing::warn!(url = %nodes[lost.node].redacted, "broker connection lost, reconnecting");
            // Move on: the lost node is tried last.
            slot.next = (lost.node + 1) % nodes.len();
        }
        let (at, link) = nodes::open_first(nodes, slot.next)
            .await
            .map_err(|error| Failure {
                error,
                transient: true,
            })?;
        let link = Arc::new(link);
        if self.apart {
            tracing::info!(url = %nodes[at].redacted, "connected to the broker for herds");
        } else {
            tracing::info!(url = %nodes[at].redacted, "reconnected to the broker");
        }
        *slot = Slot {
            link: Some(link.clone()),
            next: at,
        };
        Ok(link)
    }

    /// Runs `f` on the current link; after a transient failure, reconnects and runs it
    /// again along [`RECONNECT`], until it succeeds, fails for good, or is dropped.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping it abandons the operation (a publish may or may not have
    /// arrived; consumers deduplicate).
    async fn retrying<T, F, Fut>(
        &self,
        op: &'static str,
        about: &About<'_>,
        f: F,
    ) -> Result<T, BrokerError>
    where
        F: Fn(Arc<Link>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let f = &f;
        let tried = retry(
            RECONNECT,
            &CancellationToken::new(),
            || async move {
                let link = match self.link().await {
                    Ok(link) => link,
                    Err(failure) => return failure.retried(),
                };
                match f(link).await {
                    Ok(v) => Ok(Ok(v)),
                    Err(failure) => failure.retried(),
                }
            },
            |r| {
                tracing::warn!(
                    op,
                    job = about.job,
                    key = about.key,
                    messages = about.messages,
                    error = %chain(r.error),
                    elapsed_ms = r.elapsed.as_millis() as u64,
                    "broker operation failed, retrying on a new connection",
                );
            },
        )
        .await;
        // RECONNECT never runs out and nothing cancels its token, so only a success or a
        // refusal ends the loop; keep the last error should that ever change.
        tried.unwrap_or_else(|gave_up| Err(gave_up.into_last()))
    }

    /// Where `out` goes (exchange, routing key) and its properties.
    fn route(
        &self,
        out: &Outgoing,
    ) -> Result<(ShortString, ShortString, BasicProperties), BrokerError> {
        let names = &self.inner.names;
        let delay = quantize_delay(out.delay);
        let (exchange, delay_ms) = if delay.is_zero() {
            (names.exchange(), None)
        } else {
            (names.delay_exchange(), Some(delay.as_millis()))
        };
        Ok((
            short("publish", exchange)?,
            short("publish", out.queue.as_str())?,
            occurrence_properties(&out.occurrence, delay_ms)?,
        ))
    }

    /// Builds `out` for the wire but for its `published_at`.
    fn ahead(&self, out: &Outgoing) -> Result<Ahead, BrokerError> {
        let (exchange, routing_key, properties) = self.route(out)?;
        Ok(Ahead {
            key: out.occurrence.key.to_string(),
            exchange,
            routing_key,
            body: Encoded::new(&out.occurrence),
            properties,
        })
    }

    /// Builds `out` for the wire as it is.
    fn prepare(&self, out: &Outgoing) -> Result<Prepared, BrokerError> {
        let (exchange, routing_key, properties) = self.route(out)?;
        Ok(Prepared {
            key: out.occurrence.key.to_string(),
            exchange,
            routing_key,
            body: out.body(self.keyring.as_deref()),
            properties,
        })
    }

    /// Publishes `batch`, each message built for the wire by `message`, until confirmed
    /// or refused; returns when each confirm arrived.
    async fn publish_built(
        &self,
        batch: &[Outgoing],
        message: impl Fn(usize) -> Result<Prepared, BrokerError>,
    ) -> Result<Vec<DateTime<Utc>>, BrokerError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let one_key = match batch {
            [one] => one.occurrence.key.to_string(),
            _ => String::new(),
        };
        let about = match batch {
            [one] => About {
                job: one.occurrence.job.as_str(),
                key: &one_key,
                messages: 1,
            },
            _ => About {
                messages: batch.len(),
                ..About::default()
            },
        };
        let message = &message;
        self.retrying("publish", &about, |link| async move {
            self.prepare_delays(&link, batch).await?;
            self.send(&link, batch.len(), message).await
        })
        .await
    }

    /// Declares the delay queues a batch needs (once per process), and checks that
    /// the logical queues of delayed messages exist: the delay queue accepts a message for
    /// any queue, so without this check an unroutable delayed message would vanish later.
    async fn prepare_delays(&self, link: &Link, batch: &[Outgoing]) -> Result<(), Failure> {
        let due: BTreeSet<Duration> = {
            let delays = self
                .inner
                .delays
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            batch
                .iter()
                .map(|o| quantize_delay(o.delay))
                .filter(|d| !d.is_zero())
                .filter(|d| !delays.contains(d))
                .collect()
        };
        let unchecked: Vec<&Outgoing> = {
            let known = self
                .inner
                .known
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            batch
                .iter()
                .filter(|o| !o.delay.is_zero() && !known.contains(&o.queue))
                .collect()
        };
        if due.is_empty() && unchecked.is_empty() {
            return Ok(());
        }
        let names = &self.inner.names;
        let mut declare = link.declare(&self.inner.replication).await?;
        for delay in due {
            declare
                .delay_queue(names, delay)
                .await
                .map_err(broker_failure)?;
            self.inner
                .delays
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(delay);
        }
        let mut missing = None;
        for out in unchecked {
            if !declare
                .exists(names, &out.queue)
                .await
                .map_err(broker_failure)?
            {
                missing = Some(out);
                break;
            }
            self.inner
                .known
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(out.queue.clone());
        }
        declare.close().await;
        match missing {
            None => Ok(()),
            Some(out) => Err(Failure::fatal(BrokerError::NotConfirmed {
                key: out.occurrence.key.to_string(),
                reason: format!("unroutable: queue {} is not declared", out.queue),
            })),
        }
    }

    /// How long a publish may wait for its next confirm before its node is given up: only
    /// with several nodes (with one, there is nowhere else to go, and a broker that holds
    /// confirms back under a memory alarm is waited for, see the producer's `CONFIRM_SLOW`).
    fn confirm_stall(&self) -> Option<Duration> {
        (self.inner.nodes.len() > 1).then_some(CONFIRM_STALL)
    }

    /// Publishes `count` messages on the link's confirm channel, each made by `message`
    /// right before it goes out (so the first leaves before the last is encoded), then
    /// awaits every confirm; returns when each confirm arrived, in order.
    async fn send(
        &self,
        link: &Link,
        count: usize,
        message: impl Fn(usize) -> Result<Prepared, BrokerError>,
    ) -> Result<Vec<DateTime<Utc>>, Failure> {
        let ch = link.publisher().await?;
        let options = BasicPublishOptions {
            // Unroutable messages come back instead of vanishing.
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let mut pending = Vec::with_capacity(count);
        let mut failure = None;
        for i in 0..count {
            let m = match message(i) {
                Ok(m) => m,
                Err(error) => {
                    failure = Some(Failure::fatal(error));
                    break;
                }
            };
            match ch
                .basic_publish(m.exchange, m.routing_key, options, &m.body, m.properties)
                .await
            {
                Ok(confirm) => pending.push((m.key, confirm)),
                Err(e) => {
                    failure = Some(lapin_failure("publish")(e));
                    break;
                }
            }
        }
        // Await every confirm, even after a failure, so none is left dangling on the
        // channel; a refusal (not retried) wins over a lost connection (retried).
        let stall = self.confirm_stall();
        let mut nacked = false;
        let mut confirmed_at = Vec::with_capacity(pending.len());
        for (key, confirm) in pending {
            let confirmed = match stall {
                None => confirm.await,
                Some(stall) => match tokio::time::timeout(stall, confirm).await {
                    Ok(confirmed) => confirmed,
                    Err(_) => {
                        // A node that takes messages but confirms none (cut off from the
                        // quorum): give up on it, so the retry goes to another node.
                        link.abandon(stall).await;
                        return Err(Failure {
                            error: BrokerError::NotConfirmed {
                                key: key.to_owned(),
                                reason: format!(
                                    "no confirm from {} for {} s: moving to another node",
                                    self.inner.nodes[link.node].redacted,
                                    stall.as_secs()
                                ),
                            },
                            transient: true,
                        });
                    }
                },
            };
            let outcome = match confirmed {
                Ok(Confirmation::Ack(None)) => {
                    confirmed_at.push(Utc::now());
                    continue;
                }
                Ok(Confirmation::Ack(Some(returned))) => {
                    let delayed =
                        returned.delivery.exchange.as_str() == self.inner.names.delay_exchange();
                    if delayed {
                        // Its delay queue vanished behind our cache (deleted by hand, or
                        // expired): forget the cache so the retry declares it again.
                        self.inner
                            .delays
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .clear();
                    }
                    Failure {
                        error: BrokerError::NotConfirmed {
                            key: key.to_owned(),
                            reason: format!(
                                "unroutable ({} {}): no queue is bound for routing key {}",
                                returned.reply_code,
                                returned.reply_text,
                                returned.delivery.routing_key
                            ),
                        },
                        transient: delayed,
                    }
                }
                Ok(Confirmation::Nack(_)) => {
                    nacked = true;
                    Failure::fatal(BrokerError::NotConfirmed {
                        key: key.to_owned(),
                        reason: "nacked by the broker".to_owned(),
                    })
                }
                Ok(Confirmation::NotRequested) => Failure {
                    error: BrokerError::NotConfirmed {
                        key: key.to_owned(),
                        reason: "the channel was not in confirm mode".to_owned(),
                    },
                    transient: true,
                },
                Err(e) => lapin_failure("await publisher confirm")(e),
            };
            if failure
                .as_ref()
                .is_none_or(|f| f.transient && !outcome.transient)
            {
                failure = Some(outcome);
            }
        }
        if nacked {
            // A channel that published to a quorum queue while its leader was moving keeps
            // nacking every later publish to it (seen on RabbitMQ 3.10 after its leader's
            // node was killed): the retry gets a fresh channel.
            link.reset_publisher().await;
        }
        failure.map_or(Ok(confirmed_at), Err)
    }
}

impl Connect for AmqpBroker {
    fn link(&self) -> impl Future<Output = Result<Arc<Link>, Failure>> + Send {
        AmqpBroker::link(self)
    }

    fn names(&self) -> &Names {
        AmqpBroker::names(self)
    }

    fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }

    fn replication(&self) -> &Replication {
        &self.inner.replication
    }
}

#[async_trait]
impl Broker for AmqpBroker {
    async fn declare(&self, queues: &BTreeSet<QueueName>) -> Result<(), BrokerError> {
        self.retrying("declare", &About::default(), |link| async move {
            let names = &self.inner.names;
            let mut declare = link.declare(&self.inner.replication).await?;
            declare.base(names).await.map_err(broker_failure)?;
            for q in queues {
                declare.queue(names, q).await.map_err(broker_failure)?;
            }
            declare.close().await;
            Ok(())
        })
        .await?;
        self.inner
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(queues.iter().cloned());
        Ok(())
    }

    async fn publish(&self, batch: &[Outgoing]) -> Result<(), BrokerError> {
        self.publish_timed(batch).await.map(drop)
    }

    async fn publish_timed(&self, batch: &[Outgoing]) -> Result<Vec<DateTime<Utc>>, BrokerError> {
        self.publish_built(batch, |i| self.prepare(&batch[i])).await
    }

    fn apart(&self) -> Option<Arc<dyn Broker>> {
        Some(Arc::new(Self {
            apart: true,
            ..self.clone()
        }))
    }

    fn ready(&self, messages: Vec<Outgoing>) -> Ready {
        match messages.iter().map(|m| self.ahead(m)).collect() {
            Ok(ahead) => Ready::with_wire::<Vec<Ahead>>(messages, ahead),
            // Refused with its error when published.
            Err(_) => Ready::plain(messages),
        }
    }

    async fn publish_ready(
        &self,
        ready: &Ready,
        at: DateTime<Utc>,
    ) -> Result<Vec<DateTime<Utc>>, BrokerError> {
        let Some(ahead) = ready.take_wire::<Vec<Ahead>>() else {
            return self.publish_timed(&ready.stamped(at)).await;
        };
        // The first try sends what was built ahead; a try again builds anew.
        let ahead = Mutex::new(ahead.into_iter().map(Some).collect::<Vec<_>>());
        let batch = ready.messages();
        let (stamp, keyring) = (Stamp::new(at), self.keyring.as_deref());
        self.publish_built(batch, |i| {
            let built = ahead
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_mut(i)
                .and_then(Option::take);
            let built = match built {
                Some(built) => built,
                None => self.ahead(&batch[i])?,
            };
            Ok(built.into_prepared(&stamp, keyring))
        })
        .await
    }

    async fn consume(
        &self,
        queues: &[QueueName],
        prefetch: u16,
        token: CancellationToken,
    ) -> Result<mpsc::Receiver<Delivery>, BrokerError> {
        let limit = cronq_shared::broker::in_flight_limit(prefetch);
        let sub = self
            .retrying("consume", &About::default(), |link| async move {
                consume::subscribe(self, &link, queues, prefetch).await
            })
            .await?;
        let (tx, rx) = mpsc::channel(limit);
        let feeder = Feeder {
            broker: self.clone(),
            queues: queues.to_vec(),
            prefetch,
            // Bounds unsettled deliveries over all queues of the subscription: the
            // broker's prefetch counts per consumer, one per queue.
            permits: Arc::new(Semaphore::new(limit)),
            tx,
            token,
        };
        // The feeder ends when the token is cancelled, the receiver is dropped or the
        // broker closes; it owns nothing that outlives that.
        self.inner.tasks.spawn(feeder.run(sub));
        Ok(rx)
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), BrokerError> {
        let names = &self.inner.names;
        let key = letter.key.clone().unwrap_or_else(|| "(no key)".to_owned());
        let message = || {
            Ok(Prepared {
                key: key.clone(),
                exchange: short("dead-letter", names.dead_letter_exchange())?,
                routing_key: short(
                    "dead-letter",
                    letter.queue.as_ref().map_or("", QueueName::as_str),
                )?,
                body: letter.body.clone(),
                properties: dead_letter_properties(letter)?,
            })
        };
        // Refused at once, before any connection, when it cannot be sent at all.
        drop(message()?);
        let about = About {
            job: letter.job.as_deref().unwrap_or(""),
            key: &key,
            messages: 1,
        };
        self.retrying("dead-letter", &about, |link| async move {
            // Make sure the dead-letter queue exists, else the letter is unroutable.
            let mut declare = link.declare(&self.inner.replication).await?;
            declare.base(names).await.map_err(broker_failure)?;
            declare.close().await;
            self.send(&link, 1, |_| message()).await.map(drop)
        })
        .await
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, BrokerError> {
        self.retrying("list dead letters", &About::default(), |link| async move {
            let mut letters = Vec::new();
            walk(
                self.names(),
                &self.inner.replication,
                &link,
                Collect(&mut letters),
            )
            .await?;
            // A quorum queue puts the letters a listing held back in another order than
            // their own (RabbitMQ 3.10): oldest first is by the time each was
            // dead-lettered (a stable sort: the queue's order among letters of one instant).
            letters.sort_by_key(|l| l.dead_lettered_at);
            Ok(letters)
        })
        .await
    }

    async fn replay(
        &self,
        select: &(dyn for<'l> Fn(&'l DeadLetter) -> Pick + Send + Sync),
    ) -> Result<usize, BrokerError> {
        // One walk, not retried: a letter replayed but not yet acked when the walk breaks
        // stays in the dead-letter queue (and may be replayed twice; consumers dedup).
        let link = self.link().await.map_err(|f| f.error)?;
        let mut replay = Replay {
            broker: self,
            select,
            replayed: 0,
        };
        walk(self.names(), &self.inner.replication, &link, &mut replay)
            .await
            .map_err(|f| f.error)?;
        Ok(replay.replayed)
    }

    async fn depths(&self, queues: &[QueueName]) -> Result<Depths, BrokerError> {
        let names = self.names();
        let mut full: Vec<String> = queues.iter().map(|q| names.queue(q)).collect();
        full.push(names.dead_letter_queue());
        let mut depths = self.depths_by_name(&full).await?;
        let dead_letters = depths.pop();
        Ok(Depths {
            queues: depths,
            dead_letters,
        })
    }

    async fn close(&self) {
        AmqpBroker::close(self).await;
    }
}

/// Whether `error` comes from a refused TCP connection (nothing listens at the address).
fn refused(error: &BrokerError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = e.source();
    }
    false
}
