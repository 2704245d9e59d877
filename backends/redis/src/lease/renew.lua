-- Extend the lease, only if this term still holds it (compare-and-extend), and move the
-- term's record, if begun, to alive now.
-- KEYS[1] = lease key, KEYS[2] = the terms hash (epoch -> "START_MS ALIVE_MS INSTANCE")
-- ARGV[1] = the term's full lease value ("EPOCH TOKEN INSTANCE"), ARGV[2] = ttl in milliseconds,
-- ARGV[3] = the term's epoch, ARGV[4] = now in milliseconds since the epoch
-- Returns 1 when extended, 0 when the lease is gone or held by another term.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local record = redis.call('HGET', KEYS[2], ARGV[3])
  if record then
    local start, alive, instance = string.match(record, '^(%d+) (%d+) (.*)$')
    if start and tonumber(ARGV[4]) > tonumber(alive) then
      redis.call('HSET', KEYS[2], ARGV[3], start .. ' ' .. ARGV[4] .. ' ' .. instance)
    end
  end
  return 1
end
return 0
