-- Claims occurrence keys, each for one attempt, atomically with the overlap rules of its
-- job: any number of claims in one call, each as if it had been a call of its own, in
-- order (see the batch at the end). Prepended: clock.lua, history.lua, wait.lua, batch.lua.
-- One claim, `claim(KEYS, ARGV, shared)` (its own tables, which shadow the script's):
-- KEYS[1] record hash    (ns:occ:KEY)
-- KEYS[2] lease zset     (ns:leases)      member KEY, score = lease expiry or due time (ms,
--                        server time)
-- KEYS[3] message body   (ns:occbody:KEY) kept apart, so that the record stays a small
--                        listpack-encoded hash (a long value would make it a hashtable for
--                        the rest of its retention, 3x the memory)
-- KEYS[7] fence counter  (ns:fence:JOB) the job's last fencing token; no TTL, so that a
--                        fence outgrows every earlier one of the job whatever expired since
-- Only for an exclusive job (overlap skip, queue or replace):
-- KEYS[4] job lock       (ns:joblock:JOB) value "KEY|TOKEN", PX lease
-- KEYS[5] wait list      (ns:jobwait:JOB) see wait.lua
-- KEYS[6] run history stream, for the waiters this occurrence supersedes (replace)
-- ARGV[1] key   ARGV[2] job   ARGV[3] queue   ARGV[4] attempt
-- ARGV[5] token, the caller's for every try of this claim: a record running under it was
--         claimed by an earlier try (its answer lost, or short of replicas) and is granted
--         again
-- ARGV[6] lease ms   ARGV[7] retention ms   ARGV[8] overlap (allow|skip|queue|replace)
-- ARGV[9] message body   ARGV[10] scheduled time ms
-- Only for an exclusive job:
-- ARGV[11] ms until the reaper re-checks a waiting occurrence
-- ARGV[12] ms a woken waiter has to claim its turn
-- ARGV[13] consumer id   ARGV[14] now, RFC 3339 (history entries; replace only)
-- ARGV[15] history MAXLEN   ARGV[16] history MINID (replace only: it alone supersedes)
-- `shared` holds the batch's record and body key prefixes (ns:occ:, ns:occbody:).
-- Numbers go to Redis as the strings they came in where they can: Lua turns a number back
-- into text with sprintf, 2,000 to 3,000 instructions each (see docs/benchmarks-notebook.md,
-- throughput step 2).
-- Returns {"claimed", takeover (0|1: taken over from an owner that stopped), fence}
--   | {"duplicate", state, attempt} | {"busy", holder key}
--   | {"waiting", holder key [, woken key, woken queue, woken body]}
--   | {"superseded", by key, or an operator's mark "cancelled by WHO"}
local function claim(KEYS, ARGV, shared)
  local now_s = server_now()
  local now = tonumber(now_s)
  local key = ARGV[1]
  local attempt = ARGV[4]
  local lease = tonumber(ARGV[6])
  local lease_until = tostring(now + lease)
  -- ns:occ: and ns:occbody:, as the batch sent them (the waiters of an exclusive job).
  local prefix, body_prefix = shared.record, shared.body
  -- One read of everything the checks need (a new key reads five nils).
  local rec = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'lease_until', 'next', 'token',
    'fence', 'cancel')
  local st = rec[1]
  local takeover = 0
  -- The fence of this very claim, granted by an earlier try: it keeps it.
  local fence
  -- ... and the cancel or replace mark set on it meanwhile.
  local mark = ''
  if st then
    local rec_attempt = tonumber(rec[2] or '0')
    local mine = st == 'running' and rec[5] == ARGV[5]
    if mine then
      fence = rec[6]
      mark = rec[7] or ''
    end
    -- A terminal state is final (a dead-letter replay first makes a failed record
    -- `retrying` again: admit_replay.lua).
    if st ~= 'running' and st ~= 'retrying' and st ~= 'pending' and st ~= 'waiting' then
      return {'duplicate', st, tostring(rec_attempt)}
    end
    if st == 'running' and not mine and tonumber(rec[3] or '0') > now then
      return {'duplicate', st, tostring(rec_attempt)}
    end
    if tonumber(attempt) < tonumber(rec[4] or '0') then
      return {'duplicate', st, tostring(rec_attempt)}
    end
    if (st == 'running' and not mine) or st == 'pending' then
      -- An operator cancelled it while it ran, and its owner went away before stopping it
      -- (lapsed, reaped or released): it ends cancelled rather than run again.
      local mark = rec[7]
      if mark and string.sub(mark, 1, 13) == 'cancelled by ' then
        return {'superseded', mark}
      end
      takeover = 1
    end
  end

  -- Records this occurrence as waiting for its turn.
  local function wait_here()
    redis.call('HSET', KEYS[1], 'state', 'waiting', 'attempt', attempt, 'next', attempt,
      'token', '', 'job', ARGV[2], 'queue', ARGV[3], 'cancel', '', 'exclusive', '1',
      'sched', ARGV[10], 'updated', now_s)
    redis.call('HDEL', KEYS[1], 'error')
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
    redis.call('SET', KEYS[3], ARGV[9], 'PX', ARGV[7])
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[11]), key)
    redis.call('ZADD', KEYS[5], ARGV[10], key)
  end

  -- Records the waiter `other` as cancelled: this newer occurrence replaces it. Its entry has
  -- no published_at (read back as none), as the ledger's rules write it.
  local function supersede(other)
    local other_rec = prefix .. other
    local why = 'replaced by ' .. key
    redis.call('HSET', other_rec, 'state', 'cancelled', 'token', '', 'updated', now_s,
      'error', why)
    redis.call('DEL', body_prefix .. other)
    redis.call('ZREM', KEYS[2], other)
    redis.call('ZREM', KEYS[5], other)
    append_fields(KEYS[6], ARGV[15], ARGV[16], {
      'key', other, 'job', ARGV[2], 'attempt', redis.call('HGET', other_rec, 'attempt') or '1',
      'consumer', ARGV[13], 'started_at', ARGV[14], 'duration_ms', '0',
      'outcome', 'cancelled', 'error', why})
  end

  local policy = ARGV[8]
  local exclusive = policy ~= 'allow'
  if exclusive then
    local sched = tonumber(ARGV[10])
    local holder = redis.call('GET', KEYS[4])
    local holder_key = holder and (string.match(holder, '^(.*)|[^|]*$') or holder)
    if holder_key == key then
      -- This occurrence's own lock, left by an owner that stopped: take it over.
      holder_key = nil
    end
    if policy == 'skip' and holder_key
        and tonumber(redis.call('HGET', prefix .. holder_key, 'sched') or '0') <= sched then
      -- skip: an earlier (or same-instant) holder makes this occurrence skipped.
      return {'busy', holder_key}
    end
    if policy == 'skip' or policy == 'queue' then
      -- queue, and skip behind a later holder (a retry, or a republished attempt, of an
      -- occurrence the next one overtook): wait for the turn, never skipped for a later one.
      if holder_key then
        wait_here()
        return {'waiting', holder_key}
      end
      -- Free, but earlier occurrences wait: they go first, in scheduled order.
      local head, head_sched = wait_end(KEYS[5], prefix, false)
      if head and head ~= key and head_sched <= sched then
        local woken = wake(KEYS[5], KEYS[2], prefix, body_prefix, now, tonumber(ARGV[12]))
        if woken and woken[1] ~= key then
          wait_here()
          return {'waiting', woken[1], woken[1], woken[2], woken[3]}
        end
      end
    else
      -- replace: the newest occurrence runs; every older one running or waiting is cancelled.
      if holder_key and tonumber(redis.call('HGET', prefix .. holder_key, 'sched') or '0') > sched then
        return {'superseded', holder_key}
      end
      local newest, newest_sched = wait_end(KEYS[5], prefix, true)
      if newest and newest ~= key and newest_sched > sched then
        return {'superseded', newest}
      end
      for _, other in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
        if other ~= key and redis.call('HGET', prefix .. other, 'state') == 'waiting' then
          supersede(other)
        end
      end
      if holder_key then
        if redis.call('EXISTS', prefix .. holder_key) == 1 then
          redis.call('HSET', prefix .. holder_key, 'cancel', key)
        end
        wait_here()
        return {'waiting', holder_key}
      end
    end
    redis.call('ZREM', KEYS[5], key)
    redis.call('SET', KEYS[4], key .. '|' .. ARGV[5], 'PX', ARGV[6])
  end
  if not fence then
    fence = tostring(redis.call('INCR', KEYS[7]))
  end
  if st or exclusive then
    redis.call('HSET', KEYS[1], 'fence', fence, 'state', 'running', 'attempt', attempt, 'next', attempt,
      'token', ARGV[5], 'job', ARGV[2], 'queue', ARGV[3],
      'lease_until', lease_until, 'cancel', mark, 'exclusive', exclusive and '1' or '0',
      'sched', ARGV[10], 'updated', now_s)
  else
    -- A new record of an `allow` job: no cancel request and not exclusive, which every
    -- script reads off absent fields as well (two fields less to write and to keep).
    redis.call('HSET', KEYS[1], 'fence', fence, 'state', 'running', 'attempt', attempt,
      'next', attempt, 'token', ARGV[5], 'job', ARGV[2], 'queue', ARGV[3],
      'lease_until', lease_until, 'sched', ARGV[10], 'updated', now_s)
  end
  if st then
    -- Only an earlier attempt can have left an error behind.
    redis.call('HDEL', KEYS[1], 'error')
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  redis.call('SET', KEYS[3], ARGV[9], 'PX', ARGV[7])
  redis.call('ZADD', KEYS[2], lease_until, key)
  return {'claimed', tostring(takeover), fence}
