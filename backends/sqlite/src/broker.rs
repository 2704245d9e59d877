//! The queue port in the data file: one row per message, FIFO per queue by id, a
//! `ready_at` for delayed messages, and the dead-letter queue; what RabbitMQ does for a
//! fleet, for the processes on one file.
//!
//! A delivery marks its row with this process (a *subscriber*, renewed every
//! `HEARTBEAT`) and a random delivery tag; an ack deletes the row, a requeue (or a
//! delivery dropped unsettled) gives it back, both fenced by that tag. A subscriber that
//! stops renewing for `SUBSCRIBER_TTL` (killed) gets its deliveries given back to their
//! queues by whoever consumes next, as RabbitMQ requeues the unacked messages of a closed
//! connection; the ledger then keeps a second delivery from running twice.
//!
//! Wake-ups: a publish in this process wakes its subscriptions at once; another process's
//! publish is seen within `POLL`; a delayed message is taken when its time comes.
//!
//! Retries: each call retries by itself what may pass (the file locked past the busy
//! timeout, an I/O error, a full disk), logging each failure, until it succeeds, is
//! refused, or is dropped (the table in `cronq_shared::retry`).

mod acker;
mod dispatch;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use cronq_shared::broker::{
    Broker, BrokerError, DeadLetter, Delivery, Depth, Depths, Outgoing, Pick, in_flight_limit,
};
use cronq_shared::names::QueueName;
use cronq_shared::retry::{Backoff, retry};
use cronq_shared::signing::Keyring;

use crate::db::{Db, Failure, ms, now_ms};

/// How often a subscriber renews its liveness in the file.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long a subscriber counts as alive after its last renewal: several heartbeats, so a
/// busy moment does not give its deliveries away (a second delivery would only be a
/// duplicate the ledger refuses).
pub(crate) const SUBSCRIBER_TTL: Duration = Duration::from_secs(5);

/// How often a subscription looks for messages another process published.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// Redoing a call the file refused for a moment: a lock held long by another process or a
/// full disk takes seconds to clear; the cap keeps a long outage from being hammered.
const REDO: Backoff = Backoff::exponential(Duration::from_millis(50), Duration::from_secs(2));

/// The queue of a data file. Cheap to clone: clones share the subscriber and its tasks.
#[derive(Clone)]
pub struct SqliteBroker {
    shared: Arc<Shared>,
    /// Seals every message published (`Outgoing::body`).
    keyring: Option<Arc<Keyring>>,
}

impl std::fmt::Debug for SqliteBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBroker")
            .field("subscriber", &self.shared.subscriber)
            .field("keyring", &self.keyring)
            .finish_non_exhaustive()
    }
}

/// What the broker's clones, its subscriptions and its deliveries share.
pub(crate) struct Shared {
    pub(crate) db: Db,
    /// This process's subscriber name in the file.
    pub(crate) subscriber: String,
    /// One per live subscription of this process, woken after each local publish.
    wakers: Mutex<Vec<Weak<Notify>>>,
    /// The subscriber heartbeat and the subscriptions; stopped when the last handle (broker,
    /// receiver or delivery) is gone.
    tasks: TaskTracker,
    pub(crate) token: CancellationToken,
    heartbeat: tokio::sync::OnceCell<()>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

impl Shared {
    /// Runs the call `op` (built afresh by `call` for each try) until it succeeds, is
    /// refused (`Ok(Err(_))`), or fails for good; logs each failure it retries.
    pub(crate) async fn redo<T, Fut>(
        &self,
        op: &'static str,
        call: impl FnMut() -> Fut,
    ) -> Result<T, BrokerError>
    where
        Fut: Future<Output = Result<T, Failure>>,
    {
        let mut call = call;
        let outcome = retry(
            REDO,
            &self.token,
            || {
                let attempt = call();
                async move {
                    match attempt.await {
                        Ok(value) => Ok(Ok(value)),
                        Err(e) if e.is_transient() => Err(e),
                        Err(e) => Ok(Err(e)),
                    }
                }
            },
            |r| {
                // The failure itself was logged with its cause (`Db::run`).
                tracing::warn!(
                    data = %self.db.path().display(),
                    op,
                    failures = r.failures,
                    retry_in_ms = u64::try_from(r.wait.as_millis()).unwrap_or(u64::MAX),
                    "SQLite data file refused a queue operation, retrying"
                );
            },
        )
        .await;
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(protocol(op, e)),
            Err(gave_up) => match gave_up.into_last() {
                _ if self.token.is_cancelled() => Err(BrokerError::Closed),
                e => Err(protocol(op, e)),
            },
        }
    }

