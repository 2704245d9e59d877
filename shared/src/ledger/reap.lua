-- Takes over claims whose owner stopped renewing (or whose follow-up message was never
-- claimed): each is set back to "pending" and its lease-zset score moved `hold` ms ahead in
-- the same atomic step, so no second reaper returns it before that time.
-- KEYS[1] lease zset
-- ARGV[1] record key prefix (ns:occ:)   ARGV[2] max entries   ARGV[3] hold ms
-- ARGV[4] message body key prefix (ns:occbody:)
-- Returns a flat list {key1, queue1, body1, key2, …} for the caller to republish.
-- Record keys are derived from zset members, so this script assumes a single Redis node
-- (no cluster), as the rest of cronq does.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local hold = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, key in ipairs(due) do
  local rec = ARGV[1] .. key
  local st = redis.call('HGET', rec, 'state')
  -- A claim made by a consumer before the body moved to its own key kept it in the record:
  -- read it there too, so a rolling upgrade loses nothing.
  local body = redis.call('GET', ARGV[4] .. key) or redis.call('HGET', rec, 'body')
  if (st == 'running' or st == 'retrying' or st == 'pending') and body then
    if st == 'running'
      and tonumber(redis.call('HGET', rec, 'lease_until') or '0') > now then
      redis.call('ZADD', KEYS[1], tonumber(redis.call('HGET', rec, 'lease_until')), key)
    else
      if st == 'running' then
        redis.call('HSET', rec, 'next', redis.call('HGET', rec, 'attempt'))
      end
      redis.call('HSET', rec, 'state', 'pending', 'token', '', 'updated', now)
      redis.call('ZADD', KEYS[1], now + hold, key)
      table.insert(out, key)
      table.insert(out, redis.call('HGET', rec, 'queue') or '')
      table.insert(out, body)
    end
  else
    redis.call('ZREM', KEYS[1], key)
  end
end
return out
