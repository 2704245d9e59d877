-- A runtime job's write, compare-and-set (cronq_shared::jobs): appends the next revision
-- when the job's current revision is the one expected.
-- KEYS[1] the job's history (list of revision JSON, oldest first)
-- KEYS[2] the current revisions (hash: job -> revision JSON; deleted jobs absent)
-- KEYS[3] the store's version (integer, INCR on every write)
-- KEYS[4] the change log (list of "VERSION NAME", one per write, the last ARGV[7] kept)
-- ARGV[1] job name, ARGV[2] expected revision (-1 = any, 0 = absent),
-- ARGV[3] "1" with a spec, "0" for a delete, ARGV[4] spec TOML, ARGV[5] who,
-- ARGV[6] when (RFC 3339), ARGV[7] how many writes the change log keeps
-- Returns {1, revision} when written, {0, current} when not (current 0 = absent).
local last = redis.call('LINDEX', KEYS[1], -1)
local last_rev, current = 0, 0
if last then
  local r = cjson.decode(last)
  last_rev = tonumber(r.revision)
  if r.spec ~= cjson.null and r.spec ~= nil then
    current = last_rev
  end
end
local expect = tonumber(ARGV[2])
if (expect >= 0 and expect ~= current) or (ARGV[3] == '0' and current == 0) then
  return {0, current}
end
local rev = { name = ARGV[1], revision = last_rev + 1, by = ARGV[5], at = ARGV[6] }
if ARGV[3] == '1' then rev.spec = ARGV[4] else rev.spec = cjson.null end
local json = cjson.encode(rev)
redis.call('RPUSH', KEYS[1], json)
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[2], ARGV[1], json)
else
  redis.call('HDEL', KEYS[2], ARGV[1])
end
local version = redis.call('INCR', KEYS[3])
redis.call('RPUSH', KEYS[4], version .. ' ' .. ARGV[1])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[7]), -1)
return {1, last_rev + 1}
