-- Read who holds the lease, with its remaining time to live.
-- KEYS[1] = lease key
-- Returns {value, pttl} or false when nobody holds it.
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
return {value, redis.call('PTTL', KEYS[1])}
