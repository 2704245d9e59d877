//! In-memory implementation of the queue port, for `cronq standalone` and fast tests.
//!
//! It owns everything a single process needs from RabbitMQ: one FIFO per logical queue,
//! per-subscription prefetch, ack/requeue (a requeued message goes back to the head of its
//! queue, marked redelivered, like a quorum queue's returns), delayed messages (timer
//! tasks the broker owns, stopped when it is dropped), and a dead-letter list. It leaves persistence and cross-process delivery to
//! the RabbitMQ backend (`cronq-rabbitmq`).
//!
//! Invariant: a delivered message is either settled exactly once (ack or requeue) or,
//! when its [`Acker`] is dropped unsettled, requeued as if its channel had closed; so no
//! message is ever lost or delivered to two subscribers at once. No `Delivery` is dropped
//! while the state lock is held (dropping one may requeue, which takes the lock).

use std::any::Any;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use cronq_shared::broker::{Acker, Broker, BrokerError, DeadLetter, Delivery, Outgoing, Pick};
use cronq_shared::names::QueueName;
use cronq_shared::signing::Keyring;

/// A broker that lives in this process only. Cheap to clone: clones share one state.
#[derive(Clone, Default)]
pub struct MemoryBroker {
    inner: Arc<Inner>,
    /// Seals every message published (`Outgoing::body`).
    keyring: Option<Arc<Keyring>>,
}

impl std::fmt::Debug for MemoryBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBroker")
            .field("keyring", &self.keyring)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    /// Every task the broker spawned (delay timers, subscription ends). They hold only a
    /// weak reference to it, and stop when `token` is cancelled, on drop.
    tasks: TaskTracker,
    token: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

#[derive(Default)]
struct State {
    /// Ready messages per declared logical queue.
    queues: HashMap<QueueName, VecDeque<Stored>>,
    /// The dead-letter queue, oldest first, each with a unique id (for replay).
    dead: VecDeque<(u64, DeadLetter)>,
    subscriptions: Vec<Subscription>,
    next_id: u64,
    /// Where the next dispatch round starts, so subscribers share the work.
    rotate: usize,
}

/// A message waiting in a queue.
struct Stored {
    body: Vec<u8>,
    redelivered: bool,
}

struct Subscription {
    id: u64,
    queues: Vec<QueueName>,
    limit: usize,
    unacked: usize,
    tx: mpsc::Sender<Delivery>,
}

/// Values that must be dropped only after the state lock is released.
type Garbage = Vec<Box<dyn Any + Send>>;

/// A small error for misuse of the in-memory broker (a second settle, an unknown queue).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct MemoryError(String);

fn protocol(op: &'static str, message: String) -> BrokerError {
    BrokerError::Protocol {
        op,
        source: Box::new(MemoryError(message)),
    }
}

impl MemoryBroker {
    /// An empty broker: no queues, no dead letters.
    pub fn new() -> Self {
        Self::default()
    }

    /// This broker, sealing every message it publishes with `keyring` (when given).
    #[must_use]
    pub fn signing(mut self, keyring: Option<Arc<Keyring>>) -> Self {
        self.keyring = keyring;
        self
    }

    /// How many messages wait (ready, not delivered) in a logical queue; `None` when the
    /// queue was never declared. For tests and `standalone` diagnostics.
    pub fn ready(&self, queue: &QueueName) -> Option<usize> {
        let state = self.inner.lock();
        state.queues.get(queue).map(VecDeque::len)
    }

    /// How many live subscriptions include a logical queue (RabbitMQ's consumer count).
    /// For tests that wait until a fleet is subscribed.
    pub fn subscribers(&self, queue: &QueueName) -> usize {
        let state = self.inner.lock();
        state
            .subscriptions
            .iter()
            .filter(|s| !s.tx.is_closed() && s.queues.contains(queue))
            .count()
    }

    /// Puts a raw body on a declared queue as a foreign publisher could on RabbitMQ (not
    /// necessarily an occurrence). Returns `false` when the queue was never declared. For
    /// tests of how consumers treat malformed messages.
    pub fn publish_raw(&self, queue: &QueueName, body: Vec<u8>) -> bool {
        self.inner.with_state(|state, _| state.enqueue(queue, body))
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state consistent (every mutation is a
        // single push or pop), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `task` as one of the broker's tasks, until it ends or the broker is dropped.
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let token = self.token.clone();
        self.tasks.spawn(async move {
            token.run_until_cancelled(task).await;
        });
    }

    /// Runs `f` on the state, dispatches what became deliverable, and drops what must not
    /// be dropped under the lock only after releasing it.
    fn with_state<R>(self: &Arc<Self>, f: impl FnOnce(&mut State, &mut Garbage) -> R) -> R {
        let mut garbage = Garbage::new();
        let out = {
            let mut state = self.lock();
            let out = f(&mut state, &mut garbage);
            state.dispatch(self, &mut garbage);
            out
        };
        drop(garbage);
        out
    }

    /// Puts a settled-by-requeue (or abandoned) message back at the head of its queue.
    fn give_back(self: &Arc<Self>, sub: u64, queue: &QueueName, body: Vec<u8>) {
        self.with_state(|state, _| {
            state.release(sub);
            if let Some(q) = state.queues.get_mut(queue) {
                q.push_front(Stored {
                    body,
                    redelivered: true,
                });
            }
        });
    }
}

impl State {
    fn release(&mut self, sub: u64) {
        if let Some(s) = self.subscriptions.iter_mut().find(|s| s.id == sub) {
            s.unacked = s.unacked.saturating_sub(1);
        }
    }

