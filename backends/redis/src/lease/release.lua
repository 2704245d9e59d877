-- Give the lease up, only if this term still holds it (compare-and-delete), so a standby
-- can acquire at its next try instead of waiting for the lease to expire.
-- KEYS[1] = lease key
-- ARGV[1] = the term's full lease value ("EPOCH TOKEN INSTANCE")
-- Returns 1 when deleted, 0 when it was not ours any more.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
