-- A record as HGETALL would answer it (RedisLedger::record, for tests and inspection), a
-- held string read as the hash it stands for and left as it is. Prepended: record.lua.
-- KEYS[1] record (ns:occ:KEY, record.lua)
return held_hash(KEYS[1]) or redis.call('HGETALL', KEYS[1])