    /// Wakes every live subscription of this process.
    fn wake(&self) {
        let mut wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        wakers.retain(|w| match w.upgrade() {
            Some(n) => {
                n.notify_one();
                true
            }
            None => false,
        });
    }
}

fn protocol(op: &'static str, e: Failure) -> BrokerError {
    BrokerError::Protocol {
        op,
        source: Box::new(e),
    }
}

impl SqliteBroker {
    /// The queue in `db`, as a new subscriber (one per process).
    pub fn new(db: Db) -> Self {
        Self {
            shared: Arc::new(Shared {
                db,
                subscriber: format!("{}-{:08x}", std::process::id(), rand::random::<u32>()),
                wakers: Mutex::default(),
                tasks: TaskTracker::new(),
                token: CancellationToken::new(),
                heartbeat: tokio::sync::OnceCell::new(),
            }),
            keyring: None,
        }
    }

    /// This broker, sealing every message it publishes with `keyring` (when given).
    #[must_use]
    pub fn signing(mut self, keyring: Option<Arc<Keyring>>) -> Self {
        self.keyring = keyring;
        self
    }

    /// How many messages wait in a queue (ready or delayed, not delivered); `None` when the
    /// queue was never declared. For tests and diagnostics.
    ///
    /// # Errors
    /// [`BrokerError`] when the file cannot be read.
    pub async fn ready(&self, queue: &QueueName) -> Result<Option<usize>, BrokerError> {
        let queue = queue.to_string();
        self.shared
            .db
            .run(move |conn| {
                if !declared(conn, &queue)? {
                    return Ok(None);
                }
                let n: i64 = conn
                    .prepare_cached(
                        "SELECT count(*) FROM messages WHERE queue = ?1 AND owner IS NULL",
                    )?
                    .query_row([&queue], |r| r.get(0))?;
                Ok(Some(usize::try_from(n).unwrap_or(0)))
            })
            .await
            .map_err(|e| protocol("count messages", e))
    }

    /// Registers this process as a subscriber, renewed until the broker is dropped.
    async fn start_heartbeat(&self) -> Result<(), BrokerError> {
        let shared = &self.shared;
        shared
            .heartbeat
            .get_or_try_init(|| async {
                renew(shared).await?;
                let weak = Arc::downgrade(shared);
                shared.tasks.spawn(async move {
                    loop {
                        tokio::time::sleep(HEARTBEAT).await;
                        let Some(shared) = weak.upgrade() else {
                            return;
                        };
                        // A failure was logged by the retry; the next beat tries again.
                        let _ = renew(&shared).await;
                    }
                });
                Ok(())
            })
            .await
            .map(|_| ())
    }
}

/// Renews this process's subscriber row.
async fn renew(shared: &Shared) -> Result<(), BrokerError> {
    shared
        .redo("renew subscriber", || {
            let subscriber = shared.subscriber.clone();
            shared.db.run(move |tx| {
                tx.prepare_cached(
                    "INSERT INTO subscribers (instance, alive_until) VALUES (?1, ?2)
                     ON CONFLICT (instance) DO UPDATE SET alive_until = excluded.alive_until",
                )?
                .execute(params![subscriber, now_ms() + ms(SUBSCRIBER_TTL)])?;
                Ok(())
            })
        })
        .await
}

