//! The ledger's floor: the coalescing raw loop of [`crate::raw`] plus the fewest Redis
//! commands that the common path of an idempotent run needs, sent the cheapest way Redis
//! 7.0 allows. It prices the throughput goal's "with the idempotency claim, the end and the
//! run history" on its own, apart from anything cronq does.
//!
//! Per delivery, with the deliveries that arrived together sent as one batch:
//! - the claim: `SET record token NX PX retention` (one atomic command decides it) and
//!   `INCR` of the job's fence, pipelined, no script;
//! - the run: nothing (the no-op handler of the cronq side);
//! - the end, fenced: one script call for the batch, per delivery `GET` the record, and
//!   only while it holds the claim's token `SET` its end state (`KEEPTTL`) and `XADD` the
//!   run to the history (the fields cronq's history has, `MAXLEN ~`);
//! - the ack: one `basic.ack` with `multiple` per window, as the coalescing loop.
//!
//! The message stays in the broker until its end (no body and no lease kept in Redis), and
//! takeovers, retries, gates and waiters are left out: they are off the common path, and
//! a floor leaves out what it can. A claim found taken is counted and acked, not run.
//!
//! `--floor` adds back, one step at a time, what cronq's ledger does on the same path, so
//! that each step's price is measured in the same run (the steps of [`Form`]); the
//! default is the floor itself.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, bail};
use chrono::{SecondsFormat, Utc};
use futures_util::{FutureExt as _, StreamExt as _};
use lapin::Channel;
use lapin::options::BasicAckOptions;
use redis::aio::MultiplexedConnection;
use redis::{Script, Value};
use tokio_util::sync::CancellationToken;

