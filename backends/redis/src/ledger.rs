//! The ledger on Redis: one hash per occurrence key, one sorted set of lease expiries, one
//! hash of slots per gate (an exclusive job's, a pool's; `ledger/wait.lua`). Every operation is one Lua script (loaded with
//! `include_str!`, run with EVALSHA and loaded again on `NOSCRIPT`, see `script.rs`), so it
//! is atomic; claims and ends made together share one call of their script
//! (`ledger/batch.rs`).
//! Lease times come from the Redis server's clock (`TIME`), never from the consumers', so
//! clock skew between hosts cannot shorten or stretch a lease.
//!
//! Key layout (all through [`Names::redis_key`]): `ns:occ:KEY` (hash: state, attempt,
//! next, token, job, queue, lease_until, cancel, exclusive, cap, pool, pool_cap, gate,
//! sched, error, updated; a new record of an `allow` job outside any pool has no cancel, no
//! exclusive and no pool, read as none), `ns:occbody:KEY` (the stored message, apart so
//! that the hash stays small and listpack-encoded), `ns:leases` (zset KEY → lease expiry or
//! due time ms), `ns:slots:GATE` (hash KEY → `UNTIL|TOKEN`, one field per slot held; GATE
//! is the job's name or `pool:NAME`), `ns:jobwait:GATE` (zset of waiting KEYs → scheduled
//! ms, see `wait.lua`),
//! `ns:fence:JOB` (the job's last fencing token, no TTL; the record's `fence` field holds
//! its claim's), `ns:cancels` (how many cancels were asked for, no TTL); runs are
//! appended to the [`RedisRunLog`]'s stream by the same scripts that end a record (a fenced
//! or given-up end appends its run as lost, see `complete.lua`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{
    Cancel, Cancelled, Claim, ClaimOutcome, End, Ended, ExecutionLease, GATE_SHOWN, GateUse,
    Heartbeat, Ledger, Orphan, Record, Republish, Settle, State, WAKE_RECHECK, cancelled_by,
};
use cronq_shared::names::Names;
use cronq_shared::runlog::{Outcome, Run, lost_error};
use cronq_shared::store::StoreError;

use crate::args::millis;
use crate::conn::RedisConn;
use crate::error::{command, written};
use crate::runlog::{self, RedisRunLog};
use crate::script::Call;

mod batch;

use batch::Batcher;

/// The Redis ledger. Cheap to clone.
#[derive(Clone)]
pub struct RedisLedger {
    conn: RedisConn,
    names: Names,
    history: RedisRunLog,
    scripts: Scripts,
    /// `ns:occ:`, the prefix of every record's key.
    record_prefix: String,
    /// `ns:occbody:`, the prefix of every stored message body's key.
    body_prefix: String,
    /// `ns:leases`.
    leases_key: String,
    /// `ns:cancels`.
    cancels_key: String,
}

#[derive(Clone)]
struct Scripts {
    /// claim.lua's calls, gathered into batches.
    claims: Arc<Batcher>,
    heartbeat: Script,
    /// complete.lua's calls, gathered into batches.
    completes: Arc<Batcher>,
    settle: Script,
    reap: Script,
    admit_replay: Script,
    /// A record as HGETALL would answer it, whatever its form (read.lua).
    read: Script,
    cancel: Script,
    gates: Script,
}

impl std::fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLedger")
            .field("namespace", self.names.namespace())
            .finish()
    }
}