end

-- The batch. KEYS[1] is the lease zset, KEYS[2] the run history stream. ARGV begins with
-- what every claim of the batch shares: ARGV[1] the record key prefix (ns:occ:), ARGV[2]
-- the body key prefix (ns:occbody:), ARGV[3] the job lock key prefix (ns:joblock:),
-- ARGV[4] the wait list key prefix (ns:jobwait:), ARGV[5] ms a woken waiter has to claim
-- its turn, ARGV[6] history MAXLEN, ARGV[7] history MINID, ARGV[8] the fence counter key
-- prefix (ns:fence:). Then the claims one after the other, each as its ARGV[1..10] above, and for an exclusive job ARGV[11], ARGV[13] and
-- ARGV[14] after them (13 arguments); a claim's keys are made here from its key, its job
-- and the prefixes, and what the batch shares goes into its ARGV. A claim whose key holds
-- another type answers {"error", why} and leaves the others to run; any other error fails
-- the whole call. Returns one reply per claim, in order.
local shared = {record = ARGV[1], body = ARGV[2]}
local replies = {}
local at = 9
while at <= #ARGV do
  local key, job = ARGV[at], ARGV[at + 1]
  local keys = {ARGV[1] .. key, KEYS[1], ARGV[2] .. key}
  keys[7] = ARGV[8] .. job
  local args
  if ARGV[at + 7] ~= 'allow' then
    keys[4], keys[5], keys[6] = ARGV[3] .. job, ARGV[4] .. job, KEYS[2]
    args = {unpack(ARGV, at, at + 10)}
    args[12], args[13], args[14], args[15], args[16] =
      ARGV[5], ARGV[at + 11], ARGV[at + 12], ARGV[6], ARGV[7]
    at = at + 13
  else
    args = {unpack(ARGV, at, at + 9)}
    at = at + 10
  end
  local reply, err = run_one(claim, keys, args, shared)
  if not reply then
    return redis.error_reply(err)
  end
  replies[#replies + 1] = reply
end
return replies
