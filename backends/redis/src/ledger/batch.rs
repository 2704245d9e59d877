//! Calls sent together: `claim.lua` and `complete.lua` each take any number of calls in
//! one script call and answer each as if it had been a script call of its own, so the
//! claims (and the ends) of deliveries that arrive together (a window of prefetched
//! messages, reopened in one step by the coalesced acks of `cronq_rabbitmq`) cost Redis one
//! script call and the client one request.
//!
//! The first call of a batch starts the task that sends it; that task lets every task that
//! can run do so once (`yield_now`), so the calls they make join the batch, then takes the
//! batch and sends it as one guarded write. A batch is bounded by what is in flight (a
//! consumer's concurrency). A caller that gives up waiting (shutdown) leaves its call in
//! the batch: as with a command already written to the connection, it may run (a claim's
//! lease then lapses to the reaper; an end is fenced by its token). When the script call
//! fails, every call of the batch gets its error and is tried again by its caller, as it
//! would have been alone (a claim with the same token, an end as the same end). Only a
//! call whose own key holds another type (`WRONGTYPE`) fails alone inside a batch; any
//! other error (`READONLY` after a failover, out of memory) fails the script call, so the
//! connection sees it as it would see it on a call of its own (`sentinel.rs`).

use std::sync::{Arc, Mutex, PoisonError};

use cronq_shared::store::StoreError;
use redis::{Cmd, ErrorKind, RedisError, Script, ServerErrorKind, Value};
use tokio::sync::oneshot;

use crate::conn::RedisConn;
use crate::error::{command, written};
use crate::script::Call;

/// One call's reply (the script's for it), or why there is none.
pub(super) type Reply = Result<Vec<Vec<u8>>, StoreError>;

/// Starts a script call of a batch: `EVALSHA`, the script, its keys and what every call
/// of the batch shares, before the calls' own arguments.
pub(super) type Start = dyn Fn(&Script) -> Cmd + Send + Sync;

/// The batch being gathered.
pub(super) struct Batcher {
    script: Script,
    start: Arc<Start>,
    open: Mutex<Option<Open>>,
}

struct Open {
    cmd: Cmd,
    waiters: Vec<oneshot::Sender<Reply>>,
}

impl Batcher {
    /// A batcher of calls of `script` (claim.lua or complete.lua), each script call begun
    /// by `start`.
    pub(super) fn new(script: Script, start: Arc<Start>) -> Self {
        Self {
            script,
            start,
            open: Mutex::new(None),
        }
    }

    /// Adds one call to the batch being gathered and waits for its reply; `fill` appends
    /// the call's part of the arguments, as the script reads them.
    pub(super) async fn call(
        self: &Arc<Self>,
        conn: &RedisConn,
        fill: impl FnOnce(&mut Cmd),
    ) -> Reply {
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let first = open.is_none();
            let batch = open.get_or_insert_with(|| Open {
                cmd: self.start(),
                waiters: Vec::new(),
            });
            fill(&mut batch.cmd);
            batch.waiters.push(tx);
            first
        };
        if first {
            let (batcher, conn) = (Arc::clone(self), conn.clone());
            tokio::spawn(async move { batcher.send(&conn).await });
        }
        rx.await.unwrap_or_else(|_| {
            Err(command(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "the batch was dropped before it was sent",
            ))))
        })
    }

    /// Runs one call alone, unguarded (no `WAIT` for replicas): for a write no guarantee
    /// rests on.
    pub(super) async fn call_alone(&self, conn: &RedisConn, fill: impl FnOnce(&mut Cmd)) -> Reply {
        let mut cmd = self.start();
        fill(&mut cmd);
        let replies: Vec<Value> = Call::of(&self.script, cmd)
            .query(&mut conn.clone())
            .await
            .map_err(command)?;
        match <[Value; 1]>::try_from(replies) {
            Ok([reply]) => one(reply),
            Err(replies) => Err(refused(format!("{} replies to 1 call", replies.len()))),
        }
    }

    /// A script call with no call in it yet.
    fn start(&self) -> Cmd {
        (self.start)(&self.script)
    }

    /// Sends the batch gathered by now, and hands each call its reply.
    async fn send(&self, conn: &RedisConn) {
        tokio::task::yield_now().await;
        let Some(Open { cmd, waiters }) = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let replies: Result<Vec<Value>, _> = conn.write_script(&Call::of(&self.script, cmd)).await;
        match replies {
            Ok(replies) if replies.len() == waiters.len() => {
                for (waiter, reply) in waiters.into_iter().zip(replies) {
                    let _ = waiter.send(one(reply));
                }
            }
            Ok(replies) => {
                let why = format!("{} replies to {} calls", replies.len(), waiters.len());
                for waiter in waiters {
                    let _ = waiter.send(Err(refused(why.clone())));
                }
            }
            Err(err) => {
                for waiter in waiters {
                    let _ = waiter.send(Err(written(err.clone())));
                }
            }
        }
    }
}

/// One call's reply: the script's fields, or the error it answered for this call alone.
/// A reply of one field comes as that field alone (`batch.lua`); an integer (a claim's
/// fence, `claim.lua`) as one field of its digits.
fn one(reply: Value) -> Reply {
    let fields: Vec<Vec<u8>> = match reply {
        Value::BulkString(field) => vec![field],
        Value::Int(n) => vec![n.to_string().into_bytes()],
        reply => redis::from_redis_value(reply).map_err(|e| command(e.into()))?,
    };
    match fields.as_slice() {
        [tag, why] if tag.as_slice() == b"error" => Err(refused(wrong_type(
            String::from_utf8_lossy(why).into_owned(),
        ))),
        _ => Ok(fields),
    }
}

/// The only error a call answers alone is `WRONGTYPE` (`batch.lua`): its key holds
/// something this build does not read as a record. Said with what it likely is and what
/// to do.
fn wrong_type(why: String) -> String {
    format!(
        "{why} (the occurrence's record is a key this cronq cannot read: one written by a \
         newer cronq, whose consumers must all be upgraded together (docs/operations.md, \
         \"Upgrading\"), or a key cronq did not write)"
    )
}

fn refused(why: String) -> StoreError {
    command(RedisError::from((
        ErrorKind::Server(ServerErrorKind::ResponseError),
        "a call of the batch failed",
        why,
    )))
}
