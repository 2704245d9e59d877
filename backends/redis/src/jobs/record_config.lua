-- Records a load of the config file (cronq_shared::recorded::next_records): a load of the
-- text the newest record has replaces it, keeping its `since`; another goes first, and at
-- most ARGV[3] records stay.
-- KEYS[1] the records (list of record JSON, newest first)
-- ARGV[1] the new record's digest, ARGV[2] the new record's JSON, ARGV[3] how many to keep
-- Returns 1 when a record was added, 0 when the newest was replaced.
local newest = redis.call('LINDEX', KEYS[1], 0)
if newest then
  local old = cjson.decode(newest)
  if old.digest == ARGV[1] then
    local new = cjson.decode(ARGV[2])
    new.since = old.since
    redis.call('LSET', KEYS[1], 0, cjson.encode(new))
    return 0
  end
end
redis.call('LPUSH', KEYS[1], ARGV[2])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
return 1
