//! Settling the deliveries of one consuming channel: acks are coalesced into one
//! `basic.ack` with `multiple` over the longest settled prefix of delivery tags, requeues
//! go out at once, each on its own.
//!
//! Why: a quorum queue turns every `basic.ack` frame into a settle command of its Raft log;
//! one frame for a run of deliveries is one command for all of them, and it reopens the
//! prefetch window in one step, so the next deliveries arrive together (and their claims
//! reach the store together). A settled prefix shorter than the channel's prefetch waits up
//! to [`LINGER`] for the acks that follow it before its frame goes out: under load, one
//! frame then covers a whole window, as a consumer that acks every `prefetch` deliveries
//! does, rather than the few deliveries of one claim's batch; a lone delivery is acked
//! [`LINGER`] after its consumer acked it.
//!
//! Invariant: a delivery is acked only after its consumer acked it. RabbitMQ numbers the
//! deliveries of a channel 1, 2, 3, … and an ack with `multiple` settles every delivery up
//! to its tag, so the settler acks up to tag T only when every tag up to T was settled
//! here: a delivery still on its way (in lapin's buffer, in the subscription's receiver, or
//! being claimed) is a gap that stops the prefix. An ack waiting behind a gap for longer
//! than [`STRAGGLE`] goes out on its own. A requeue is sent before any ack that follows
//! it, from this one task, so an ack with `multiple` never covers a delivery meant to be
//! requeued. Unsettled deliveries return to their queue when the channel closes, as before.

use std::collections::BTreeMap;
use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicNackOptions};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::tasks::Tasks;

/// How long an ack may wait behind an earlier delivery that is not settled yet before it
/// is sent on its own.
const STRAGGLE: Duration = Duration::from_millis(100);

/// How long a settled prefix shorter than the prefetch waits for more acks before
/// its frame goes out. Far below anything a consumer waits on (the broker's redelivery of
/// an unacked message to a ledger that acks it as a duplicate costs more than the frame
/// saved only when a consumer dies in it).
const LINGER: Duration = Duration::from_millis(5);

/// One delivery settled by its consumer.
pub(super) struct Settlement {
    pub(super) tag: u64,
    pub(super) acker: lapin::Acker,
    /// Requeue it (sent at once); else ack it (coalesced).
    pub(super) requeue: bool,
    /// Told whether the frame went out, for a settlement whose caller waits for it.
    pub(super) sent: Option<oneshot::Sender<lapin::Result<bool>>>,
}

/// Sends a channel's settlements to its settler task. Cheap to clone.
#[derive(Clone)]
pub(super) struct Settler(mpsc::UnboundedSender<Settlement>);

impl Settler {
    /// A settler whose task runs among the broker's `tasks`, for a channel whose
    /// consumers each have `prefetch`. The task ends when every clone of the settler is
    /// dropped, or when the broker closes, after sending what it holds (acks beyond a gap
    /// each on its own); `keep` is held until then (the channel's guard, which closes the
    /// channel when dropped).
    pub(super) fn spawn<K: Send + 'static>(tasks: &Tasks, prefetch: u16, keep: K) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let pending = Pending {
            frame: usize::from(prefetch).max(1),
            ..Pending::default()
        };
        tasks.spawn_stoppable(|stop| async move {
            pending.run(rx, stop).await;
            drop(keep);
        });
        Self(tx)
    }

    /// Hands `settlement` to the task; false when the task has ended (the channel is gone:
    /// the broker requeues what it did not get an ack for).
    pub(super) fn send(&self, settlement: Settlement) -> bool {
        self.0.send(settlement).is_ok()
    }
}

/// What one settled tag waits for.
enum Done {
    /// Acked by its consumer, not yet sent; since when.
    Ack(lapin::Acker, Instant),
    /// Sent already (a requeue, or an ack sent on its own).
    Sent,
}

