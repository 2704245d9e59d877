-- How gates are used now (`Ledger::gates`), read only: for each gate, the keys running in
-- its live slots (a slot with a token: a woken waiter's has none), how many occurrences
-- wait on it, and the first ones in the order they will run (see wait.lua). Prepended:
-- record.lua.
-- ARGV[1] record key prefix (ns:occ:)   ARGV[2] slots key prefix (ns:slots:)
-- ARGV[3] wait list key prefix (ns:jobwait:)   ARGV[4] how many waiting keys to list
-- ARGV[5..] the gates
-- Returns one {running keys, waiting count, first waiting keys} per gate.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local shown = tonumber(ARGV[4])
local out = {}
for i = 5, #ARGV do
  local gate = ARGV[i]
  local running = {}
  local all = redis.call('HGETALL', ARGV[2] .. gate)
  for j = 1, #all, 2 do
    local untl, token = string.match(all[j + 1], '^(%d+)|(.*)$')
    if untl and tonumber(untl) > now and token ~= '' then
      running[#running + 1] = all[j]
    end
  end
  table.sort(running)
  local waiting, next = 0, {}
  for _, k in ipairs(redis.call('ZRANGE', ARGV[3] .. gate, 0, -1)) do
    local r = hash_fields(ARGV[1] .. k, 'state', 'gate', 'job')
    local on = r[2]
    if not on or on == '' then
      on = r[3]
    end
    if r[1] == 'waiting' and on == gate then
      waiting = waiting + 1
      if #next < shown then
        next[#next + 1] = k
      end
    end
  end
  out[#out + 1] = {running, waiting, next}
end
return out
