-- Renews the execution lease of a claim, and the slots it holds (its job's gate if
-- exclusive, its pool's if pooled). Prepended: wait.lua.
-- KEYS[1] record hash   KEYS[2] lease zset
-- ARGV[1] key   ARGV[2] token   ARGV[3] lease ms   ARGV[4] slots key prefix (ns:slots:)
-- Returns {"held"} | {"cancel", replacing key} (a newer occurrence asked this one to stop;
-- "" when a consumer older than this script asked) | {"lost"} (the claim, or a slot it
-- held, belongs to someone else now)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'state', 'token', 'exclusive', 'cancel', 'job', 'cap',
  'pool', 'pool_cap')
if rec[1] ~= 'running' or rec[2] ~= ARGV[2] then
  return {'lost'}
end
local lease = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'lease_until', now + lease)
redis.call('ZADD', KEYS[2], now + lease, ARGV[1])
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
