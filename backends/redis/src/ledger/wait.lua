-- Prepended to claim.lua, complete.lua, settle.lua, cancel.lua and heartbeat.lua, after
-- record.lua: gates, their slots and their wait lists (the rules in full:
-- cronq_ledger_rules).
-- A gate is an exclusive job's (named after the job) or a pool's ("pool:NAME"). Its slots
-- are a hash (ns:slots:GATE), one field per holding occurrence key, valued "UNTIL|TOKEN"
-- (UNTIL in ms, server time); a slot whose UNTIL has passed is free, and removed when met.
-- Its wait list is a zset (ns:jobwait:GATE) of the keys of waiting occurrences, scored by
-- scheduled time (ms); each has a record in state "waiting" whose `gate` field names the
-- gate (a record without one waits on its job's), its message in its body key, and a due
-- time in the lease zset, so the reaper republishes it if its turn is lost.
-- rec_prefix: ns:occ:   body_prefix: ns:occbody:

-- The holders of the live slots of `slots` other than `key`, sorted; lapsed slots go.
local function slot_holders(slots, now, key)
  local all = redis.call('HGETALL', slots)
  local out = {}
  for i = 1, #all, 2 do
    local untl = tonumber(string.match(all[i + 1], '^(%d+)|') or '0')
    if untl <= now then
      redis.call('HDEL', slots, all[i])
    elseif all[i] ~= key then
      out[#out + 1] = all[i]
    end
  end
  table.sort(out)
  return out
end

-- The token of the live slot `holder` holds in `slots`, or nil.
local function slot_token(slots, holder, now)
  local v = redis.call('HGET', slots, holder)
  if not v then
    return nil
  end
  local untl, token = string.match(v, '^(%d+)|(.*)$')
  if not untl or tonumber(untl) <= now then
    return nil
  end
  return token
end

-- Stores the slot `holder` holds in `slots` until `untl` (ms); the hash lives as long as
-- its longest slot.
local function set_slot(slots, holder, token, untl, now)
  redis.call('HSET', slots, holder, untl .. '|' .. token)
  local ttl = untl - now
  if redis.call('PTTL', slots) < ttl then
    redis.call('PEXPIRE', slots, ttl)
  end
end

-- The first `n` (or, with last = true, the last `n`, latest first) waiters of the wait list
-- `wait` of `gate` whose records still say "waiting" on it and hold their message, each as
-- {key, scheduled ms}; members whose record moved on are dropped on the way.
local function wait_ends(wait, gate, rec_prefix, body_prefix, last, n)
  local out = {}
  local at = 0
  while #out < n do
    local found
    if last then
      found = redis.call('ZRANGE', wait, -(at + 1), -(at + 1), 'WITHSCORES')
    else
      found = redis.call('ZRANGE', wait, at, at, 'WITHSCORES')
    end
    if #found == 0 then
      break
    end
    local k = found[1]
    local r = hash_fields(rec_prefix .. k, 'state', 'gate', 'job')
    local on = r[2]
    if not on or on == '' then
      on = r[3]
    end
    if r[1] == 'waiting' and on == gate then
      if redis.call('EXISTS', body_prefix .. k) == 1 then
        out[#out + 1] = {k, tonumber(found[2])}
      end
      at = at + 1
    else
      redis.call('ZREM', wait, k)
    end
  end
  return out
end

-- Gives the waiter of `gate` whose turn it is a wake-up, `free` slots being free: the
-- `free`-th in scheduled order (those before it had theirs from the slots freed before),
-- or the last when fewer wait. Its due time moves `soon` ms ahead (if the message that
-- starts it is lost, the reaper republishes it then) and {key, queue, body} is returned for
-- the caller to publish; nil when no one waits.
local function wake(wait, gate, leases, rec_prefix, body_prefix, now, soon, free)
  if free <= 0 then
    return nil
  end
  local heads = wait_ends(wait, gate, rec_prefix, body_prefix, false, free)
  local head = heads[#heads]
  if not head then
    return nil
  end
  local key = head[1]
  redis.call('ZADD', leases, now + soon, key)
  return {key, redis.call('HGET', rec_prefix .. key, 'queue') or '',
    redis.call('GET', body_prefix .. key)}
end

-- The gates a record holds (or waits for) a slot of, each as {gate, slots}, from its
-- fields exclusive, job, cap, pool, pool_cap.
local function gates_of(exclusive, job, cap, pool, pool_cap)
  local gates = {}
  if exclusive == '1' then
    gates[#gates + 1] = {job, math.max(tonumber(cap or '1') or 1, 1)}
  end
  if pool and pool ~= '' then
    gates[#gates + 1] = {'pool:' .. pool, math.max(tonumber(pool_cap or '1') or 1, 1)}
  end
  return gates
end
