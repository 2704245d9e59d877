-- Claims an occurrence key for one attempt, atomically with the job's overlap lock.
-- KEYS[1] record hash    (ns:occ:KEY)
-- KEYS[2] lease zset     (ns:leases)      member KEY, score = lease expiry (ms, server time)
-- KEYS[3] job lock       (ns:joblock:JOB) value "KEY|TOKEN", PX lease; only for exclusive jobs
-- KEYS[4] message body   (ns:occbody:KEY) kept apart, so that the record stays a small
--                        listpack-encoded hash (a long value would make it a hashtable for
--                        the rest of its retention, 3x the memory)
-- ARGV[1] key   ARGV[2] job   ARGV[3] queue   ARGV[4] attempt   ARGV[5] token
-- ARGV[6] lease ms   ARGV[7] retention ms   ARGV[8] overlap (allow|skip|queue|replace)
-- ARGV[9] message body   ARGV[10] record key prefix (ns:occ:), to flag a replaced holder
-- Returns {"claimed", takeover 0|1} | {"duplicate", state, attempt} | {"busy", holder key}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local attempt = tonumber(ARGV[4])
local lease = tonumber(ARGV[6])
-- One read of everything the checks need (a new key reads four nils).
local rec = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'lease_until', 'next')
local st = rec[1]
local takeover = 0
if st then
  local rec_attempt = tonumber(rec[2] or '0')
  -- A failed (dead-lettered) occurrence may be claimed again by a later attempt: a
  -- replay from the dead-letter queue. Every other terminal state is final.
  if st == 'failed' then
    if attempt <= rec_attempt then
      return {'duplicate', st, tostring(rec_attempt)}
    end
  elseif st ~= 'running' and st ~= 'retrying' and st ~= 'pending' then
    return {'duplicate', st, tostring(rec_attempt)}
  end
  if st == 'running' and tonumber(rec[3] or '0') > now then
    return {'duplicate', st, tostring(rec_attempt)}
  end
  if attempt < tonumber(rec[4] or '0') then
    return {'duplicate', st, tostring(rec_attempt)}
  end
  if st == 'running' or st == 'pending' then takeover = 1 end
end
local exclusive = ARGV[8] ~= 'allow'
if exclusive then
  local holder = redis.call('GET', KEYS[3])
  if holder then
    local holder_key = string.match(holder, '^(.*)|[^|]*$') or holder
    if holder_key ~= ARGV[1] then
      if ARGV[8] == 'replace' and redis.call('EXISTS', ARGV[10] .. holder_key) == 1 then
        redis.call('HSET', ARGV[10] .. holder_key, 'cancel', '1')
      end
      return {'busy', holder_key}
    end
  end
  redis.call('SET', KEYS[3], ARGV[1] .. '|' .. ARGV[5], 'PX', lease)
end
redis.call('HSET', KEYS[1], 'state', 'running', 'attempt', attempt, 'next', attempt,
  'token', ARGV[5], 'job', ARGV[2], 'queue', ARGV[3],
  'lease_until', now + lease, 'cancel', '0', 'exclusive', exclusive and '1' or '0',
  'updated', now)
if st then
  -- Only an earlier attempt can have left an error behind.
  redis.call('HDEL', KEYS[1], 'error')
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
redis.call('SET', KEYS[4], ARGV[9], 'PX', ARGV[7])
redis.call('ZADD', KEYS[2], now + lease, ARGV[1])
return {'claimed', tostring(takeover)}
