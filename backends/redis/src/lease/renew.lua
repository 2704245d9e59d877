-- Extend the lease, only if this term still holds it (compare-and-extend).
-- KEYS[1] = lease key
-- ARGV[1] = the term's full lease value ("EPOCH TOKEN INSTANCE"), ARGV[2] = ttl in milliseconds
-- Returns 1 when extended, 0 when the lease is gone or held by another term.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
