-- Prepended to claim.lua, complete.lua and settle.lua: appends a run to the history stream
-- in the same atomic step as its record, bounded as RedisRunLog::record bounds it
-- (MAXLEN ~ on every append, MINID ~ on about one in TRIM_EVERY: Redis trims whole macro
-- nodes). Field names are those of runlog::fields.

local TRIM_EVERY = 16

-- Appends one entry whose field names and values alternate in `fields`.
local function append_fields(stream, maxlen, minid, fields)
  local args = {stream, 'MAXLEN', '~', maxlen, '*'}
  for i = 1, #fields do
    args[#args + 1] = fields[i]
  end
  local id = redis.call('XADD', unpack(args))
  -- The age bound is kept by one append in about TRIM_EVERY (those whose entry falls on a
  -- millisecond divisible by it): a few more entries than the retention for a moment,
  -- one command less per append.
  if tonumber(string.match(id, '^%d+')) % TRIM_EVERY == 0 then
    redis.call('XTRIM', stream, 'MINID', '~', minid)
  end
end

-- Appends the entry whose names and values alternate in ARGV from index `first` to the
-- end; with `lost_error`, as the same run lost: outcome 'lost' and that error (the caller
-- computes it, see Run::lost).
local function append_run(stream, maxlen, minid, first, lost_error)
  local fields = {}
  for i = first, #ARGV, 2 do
    local name, value = ARGV[i], ARGV[i + 1]
    if lost_error then
      if name == 'outcome' then
        value = 'lost'
      elseif name == 'error' then
        value = lost_error
      end
    end
    fields[#fields + 1] = name
    fields[#fields + 1] = value
  end
  append_fields(stream, maxlen, minid, fields)
end
