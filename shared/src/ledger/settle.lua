-- Records a terminal state for an occurrence that was not run (missed, skipped), unless it
-- is already terminal, running under a live lease, or the message is a stale attempt. With
-- run fields, the run is appended to the history in the same step (history.lua, prepended).
-- KEYS[1] record hash   KEYS[2] lease zset   KEYS[3] run history stream   KEYS[4] message body
-- ARGV[1] key   ARGV[2] job   ARGV[3] attempt   ARGV[4] state   ARGV[5] error ('' = none)
-- ARGV[6] retention ms   ARGV[7] history MAXLEN   ARGV[8] history MINID
-- ARGV[9..] run fields (none: no run)
-- Returns 1 when recorded, 0 when the record already says otherwise.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local attempt = tonumber(ARGV[3])
local st = redis.call('HGET', KEYS[1], 'state')
if st then
  if st == 'failed' then
    if attempt <= tonumber(redis.call('HGET', KEYS[1], 'attempt') or '0') then
      return 0
    end
  elseif st ~= 'running' and st ~= 'retrying' and st ~= 'pending' then
    return 0
  end
  if st == 'running' and tonumber(redis.call('HGET', KEYS[1], 'lease_until') or '0') > now then
    return 0
  end
  if attempt < tonumber(redis.call('HGET', KEYS[1], 'next') or '0') then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'attempt', attempt, 'job', ARGV[2],
  'token', '', 'updated', now)
redis.call('DEL', KEYS[4])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'error', ARGV[5])
else
  redis.call('HDEL', KEYS[1], 'error')
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if #ARGV > 8 then
  append_run(KEYS[3], ARGV[7], ARGV[8], 9)
end
return 1