impl RedisLedger {
    /// A ledger over an open connection (see [`crate::connect()`]) that appends the
    /// runs of ended records to `history`.
    pub fn new(conn: RedisConn, names: Names, history: RedisRunLog) -> Self {
        // The helpers the scripts that end records share, in front of each.
        let with_history = |script: &str| {
            Script::new(
                &[
                    include_str!("ledger/clock.lua"),
                    include_str!("ledger/history.lua"),
                    include_str!("ledger/record.lua"),
                    include_str!("ledger/wait.lua"),
                    script,
                ]
                .concat(),
            )
        };
        // The reader of records (ledger/record.lua) alone, in front of a script.
        let with_record =
            |script: &str| Script::new(&[include_str!("ledger/record.lua"), script].concat());
        // A batched script (ledger/batch.rs) also runs each of its calls through run_one.
        let batched =
            |script: &str| with_history(&[include_str!("ledger/batch.lua"), script].concat());
        let leases_key = names.redis_key(&["leases"]);
        let record_prefix = names.redis_key(&["occ", ""]);
        let body_prefix = names.redis_key(&["occbody", ""]);
        // What every call of a batch of claims or ends shares (claim.lua, complete.lua):
        // the lease zset and the history stream, then the key prefixes, how long a woken
        // waiter has, and the history's bounds as of the batch; then, for claims, the
        // fence counters' key prefix, for ends the error of a run without one as lost.
        let shared = |last: String| {
            let prefixes = [
                record_prefix.clone(),
                body_prefix.clone(),
                names.redis_key(&["slots", ""]),
                names.redis_key(&["jobwait", ""]),
            ];
            let (leases_key, history) = (leases_key.clone(), history.clone());
            Arc::new(move |script: &Script| {
                let mut call = Call::new(script, 2);
                call.key(&leases_key).key(history.key());
                for prefix in &prefixes {
                    call.arg(prefix);
                }
                let (max_runs, min_id) = history.bounds();
                call.arg(millis(WAKE_RECHECK))
                    .arg(max_runs)
                    .arg(min_id)
                    .arg(&last);
                call.into_cmd()
            }) as Arc<batch::Start>
        };
        let claims = Arc::new(Batcher::new(
            batched(include_str!("ledger/claim.lua")),
            shared(names.redis_key(&["fence", ""])),
        ));
        let completes = Arc::new(Batcher::new(
            batched(include_str!("ledger/complete.lua")),
            shared(lost_error(None)),
        ));
        Self {
            cancels_key: names.redis_key(&["cancels"]),
            record_prefix,
            body_prefix,
            conn,
            names,
            history,
            scripts: Scripts {
                claims,
                heartbeat: Script::new(
                    &[
                        include_str!("ledger/record.lua"),
                        include_str!("ledger/wait.lua"),
                        include_str!("ledger/heartbeat.lua"),
                    ]
                    .concat(),
                ),
                completes,
                settle: with_history(include_str!("ledger/settle.lua")),
                reap: with_record(include_str!("ledger/reap.lua")),
                admit_replay: with_record(include_str!("ledger/admit_replay.lua")),
                read: with_record(include_str!("ledger/read.lua")),
                cancel: with_history(include_str!("ledger/cancel.lua")),
                gates: with_record(include_str!("ledger/gates.lua")),
            },
            leases_key,
        }
    }

    /// A key's record as it is now, for tests and inspection.
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot be reached or the record is unreadable.
    pub async fn record(&self, key: &OccurrenceKey) -> Result<Option<Record>, StoreError> {
        let fields = self.fields(key).await?;
        let Some(state) = fields.get("state") else {
            return Ok(None);
        };
        Ok(Some(Record {
            state: State::parse(state).ok_or_else(|| unexpected(state))?,
            attempt: fields
                .get("attempt")
                .and_then(|a| a.parse().ok())
                .unwrap_or(0),
            error: fields.get("error").cloned(),
        }))
    }

    /// A key's record as the fields of its hash (empty when there is none), whichever of
    /// its two forms Redis keeps it in (`ledger/record.lua`), left as it is; for tests and
    /// inspection.
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot be reached or the key holds something other than a
    /// record.
    pub async fn fields(
        &self,
        key: &OccurrenceKey,
    ) -> Result<std::collections::HashMap<String, String>, StoreError> {
        let mut invocation = Call::new(&self.scripts.read, 1);
        invocation.key(self.record_key(key.as_str()));
        invocation
            .query(&mut self.conn.clone())
            .await
            .map_err(command)
    }

    fn record_key(&self, key: &str) -> String {
        [self.record_prefix.as_str(), key].concat()
    }

