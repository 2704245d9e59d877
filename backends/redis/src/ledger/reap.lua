-- Hands back the stored message of every occurrence whose due time in the lease zset has
-- passed, to be republished, and moves its due time `hold` ms ahead in the same atomic
-- step, so no second reaper returns it before then. Why each is due:
--   running  → "lapsed": its owner stopped renewing the lease; the claim becomes "pending"
--   retrying → "retry": the retry message was not claimed in time (lost by the broker?)
--   pending  → "released": a released or reaped occurrence was not claimed in time
--   waiting  → "waiting": held back by its job's overlap policy, and not started in time
--              (its turn's message was lost, or the holder of its job's lock still runs)
-- KEYS[1] lease zset
-- ARGV[1] record key prefix (ns:occ:)   ARGV[2] max entries   ARGV[3] hold ms
-- ARGV[4] message body key prefix (ns:occbody:)
-- Returns a flat list {key1, queue1, body1, why1, key2, …} for the caller to republish.
-- Prepended: record.lua. Record keys are derived from zset members, so this script
-- assumes a single Redis node (no cluster), as the rest of cronq does.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local hold = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local why = {running = 'lapsed', retrying = 'retry', pending = 'released', waiting = 'waiting'}
local out = {}
for _, key in ipairs(due) do
  local rec = ARGV[1] .. key
  local r = hash_fields(rec, 'state', 'lease_until', 'attempt', 'queue', 'body')
  local st = r[1]
  -- A claim made by a consumer before the body moved to its own key kept it in the record:
  -- read it there too, so a rolling upgrade loses nothing.
  local body = redis.call('GET', ARGV[4] .. key) or r[5]
  if st and why[st] and body then
    local lease_until = tonumber(r[2] or '0')
    if st == 'running' and lease_until > now then
      redis.call('ZADD', KEYS[1], lease_until, key)
    else
      if st == 'running' then
        redis.call('HSET', rec, 'next', r[3], 'state', 'pending', 'token', '', 'updated', now)
      end
      redis.call('ZADD', KEYS[1], now + hold, key)
      table.insert(out, key)
      table.insert(out, r[4] or '')
      table.insert(out, body)
      table.insert(out, why[st])
    end
  else
    redis.call('ZREM', KEYS[1], key)
  end
end
return out
