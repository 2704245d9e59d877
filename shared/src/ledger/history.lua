-- Prepended to complete.lua and settle.lua: appends an attempt's run to the history stream
-- in the same atomic step as its record, bounded as RedisRunLog::record bounds it
-- (MAXLEN ~ and MINID ~: Redis trims whole macro nodes).
-- stream: the stream key   maxlen, minid: the bounds   first: the ARGV index of the first
-- field name; names and values alternate up to the end of ARGV.
local function append_run(stream, maxlen, minid, first)
  local args = {stream, 'MAXLEN', '~', maxlen, '*'}
  for i = first, #ARGV do
    args[#args + 1] = ARGV[i]
  end
  redis.call('XADD', unpack(args))
  redis.call('XTRIM', stream, 'MINID', '~', minid)
end
