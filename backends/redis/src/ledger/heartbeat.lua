-- Renews the execution lease of a claim, and the slots it holds (its job's gate if
-- exclusive, its pool's if pooled); with a body, keeps the message of a held claim
-- (claim.lua) and lists its lease for the reaper. A held claim's lease is not listed
-- otherwise: the reaper would find no body to republish. Prepended: record.lua, wait.lua.
-- KEYS[1] record (record.lua)   KEYS[2] lease zset   KEYS[3] message body (with ARGV[5])
-- ARGV[1] key   ARGV[2] token   ARGV[3] lease ms   ARGV[4] slots key prefix (ns:slots:)
-- ARGV[5] the message body to keep, ARGV[6] for how many ms (both or neither)
-- Returns {"held"} | {"cancel", replacing key} (a newer occurrence asked this one to stop;
-- "" when a consumer older than this script asked) | {"lost"} (the claim, or a slot it
-- held, belongs to someone else now)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = read_record(KEYS[1], 'state', 'token', 'exclusive', 'cancel', 'job', 'cap',
  'pool', 'pool_cap', 'held')
if rec[1] ~= 'running' or rec[2] ~= ARGV[2] then
  return {'lost'}
end
local lease = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'lease_until', now + lease)
if ARGV[5] then
  redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[6])
  redis.call('HDEL', KEYS[1], 'held')
  redis.call('ZADD', KEYS[2], now + lease, ARGV[1])
elseif rec[9] ~= '1' then
  redis.call('ZADD', KEYS[2], now + lease, ARGV[1])
end
for _, g in ipairs(gates_of(rec[3], rec[5], rec[6], rec[7], rec[8])) do
  local slots = ARGV[4] .. g[1]
  local token = slot_token(slots, ARGV[1], now)
  if token then
    if token ~= ARGV[2] then
      return {'lost'}
    end
  elseif #slot_holders(slots, now, ARGV[1]) >= g[2] then
    -- Its slot lapsed (heartbeats were late) and others took every slot: stop, so that a
    -- gate never has more runs than slots. The claim is left to lapse and be reaped (run
    -- again later).
    return {'lost'}
  end
  set_slot(slots, ARGV[1], ARGV[2], now + lease, now)
end
local cancel = rec[4]
if cancel and cancel ~= '' and cancel ~= '0' then
  if cancel == '1' then cancel = '' end
  return {'cancel', cancel}
end
return {'held'}