/// The end of a batch: KEYS are the records, then the history stream last; `ARGV[1]` the
/// history's MAXLEN, `ARGV[2]` the consumer, `ARGV[3]` the start instant, then per record its
/// key, job, token, end state, and publish instant.
const END: &str = r"
local stream = KEYS[#KEYS]
local ended = {}
for i = 1, #KEYS - 1 do
  local a = 3 + (i - 1) * 5
  if redis.call('GET', KEYS[i]) == ARGV[a + 3] then
    redis.call('SET', KEYS[i], ARGV[a + 4], 'KEEPTTL')
    redis.call('XADD', stream, 'MAXLEN', '~', ARGV[1], '*', 'key', ARGV[a + 1],
      'job', ARGV[a + 2], 'attempt', '1', 'consumer', ARGV[2], 'started_at', ARGV[3],
      'duration_ms', '0', 'outcome', 'succeeded', 'error', '', 'published_at', ARGV[a + 5])
    ended[#ended + 1] = 1
  else
    ended[#ended + 1] = 0
  end
end
return ended
";

/// The forms of [`Form::Lua`] and after: one script call for a batch's claims, one for its
/// ends. `ARGV[1]` the key prefix, `ARGV[2]` the retention (ms), `ARGV[3]` the form (`lua`,
/// `hash`, `hash-body`), `ARGV[4]` now (ms); then per claim its key, job, token and body.
/// Replies the fence of each claim, 0 for one found taken.
const CLAIM_STEPS: &str = r"
local p, ret, form, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local fences = {}
for i = 5, #ARGV, 4 do
  local key, job, token = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local rec = p .. 'occ:' .. key
  local fence = 0
  if form == 'lua' then
    if redis.call('SET', rec, token, 'NX', 'PX', ret) then
      fence = redis.call('INCR', p .. 'fence:' .. job)
    end
  elseif not redis.call('HMGET', rec, 'state', 'attempt', 'lease_until', 'next', 'token',
      'fence', 'cancel')[1] then
    fence = redis.call('INCR', p .. 'fence:' .. job)
    redis.call('HSET', rec, 'fence', fence, 'state', 'running', 'attempt', '1', 'next', '1',
      'token', token, 'job', job, 'queue', 'default', 'lease_until', now, 'sched', now,
      'updated', now)
    redis.call('PEXPIRE', rec, ret)
    if form == 'hash-body' then
      redis.call('SET', p .. 'occbody:' .. key, ARGV[i + 3], 'PX', ret)
      redis.call('ZADD', p .. 'leases', now, key)
    end
  end
  fences[#fences + 1] = fence
end
return fences
";

/// The ends of [`CLAIM_STEPS`]' claims: `ARGV[1]` to `ARGV[4]` as there, `ARGV[5]` the
/// history's MAXLEN, `ARGV[6]` the consumer; then per end its key, job, token and publish
/// instant. Replies 1 for each end recorded, 0 for one whose claim was lost.
const END_STEPS: &str = r"
local p, ret, form, now, maxlen, consumer = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local ended = {}
for i = 7, #ARGV, 4 do
  local key, job, token = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local rec = p .. 'occ:' .. key
  local mine
  if form == 'lua' then
    mine = redis.call('GET', rec) == token
    if mine then
      redis.call('SET', rec, 'succeeded ' .. token, 'KEEPTTL')
    end
  else
    local r = redis.call('HMGET', rec, 'state', 'token', 'exclusive', 'job', 'cap', 'pool',
      'pool_cap')
    mine = r[1] == 'running' and r[2] == token
    if mine then
      redis.call('HSET', rec, 'state', 'succeeded', 'updated', now)
      if form == 'hash-body' then
        redis.call('DEL', p .. 'occbody:' .. key)
        redis.call('ZREM', p .. 'leases', key)
      end
      redis.call('PEXPIRE', rec, ret)
    end
  end
  if mine then
    redis.call('XADD', p .. 'runs', 'MAXLEN', '~', maxlen, '*', 'key', key, 'job', job,
      'attempt', '1', 'consumer', consumer, 'started_at', now, 'duration_ms', '0',
      'outcome', 'succeeded', 'error', '', 'published_at', ARGV[i + 3])
    ended[#ended + 1] = 1
  else
    ended[#ended + 1] = 0
  end
end
return ended
";

/// What the floor's ledger does per occurrence, from the floor itself to cronq's own
/// commands (`backends/redis/src/ledger/claim.lua`, `complete.lua`) in the plainest scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Form {
    /// The floor: the claim as two plain commands, the end in a script (see the module).
    #[default]
    Plain,
    /// The claim in a script too: what a script call costs over plain commands.
    Lua,
    /// cronq's record: a hash read whole (7 fields) and written with its 12 fields and an
    /// expiry at the claim, read again and written with its expiry at the end.
    Hash,
    /// [`Form::Hash`] and the message body and the lease entry a reaper needs, written at
    /// the claim and removed at the end: cronq's 12 commands per occurrence.
    HashBody,
}

impl Form {
    /// Its name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Lua => "lua",
            Self::Hash => "hash",
            Self::HashBody => "hash-body",
        }
    }
}

/// How long a record is kept (the bench config's `retention`).
const RETENTION_MS: u64 = 3_600_000;

/// The history's `MAXLEN ~` (cronq's default bound).
const HISTORY_MAXLEN: &str = "100000";

/// What a floor consumer needs of Redis: its connection and where its keys go.
#[derive(Clone)]
pub struct Ledger {
    conn: MultiplexedConnection,
    /// `ns:floor:`, before `occ:KEY`, `fence:JOB` and `runs`.
    prefix: String,
    form: Form,
    end: Arc<Script>,
    claim_steps: Arc<Script>,
    end_steps: Arc<Script>,
}

/// The fields of a body the floor reads: the occurrence's key and job.
#[derive(serde::Deserialize)]
struct Ids<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow)]
    job: Cow<'a, str>,
    #[serde(borrow)]
    published_at: Cow<'a, str>,
}

