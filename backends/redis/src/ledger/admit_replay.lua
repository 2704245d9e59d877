-- Admits a dead-letter replay (Ledger::admit_replay, `cronq dlq replay`): a `failed`
-- occurrence record becomes runnable again, `retrying` with attempt 1 allowed to claim,
-- exactly as after a failed attempt that is retried. Any other state is left alone (a
-- `succeeded` record is never reset: G1).
-- KEYS[1] record hash (ns:occ:KEY)   KEYS[2] lease zset (ns:leases)
-- KEYS[3] message body (ns:occbody:KEY)
-- ARGV[1] key
-- Returns the state before ('' when there is no record).
local st = redis.call('HGET', KEYS[1], 'state')
if not st then
  return ''
end
if st == 'failed' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'state', 'retrying', 'next', '1', 'token', '', 'updated', now)
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return st