/// The settler task's state: every tag up to `upto` is settled by its consumer; `done`
/// holds the settled tags above it. The acks of the prefix not yet sent are `held`.
#[derive(Default)]
struct Pending {
    upto: u64,
    done: BTreeMap<u64, Done>,
    held: Option<Held>,
    /// Acks a held prefix gathers before its frame goes out at once.
    frame: usize,
}

/// The settled prefix's acks not sent yet: one frame, with `multiple`, up to `acker`'s tag.
struct Held {
    acker: lapin::Acker,
    count: usize,
    since: Instant,
}

impl Pending {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Settlement>, stop: CancellationToken) {
        loop {
            let straggler = self.oldest_ack().map(|since| since + STRAGGLE);
            let lingered = self.held.as_ref().map(|h| h.since + LINGER);
            let next = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                next = rx.recv() => next,
                () = sleep_until(lingered), if lingered.is_some() => {
                    self.send_held().await;
                    continue;
                }
                () = sleep_until(straggler), if straggler.is_some() => {
                    self.send_stragglers(Instant::now()).await;
                    continue;
                }
            };
            let Some(first) = next else { break };
            // Let the other settlements of this burst arrive: one frame for all of them.
            tokio::task::yield_now().await;
            self.take(first).await;
            while let Ok(more) = rx.try_recv() {
                self.take(more).await;
            }
            self.hold_prefix();
            if self.held.as_ref().is_some_and(|h| h.count >= self.frame) {
                self.send_held().await;
            }
        }
        // Stopping: send everything held, acks beyond a gap each on its own.
        rx.close();
        while let Ok(more) = rx.try_recv() {
            self.take(more).await;
        }
        self.hold_prefix();
        self.send_held().await;
        self.send_stragglers(Instant::now() + STRAGGLE).await;
    }

    async fn take(&mut self, s: Settlement) {
        if s.tag <= self.upto || self.done.contains_key(&s.tag) {
            // Settled twice: the acker refuses that before it gets here.
            return;
        }
        if s.requeue {
            let options = BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            };
            let result = s.acker.nack(options).await;
            if let Some(sent) = s.sent {
                let _ = sent.send(result);
            }
            self.done.insert(s.tag, Done::Sent);
        } else {
            self.done.insert(s.tag, Done::Ack(s.acker, Instant::now()));
        }
    }

    /// Moves the longest run of settled tags after `upto` into the prefix, its acks into
    /// the held frame.
    fn hold_prefix(&mut self) {
        while let Some(entry) = self.done.first_entry() {
            if *entry.key() != self.upto + 1 {
                break;
            }
            self.upto += 1;
            if let Done::Ack(acker, since) = entry.remove() {
                match &mut self.held {
                    Some(held) => {
                        held.acker = acker;
                        held.count += 1;
                    }
                    None => {
                        self.held = Some(Held {
                            acker,
                            count: 1,
                            since,
                        });
                    }
                }
            }
        }
    }

    /// Acks the held prefix with one frame.
    async fn send_held(&mut self) {
        if let Some(held) = self.held.take() {
            send_ack(&held.acker, true).await;
        }
    }

    /// Sends on its own every ack held back by a gap for [`STRAGGLE`] as of `at`.
    async fn send_stragglers(&mut self, at: Instant) {
        for done in self.done.values_mut() {
            if let Done::Ack(acker, since) = done
                && *since + STRAGGLE <= at
            {
                send_ack(acker, false).await;
                *done = Done::Sent;
            }
        }
    }

    fn oldest_ack(&self) -> Option<Instant> {
        self.done
            .values()
            .filter_map(|d| match d {
                Done::Ack(_, since) => Some(*since),
                Done::Sent => None,
            })
            .min()
    }
}

async fn send_ack(acker: &lapin::Acker, multiple: bool) {
    match acker.ack(BasicAckOptions { multiple }).await {
        Ok(true) => {}
        // Poisoned: the channel is gone, and the broker redelivers (the ledger deduplicates).
        Ok(false) => tracing::debug!("ack not sent: the channel is gone; the broker redelivers"),
        Err(err) => {
            tracing::warn!(error = %err, "ack failed; the broker will redeliver and the ledger deduplicates");
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
