-- Records a terminal state for an occurrence that was not run (missed, skipped, cancelled
-- by a newer one), unless it is already terminal, running under a live lease, or the
-- message is a stale attempt. With run fields, the run is appended to the history in the
-- same step. A waiting occurrence leaves its gate's wait list; when a slot of that gate (of
-- its job's, for any other) is free, the waiter whose turn it is is given it.
-- Prepended: clock.lua, history.lua, record.lua, wait.lua.
-- KEYS[1] record (record.lua)   KEYS[2] lease zset   KEYS[3] run history stream   KEYS[4] message body
-- KEYS[5] slots key prefix (ns:slots:, a prefix: the gate is read off the record)
-- KEYS[6] wait list key prefix (ns:jobwait:)
-- ARGV[1] key   ARGV[2] job   ARGV[3] attempt   ARGV[4] state   ARGV[5] error ('' = none)
-- ARGV[6] retention ms   ARGV[7] record key prefix   ARGV[8] body key prefix
-- ARGV[9] ms a woken waiter has to claim its turn
-- ARGV[10] history MAXLEN   ARGV[11] history MINID   ARGV[12..] the run's field values (none: no run), see history.lua
-- Returns {1 [, woken key, woken queue, woken body]}, or {0} when the record already says
-- otherwise.
local now_s = server_now()
local now = tonumber(now_s)
local attempt = tonumber(ARGV[3])
local rec = read_record(KEYS[1], 'state', 'attempt', 'lease_until', 'next', 'gate',
  'exclusive', 'cap', 'pool_cap', 'job')
local st = rec[1]
if st then
  if st ~= 'running' and st ~= 'retrying' and st ~= 'pending' and st ~= 'waiting' then
    return {'0'}
  end
  if st == 'running' and tonumber(rec[3] or '0') > now then
    return {'0'}
  end
  if attempt < tonumber(rec[4] or '0') then
    return {'0'}
  end
end
-- The gate whose turn may pass on: a waiter's own, else its job's.
local gate, cap = ARGV[2], 1
if st == 'waiting' then
  local job = rec[9] or ARGV[2]
  gate = rec[5]
  if not gate or gate == '' then
    gate = job
  end
  if gate == job then
    cap = tonumber(rec[7] or '1') or 1
  else
    cap = tonumber(rec[8] or '1') or 1
  end
elseif rec[6] == '1' then
  cap = tonumber(rec[7] or '1') or 1
end
cap = math.max(cap, 1)
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'attempt', attempt, 'job', ARGV[2],
  'token', '', 'exclusive', '0', 'pool', '', 'gate', ARGV[2], 'updated', now_s)
redis.call('DEL', KEYS[4])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'error', ARGV[5])
else
  redis.call('HDEL', KEYS[1], 'error')
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[6] .. gate, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if #ARGV > 11 then
  append_run(KEYS[3], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV, 14, #ARGV)
end
local free = cap - #slot_holders(KEYS[5] .. gate, now, '')
local woken = wake(KEYS[6] .. gate, gate, KEYS[2], ARGV[7], ARGV[8], now, tonumber(ARGV[9]),
  free)
if woken then
  return {'1', woken[1], woken[2], woken[3]}
end
return {'1'}
