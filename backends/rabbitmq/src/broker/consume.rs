//! Consuming from RabbitMQ: one channel per subscription, re-subscribed after a lost
//! connection or a broker-side cancel, feeding one receiver until the token is cancelled.
//!
//! Invariant: at most `prefetch` deliveries of a subscription are unsettled at once (a
//! semaphore permit travels with each delivery, since the broker's prefetch counts per
//! queue); a delivery dropped unsettled is requeued; a cancelled subscription hands back
//! what was on its way and keeps its channel open until every delivery handed out is
//! settled, so none is acked or requeued behind its consumer's back. Settlements go
//! through the channel's settler (`settle.rs`), which coalesces acks.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream, SelectAll};
use lapin::Channel;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{FieldTable, ShortString};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::failure::{Failure, broker_failure, chain, channel_gone, lapin_failure};
use super::link::{Link, RECONNECT};
use super::settle::{Settlement, Settler};
use super::tasks::Tasks;
use crate::topology::{Replication, short};
use cronq_shared::broker::{Acker, BrokerError, Delivery};
use cronq_shared::names::{Names, QueueName};
use cronq_shared::retry::retry;

/// How long a cancelled subscription waits for the broker's `cancel-ok` while it hands
/// back messages that were already on their way.
const CANCEL_DRAIN: Duration = Duration::from_secs(2);

/// What a subscription needs from the broker that owns it: a live link (reconnecting when
/// it is gone), its names, and the tasks it may spawn. The broker implements it, so this
/// module depends on the broker's abilities, not on the broker.
pub(super) trait Connect: Clone + Send + Sync + 'static {
    /// The current link, or a new one when it is gone (one attempt).
    fn link(&self) -> impl Future<Output = Result<Arc<Link>, Failure>> + Send;
    /// The namespace's names.
    fn names(&self) -> &Names;
    /// The tasks the broker owns.
    fn tasks(&self) -> &Tasks;
    /// How its queues replicate.
    fn replication(&self) -> &Replication;
}

/// Declares `queues` and starts one consumer per queue on a new channel of `link`.
pub(super) async fn subscribe(
    broker: &impl Connect,
    link: &Link,
    queues: &[QueueName],
    prefetch: u16,
) -> Result<Subscription, Failure> {
    let names = broker.names();
    let mut declare = link.declare(broker.replication()).await?;
    declare.base(names).await.map_err(broker_failure)?;
    for q in queues {
        declare.queue(names, q).await.map_err(broker_failure)?;
    }
    declare.close().await;
    let ch = link.channel().await?;
    match start_consumers(names, &ch, queues, prefetch).await {
        Ok(consumers) => {
            let guard = Arc::new(ChannelGuard {
                channel: ch,
                tasks: broker.tasks().clone(),
            });
            Ok(Subscription {
                settler: Settler::spawn(broker.tasks(), prefetch, Arc::clone(&guard)),
                guard,
                consumers,
            })
        }
        Err(failure) => {
            // Consumers already started on it must not hold messages unacked.
            let _ = ch.close(200, ShortString::from("subscribe failed")).await;
            Err(failure)
        }
    }
}