    /// Renews `lease` for `duration` (heartbeat.lua); with `keep`, keeps a held claim's
    /// message for its retention too ([`Ledger::keep`]).
    async fn renew(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
        keep: Option<(&[u8], Duration)>,
    ) -> Result<Heartbeat, StoreError> {
        let key = lease.key.as_str();
        let mut invocation = Call::new(&self.scripts.heartbeat, if keep.is_some() { 3 } else { 2 });
        invocation.key(self.record_key(key)).key(&self.leases_key);
        if keep.is_some() {
            invocation.key(self.body_key(key));
        }
        invocation
            .arg(key)
            .arg(&lease.token)
            .arg(millis(duration))
            .arg(self.slots_prefix());
        if let Some((body, retention)) = keep {
            invocation.arg(body).arg(millis(retention));
        }
        // Guarded: a renewal a failover could lose would let the lease lapse early on the
        // new master, and the reaper hand the occurrence out while it still runs.
        let reply: Vec<String> = self.conn.write_script(&invocation).await.map_err(written)?;
        match reply.as_slice() {
            [tag] if tag == "held" => Ok(Heartbeat::Held),
            [tag, by] if tag == "cancel" => Ok(Heartbeat::CancelRequested { by: by.clone() }),
            [tag] if tag == "lost" => Ok(Heartbeat::Lost),
            other => Err(unexpected(&other.join(" "))),
        }
    }

    fn body_key(&self, key: &str) -> String {
        [self.body_prefix.as_str(), key].concat()
    }

    fn slots_prefix(&self) -> String {
        self.names.redis_key(&["slots", ""])
    }

    fn wait_prefix(&self) -> String {
        self.names.redis_key(&["jobwait", ""])
    }
}

/// Reads the `[woken key, woken queue, woken body]` tail of a script reply.
fn woken(tail: &[Vec<u8>]) -> Option<Orphan> {
    match tail {
        [key, queue, body] => Some(Orphan {
            key: String::from_utf8_lossy(key).into_owned(),
            queue: String::from_utf8_lossy(queue).into_owned(),
            body: body.clone(),
            why: Republish::Turn,
        }),
        _ => None,
    }
}

/// Reads the `{1 [, woken…]}` / `{0}` reply of complete.lua and settle.lua.
fn ended(reply: &[Vec<u8>]) -> Result<Ended, StoreError> {
    match reply.split_first() {
        Some((done, tail)) if done.as_slice() == b"1" => Ok(Ended {
            recorded: true,
            woken: woken(tail),
        }),
        Some((done, [])) if done.as_slice() == b"0" => Ok(Ended {
            recorded: false,
            woken: None,
        }),
        _ => Err(unexpected(&format!("{} fields", reply.len()))),
    }
}

fn text(field: &[u8]) -> String {
    String::from_utf8_lossy(field).into_owned()
}

/// A reply field's digits as a number, read in place.
fn number<T: std::str::FromStr>(field: &[u8]) -> Option<T> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Appends the history arguments of `run` (bounds, then its field values in
/// [`runlog::FIELDS`] order) to an invocation of settle.lua; none when there is no run.
fn history_args(invocation: &mut Call<'_>, history: &RedisRunLog, run: Option<&Run>) {
    let Some(run) = run else {
        return;
    };
    let (max_runs, min_id) = history.bounds();
    invocation.arg(max_runs).arg(min_id);
    for value in runlog::values(run) {
        invocation.arg(value);
    }
}

/// The run of `end` when it is the success of a held claim, with that run and nothing
/// else (no error, no follow-up): the end `complete.lua` makes from fewer arguments.
fn held_success<'a>(lease: &ExecutionLease, end: &'a End) -> Option<&'a Run> {
    let run = end.run.as_ref()?;
    let plain = end.state == Some(State::Succeeded)
        && end.error.is_none()
        && end.next.is_none()
        && run.outcome == Outcome::Succeeded
        && run.error.is_none();
    (lease.held && plain).then_some(run)
}

fn overlap_arg(overlap: cronq_shared::config::Overlap) -> &'static str {
    use cronq_shared::config::Overlap;
    match overlap {
        Overlap::Allow => "allow",
        Overlap::Skip => "skip",
        Overlap::Queue => "queue",
        Overlap::Replace => "replace",
    }
}

