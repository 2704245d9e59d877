-- Records a load of the config file (cronq_shared::recorded::next_records): a load of the
-- text the newest record has replaces it; another goes first, and at most ARGV[3] records
-- stay. No record is decoded here (one may be megabytes): the newest's digest and since
-- are kept beside the list, and the caller read them to give the record its since.
-- KEYS[1] the records (list of record JSON, newest first)
-- KEYS[2] the newest record's digest and since (hash)
-- ARGV[1] the new record's digest, ARGV[2] its JSON, ARGV[3] how many to keep,
-- ARGV[4] its since (RFC 3339)
-- Returns 1 when a record was added, 0 when the newest was replaced.
local added = 1
if redis.call('HGET', KEYS[2], 'digest') == ARGV[1] and redis.call('LLEN', KEYS[1]) > 0 then
  redis.call('LSET', KEYS[1], 0, ARGV[2])
  added = 0
else
  redis.call('LPUSH', KEYS[1], ARGV[2])
  redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
end
redis.call('HSET', KEYS[2], 'digest', ARGV[1], 'since', ARGV[4])
return added