async fn start_consumers(
    names: &Names,
    ch: &Channel,
    queues: &[QueueName],
    prefetch: u16,
) -> Result<Vec<(QueueName, ShortString, lapin::Consumer)>, Failure> {
    // Per consumer, not global: RabbitMQ 4.3 rejects global QoS.
    ch.basic_qos(prefetch, BasicQosOptions { global: false })
        .await
        .map_err(lapin_failure("set prefetch"))?;
    let mut consumers = Vec::with_capacity(queues.len());
    for q in queues {
        let tag = short(
            "consume",
            format!("cronq-{}", uuid::Uuid::new_v4().simple()),
        )?;
        let consumer = ch
            .basic_consume(
                short("consume", names.queue(q))?,
                tag.clone(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(lapin_failure("consume"))?;
        consumers.push((q.clone(), tag, consumer));
    }
    Ok(consumers)
}

/// Closes a consuming channel once the subscription and every delivery from it are done,
/// so anything still unacked returns to its queue.
struct ChannelGuard {
    channel: Channel,
    /// The broker's tasks: the close runs as one of them (a `Drop` cannot wait).
    tasks: Tasks,
}

impl Drop for ChannelGuard {
    fn drop(&mut self) {
        let ch = self.channel.clone();
        if ch.status().connected() {
            self.tasks.spawn(async move {
                let _ = ch.close(200, ShortString::from("subscription done")).await;
            });
        }
    }
}

pub(super) struct Subscription {
    guard: Arc<ChannelGuard>,
    /// Sends the channel's acks and requeues, in tag order (it keeps the guard too).
    settler: Settler,
    consumers: Vec<(QueueName, ShortString, lapin::Consumer)>,
}

/// Settles one AMQP delivery through its channel's [`Settler`]; requeues it when dropped
/// unsettled.
struct AmqpAcker {
    /// Taken by the one settlement (or by the requeue of a drop): what the settler sends,
    /// and the prefetch permit it gives back.
    unsettled: Mutex<Option<Unsettled>>,
    tag: u64,
    settler: Settler,
}

/// What an unsettled delivery holds until it is settled.
struct Unsettled {
    acker: lapin::Acker,
    permit: OwnedSemaphorePermit,
}

impl AmqpAcker {
    /// What the delivery holds, if it was not settled yet; then it is.
    fn take(&self) -> Option<Unsettled> {
        self.unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Hands the settlement to the settler. An ack returns at once (the settler sends it
    /// with the acks around it); a requeue returns once its frame went out.
    async fn settle(&self, op: &'static str, requeue: bool) -> Result<(), BrokerError> {
        let Some(Unsettled { acker, permit }) = self.take() else {
            return Err(BrokerError::Protocol {
                op,
                source: "the delivery was already acked or requeued".into(),
            });
        };
        let (sent, result) = if requeue {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        // Moved to the settler, not cloned: a lapin acker holds its channel's handles.
        let handed = acker.usable()
            && self.settler.send(Settlement {
                tag: self.tag,
                acker,
                requeue,
                sent,
            });
        drop(permit);
        if !handed {
            return Err(channel_gone(op));
        }
        match result {
            None => Ok(()),
            Some(rx) => match rx.await {
                Ok(Ok(true)) => Ok(()),
                Ok(Ok(false)) | Err(_) => Err(channel_gone(op)),
                Ok(Err(e)) => Err(BrokerError::Protocol {
                    op,
                    source: Box::new(e),
                }),
            },
        }
    }
}

#[async_trait]
impl Acker for AmqpAcker {
    async fn ack(&self) -> Result<(), BrokerError> {
        self.settle("ack", false).await
    }

    async fn requeue(&self) -> Result<(), BrokerError> {
        self.settle("requeue", true).await
    }
}

impl Drop for AmqpAcker {
    fn drop(&mut self) {
        // Dropped by its owner: no lock is needed to see whether it was settled.
        let unsettled = self
            .unsettled
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(Unsettled { acker, .. }) = unsettled else {
            return;
        };
        if !acker.usable() {
            return;
        }
        // A `Drop` cannot wait: the settler sends the requeue.
        self.settler.send(Settlement {
            tag: self.tag,
            acker,
            requeue: true,
            sent: None,
        });
    }
}

/// Feeds one subscription's deliveries into the receiver, re-subscribing after a lost
/// connection or a broker-side cancel, until the token is cancelled or the receiver is
/// dropped.
pub(super) struct Feeder<C> {
    pub(super) broker: C,
    pub(super) queues: Vec<QueueName>,
    pub(super) prefetch: u16,
    pub(super) permits: Arc<Semaphore>,
    pub(super) tx: mpsc::Sender<Delivery>,
    pub(super) token: CancellationToken,
}

enum End {
    /// Stop for good: token cancelled or receiver dropped.
    Stop,
    /// The subscription broke: subscribe again.
    Lost,
}

type Item = (QueueName, Option<lapin::Result<lapin::message::Delivery>>);

impl<C: Connect> Feeder<C> {
    /// Runs until the token is cancelled or the receiver is dropped.
    pub(super) async fn run(self, mut sub: Subscription) {
        loop {
            match self.feed(sub).await {
                End::Stop => return,
                End::Lost => {}
            }
            sub = match self.resubscribe().await {
                Some(sub) => sub,
                None => return,
            };
            tracing::info!(queues = ?self.queues, "re-subscribed to the broker");
        }
    }

    /// Subscribes again along [`RECONNECT`]; `None` when the broker was closed or the
    /// token cancelled first.
    async fn resubscribe(&self) -> Option<Subscription> {
        // Every failure but a closed broker is retried: a refused subscription (a queue
        // deleted meanwhile) passes once the queue is declared again.
        let tried = retry(
            RECONNECT,
            &self.token,
            || async {
                let sub = match self.broker.link().await {
                    Ok(link) => {
                        subscribe(&self.broker, &link, &self.queues, self.prefetch).await
                    }
                    Err(f) => Err(f),
                };
                match sub {
                    Ok(sub) => Ok(Some(sub)),
                    Err(f) if matches!(f.error, BrokerError::Closed) => Ok(None),
                    Err(f) => Err(f),
                }
            },
            |r| tracing::warn!(error = %chain(&r.error.error), queues = ?self.queues, "cannot re-subscribe yet, retrying"),
        )
        .await;
        tried.ok().flatten()
    }

    /// Feeds `sub` until it breaks or the feeder must stop, then cancels its consumers and
    /// hands back what was still on its way.
    async fn feed(&self, sub: Subscription) -> End {
        let Subscription {
            guard,
            settler,
            consumers,
        } = sub;
        let tags: Vec<ShortString> = consumers.iter().map(|(_, t, _)| t.clone()).collect();
        let mut merged = merge(consumers);
        let end = self.forward(&mut merged, &settler).await;
        // Stop intake on this channel; deliveries already handed out stay unacked until
        // settled (the guard keeps the channel open for them).
        for tag in tags {
            let _ = guard
                .channel
                .basic_cancel(tag, BasicCancelOptions::default())
                .await;
        }
        // Hand back what was already on its way to us (through the settler, so that its
        // acks can move past these tags).
        let drain = async {
            while let Some((_, item)) = merged.next().await {
                if let Some(Ok(d)) = item {
                    settler.send(Settlement {
                        tag: d.delivery_tag,
                        acker: d.acker,
                        requeue: true,
                        sent: None,
                    });
                }
            }
        };
        let _ = tokio::time::timeout(CANCEL_DRAIN, drain).await;
        end
    }

    /// Sends each delivery of `merged` to the receiver, one permit each, until the token is
    /// cancelled, the receiver is dropped or a consumer ends.
    async fn forward(
        &self,
        merged: &mut SelectAll<BoxStream<'static, Item>>,
        settler: &Settler,
    ) -> End {
        loop {
            let permit = tokio::select! {
                biased;
                () = self.token.cancelled() => return End::Stop,
                permit = self.permits.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return End::Stop,
                },
            };
            let item = tokio::select! {
                biased;
                () = self.token.cancelled() => return End::Stop,
                item = merged.next() => item,
            };
            match item {
                Some((queue, Some(Ok(d)))) => {
                    let delivery = Delivery {
                        queue,
                        body: d.data,
                        redelivered: d.redelivered,
                        acker: Box::new(AmqpAcker {
                            unsettled: Mutex::new(Some(Unsettled {
                                acker: d.acker,
                                permit,
                            })),
                            tag: d.delivery_tag,
                            settler: settler.clone(),
                        }),
                    };
                    if self.tx.send(delivery).await.is_err() {
                        return End::Stop;
                    }
                }
                Some((queue, Some(Err(e)))) => {
                    tracing::warn!(queue = %queue, error = %chain(&e), "consumer failed, re-subscribing");
                    return End::Lost;
                }
                Some((queue, None)) => {
                    tracing::warn!(queue = %queue, "consumer ended by the broker, re-subscribing");
                    return End::Lost;
                }
                None => return End::Lost,
            }
        }
    }
}

/// One stream of every consumer's deliveries, each tagged with its queue. Each consumer's
/// stream ends with one `None` item, so the end of any one consumer (a broker-side cancel)
/// is seen, not silently dropped from the merge.
fn merge(
    consumers: Vec<(QueueName, ShortString, lapin::Consumer)>,
) -> SelectAll<BoxStream<'static, Item>> {
    let streams: Vec<BoxStream<'static, Item>> = consumers
        .into_iter()
        .map(|(q, _, c)| {
            let q2 = q.clone();
            c.map(move |d| (q.clone(), Some(d)))
                .chain(stream::once(async move { (q2, None) }))
                .boxed()
        })
        .collect();
    stream::select_all(streams)
}
