-- Renews the execution lease of a claim, and the job lock of an exclusive job.
-- KEYS[1] record hash   KEYS[2] lease zset   KEYS[3] job lock
-- ARGV[1] key   ARGV[2] token   ARGV[3] lease ms
-- Returns {"held"} | {"cancel", replacing key} (a newer occurrence asked this one to stop;
-- "" when a consumer older than this script asked) | {"lost"} (the claim, or an exclusive
-- job's lock, belongs to someone else now)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'state', 'token', 'exclusive', 'cancel')
if rec[1] ~= 'running' or rec[2] ~= ARGV[2] then
  return {'lost'}
end
local lease = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'lease_until', now + lease)
redis.call('ZADD', KEYS[2], now + lease, ARGV[1])
if rec[3] == '1' then
  local mine = ARGV[1] .. '|' .. ARGV[2]
  local holder = redis.call('GET', KEYS[3])
  if holder and holder ~= mine then
    -- The job lock lapsed (heartbeats were late) and another occurrence took it: stop,
    -- so that two occurrences of an exclusive job never keep running together. The claim
    -- is left to lapse and be reaped (run again later).
    return {'lost'}
  end
  redis.call('SET', KEYS[3], mine, 'PX', lease)
end
local cancel = rec[4]
if cancel and cancel ~= '' and cancel ~= '0' then
  if cancel == '1' then cancel = '' end
  return {'cancel', cancel}
end
return {'held'}
