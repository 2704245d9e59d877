-- Cancels an occurrence for an operator (`cronq cancel`). A waiting, pending or retrying
-- record, or a running one whose lease lapsed, becomes "cancelled" at once: its body, due
-- time, wait list entry and slots go, its run is appended to the history, and when a slot of
-- its gate is free the waiter whose turn it is is given it (the reaper publishes it). A running one
-- under a live lease gets the reason as its cancel mark, which its heartbeat returns
-- (heartbeat.lua), so its owner stops it and records the end. A cancel of a running
-- attempt (asked to stop, or ended under a lapsed lease: its owner may still run it) moves
-- the cancel counter consumers poll, so their running attempts renew at once; any other
-- leaves it. Prepended: clock.lua, history.lua, record.lua, wait.lua.
-- KEYS[1] record (record.lua)   KEYS[2] lease zset   KEYS[3] run history stream   KEYS[4] message body
-- KEYS[5] wait list key prefix (ns:jobwait:)   KEYS[6] slots key prefix (ns:slots:)
-- KEYS[7] cancel counter (ns:cancels)   (the gates are read off the record)
-- ARGV[1] key   ARGV[2] job   ARGV[3] reason ("cancelled by WHO")   ARGV[4] who
-- ARGV[5] now, RFC 3339   ARGV[6] history MAXLEN   ARGV[7] history MINID
-- ARGV[8] record key prefix   ARGV[9] body key prefix   ARGV[10] ms a woken waiter has
-- Returns {"unknown"} | {"finished", state} | {"stopping"} | {"ended", state before}
local now_s = server_now()
local now = tonumber(now_s)
local rec = read_record(KEYS[1], 'state', 'attempt', 'lease_until', 'exclusive', 'job',
  'cap', 'pool', 'pool_cap', 'gate')
local st = rec[1]
if not st then
  return {'unknown'}
end
if st ~= 'running' and st ~= 'retrying' and st ~= 'pending' and st ~= 'waiting' then
  return {'finished', st}
end
if st == 'running' then
  redis.call('INCR', KEYS[7])
end
if st == 'running' and tonumber(rec[3] or '0') > now then
  redis.call('HSET', KEYS[1], 'cancel', ARGV[3])
  return {'stopping'}
end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'token', '', 'error', ARGV[3],
  'updated', now_s)
redis.call('DEL', KEYS[4])
redis.call('ZREM', KEYS[2], ARGV[1])
local gates = gates_of(rec[4], rec[5] or ARGV[2], rec[6], rec[7], rec[8])
if st == 'waiting' then
  local on = rec[9]
  if not on or on == '' then
    on = rec[5] or ARGV[2]
  end
  local mine = {}
  for _, g in ipairs(gates) do
    if g[1] == on then
      mine[1] = g
    end
  end
  gates = mine
  redis.call('ZREM', KEYS[5] .. on, ARGV[1])
end
append_fields(KEYS[3], ARGV[6], ARGV[7], {
  'key', ARGV[1], 'job', ARGV[2], 'attempt', rec[2] or '1', 'consumer', ARGV[4],
  'started_at', ARGV[5], 'duration_ms', '0', 'outcome', 'cancelled', 'error', ARGV[3]})
for _, g in ipairs(gates) do
  redis.call('HDEL', KEYS[6] .. g[1], ARGV[1])
  local free = g[2] - #slot_holders(KEYS[6] .. g[1], now, '')
  if wake(KEYS[5] .. g[1], g[1], KEYS[2], ARGV[8], ARGV[9], now, tonumber(ARGV[10]), free) then
    break
  end
end
return {'ended', st}