fn unexpected(what: &str) -> StoreError {
    StoreError::Corrupt {
        key: "a ledger script reply".to_owned(),
        source: serde::de::Error::custom(format!("unexpected reply {what:?}")),
    }
}

#[async_trait]
impl Ledger for RedisLedger {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        let key = claim.key.as_str();
        let token = &claim.token;
        // What a gate's waiters need: an `allow` claim outside any pool sends none of it.
        let gated = claim.overlap != cronq_shared::config::Overlap::Allow || claim.pool.is_some();
        // Only a `replace` claim can supersede waiters and append their history entries:
        // no clock read or formatting for the other policies.
        let now = gated.then(|| {
            if claim.overlap == cronq_shared::config::Overlap::Replace {
                chrono::Utc::now().to_rfc3339()
            } else {
                String::new()
            }
        });
        // The claim goes to Redis in a batch (ledger/batch.rs), as its arguments alone: the
        // script makes its keys from its key and job (claim.lua).
        let reply = self
            .scripts
            .claims
            .call(&self.conn, |cmd| {
                cmd.arg(if gated { 16 } else { 10 })
                    .arg(key)
                    .arg(claim.job.as_str())
                    .arg(claim.queue.as_str())
                    .arg(claim.attempt)
                    .arg(token)
                    .arg(millis(claim.lease))
                    .arg(millis(claim.retention))
                    .arg(if claim.held && !gated {
                        "held"
                    } else {
                        overlap_arg(claim.overlap)
                    })
                    .arg(&claim.body[..])
                    .arg(claim.scheduled_at.timestamp_millis());
                if let Some(now) = &now {
                    let (pool, size) = claim
                        .pool
                        .as_ref()
                        .map_or(("", 0), |p| (p.name.as_str(), p.size));
                    cmd.arg(millis(claim.recheck))
                        .arg(&claim.consumer)
                        .arg(now)
                        .arg(claim.max_concurrent.max(1))
                        .arg(pool)
                        .arg(size);
                }
            })
            .await?;
        let Some((tag, rest)) = reply.split_first() else {
            return Err(unexpected("an empty reply"));
        };
        let claimed = |fence: &[u8], held: bool, takeover: bool| {
            Ok(ClaimOutcome::Claimed {
                lease: ExecutionLease {
                    key: claim.key.clone(),
                    job: claim.job.clone(),
                    token: token.clone(),
                    fence: number(fence).ok_or_else(|| unexpected(&text(fence)))?,
                    held,
                },
                takeover,
            })
        };
        match (tag.as_slice(), rest) {
            // The most common reply: a new record granted held, its fence alone (batch.rs
            // reads the script's integer as its digits).
            (fence, []) if fence.first().is_some_and(u8::is_ascii_digit) => {
                claimed(fence, true, false)
            }
            (b"claimed", [takeover, fence, held @ ..]) if held.len() <= 1 => claimed(
                fence,
                held.first().is_some_and(|h| h.as_slice() == b"1"),
                takeover.as_slice() == b"1",
            ),
            (b"duplicate", [state, attempt]) => {
                let state = text(state);
                Ok(ClaimOutcome::Duplicate {
                    state: State::parse(&state).ok_or_else(|| unexpected(&state))?,
                    attempt: number(attempt).unwrap_or(0),
                })
            }
            (b"busy", [holder]) => Ok(ClaimOutcome::Busy {
                holder: text(holder),
            }),
            (b"waiting", [holder, tail @ ..]) => Ok(ClaimOutcome::Waiting {
                holder: text(holder),
                woken: woken(tail),
            }),
            (b"superseded", [by]) => Ok(ClaimOutcome::Superseded { by: text(by) }),
            _ => Err(unexpected(&text(tag))),
        }
    }

    async fn heartbeat(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
    ) -> Result<Heartbeat, StoreError> {
        self.renew(lease, duration, None).await
    }

    async fn keep(
        &self,
        lease: &ExecutionLease,
        duration: Duration,
        body: &[u8],
        retention: Duration,
    ) -> Result<Heartbeat, StoreError> {
        self.renew(lease, duration, Some((body, retention))).await
    }

    async fn complete(&self, lease: &ExecutionLease, end: &End) -> Result<Ended, StoreError> {
        let key = lease.key.as_str();
        if let Some(run) = held_success(lease, end) {
            // complete.lua's most common end: "h", the number of its arguments, then its
            // arguments (the run's values after its key and job last).
            let values = runlog::values_after_job(run);
            let reply = self
                .scripts
                .completes
                .call(&self.conn, |cmd| {
                    cmd.arg("h")
                        .arg(4 + values.len())
                        .arg(key)
                        .arg(lease.job.as_str())
                        .arg(&lease.token)
                        .arg(millis(end.retention));
                    for value in &values {
                        cmd.arg(value);
                    }
                })
                .await?;
            return ended(&reply);
        }
        let (next, body, within) = match &end.next {
            Some(f) => (f.attempt.to_string(), f.body.clone(), millis(f.within)),
            None => (String::new(), Vec::new(), 1),
        };
        // The run as recorded, and the error it is appended with as lost should the end not
        // be recorded (the script writes the lost entry from the same fields).
        let run = end.run.as_ref().map(|run| {
            (
                run.error_as_lost().unwrap_or_default(),
                runlog::values_after_job(run),
            )
        });
        // complete.lua's part for this end: the number of its arguments, then its arguments;
        // the script makes its keys.
        let fill = |cmd: &mut redis::Cmd| {
            let args = 10 + run.as_ref().map_or(0, |(_, values)| values.len());
            cmd.arg(args)
                .arg(key)
                .arg(lease.job.as_str())
                .arg(&lease.token)
                .arg(end.state.map_or("", State::as_str))
                .arg(end.error.as_deref().unwrap_or(""))
                .arg(millis(end.retention))
                .arg(&next)
                .arg(&body[..])
                .arg(within);
            match &run {
                Some((lost, values)) => {
                    cmd.arg(lost);
                    for value in values {
                        cmd.arg(value);
                    }
                }
                None => {
                    cmd.arg("");
                }
            }
        };
        let reply = if end.state.is_some() {
            self.scripts.completes.call(&self.conn, fill).await?
        } else {
            // Giving a claim up changes no record (it only appends the attempt as lost):
            // nothing a guarantee rests on, no replica to wait for.
            self.scripts.completes.call_alone(&self.conn, fill).await?
        };
        ended(&reply)
    }

    async fn settle(&self, settle: &Settle) -> Result<Ended, StoreError> {
        let key = settle.key.as_str();
        let mut invocation = Call::new(&self.scripts.settle, 6);
        invocation
            .key(self.record_key(key))
            .key(&self.leases_key)
            .key(self.history.key())
            .key(self.body_key(key))
            .key(self.slots_prefix())
            .key(self.wait_prefix())
            .arg(key)
            .arg(settle.job.as_str())
            .arg(settle.attempt)
            .arg(settle.state.as_str())
            .arg(settle.error.as_deref().unwrap_or(""))
            .arg(millis(settle.retention))
            .arg(&self.record_prefix)
            .arg(&self.body_prefix)
            .arg(millis(WAKE_RECHECK));
        history_args(&mut invocation, &self.history, settle.run.as_ref());
        let reply: Vec<Vec<u8>> = self.conn.write_script(&invocation).await.map_err(written)?;
        ended(&reply)
    }

    async fn reap(&self, limit: usize, hold: Duration) -> Result<Vec<Orphan>, StoreError> {
        // Not guarded: a reap only hands stored messages out again. If a failover loses
        // what it wrote (due times, `pending`), the next sweep on the new master hands the
        // same ones out again, and the claim (guarded) lets only one of the copies run;
        // waiting for replicas here would only hold republishing back.
        let flat: Vec<Vec<u8>> = Call::new(&self.scripts.reap, 1)
            .key(&self.leases_key)
            .arg(&self.record_prefix)
            .arg(limit.max(1))
            .arg(millis(hold))
            .arg(&self.body_prefix)
            .query(&mut self.conn.clone())
            .await
            .map_err(command)?;
        flat.chunks_exact(4)
            .map(|c| {
                let why = text(&c[3]);
                Ok(Orphan {
                    key: text(&c[0]),
                    queue: text(&c[1]),
                    body: c[2].clone(),
                    why: Republish::parse(&why).ok_or_else(|| unexpected(&why))?,
                })
            })
            .collect()
    }

    async fn admit_replay(&self, key: &OccurrenceKey) -> Result<Option<State>, StoreError> {
        let key = key.to_string();
        let mut invocation = Call::new(&self.scripts.admit_replay, 3);
        invocation
            .key(self.record_key(&key))
            .key(&self.leases_key)
            .key(self.body_key(&key))
            .arg(&key)
            .arg(cronq_shared::ledger::PARENT_ENDED);
        // Guarded: were the reset lost, the replayed message would meet the `failed` record
        // and be acked as a duplicate without running.
        let before: String = self.conn.write_script(&invocation).await.map_err(written)?;
        if before.is_empty() {
            return Ok(None);
        }
        State::parse(&before)
            .map(Some)
            .ok_or_else(|| unexpected(&before))
    }

    async fn cancel(&self, cancel: &Cancel) -> Result<Cancelled, StoreError> {
        let key = cancel.key.as_str();
        let job = cancel.key.job();
        let mut invocation = Call::new(&self.scripts.cancel, 7);
        invocation
            .key(self.record_key(key))
            .key(&self.leases_key)
            .key(self.history.key())
            .key(self.body_key(key))
            .key(self.wait_prefix())
            .key(self.slots_prefix())
            .key(&self.cancels_key)
            .arg(key)
            .arg(job.as_str())
            .arg(cancelled_by(&cancel.who))
            .arg(&cancel.who)
            .arg(chrono::Utc::now().to_rfc3339());
        let (max_runs, min_id) = self.history.bounds();
        invocation
            .arg(max_runs)
            .arg(min_id)
            .arg(&self.record_prefix)
            .arg(&self.body_prefix)
            .arg(millis(WAKE_RECHECK));
        // Guarded: a cancel a failover lost would let the occurrence run after all.
        let reply: Vec<String> = self.conn.write_script(&invocation).await.map_err(written)?;
        let state = |s: &str| State::parse(s).ok_or_else(|| unexpected(s));
        match reply.as_slice() {
            [tag] if tag == "unknown" => Ok(Cancelled::Unknown),
            [tag] if tag == "stopping" => Ok(Cancelled::Stopping),
            [tag, st] if tag == "finished" => Ok(Cancelled::Finished(state(st)?)),
            [tag, st] if tag == "ended" => Ok(Cancelled::Ended(state(st)?)),
            other => Err(unexpected(&other.join(" "))),
        }
    }

    async fn gates(&self, gates: &[String]) -> Result<Vec<GateUse>, StoreError> {
        if gates.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = Call::new(&self.scripts.gates, 0);
        invocation
            .arg(&self.record_prefix)
            .arg(self.slots_prefix())
            .arg(self.wait_prefix())
            .arg(GATE_SHOWN);
        for gate in gates {
            invocation.arg(gate);
        }
        let reply: Vec<(Vec<String>, usize, Vec<String>)> = invocation
            .query(&mut self.conn.clone())
            .await
            .map_err(command)?;
        Ok(gates
            .iter()
            .zip(reply)
            .map(|(gate, (running, waiting, next))| GateUse {
                gate: gate.clone(),
                running,
                waiting,
                next,
            })
            .collect())
    }

    async fn cancels(&self) -> Result<u64, StoreError> {
        let n: Option<u64> = redis::cmd("GET")
            .arg(&self.cancels_key)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(command)?;
        Ok(n.unwrap_or(0))
    }

    async fn record(&self, key: &OccurrenceKey) -> Result<Option<Record>, StoreError> {
        RedisLedger::record(self, key).await
    }
}
