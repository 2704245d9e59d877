-- The leader's one fenced write: advance cursors and settle requests, only if the caller's
-- term still holds the lease. A replaced (stale) leader changes nothing.
-- KEYS[1] = lease key ("EPOCH TOKEN INSTANCE"), KEYS[2] = cursor hash (job -> unix ms),
-- KEYS[3] = request hash (id -> JSON)
-- ARGV[1] = the caller's full lease value
-- ARGV[2] = n, the number of cursor pairs that follow
-- ARGV[3 .. 2+2n] = job, unix ms   (a cursor only ever moves forward)
-- ARGV[3+2n ..]   = id, JSON       (JSON '' deletes the request; otherwise it replaces an
--                                   existing request and never re-creates a settled one)
-- Returns -1 when the caller does not hold the lease, else how many cursors moved.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local n = tonumber(ARGV[2])
local moved = 0
for i = 0, n - 1 do
  local job = ARGV[3 + 2 * i]
  local at = ARGV[4 + 2 * i]
  local current = redis.call('HGET', KEYS[2], job)
  if (not current) or tonumber(current) < tonumber(at) then
    redis.call('HSET', KEYS[2], job, at)
    moved = moved + 1
  end
end
local i = 3 + 2 * n
while i < #ARGV do
  local id, value = ARGV[i], ARGV[i + 1]
  if value == '' then
    redis.call('HDEL', KEYS[3], id)
  elseif redis.call('HEXISTS', KEYS[3], id) == 1 then
    redis.call('HSET', KEYS[3], id, value)
  end
  i = i + 2
end
return moved
