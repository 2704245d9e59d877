-- Records a terminal state for an occurrence that was not run (missed, skipped, cancelled
-- by a newer one), unless it is already terminal, running under a live lease, or the
-- message is a stale attempt. With run fields, the run is appended to the history in the
-- same step. A waiting occurrence leaves its job's wait list; when the job lock is free, the
-- earliest waiter left is given its turn. Prepended: clock.lua, history.lua, wait.lua.
-- KEYS[1] record hash   KEYS[2] lease zset   KEYS[3] run history stream   KEYS[4] message body
-- KEYS[5] job lock   KEYS[6] wait list
-- ARGV[1] key   ARGV[2] job   ARGV[3] attempt   ARGV[4] state   ARGV[5] error ('' = none)
-- ARGV[6] retention ms   ARGV[7] record key prefix   ARGV[8] body key prefix
-- ARGV[9] ms a woken waiter has to claim its turn
-- ARGV[10] history MAXLEN   ARGV[11] history MINID   ARGV[12..] the run's field values (none: no run), see history.lua
-- Returns {1 [, woken key, woken queue, woken body]}, or {0} when the record already says
-- otherwise.
local now_s = server_now()
local now = tonumber(now_s)
local attempt = tonumber(ARGV[3])
local rec = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'lease_until', 'next')
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
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'attempt', attempt, 'job', ARGV[2],
  'token', '', 'updated', now_s)
redis.call('DEL', KEYS[4])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'error', ARGV[5])
else
  redis.call('HDEL', KEYS[1], 'error')
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if #ARGV > 11 then
  append_run(KEYS[3], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV, 14)
end
if redis.call('EXISTS', KEYS[5]) == 0 then
  local woken = wake(KEYS[6], KEYS[2], ARGV[7], ARGV[8], now, tonumber(ARGV[9]))
  if woken then
    return {'1', woken[1], woken[2], woken[3]}
  end
end
return {'1'}
