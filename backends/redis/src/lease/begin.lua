-- Record that a term took over, and drop the records of terms last alive before the cutoff.
-- KEYS[1] = the terms hash (epoch -> "START_MS ALIVE_MS INSTANCE")
-- ARGV[1] = the term's epoch, ARGV[2] = its start in milliseconds since the epoch,
-- ARGV[3] = its instance id, ARGV[4] = the cutoff in milliseconds since the epoch
local all = redis.call('HGETALL', KEYS[1])
local cutoff = tonumber(ARGV[4])
for i = 1, #all, 2 do
  local alive = string.match(all[i + 1], '^%d+ (%d+)')
  if alive and tonumber(alive) < cutoff then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
return 1
