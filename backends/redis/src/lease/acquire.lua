-- Acquire the leader lease if nobody holds it, and stamp it with a fresh epoch.
-- KEYS[1] = lease key (value "EPOCH TOKEN INSTANCE", expires with the lease)
-- KEYS[2] = epoch counter (never expires, only grows: the fencing token)
-- ARGV[1] = token (random per term), ARGV[2] = instance id, ARGV[3] = ttl in milliseconds
-- Returns the new epoch, or false when the lease is held.
-- SET NX and INCR run in one script so no epoch is spent on a failed acquisition and no
-- holder exists without an epoch.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], epoch .. ' ' .. ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3], 'NX')
return epoch
