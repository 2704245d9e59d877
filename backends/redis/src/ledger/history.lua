-- Prepended to claim.lua, complete.lua and settle.lua: appends a run to the history stream
-- in the same atomic step as its record, bounded as RedisRunLog::record bounds it
-- (MAXLEN ~ on every append, MINID ~ on about one in ten: Redis trims whole macro nodes).
-- Field names are those of runlog::FIELDS.

-- Keeps the age bound on about one append in ten, those whose entry id's millisecond ends
-- in 0 (read off the id's text, no number conversion): a few more entries than the
-- retention for a moment, one command less on the other appends.
local function trim_sometimes(stream, id, minid)
  local dash = string.find(id, '-', 1, true)
  if dash and string.byte(id, dash - 1) == 48 then
    redis.call('XTRIM', stream, 'MINID', '~', minid)
  end
end

-- Appends one entry whose field names and values alternate in `fields`.
local function append_fields(stream, maxlen, minid, fields)
  trim_sometimes(stream, redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(fields)),
    minid)
end

-- Appends the run of occurrence `key` of `job` whose other field values are in `argv`
-- (the script's ARGV, or a call's own in a batch) from index `first` to `last`, named in
-- the order of runlog::FIELDS after key and job: attempt, consumer, started_at,
-- duration_ms, outcome, error [, published_at] (the names are this script's constants, so
-- the caller sends the values alone); with `lost_error`, as the same run lost: outcome
-- 'lost' and that error (the caller computes it, see Run::lost).
local function append_run(stream, maxlen, minid, key, job, argv, first, last, lost_error)
  local ARGV, a = argv, first
  local outcome, err = ARGV[a + 4], ARGV[a + 5]
  if lost_error then
    outcome, err = 'lost', lost_error
  end
  -- Past `last`, ARGV holds the next call of a batch, not this run's.
  local published_at = a + 6 <= last and ARGV[a + 6] or nil
  local id
  if published_at then
    id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
      'key', key, 'job', job, 'attempt', ARGV[a], 'consumer', ARGV[a + 1],
      'started_at', ARGV[a + 2], 'duration_ms', ARGV[a + 3], 'outcome', outcome,
      'error', err, 'published_at', published_at)
  else
    id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
      'key', key, 'job', job, 'attempt', ARGV[a], 'consumer', ARGV[a + 1],
      'started_at', ARGV[a + 2], 'duration_ms', ARGV[a + 3], 'outcome', outcome,
      'error', err)
  end
  trim_sometimes(stream, id, minid)
end
