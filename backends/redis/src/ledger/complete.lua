-- Ends claimed attempts, any number in one call, each as if it had been a call of its own,
-- in order (see the batch at the end). One end, `complete(KEYS, ARGV, shared)` (its own tables,
-- which shadow the script's), is fenced by its token: a consumer that lost its claim (its lease
-- expired and the reaper took the key over), or that gives it up (no state), changes no
-- record. The ended record keeps the token, so the same end tried again by the same claim
-- (its answer lost, or short of replicas) is answered recorded, changing and appending
-- nothing. With run fields, the attempt's run is appended to the history in the same step:
-- as given when the end is recorded, as lost (the same fields, outcome `lost` and ARGV[10]
-- as its error) when it is not. The slots it holds are freed (wait.lua) and the waiter
-- whose turn it is, if any, is given its turn. Prepended: clock.lua, history.lua, record.lua,
-- wait.lua, batch.lua.
-- KEYS[1] record (record.lua)   KEYS[2] lease zset   KEYS[3] run history stream
-- KEYS[4] message body
-- ARGV[1] key   ARGV[2] job   ARGV[3] token   ARGV[4] state ('' = give the claim up)
-- ARGV[5] error ('' = none)   ARGV[6] retention ms
-- ARGV[7] next attempt allowed to claim ('' when the state is terminal)
-- ARGV[8] body of the message that must follow (retry or release)
-- ARGV[9] ms after which the reaper republishes that body if no one claimed it
-- ARGV[10] the error of the run as lost
-- ARGV[11..] the run's field values after its key and job (none: no run), as recorded; see
-- history.lua
-- `shared`: what the batch's ends share (see the batch at the end): the record, body,
-- slots and wait list key prefixes, ms a woken waiter has to claim its turn, history MAXLEN
-- and MINID.
-- Returns {1 [, woken key, woken queue, woken body]}, or {0} when fenced or given up.
local function complete(KEYS, ARGV, shared)
  local now_s = server_now()
  local has_run = #ARGV > 10
  local rec = read_record(KEYS[1], 'state', 'token', 'exclusive', 'job', 'cap', 'pool',
    'pool_cap', 'held')
  if rec[1] == ARGV[4] and rec[2] == ARGV[3] then
    -- This very end, recorded by an earlier try of this claim (no end is 'running', and a
    -- give-up, '', is never a record's state).
    return {'1'}
  end
  if ARGV[4] == '' or rec[1] ~= 'running' or rec[2] ~= ARGV[3] then
    if has_run then
      append_run(KEYS[3], shared.maxlen, shared.minid, ARGV[1], ARGV[2], ARGV, 11, #ARGV,
        ARGV[10])
    end
    return {'0'}
  end
  -- Its slots are freed; the first gate with a free slot gives a waiter its turn (a second
  -- one's waiter gets it from its own claim, or from the reaper).
  local woken
  local now = server_ms()
  for _, g in ipairs(gates_of(rec[3], rec[4], rec[5], rec[6], rec[7])) do
    local slots = shared.slots .. g[1]
    if redis.call('HGET', slots, ARGV[1]) and slot_token(slots, ARGV[1], 0) == ARGV[3] then
      redis.call('HDEL', slots, ARGV[1])
    end
    if not woken and redis.call('ZCARD', shared.wait .. g[1]) > 0 then
      local free = g[2] - #slot_holders(slots, now, '')
      woken = wake(shared.wait .. g[1], g[1], KEYS[2], shared.record, shared.body, now,
        shared.wake, free)
    end
  end
  -- The claim removed any earlier error, so a running record has none to delete.
  if ARGV[5] ~= '' then
    redis.call('HSET', KEYS[1], 'state', ARGV[4], 'updated', now_s, 'error', ARGV[5])
  else
    redis.call('HSET', KEYS[1], 'state', ARGV[4], 'updated', now_s)
  end
  -- A held claim (claim.lua) has no body and no lease entry to remove.
  local held = rec[8] == '1'
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[1], 'next', ARGV[7])
    if held then
      redis.call('HDEL', KEYS[1], 'held')
    end
    redis.call('SET', KEYS[4], ARGV[8], 'PX', ARGV[6])
    redis.call('ZADD', KEYS[2], server_ms() + tonumber(ARGV[9]), ARGV[1])
  elseif not held then
    redis.call('DEL', KEYS[4])
    redis.call('ZREM', KEYS[2], ARGV[1])
  end
  -- A held claim that ends was claimed about a second ago at most (a longer run is kept
  -- and no longer held): its record keeps the expiry its claim set, the retention from
  -- then, one command less.
  if not held or ARGV[7] ~= '' then
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
  end
  if has_run then
    append_run(KEYS[3], shared.maxlen, shared.minid, ARGV[1], ARGV[2], ARGV, 11, #ARGV)
  end
  if woken then
    return {'1', woken[1], woken[2], woken[3]}
  end
  return {'1'}
end

-- The batch. KEYS[1] is the lease zset, KEYS[2] the run history stream. ARGV begins with
-- what every end of the batch shares, as claim.lua's batch does: ARGV[1] the record key
-- prefix, ARGV[2] the body key prefix, ARGV[3] the slots key prefix, ARGV[4] the wait
-- list key prefix, ARGV[5] ms a woken waiter has to claim its turn, ARGV[6] history
-- MAXLEN, ARGV[7] history MINID, ARGV[8] the error of a run without one as lost (see
-- Run::lost). Then the ends one after the other, each as the number of its arguments,
-- then its arguments (its ARGV above); its keys are made here from its key and the
-- prefixes, the gates' slots and wait lists by the end itself. An end whose key holds
-- another type answers {"error", why} and leaves the others to run; any other error fails
-- the whole call. Returns one reply per end, in order.
--
-- The most common end, a held claim's success with its run, comes as "h", then the number
-- of its arguments, then: key, job, token, retention ms, then the run's field values after
-- its key and job (history.lua; outcome succeeded, no error). While the record is the
-- held string record (record.lua) of that token, running, it is made here as `complete`
-- makes it, without its framing (a call, a table of its arguments, a pcall) and from fewer
-- arguments: its state and update time in the string, its history entry, nothing else (a
-- held claim has no gate, body or lease entry, and keeps the expiry its claim set).
-- Anything else (the end tried again, fenced, a claim kept or renewed since, which made it
-- a hash, a key of another type) goes to `complete` as the end it stands for.
local shared = {record = ARGV[1], body = ARGV[2], slots = ARGV[3], wait = ARGV[4],
  wake = tonumber(ARGV[5]), maxlen = ARGV[6],
  minid = ARGV[7]}
local lost = ARGV[8]
local replies = {}
-- One table of keys for every end (`complete` only reads it), refilled for each.
local keys = {false, KEYS[1], KEYS[2], false}
local at = 9
while at <= #ARGV do
  local held = ARGV[at] == 'h'
  if held then
    at = at + 1
  end
  local first = at + 1
  local last = at + tonumber(ARGV[at])
  local key = ARGV[first]
  keys[1], keys[4] = ARGV[1] .. key, ARGV[2] .. key
  local reply, err
  if held then
    local job, token = ARGV[first + 1], ARGV[first + 2]
    if end_held(keys[1], token, 'succeeded', server_now()) then
      append_run(KEYS[2], shared.maxlen, shared.minid, key, job, ARGV, first + 4, last)
      reply = '1'
    else
      reply, err = run_one(complete, keys, {key, job, token, 'succeeded', '', ARGV[first + 3],
        '', '', '1', lost, unpack(ARGV, first + 4, last)}, shared)
    end
  else
    reply, err = run_one(complete, keys, {unpack(ARGV, first, last)}, shared)
  end
  if not reply then
    return redis.error_reply(err)
  end
  replies[#replies + 1] = reply
  at = last + 1
end
return replies
