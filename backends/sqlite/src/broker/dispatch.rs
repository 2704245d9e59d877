//! One subscription: takes ready messages of its queues for this process, up to its
//! in-flight limit, and hands them to the consumer; gives back the deliveries of processes
//! that stopped renewing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rusqlite::params;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use cronq_shared::broker::Delivery;
use cronq_shared::names::QueueName;

use super::acker::SqliteAcker;
use super::{HEARTBEAT, POLL, Shared};
use crate::db::now_ms;

/// A taken message.
struct Taken {
    id: i64,
    /// Its delivery tag.
    delivery: i64,
    queue: String,
    body: Vec<u8>,
    redelivered: bool,
}

/// One `consume` call's loop.
pub(super) struct Subscription {
    shared: Arc<Shared>,
    queues: Vec<String>,
    limit: usize,
    in_flight: Arc<AtomicUsize>,
    notify: Arc<Notify>,
    tx: mpsc::Sender<Delivery>,
    /// Which queue the next take starts with, so that no queue starves the others.
    start: usize,
}

impl Subscription {
    pub(super) fn new(
        shared: Arc<Shared>,
        queues: Vec<String>,
        limit: usize,
        notify: Arc<Notify>,
        tx: mpsc::Sender<Delivery>,
    ) -> Self {
        Self {
            shared,
            queues,
            limit,
            in_flight: Arc::default(),
            notify,
            tx,
            start: 0,
        }
    }

    /// Delivers until `token` is cancelled or the receiver is gone.
    pub(super) async fn run(mut self, token: CancellationToken) {
        let mut swept: Option<Instant> = None;
        loop {
            if token.is_cancelled() {
                return;
            }
            if swept.is_none_or(|at| at.elapsed() >= HEARTBEAT) {
                self.give_back_orphans().await;
                swept = Some(Instant::now());
            }
            let room = self
                .limit
                .saturating_sub(self.in_flight.load(Ordering::Acquire));
            let mut wait = POLL;
            if room > 0 {
                match self.take(room).await {
                    Ok((taken, next_due)) => {
                        let full = taken.len() == room;
                        for t in taken {
                            if !self.hand_out(t).await {
                                return;
                            }
                        }
                        if let Some(due) = next_due {
                            let ms = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
                            wait = wait.min(Duration::from_millis(ms));
                        }
                        if full {
                            continue; // maybe more: look again once there is room
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot take messages from the data file, retrying");
                    }
                }
            }
            tokio::select! {
                () = token.cancelled() => return,
                () = self.notify.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Sends one delivery; `false` when the receiver is gone (the delivery, dropped, goes
    /// back to its queue).
    async fn hand_out(&self, t: Taken) -> bool {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let Ok(queue) = QueueName::new(&t.queue) else {
            // Only declared queue names are ever stored.
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return true;
        };
        let acker = SqliteAcker::new(
            Arc::clone(&self.shared),
            t.id,
            t.delivery,
            Arc::clone(&self.in_flight),
            Arc::clone(&self.notify),
        );
        let delivery = Delivery {
            queue,
            body: t.body,
            redelivered: t.redelivered,
            acker: Box::new(acker),
        };
        self.tx.send(delivery).await.is_ok()
    }

    /// Marks up to `room` ready messages as delivered here, oldest first per queue; and the
    /// next instant a delayed message becomes ready, if any.
    async fn take(
        &mut self,
        room: usize,
    ) -> Result<(Vec<Taken>, Option<i64>), cronq_shared::broker::BrokerError> {
        let n = self.queues.len().max(1);
        let order: Vec<String> = (0..self.queues.len())
            .map(|i| self.queues[(self.start + i) % n].clone())
            .collect();
        self.start = (self.start + 1) % n;
        let order = Arc::new(order);
        let shared = Arc::clone(&self.shared);
        shared
            .redo("take messages", || {
                let order = Arc::clone(&order);
                let subscriber = shared.subscriber.clone();
                shared.db.run(move |tx| {
                    let now = now_ms();
                    let mut taken = Vec::new();
                    for queue in order.iter() {
                        let want = room - taken.len();
                        if want == 0 {
                            break;
                        }
                        let delivery = rand::random::<i64>();
                        let mut batch: Vec<Taken> = tx
                            .prepare_cached(
                                "UPDATE messages SET owner = ?1, delivery = ?2
                                 WHERE id IN (SELECT id FROM messages
                                              WHERE owner IS NULL AND queue = ?3 AND ready_at <= ?4
                                              ORDER BY id LIMIT ?5)
                                 RETURNING id, body, redelivered",
                            )?
                            .query_map(
                                params![
                                    subscriber,
                                    delivery,
                                    queue,
                                    now,
                                    i64::try_from(want).unwrap_or(i64::MAX)
                                ],
                                |r| {
                                    Ok(Taken {
                                        id: r.get(0)?,
                                        delivery,
                                        queue: queue.clone(),
                                        body: r.get(1)?,
                                        redelivered: r.get(2)?,
                                    })
                                },
                            )?
                            .collect::<Result<_, _>>()?;
                        // RETURNING has no order: FIFO is by id.
                        batch.sort_by_key(|t| t.id);
                        taken.extend(batch);
                    }
                    let next_due: Option<i64> = tx
                        .prepare_cached(
                            "SELECT min(ready_at) FROM messages WHERE owner IS NULL AND ready_at > ?1",
                        )?
                        .query_row([now], |r| r.get(0))?;
                    Ok((taken, next_due))
                })
            })
            .await
    }

    /// Gives the deliveries of subscribers that stopped renewing back to their queues.
    async fn give_back_orphans(&self) {
        let shared = &self.shared;
        let given = shared
            .redo("give back deliveries", || {
                shared.db.run(|tx| {
                    let now = now_ms();
                    let n = tx
                        .prepare_cached(
                            "UPDATE messages SET owner = NULL, delivery = NULL, redelivered = 1
                             WHERE owner IS NOT NULL
                               AND owner NOT IN (SELECT instance FROM subscribers
                                                 WHERE alive_until > ?1)",
                        )?
                        .execute([now])?;
                    tx.prepare_cached("DELETE FROM subscribers WHERE alive_until <= ?1")?
                        .execute([now])?;
                    Ok(n)
                })
            })
            .await;
        match given {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                messages = n,
                "gave back to their queues the deliveries of a process that stopped"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot give back stopped processes' deliveries"),
        }
    }
}
