-- Appends an audit entry (cronq_shared::audit) and drops the entries past the retention
-- and beyond the cap, in one step.
-- KEYS[1] the log (sorted set: score = the entry's time in ms, member = "SEQ:JSON", SEQ
--         16 hex digits, so entries of the same millisecond keep their recording order)
-- KEYS[2] the sequence (integer, INCR per entry)
-- ARGV[1] the entry's time (ms), ARGV[2] the entry as JSON, ARGV[3] the cut-off (ms):
-- older entries are dropped, ARGV[4] how many entries are kept at most
-- Returns the entry's sequence number.
local seq = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], ARGV[1], string.format('%016x', seq) .. ':' .. ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[4]) + 1))
return seq