/// Whether `queue` was declared.
fn declared(conn: &Connection, queue: &str) -> Result<bool, Failure> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM queues WHERE name = ?1")?
        .query_row([queue], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Inserts one message, due `delay` from now.
fn insert(tx: &Connection, queue: &str, body: &[u8], delay: Duration) -> Result<(), Failure> {
    tx.prepare_cached("INSERT INTO messages (queue, body, ready_at) VALUES (?1, ?2, ?3)")?
        .execute(params![queue, body, now_ms() + ms(delay)])?;
    Ok(())
}

/// The refusal of a message to an undeclared queue, as RabbitMQ returns a mandatory publish.
fn unroutable(out: &Outgoing) -> BrokerError {
    BrokerError::NotConfirmed {
        key: out.occurrence.key.to_string(),
        reason: format!("unroutable: no queue {} is declared", out.queue),
    }
}

fn letter_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, DeadLetter)> {
    let queue: Option<String> = r.get(3)?;
    let at: String = r.get(7)?;
    Ok((
        r.get(0)?,
        DeadLetter {
            key: r.get(1)?,
            job: r.get(2)?,
            queue: queue.and_then(|q| QueueName::new(&q).ok()),
            attempts: r.get(4)?,
            reason: r.get(5)?,
            last_error: r.get(6)?,
            dead_lettered_at: DateTime::parse_from_rfc3339(&at)
                .map_or_else(|_| Utc::now(), |t| t.with_timezone(&Utc)),
            body: r.get(8)?,
        },
    ))
}

#[async_trait]
impl Broker for SqliteBroker {
    async fn declare(&self, queues: &BTreeSet<QueueName>) -> Result<(), BrokerError> {
        let names: Vec<String> = queues.iter().map(ToString::to_string).collect();
        self.shared
            .redo("declare", || {
                let names = names.clone();
                self.shared.db.run(move |tx| {
                    for name in &names {
                        tx.prepare_cached("INSERT OR IGNORE INTO queues (name) VALUES (?1)")?
                            .execute([name])?;
                    }
                    Ok(())
                })
            })
            .await
    }

    async fn publish(&self, batch: &[Outgoing]) -> Result<(), BrokerError> {
        if batch.is_empty() {
            return Ok(());
        }
        let rows: Arc<Vec<(String, Vec<u8>, Duration)>> = Arc::new(
            batch
                .iter()
                .map(|o| {
                    (
                        o.queue.to_string(),
                        o.body(self.keyring.as_deref()),
                        o.delay,
                    )
                })
                .collect(),
        );
        let refused = self
            .shared
            .redo("publish", || {
                let rows = Arc::clone(&rows);
                self.shared.db.run(move |tx| {
                    // Like a mandatory publish: refuse the batch if any message has no
                    // queue, and store nothing then (the caller retries the whole batch).
                    let mut checked: Vec<&str> = Vec::new();
                    for (i, (queue, _, _)) in rows.iter().enumerate() {
                        if checked.contains(&queue.as_str()) {
                            continue;
                        }
                        if !declared(tx, queue)? {
                            return Ok(Some(i));
                        }
                        checked.push(queue);
                    }
                    for (queue, body, delay) in rows.iter() {
                        insert(tx, queue, body, *delay)?;
                    }
                    Ok(None)
                })
            })
            .await?;
        if let Some(i) = refused {
            return Err(unroutable(&batch[i]));
        }
        self.shared.wake();
        Ok(())
    }

