-- Admits a dead-letter replay (Ledger::admit_replay, `cronq dlq replay`): a `failed`
-- occurrence record becomes runnable again, `retrying` with attempt 1 allowed to claim,
-- exactly as after a failed attempt that is retried. So does a `skipped` record whose
-- error begins with ARGV[2] (a job with parents, skipped because a parent did not
-- succeed). Any other state is left alone (a `succeeded` record is never reset: G1).
-- Prepended: record.lua.
-- KEYS[1] record (ns:occ:KEY, record.lua)   KEYS[2] lease zset (ns:leases)
-- KEYS[3] message body (ns:occbody:KEY)
-- ARGV[1] key   ARGV[2] the reason prefix of a skip for a parent (PARENT_ENDED)
-- Returns the state before ('' when there is no record).
local rec = read_record(KEYS[1], 'state', 'error')
local st, err = rec[1], rec[2]
if not st then
  return ''
end
local parent_skipped = st == 'skipped' and err
  and string.sub(err, 1, string.len(ARGV[2])) == ARGV[2]
if st == 'failed' or parent_skipped then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'state', 'retrying', 'next', '1', 'token', '', 'updated', now)
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return st