    fn enqueue(&mut self, queue: &QueueName, body: Vec<u8>) -> bool {
        match self.queues.get_mut(queue) {
            Some(q) => {
                q.push_back(Stored {
                    body,
                    redelivered: false,
                });
                true
            }
            None => false,
        }
    }

    /// Hands ready messages to subscriptions with room, round robin, until no subscription
    /// with room has a non-empty queue.
    fn dispatch(&mut self, inner: &Arc<Inner>, garbage: &mut Garbage) {
        loop {
            let n = self.subscriptions.len();
            if n == 0 {
                return;
            }
            let mut progressed = false;
            for i in 0..n {
                let idx = (self.rotate + i) % n;
                if self.offer(idx, inner, garbage) {
                    progressed = true;
                    self.rotate = (idx + 1) % n.max(1);
                    break;
                }
            }
            if !progressed {
                return;
            }
        }
    }

    /// Delivers one message to subscription `idx` if it has room and a queue with a
    /// message; removes it when its receiver is gone. Returns whether anything changed.
    fn offer(&mut self, idx: usize, inner: &Arc<Inner>, garbage: &mut Garbage) -> bool {
        let sub = &self.subscriptions[idx];
        if sub.tx.is_closed() {
            let gone = self.subscriptions.remove(idx);
            garbage.push(Box::new(gone.tx));
            return true;
        }
        if sub.unacked >= sub.limit {
            return false;
        }
        let Some(queue) = sub
            .queues
            .iter()
            .find(|q| self.queues.get(*q).is_some_and(|m| !m.is_empty()))
            .cloned()
        else {
            return false;
        };
        let Ok(permit) = sub.tx.try_reserve() else {
            // Full (the consumer holds more than `limit` unread, which cannot happen while
            // `unacked < limit`) or closed: leave the message where it is.
            return false;
        };
        let sub_id = sub.id;
        let Some(stored) = self.queues.get_mut(&queue).and_then(VecDeque::pop_front) else {
            return false;
        };
        let acker = MemoryAcker {
            inner: Arc::downgrade(inner),
            sub: sub_id,
            queue: queue.clone(),
            body: stored.body.clone(),
            settled: AtomicBool::new(false),
        };
        permit.send(Delivery {
            queue,
            body: stored.body,
            redelivered: stored.redelivered,
            acker: Box::new(acker),
        });
        self.subscriptions[idx].unacked += 1;
        true
    }
}

/// Settles one in-memory delivery; requeues it when dropped unsettled.
struct MemoryAcker {
    inner: Weak<Inner>,
    sub: u64,
    queue: QueueName,
    body: Vec<u8>,
    settled: AtomicBool,
}

impl MemoryAcker {
    fn settle(&self, op: &'static str) -> Result<Arc<Inner>, BrokerError> {
        if self.settled.swap(true, Ordering::AcqRel) {
            return Err(protocol(
                op,
                format!(
                    "delivery from queue {} was already acked or requeued",
                    self.queue
                ),
            ));
        }
        self.inner.upgrade().ok_or(BrokerError::Closed)
    }
}

#[async_trait]
impl Acker for MemoryAcker {
    async fn ack(&self) -> Result<(), BrokerError> {
        let inner = self.settle("ack")?;
        inner.with_state(|state, _| state.release(self.sub));
        Ok(())
    }

    async fn requeue(&self) -> Result<(), BrokerError> {
        let inner = self.settle("requeue")?;
        inner.give_back(self.sub, &self.queue, self.body.clone());
        Ok(())
    }
}

impl Drop for MemoryAcker {
    fn drop(&mut self) {
        if self.settled.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(inner) = self.inner.upgrade() {
            inner.give_back(self.sub, &self.queue, std::mem::take(&mut self.body));
        }
    }
}

#[async_trait]
impl Broker for MemoryBroker {
    async fn declare(&self, queues: &BTreeSet<QueueName>) -> Result<(), BrokerError> {
        self.inner.with_state(|state, _| {
            for q in queues {
                state.queues.entry(q.clone()).or_default();
            }
        });
        Ok(())
    }