    async fn consume(
        &self,
        queues: &[QueueName],
        prefetch: u16,
        token: CancellationToken,
    ) -> Result<mpsc::Receiver<Delivery>, BrokerError> {
        self.declare(&queues.iter().cloned().collect()).await?;
        self.start_heartbeat().await?;
        let limit = in_flight_limit(prefetch);
        let (tx, rx) = mpsc::channel(limit);
        let notify = Arc::new(Notify::new());
        self.shared
            .wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&notify));
        let subscription = dispatch::Subscription::new(
            Arc::clone(&self.shared),
            queues.iter().map(ToString::to_string).collect(),
            limit,
            notify,
            tx,
        );
        self.shared.tasks.spawn(subscription.run(token));
        Ok(rx)
    }

    async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), BrokerError> {
        let letter = Arc::new(letter.clone());
        self.shared
            .redo("dead letter", || {
                let l = Arc::clone(&letter);
                self.shared.db.run(move |tx| {
                    tx.prepare_cached(
                        "INSERT INTO dead_letters
                           (key, job, queue, attempts, reason, last_error, dead_lettered_at, body)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    )?
                    .execute(params![
                        l.key,
                        l.job,
                        l.queue.as_ref().map(QueueName::as_str),
                        l.attempts,
                        l.reason,
                        l.last_error,
                        l.dead_lettered_at.to_rfc3339(),
                        l.body,
                    ])?;
                    Ok(())
                })
            })
            .await
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, BrokerError> {
        Ok(self.letters().await?.into_iter().map(|(_, l)| l).collect())
    }

    async fn replay(
        &self,
        select: &(dyn for<'l> Fn(&'l DeadLetter) -> Pick + Send + Sync),
    ) -> Result<usize, BrokerError> {
        let mut replayed = 0;
        for (id, letter) in self.letters().await? {
            let out = match select(&letter) {
                Pick::Keep => continue,
                Pick::Remove => {
                    self.shared
                        .redo("remove a copy of a replayed dead letter", || {
                            self.shared.db.run(move |tx| {
                                tx.prepare_cached("DELETE FROM dead_letters WHERE id = ?1")?
                                    .execute([id])?;
                                Ok(())
                            })
                        })
                        .await?;
                    continue;
                }
                Pick::Replay(out) => *out,
            };
            let (queue, body) = (
                out.queue.to_string(),
                Arc::new(out.body(self.keyring.as_deref())),
            );
            let delay = out.delay;
            // One transaction: the letter leaves the dead-letter queue exactly when its
            // message is in its queue.
            let moved = self
                .shared
                .redo("replay", || {
                    let (queue, body) = (queue.clone(), Arc::clone(&body));
                    self.shared.db.run(move |tx| {
                        if !declared(tx, &queue)? {
                            return Ok(None);
                        }
                        let taken = tx
                            .prepare_cached("DELETE FROM dead_letters WHERE id = ?1")?
                            .execute([id])?
                            > 0;
                        if taken {
                            insert(tx, &queue, &body, delay)?;
                        }
                        Ok(Some(taken))
                    })
                })
                .await?;
            match moved {
                None => return Err(unroutable(&out)),
                Some(true) => replayed += 1,
                Some(false) => {} // taken by a concurrent replay
            }
        }
        if replayed > 0 {
            self.shared.wake();
        }
        Ok(replayed)
    }

    /// Each queue's waiting messages ([`SqliteBroker::ready`]); consumers are not counted,
    /// and the dead letters are counted by listing them.
    async fn depths(&self, queues: &[QueueName]) -> Result<Depths, BrokerError> {
        let mut depths = Vec::with_capacity(queues.len());
        for q in queues {
            let ready = SqliteBroker::ready(self, q).await?;
            depths.push(Depth {
                messages: ready.map(|n| n as u64),
                consumers: None,
            });
        }
        Ok(Depths {
            queues: depths,
            dead_letters: None,
        })
    }
}

impl SqliteBroker {
    /// The dead letters with their row ids, oldest first.
    async fn letters(&self) -> Result<Vec<(i64, DeadLetter)>, BrokerError> {
        self.shared
            .redo("list dead letters", || {
                self.shared.db.run(|conn| {
                    Ok(conn
                        .prepare_cached(
                            "SELECT id, key, job, queue, attempts, reason, last_error,
                                    dead_lettered_at, body
                             FROM dead_letters ORDER BY id",
                        )?
                        .query_map([], letter_from_row)?
                        .collect::<Result<_, _>>()?)
                })
            })
            .await
    }
}
