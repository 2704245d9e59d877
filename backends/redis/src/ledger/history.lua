-- Prepended to claim.lua, complete.lua and settle.lua: appends a run to the history stream
-- in the same atomic step as its record, bounded as RedisRunLog::record bounds it
-- (MAXLEN ~ and MINID ~: Redis trims whole macro nodes). Field names are those of
-- runlog::fields.

-- Appends one entry whose field names and values alternate in `fields`.
local function append_fields(stream, maxlen, minid, fields)
  local args = {stream, 'MAXLEN', '~', maxlen, '*'}
  for i = 1, #fields do
    args[#args + 1] = fields[i]
  end
  redis.call('XADD', unpack(args))
  redis.call('XTRIM', stream, 'MINID', '~', minid)
end

-- Appends the entry whose names and values alternate in ARGV from index `first` to `last`
-- (the end of ARGV when not given).
local function append_run(stream, maxlen, minid, first, last)
  local fields = {}
  for i = first, last or #ARGV do
    fields[#fields + 1] = ARGV[i]
  end
  append_fields(stream, maxlen, minid, fields)
end
