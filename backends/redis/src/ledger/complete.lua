-- Ends claimed attempts, any number in one call, each as if it had been a call of its own,
-- in order (see the batch at the end). One end, `complete(KEYS, ARGV)` (its own tables,
-- which shadow the script's), is fenced by its token: a consumer that lost its claim (its lease
-- expired and the reaper took the key over), or that gives it up (no state), changes no
-- record. The ended record keeps the token, so the same end tried again by the same claim
-- (its answer lost, or short of replicas) is answered recorded, changing and appending
-- nothing. With run fields, the attempt's run is appended to the history in the same step:
-- as given when the end is recorded, as lost (the same fields, outcome `lost` and ARGV[12]
-- as its error) when it is not. An exclusive job's lock is released and the earliest
-- waiting occurrence, if any, is given its turn. Prepended: clock.lua, history.lua, wait.lua, batch.lua.
-- KEYS[1] record hash   KEYS[2] lease zset   KEYS[3] job lock   KEYS[4] run history stream
-- KEYS[5] message body   KEYS[6] wait list (ns:jobwait:JOB)
-- ARGV[1] key   ARGV[2] token   ARGV[3] state ('' = give the claim up)   ARGV[4] error ('' = none)
-- ARGV[5] retention ms
-- ARGV[6] next attempt allowed to claim ('' when the state is terminal)
-- ARGV[7] body of the message that must follow (retry or release)
-- ARGV[8] ms after which the reaper republishes that body if no one claimed it
-- ARGV[9] ms a woken waiter has to claim its turn
-- ARGV[10] history MAXLEN   ARGV[11] history MINID   ARGV[12] the error of the run as lost
-- ARGV[13..] the run's field values (none: no run), as recorded; see history.lua
-- The record and body key prefixes (ns:occ:, ns:occbody:) are KEYS[1] and KEYS[5] less
-- the key.
-- Returns {1 [, woken key, woken queue, woken body]}, or {0} when fenced or given up.
local function complete(KEYS, ARGV)
  local now_s = server_now()
  local has_run = #ARGV > 12
  local rec = redis.call('HMGET', KEYS[1], 'state', 'token', 'exclusive')
  if rec[1] == ARGV[3] and rec[2] == ARGV[2] then
    -- This very end, recorded by an earlier try of this claim (no end is 'running', and a
    -- give-up, '', is never a record's state).
    return {'1'}
  end
  if ARGV[3] == '' or rec[1] ~= 'running' or rec[2] ~= ARGV[2] then
    if has_run then
      append_run(KEYS[4], ARGV[10], ARGV[11], ARGV, 13, ARGV[12])
    end
    return {'0'}
  end
  local woken
  if rec[3] == '1' then
    if redis.call('GET', KEYS[3]) == ARGV[1] .. '|' .. ARGV[2] then
      redis.call('DEL', KEYS[3])
    end
    if redis.call('EXISTS', KEYS[3]) == 0 then
      local key = ARGV[1]
      woken = wake(KEYS[6], KEYS[2], string.sub(KEYS[1], 1, #KEYS[1] - #key),
        string.sub(KEYS[5], 1, #KEYS[5] - #key), tonumber(now_s), tonumber(ARGV[9]))
    end
  end
  -- The claim removed any earlier error, so a running record has none to delete.
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'state', ARGV[3], 'updated', now_s, 'error', ARGV[4])
  else
    redis.call('HSET', KEYS[1], 'state', ARGV[3], 'updated', now_s)
  end
  if ARGV[6] ~= '' then
    redis.call('HSET', KEYS[1], 'next', ARGV[6])
    redis.call('SET', KEYS[5], ARGV[7], 'PX', ARGV[5])
    redis.call('ZADD', KEYS[2], tonumber(now_s) + tonumber(ARGV[8]), ARGV[1])
  else
    redis.call('DEL', KEYS[5])
    redis.call('ZREM', KEYS[2], ARGV[1])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  if has_run then
    append_run(KEYS[4], ARGV[10], ARGV[11], ARGV, 13)
  end
  if woken then
    return {'1', woken[1], woken[2], woken[3]}
  end
  return {'1'}
end

-- The batch. KEYS[1] is the lease zset, shared. ARGV holds the ends one after the other,
-- each as the number of its arguments, its arguments (its ARGV above), then its keys other
-- than the lease zset (5: KEYS[1], KEYS[3..6] above). An end whose key holds another
-- type answers {"error", why} and leaves the others to run; any other error fails the
-- whole call. Returns one reply per end,
-- in order.
local replies = {}
local at = 1
while at <= #ARGV do
  local args = tonumber(ARGV[at])
  local keys_at = at + 1 + args
  local keys = {ARGV[keys_at], KEYS[1], ARGV[keys_at + 1], ARGV[keys_at + 2],
    ARGV[keys_at + 3], ARGV[keys_at + 4]}
  local reply, err = run_one(complete, keys, {unpack(ARGV, at + 1, keys_at - 1)})
  if not reply then
    return redis.error_reply(err)
  end
  replies[#replies + 1] = reply
  at = keys_at + 5
end
return replies