impl Ledger {
    /// A connection of its own to `url`, keys under `prefix` (`ns:floor:`), claims and ends
    /// made as `form` says.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn open(url: &str, prefix: String, form: Form) -> anyhow::Result<Self> {
        let conn = redis::Client::open(url)
            .context("while reading the Redis URL")?
            .get_multiplexed_async_connection()
            .await
            .context("while connecting to Redis (is it running on CRONQ_REDIS_URL?)")?;
        Ok(Self {
            conn,
            prefix,
            form,
            end: Arc::new(Script::new(END)),
            claim_steps: Arc::new(Script::new(CLAIM_STEPS)),
            end_steps: Arc::new(Script::new(END_STEPS)),
        })
    }

    /// Claims, runs (nothing) and ends the occurrences of `bodies`; returns how many ran
    /// (the others were found claimed).
    async fn run<'a>(
        &mut self,
        consumer: &str,
        seq: &mut u64,
        bodies: impl ExactSizeIterator<Item = &'a [u8]>,
    ) -> anyhow::Result<usize> {
        let mut ids = Vec::with_capacity(bodies.len());
        for body in bodies {
            let id: Ids<'_> = serde_json::from_slice(body)
                .context("the ledger floor reads unsigned occurrence bodies only")?;
            ids.push((id, body));
        }
        if self.form != Form::Plain {
            return self.run_steps(consumer, seq, &ids).await;
        }
        let mut claims = redis::pipe();
        let mut tokens = Vec::with_capacity(ids.len());
        for (id, _) in &ids {
            *seq += 1;
            let token = format!("{consumer}:{seq}");
            claims
                .cmd("SET")
                .arg(format!("{}occ:{}", self.prefix, id.key))
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(RETENTION_MS)
                .cmd("INCR")
                .arg(format!("{}fence:{}", self.prefix, id.job));
            tokens.push(token);
        }
        let replies: Vec<Value> = claims
            .query_async(&mut self.conn)
            .await
            .context("while claiming a batch")?;
        let started = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
        let mut end = self.end.prepare_invoke();
        end.arg(HISTORY_MAXLEN).arg(consumer).arg(&started);
        let mut claimed = 0;
        for (i, (id, _)) in ids.iter().enumerate() {
            if matches!(replies.get(2 * i), Some(Value::Nil) | None) {
                continue;
            }
            claimed += 1;
            end.key(format!("{}occ:{}", self.prefix, id.key))
                .arg(id.key.as_ref())
                .arg(id.job.as_ref())
                .arg(&tokens[i])
                .arg(format!("succeeded {}", tokens[i]))
                .arg(id.published_at.as_ref());
        }
        if claimed == 0 {
            return Ok(0);
        }
        end.key(format!("{}runs", self.prefix));
        let ended: Vec<i64> = end
            .invoke_async(&mut self.conn)
            .await
            .context("while ending a batch")?;
        lost_none(&ended)?;
        Ok(claimed)
    }

    /// [`Ledger::run`] in the forms after [`Form::Plain`]: one script call for the claims,
    /// one for the ends.
    async fn run_steps(
        &mut self,
        consumer: &str,
        seq: &mut u64,
        ids: &[(Ids<'_>, &[u8])],
    ) -> anyhow::Result<usize> {
        let now = Utc::now().timestamp_millis();
        let mut claims = self.claim_steps.prepare_invoke();
        claims
            .arg(&self.prefix)
            .arg(RETENTION_MS)
            .arg(self.form.as_str())
            .arg(now);
        let mut tokens = Vec::with_capacity(ids.len());
        for (id, body) in ids {
            *seq += 1;
            let token = format!("{consumer}:{seq}");
            claims
                .arg(id.key.as_ref())
                .arg(id.job.as_ref())
                .arg(&token)
                .arg(*body);
            tokens.push(token);
        }
        let fences: Vec<i64> = claims
            .invoke_async(&mut self.conn)
            .await
            .context("while claiming a batch")?;
        let mut ends = self.end_steps.prepare_invoke();
        ends.arg(&self.prefix)
            .arg(RETENTION_MS)
            .arg(self.form.as_str())
            .arg(now)
            .arg(HISTORY_MAXLEN)
            .arg(consumer);
        let mut claimed = 0;
        for (((id, _), token), fence) in ids.iter().zip(&tokens).zip(&fences) {
            if *fence != 0 {
                claimed += 1;
                ends.arg(id.key.as_ref())
                    .arg(id.job.as_ref())
                    .arg(token)
                    .arg(id.published_at.as_ref());
            }
        }
        if claimed == 0 {
            return Ok(0);
        }
        let ended: Vec<i64> = ends
            .invoke_async(&mut self.conn)
            .await
            .context("while ending a batch")?;
        lost_none(&ended)?;
        Ok(claimed)
    }
}

/// Fails when an end found its claim lost: nothing else ends the floor's records, so it
/// would be a fault of the floor's own.
fn lost_none(ended: &[i64]) -> anyhow::Result<()> {
    if ended.iter().any(|e| *e != 1) {
        bail!("the ledger floor lost a claim it held: nothing else ends its records");
    }
    Ok(())
}

/// Consumes `queue` as [`crate::raw::consume_acking`] does with coalesced acks (one with
/// `multiple` per `ack_every` deliveries), each batch of deliveries that arrived together
/// claimed and ended in `ledger` before it counts, until `count` reaches `target` or
/// `token` is cancelled.
///
/// # Errors
/// When the subscription or Redis fails.
#[expect(
    clippy::too_many_arguments,
    reason = "the arguments of crate::raw::consume_acking, and the ledger with its consumer name"
)]
pub async fn consume(
    ch: Channel,
    queue: &str,
    prefetch: u16,
    ack_every: usize,
    mut ledger: Ledger,
    consumer: String,
    count: Arc<AtomicUsize>,
    target: usize,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let mut deliveries = crate::raw::subscribe(&ch, queue, prefetch).await?;
    let (mut batch, mut seq, mut unacked, mut pending) = (Vec::new(), 0_u64, 0, None);
    let (mut drained, mut batches) = (0_usize, 0_usize);
    loop {
        let next = tokio::select! {
            biased;
            () = token.cancelled() => break,
            d = deliveries.next() => d,
        };
        let Some(first) = next else { break };
        batch.push(first?);
        while batch.len() < usize::from(prefetch) {
            match deliveries.next().now_or_never() {
                Some(Some(d)) => batch.push(d?),
                _ => break,
            }
        }
        ledger
            .run(&consumer, &mut seq, batch.iter().map(|d| d.data.as_slice()))
            .await?;
        (drained, batches) = (drained + batch.len(), batches + 1);
        unacked += batch.len();
        let done = count.fetch_add(batch.len(), Ordering::AcqRel) + batch.len() >= target;
        pending = batch.pop().map(|d| d.acker);
        batch.clear();
        if unacked >= ack_every || done {
            if let Some(acker) = pending.take() {
                acker.ack(BasicAckOptions { multiple: true }).await?;
            }
            unacked = 0;
        }
        if done {
            token.cancel();
        }
    }
    if let Some(acker) = pending {
        acker.ack(BasicAckOptions { multiple: true }).await?;
    }
    eprintln!(
        "  {consumer}: {drained} deliveries in {batches} batches ({:.1} a batch)",
        drained as f64 / batches.max(1) as f64
    );
    let _ = ch.close(200, "baseline done".into()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The floor does the work it is measured for, on the real Redis: each occurrence is
    /// claimed once (a second delivery of it does not run), and each run ends its record
    /// and appends one history entry.
    #[tokio::test]
    async fn each_occurrence_runs_once_and_leaves_its_end_and_its_history_entry() {
        for form in [Form::Plain, Form::Lua, Form::Hash, Form::HashBody] {
            runs_once(form).await;
        }
    }

    async fn runs_once(form: Form) {
        let url = std::env::var("CRONQ_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let prefix = format!("bench-floor-test-{}:{form:?}:floor:", std::process::id());
        let mut ledger = Ledger::open(&url, prefix.clone(), form).await.unwrap();
        let bodies: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                format!(
                    r#"{{"kind":"occurrence.v1","key":"j@2020-01-01T00:00:0{i}Z","job":"j","published_at":"2020-01-01T00:00:0{i}Z"}}"#
                )
                .into_bytes()
            })
            .collect();
        let mut seq = 0;
        let first = ledger
            .run("c", &mut seq, bodies.iter().map(Vec::as_slice))
            .await
            .unwrap();
        // The second and third again, with one not seen before.
        let again: Vec<&[u8]> = vec![&bodies[1], &bodies[2]];
        let second = ledger.run("c", &mut seq, again.into_iter()).await.unwrap();
        let mut conn = ledger.conn.clone();
        let record = format!("{prefix}occ:j@2020-01-01T00:00:01Z");
        let state: Option<String> = if form == Form::Plain || form == Form::Lua {
            redis::cmd("GET")
                .arg(&record)
                .query_async(&mut conn)
                .await
                .unwrap()
        } else {
            redis::cmd("HGET")
                .arg(&record)
                .arg("state")
                .query_async(&mut conn)
                .await
                .unwrap()
        };
        let left: usize = redis::cmd("EXISTS")
            .arg(format!("{prefix}occbody:j@2020-01-01T00:00:01Z"))
            .arg(format!("{prefix}leases"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let history: usize = redis::cmd("XLEN")
            .arg(format!("{prefix}runs"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let fence: u64 = redis::cmd("GET")
            .arg(format!("{prefix}fence:j"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!((first, second), (3, 0), "{form:?}");
        let ended = if form == Form::Plain || form == Form::Lua {
            "succeeded c:2"
        } else {
            "succeeded"
        };
        assert_eq!(state.as_deref(), Some(ended), "{form:?}");
        assert_eq!(
            left, 0,
            "{form:?}: an end removes the body and the lease entry"
        );
        assert_eq!(history, 3, "{form:?}");
        // The plain claim takes a fence whether or not it wins; a script only when it does.
        let fences = if form == Form::Plain { 5 } else { 3 };
        assert_eq!(fence, fences, "{form:?}");
    }
}
