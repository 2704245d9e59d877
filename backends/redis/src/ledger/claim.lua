-- Claims occurrence keys, each for one attempt, atomically with the overlap rules of its
-- job: any number of claims in one call, each as if it had been a call of its own, in
-- order (see the batch at the end). Prepended: clock.lua, history.lua, record.lua, wait.lua,
-- batch.lua.
-- One claim, `claim(KEYS, ARGV, shared)` (its own tables, which shadow the script's):
-- KEYS[1] record         (ns:occ:KEY, record.lua)
-- KEYS[2] lease zset     (ns:leases)      member KEY, score = lease expiry or due time (ms,
--                        server time)
-- KEYS[3] message body   (ns:occbody:KEY) kept apart, so that the record stays a small
--                        listpack-encoded hash (a long value would make it a hashtable for
--                        the rest of its retention, 3x the memory)
-- KEYS[7] fence counter  (ns:fence:JOB) the job's last fencing token; no TTL, so that a
--                        fence outgrows every earlier one of the job whatever expired since
-- KEYS[6] run history stream, for the waiters this occurrence supersedes (replace)
-- ARGV[1] key   ARGV[2] job   ARGV[3] queue   ARGV[4] attempt
-- ARGV[5] token, the caller's for every try of this claim: a record running under it was
--         claimed by an earlier try (its answer lost, or short of replicas) and is granted
--         again
-- ARGV[6] lease ms   ARGV[7] retention ms   ARGV[8] overlap (allow|skip|queue|replace), or
--         held: an allow claim outside any pool whose caller holds its delivery unacked
--         (Claim::held), so that a new record keeps no body and no lease entry (`held` = 1;
--         the string of record.lua) until heartbeat.lua keeps them or the end; the broker
--         redelivers the message of an owner that died, and a redelivery of a held running
--         claim keeps them then
-- ARGV[9] message body   ARGV[10] scheduled time ms
-- Only for a gated claim (overlap other than allow, or a pool):
-- ARGV[11] ms until the reaper re-checks a waiting occurrence
-- ARGV[12] consumer id   ARGV[13] now, RFC 3339 (history entries; replace only)
-- ARGV[14] slots of the job's gate (max_concurrent)   ARGV[15] pool ('' none)
-- ARGV[16] slots of the pool
-- An exclusive job takes a slot of its gate (see wait.lua: ns:slots:JOB, ns:jobwait:JOB),
-- a pooled one a slot of its pool's (ns:slots:pool:NAME, ns:jobwait:pool:NAME).
-- `shared` holds what the batch shares: key prefixes (record, body, slots, wait), ms a
-- woken waiter has to claim its turn, history MAXLEN and MINID.
-- Numbers go to Redis as the strings they came in where they can: Lua turns a number back
-- into text with sprintf, 2,000 to 3,000 instructions each (see docs/benchmarks-notebook.md,
-- throughput step 2).
-- Returns {"claimed", takeover (0|1: taken over from an owner that stopped), fence [, "1": held]}
--   | fence, an integer: a new record granted held (not taken over)
--   | {"duplicate", state, attempt} | {"busy", holder key}
--   | {"waiting", holder key [, woken key, woken queue, woken body]}
--   | {"superseded", by key, or an operator's mark "cancelled by WHO"}

-- The gates of a claim of an exclusive or a pooled job (`claim`'s tables and instant):
-- a reply when it does not run now (busy, waiting, superseded); nil when it runs, with
-- the slots of its gates taken. Apart from `claim`, so that a claim of an `allow` job
-- outside any pool makes none of the functions it defines.
local function take_gates(KEYS, ARGV, shared, now, now_s, exclusive, pool)
  local key = ARGV[1]
  local attempt = ARGV[4]
  local lease = tonumber(ARGV[6])
  local policy = ARGV[8]
  -- ns:occ: and ns:occbody:, as the batch sent them (the waiters of a gate).
  local prefix, body_prefix = shared.record, shared.body

  -- Records this occurrence as waiting for a slot of `gate`: a waiter holds no slot, and
  -- is on one wait list only.
  local function wait_here(gate)
    local pool = ARGV[15] or ''
    redis.call('HSET', KEYS[1], 'state', 'waiting', 'attempt', attempt, 'next', attempt,
      'token', '', 'job', ARGV[2], 'queue', ARGV[3], 'cancel', '',
      'exclusive', ARGV[8] ~= 'allow' and '1' or '0', 'cap', ARGV[14] or '1',
      'pool', pool, 'pool_cap', ARGV[16] or '0', 'gate', gate,
      'sched', ARGV[10], 'updated', now_s)
    redis.call('HDEL', KEYS[1], 'error')
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
    redis.call('SET', KEYS[3], ARGV[9], 'PX', ARGV[7])
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[11]), key)
    for _, g in ipairs({ARGV[2], 'pool:' .. pool}) do
      redis.call('HDEL', shared.slots .. g, key)
      if g ~= gate then
        redis.call('ZREM', shared.wait .. g, key)
      end
    end
    redis.call('ZADD', shared.wait .. gate, ARGV[10], key)
  end

  -- Records the waiter `other` as cancelled: this newer occurrence replaces it. Its entry has
  -- no published_at (read back as none), as the ledger's rules write it.
  local function supersede(other, wait)
    local other_rec = prefix .. other
    local why = 'replaced by ' .. key
    redis.call('HSET', other_rec, 'state', 'cancelled', 'token', '', 'updated', now_s,
      'error', why)
    redis.call('DEL', body_prefix .. other)
    redis.call('ZREM', KEYS[2], other)
    redis.call('ZREM', wait, other)
    append_fields(KEYS[6], shared.maxlen, shared.minid, {
      'key', other, 'job', ARGV[2], 'attempt', redis.call('HGET', other_rec, 'attempt') or '1',
      'consumer', ARGV[12], 'started_at', ARGV[13], 'duration_ms', '0',
      'outcome', 'cancelled', 'error', why})
  end

  local sched = tonumber(ARGV[10])

  -- Takes a slot of `gate` (of `cap`) in scheduled order (queue, and every pool): nil when
  -- it may take one now; else it waits on the gate's wait list. With k slots free, the
  -- first k waiters scheduled no later than it go first.
  local function queue_at(gate, cap)
    local slots, wait = shared.slots .. gate, shared.wait .. gate
    -- The common case first, without reading every slot: fewer slots stored (live or
    -- lapsed, its own included) than the gate has, and no one waiting.
    if redis.call('HLEN', slots) < cap and redis.call('ZCARD', wait) == 0 then
      return nil
    end
    local holders = slot_holders(slots, now, key)
    local free = cap - #holders
    if free <= 0 then
      wait_here(gate)
      return {'waiting', holders[1]}
    end
    local ahead = 0
    for _, w in ipairs(wait_ends(wait, gate, prefix, body_prefix, false, free)) do
      if w[1] == key or w[2] > sched then
        break
      end
      ahead = ahead + 1
    end
    if ahead < free then
      return nil
    end
    local woken = wake(wait, gate, KEYS[2], prefix, body_prefix, now, shared.wake, free)
    if woken and woken[1] ~= key then
      wait_here(gate)
      return {'waiting', woken[1], woken[1], woken[2], woken[3]}
    end
    return nil
  end

  local cap = math.max(tonumber(ARGV[14] or '1') or 1, 1)
  if exclusive then
    local gate = ARGV[2]
    local slots, wait = shared.slots .. gate, shared.wait .. gate
    local reply
    if policy == 'skip' then
      -- All slots taken: an earlier (or same-instant) holder makes this occurrence skipped;
      -- behind later ones only (retries, or republished attempts, of occurrences the next
      -- ones overtook) it waits for its turn as under queue, never skipped for later ones.
      local holders = slot_holders(slots, now, key)
      if #holders >= cap then
        for _, h in ipairs(holders) do
          local at = redis.call('HGET', prefix .. h, 'sched')
          if not at or tonumber(at) <= sched then
            return {'busy', h}
          end
        end
      end
      reply = queue_at(gate, cap)
    elseif policy == 'queue' then
      reply = queue_at(gate, cap)
    else
      -- replace: the newest occurrences run. All slots taken, a newer one asks the running
      -- one to stop (one slot: the holder; more: the oldest not yet asked) and waits for its
      -- slot; an older one is superseded.
      local holders = slot_holders(slots, now, key)
      local full = #holders >= cap
      local running = {}
      for _, h in ipairs(holders) do
        local r = redis.call('HMGET', prefix .. h, 'sched', 'cancel')
        local at = -1e300
        if r[1] then at = tonumber(r[1]) end
        running[#running + 1] = {at, h, r[2] and r[2] ~= '' and r[2] ~= '0'}
      end
      table.sort(running, function(x, y)
        if x[1] ~= y[1] then return x[1] < y[1] end
        return x[2] < y[2]
      end)
      local target
      if full then
        if cap == 1 then
          target = running[1]
        else
          for _, r in ipairs(running) do
            if not r[3] then
              target = r
              break
            end
          end
        end
      end
      if target and target[1] > sched then
        return {'superseded', target[2]}
      end
      -- As many waiters newer than it as there are slots: they run, not it.
      local newer = {}
      for _, w in ipairs(wait_ends(wait, gate, prefix, body_prefix, true, cap)) do
        if w[1] ~= key and w[2] > sched then
          newer[#newer + 1] = w[1]
        end
      end
      if #newer >= cap then
        return {'superseded', newer[1]}
      end
      if cap == 1 then
        for _, other in ipairs(redis.call('ZRANGE', wait, 0, -1)) do
          if other ~= key and redis.call('HGET', prefix .. other, 'state') == 'waiting' then
            supersede(other, wait)
          end
        end
      elseif full and not target then
        local first = wait_ends(wait, gate, prefix, body_prefix, false, 1)[1]
        if first and first[1] ~= key then
          supersede(first[1], wait)
        end
      end
      if full then
        local holder
        if target then
          holder = target[2]
          if redis.call('EXISTS', prefix .. holder) == 1 then
            redis.call('HSET', prefix .. holder, 'cancel', key)
          end
        else
          holder = running[1][2]
        end
        wait_here(gate)
        return {'waiting', holder}
      end
    end
    if reply then
      return reply
    end
  end
  if pool ~= '' then
    local reply = queue_at('pool:' .. pool, math.max(tonumber(ARGV[16]) or 1, 1))
    if reply then
      return reply
    end
  end
  redis.call('ZREM', shared.wait .. ARGV[2], key)
  if exclusive then
    set_slot(shared.slots .. ARGV[2], key, ARGV[5], now + lease, now)
  end
  if pool ~= '' then
    redis.call('ZREM', shared.wait .. 'pool:' .. pool, key)
    set_slot(shared.slots .. 'pool:' .. pool, key, ARGV[5], now + lease, now)
  end
  return nil
end

-- The expiry of a lease of `ms` (text) from now, as text: made once per lease length in a
-- script call (a number turned into text is a sprintf).
local lease_ends = {}
local function lease_end(ms)
  local at = lease_ends[ms]
  if not at then
    at = tostring(server_ms() + tonumber(ms))
    lease_ends[ms] = at
  end
  return at
end

-- The value of a new held record (the string record.lua describes), running under the
-- claim's token with `fence`. `ARGV` is the claim's own, from `at` on.
local function held_record(fence, ARGV, at)
  return held_value('running', server_now(), fence, ARGV[at + 3], ARGV[at + 1],
    ARGV[at + 2], lease_end(ARGV[at + 5]), ARGV[at + 9], ARGV[at + 4])
end

-- A new record of an `allow` job outside any pool: no cancel request, not exclusive, no
-- pool, which every script reads off absent fields as well (fields less to write and to
-- keep). `held`: the claim was granted held, and the record is the string of
-- `held_record` (one command, not two). `ARGV` is the claim's own, from `at` on.
local function new_record(record, fence, ARGV, at, held)
  if held then
    redis.call('SET', record, held_record(fence, ARGV, at), 'PX', ARGV[at + 6])
    return
  end
  local attempt = ARGV[at + 3]
  redis.call('HSET', record, 'fence', fence, 'state', 'running', 'attempt', attempt,
    'next', attempt, 'token', ARGV[at + 4], 'job', ARGV[at + 1], 'queue', ARGV[at + 2],
    'lease_until', lease_end(ARGV[at + 5]), 'sched', ARGV[at + 9],
    'updated', server_now())
  redis.call('PEXPIRE', record, ARGV[at + 6])
end

local function claim(KEYS, ARGV, shared)
  local now_s = server_now()
  local now = server_ms()
  local key = ARGV[1]
  local attempt = ARGV[4]
  local lease_until = lease_end(ARGV[6])
  -- One read of everything the checks need (a new key reads eight nils).
  local rec = read_record(KEYS[1], 'state', 'attempt', 'lease_until', 'next', 'token',
    'fence', 'cancel', 'held')
  local st = rec[1]
  local takeover = '0'
  -- The fence of this very claim, granted by an earlier try: it keeps it.
  local fence
  -- ... and the cancel or replace mark set on it meanwhile.
  local mark = ''
  -- Running under this claim's token: granted by an earlier try of it.
  local mine = false
  if st then
    local rec_attempt = tonumber(rec[2] or '0')
    mine = st == 'running' and rec[5] == ARGV[5]
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
      if rec[8] == '1' and attempt == rec[2] then
        -- The message of a held claim, delivered again while its lease lives: its owner's
        -- delivery is gone (the owner died, or its channel closed). Kept here, with the
        -- lease listed, so the reaper republishes it if the owner does not end it.
        redis.call('SET', KEYS[3], ARGV[9], 'PX', ARGV[7])
        redis.call('ZADD', KEYS[2], rec[3], key)
        redis.call('HDEL', KEYS[1], 'held')
      end
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
      takeover = '1'
    end
  end

  -- Held: a new record, or this very claim granted held by an earlier try.
  local held = ARGV[8] == 'held' and (not st or (mine and rec[8] == '1'))
  local exclusive = ARGV[8] ~= 'allow' and ARGV[8] ~= 'held'
  local pool = ARGV[15] or ''
  local gated = exclusive or pool ~= ''
  if gated then
    local reply = take_gates(KEYS, ARGV, shared, now, now_s, exclusive, pool)
    if reply then
      return reply
    end
  end
  -- A new fence stays a number: Redis turns a number argument into text itself, far
  -- cheaper than Lua's tostring.
  if not fence then
    fence = redis.call('INCR', KEYS[7])
  end
  if not (st or gated) then
    new_record(KEYS[1], fence, ARGV, 1, held)
  else
    redis.call('HSET', KEYS[1], 'fence', fence, 'state', 'running', 'attempt', attempt, 'next', attempt,
      'token', ARGV[5], 'job', ARGV[2], 'queue', ARGV[3],
      'lease_until', lease_until, 'cancel', mark, 'exclusive', exclusive and '1' or '0',
      'cap', ARGV[14] or '1', 'pool', pool, 'pool_cap', ARGV[16] or '0', 'gate', ARGV[2],
      'sched', ARGV[10], 'updated', now_s)
    if st then
      -- Only an earlier attempt can have left an error behind, or a held mark (kept by a
      -- claim granted held again: the last field named twice then).
      redis.call('HDEL', KEYS[1], 'error', held and 'error' or 'held')
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
  end
  if held then
    if not st then
      -- The most common reply, a new record granted held: its fence alone, an integer.
      return fence
    end
    return {'claimed', takeover, tostring(fence), '1'}
  end
  redis.call('SET', KEYS[3], ARGV[9], 'PX', ARGV[7])
  redis.call('ZADD', KEYS[2], lease_until, key)
  return {'claimed', takeover, tostring(fence)}
end

-- The batch. KEYS[1] is the lease zset, KEYS[2] the run history stream. ARGV begins with
-- what every claim of the batch shares: ARGV[1] the record key prefix (ns:occ:), ARGV[2]
-- the body key prefix (ns:occbody:), ARGV[3] the slots key prefix (ns:slots:), ARGV[4]
-- the wait list key prefix (ns:jobwait:), ARGV[5] ms a woken waiter has to claim its turn,
-- ARGV[6] history MAXLEN, ARGV[7] history MINID, ARGV[8] the fence counter key prefix
-- (ns:fence:). Then the claims one after the other, each as the number of its arguments,
-- then its ARGV above (10, or 16 for a gated one); a claim's keys are made here from its
-- key, its job and the prefixes. A claim whose key holds another type answers
-- {"error", why} and leaves the others to run; any other error fails the whole call.
-- Returns one reply per claim, in order.
local shared = {record = ARGV[1], body = ARGV[2], slots = ARGV[3], wait = ARGV[4],
  wake = tonumber(ARGV[5]), maxlen = ARGV[6], minid = ARGV[7]}
local replies = {}
-- One table of keys for every claim (`claim` only reads it), refilled for each.
local keys = {false, KEYS[1], false, false, false, KEYS[2], false}
local at = 9
while at <= #ARGV do
  local first = at + 1
  local last = at + tonumber(ARGV[at])
  local key, job = ARGV[first], ARGV[first + 1]
  keys[1], keys[3], keys[7] = ARGV[1] .. key, ARGV[2] .. key, ARGV[8] .. job
  -- The most common claim, made here as `claim` makes it but without its framing (a call,
  -- a table of its arguments, a pcall: about a µs): a new record granted held, its fence
  -- taken first (the record holds it) and the record written only where there is none
  -- (`SET … NX`, one command in place of an `EXISTS` before it). A key found there leaves
  -- the claim to `claim`, with the fence taken skipped: a job's fences grow, with gaps. A
  -- fence counter that is not a number leaves it to `claim` too, which answers its error.
  local fence = ARGV[first + 7] == 'held' and redis.pcall('INCR', keys[7])
  if type(fence) == 'number'
    and redis.call('SET', keys[1], held_record(fence, ARGV, first), 'NX', 'PX',
      ARGV[first + 6]) then
    replies[#replies + 1] = fence
  else
    local reply, err = run_one(claim, keys, {unpack(ARGV, first, last)}, shared)
    if not reply then
      return redis.error_reply(err)
    end
    replies[#replies + 1] = reply
  end
  at = last + 1
end
return replies