    async fn publish(&self, batch: &[Outgoing]) -> Result<(), BrokerError> {
        self.inner.with_state(|state, _| {
            // Like a mandatory publish: refuse the batch if any message has no queue, and
            // enqueue nothing in that case (the caller retries the whole batch anyway).
            if let Some(out) = batch.iter().find(|o| !state.queues.contains_key(&o.queue)) {
                return Err(BrokerError::NotConfirmed {
                    key: out.occurrence.key.to_string(),
                    reason: format!("unroutable: no queue {} is declared", out.queue),
                });
            }
            for out in batch {
                if out.delay.is_zero() {
                    state.enqueue(&out.queue, out.body(self.keyring.as_deref()));
                } else {
                    let inner = Arc::downgrade(&self.inner);
                    let (queue, body, delay) = (
                        out.queue.clone(),
                        out.body(self.keyring.as_deref()),
                        out.delay,
                    );
                    // The timer holds only a weak reference: a dropped broker drops its
                    // delayed messages, as a stopped standalone process would.
                    self.inner.spawn(async move {
                        tokio::time::sleep(delay).await;
                        if let Some(inner) = inner.upgrade() {
                            inner.with_state(|state, _| state.enqueue(&queue, body));
                        }
                    });
                }
            }
            Ok(())
        })
    }

    async fn consume(
        &self,
        queues: &[QueueName],
        prefetch: u16,
        token: CancellationToken,
    ) -> Result<mpsc::Receiver<Delivery>, BrokerError> {
        let limit = cronq_shared::broker::in_flight_limit(prefetch);
        let (tx, rx) = mpsc::channel(limit);
        let id = self.inner.with_state(|state, _| {
            // Consuming declares what it serves, as the AMQP broker does.
            for q in queues {
                state.queues.entry(q.clone()).or_default();
            }
            state.next_id += 1;
            let id = state.next_id;
            state.subscriptions.push(Subscription {
                id,
                queues: queues.to_vec(),
                limit,
                unacked: 0,
                tx,
            });
            id
        });
        let inner = Arc::downgrade(&self.inner);
        // Ends the subscription when the token is cancelled: dropping the sender closes
        // the receiver once it has drained what was already delivered.
        self.inner.spawn(async move {
            token.cancelled().await;
            if let Some(inner) = inner.upgrade() {
                inner.with_state(|state, garbage| {
                    if let Some(pos) = state.subscriptions.iter().position(|s| s.id == id) {
                        garbage.push(Box::new(state.subscriptions.remove(pos).tx));
                    }
                });
            }
        });
        Ok(rx)
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), BrokerError> {
        self.inner.with_state(|state, _| {
            state.next_id += 1;
            let id = state.next_id;
            state.dead.push_back((id, letter.clone()));
        });
        Ok(())
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, BrokerError> {
        let state = self.inner.lock();
        Ok(state.dead.iter().map(|(_, l)| l.clone()).collect())
    }

    async fn replay(
        &self,
        select: &(dyn for<'l> Fn(&'l DeadLetter) -> Pick + Send + Sync),
    ) -> Result<usize, BrokerError> {
        let snapshot: Vec<(u64, DeadLetter)> = self.inner.lock().dead.iter().cloned().collect();
        let mut replayed = 0;
        for (id, letter) in snapshot {
            match select(&letter) {
                Pick::Keep => continue,
                Pick::Replay(out) => {
                    self.publish(std::slice::from_ref(&*out)).await?;
                    replayed += 1;
                }
                Pick::Remove => {}
            }
            self.inner.with_state(|state, _| {
                state.dead.retain(|(i, _)| *i != id);
            });
        }
        Ok(replayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropped_acker_requeues() {
        let broker = MemoryBroker::new();
        let q = QueueName::new("a").unwrap();
        broker.declare(&BTreeSet::from([q.clone()])).await.unwrap();
        broker.inner.with_state(|s, _| s.enqueue(&q, b"x".to_vec()));
        let token = CancellationToken::new();
        let mut rx = broker
            .consume(std::slice::from_ref(&q), 1, token.clone())
            .await
            .unwrap();
        let first = rx.recv().await.unwrap();
        assert!(!first.redelivered);
        drop(first);
        let again = rx.recv().await.unwrap();
        assert!(again.redelivered);
        again.acker.ack().await.unwrap();
        assert!(again.acker.ack().await.is_err());
        token.cancel();
        assert!(rx.recv().await.is_none());
        assert_eq!(broker.ready(&q), Some(0));
    }

    #[tokio::test]
    async fn dropped_receiver_returns_buffered_deliveries() {
        let broker = MemoryBroker::new();
        let q = QueueName::new("a").unwrap();
        broker.declare(&BTreeSet::from([q.clone()])).await.unwrap();
        for _ in 0..3 {
            broker.inner.with_state(|s, _| s.enqueue(&q, b"x".to_vec()));
        }
        let rx = broker
            .consume(std::slice::from_ref(&q), 2, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(broker.ready(&q), Some(1));
        drop(rx);
        assert_eq!(broker.ready(&q), Some(3));
    }
}
