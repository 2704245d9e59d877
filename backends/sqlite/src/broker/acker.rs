//! Settling one delivery: an ack deletes its row, a requeue gives it back to its queue,
//! both fenced by the delivery tag (a row given back and delivered again elsewhere is not
//! touched); a delivery dropped unsettled is given back, as a closed AMQP channel would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use rusqlite::params;
use tokio::sync::Notify;

use cronq_shared::broker::{Acker, BrokerError};

use super::Shared;
use crate::db::Failure;

/// Misuse: a second settle of one delivery.
#[derive(Debug, thiserror::Error)]
#[error("delivery {0} was already acked or requeued")]
struct Settled(i64);

pub(super) struct SqliteAcker {
    shared: Arc<Shared>,
    id: i64,
    delivery: i64,
    in_flight: Arc<AtomicUsize>,
    notify: Arc<Notify>,
    settled: AtomicBool,
}

const ACK: &str = "DELETE FROM messages WHERE id = ?1 AND delivery = ?2";
const REQUEUE: &str = "UPDATE messages SET owner = NULL, delivery = NULL, redelivered = 1
                       WHERE id = ?1 AND delivery = ?2";

impl SqliteAcker {
    pub(super) fn new(
        shared: Arc<Shared>,
        id: i64,
        delivery: i64,
        in_flight: Arc<AtomicUsize>,
        notify: Arc<Notify>,
    ) -> Self {
        Self {
            shared,
            id,
            delivery,
            in_flight,
            notify,
            settled: AtomicBool::new(false),
        }
    }

    fn first_settle(&self, op: &'static str) -> Result<(), BrokerError> {
        if self.settled.swap(true, Ordering::AcqRel) {
            return Err(BrokerError::Protocol {
                op,
                source: Box::new(Settled(self.id)),
            });
        }
        Ok(())
    }

    /// Room for one more delivery in the subscription.
    fn release(in_flight: &AtomicUsize, notify: &Notify) {
        in_flight.fetch_sub(1, Ordering::AcqRel);
        notify.notify_one();
    }
}

/// Runs `sql` on the delivery's row, retried as every queue call.
async fn settle(
    shared: &Shared,
    op: &'static str,
    sql: &'static str,
    (id, delivery): (i64, i64),
) -> Result<(), BrokerError> {
    shared
        .redo(op, || {
            shared.db.run(move |tx| {
                tx.prepare_cached(sql)?.execute(params![id, delivery])?;
                Ok(())
            })
        })
        .await
}

#[async_trait]
impl Acker for SqliteAcker {
    async fn ack(&self) -> Result<(), BrokerError> {
        self.first_settle("ack")?;
        let done = settle(&self.shared, "ack", ACK, (self.id, self.delivery)).await;
        Self::release(&self.in_flight, &self.notify);
        done
    }

    async fn requeue(&self) -> Result<(), BrokerError> {
        self.first_settle("requeue")?;
        let done = settle(&self.shared, "requeue", REQUEUE, (self.id, self.delivery)).await;
        Self::release(&self.in_flight, &self.notify);
        self.shared.wake();
        done
    }
}

impl Drop for SqliteAcker {
    fn drop(&mut self) {
        if self.settled.swap(true, Ordering::AcqRel) {
            return;
        }
        let (shared, row) = (Arc::clone(&self.shared), (self.id, self.delivery));
        let (in_flight, notify) = (Arc::clone(&self.in_flight), Arc::clone(&self.notify));
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    if let Err(e) = settle(&shared, "requeue", REQUEUE, row).await {
                        tracing::warn!(error = %e, "cannot give back a dropped delivery; it goes back when this process stops");
                    }
                    Self::release(&in_flight, &notify);
                    shared.wake();
                });
            }
            Err(_) => {
                let _ = shared.db.run_blocking(move |conn| {
                    conn.execute(REQUEUE, params![row.0, row.1])
                        .map_err(Failure::from)
                });
                Self::release(&in_flight, &notify);
            }
        }
    }
}
