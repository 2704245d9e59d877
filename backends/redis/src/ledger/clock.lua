-- Prepended to claim.lua, complete.lua and settle.lua: the server's clock.

-- Now in ms on the Redis server's clock, as a string: TIME's seconds followed by the
-- first 3 of its 6 microsecond digits, joined without turning a number back into text
-- (Lua does that with sprintf, a few thousand instructions each). Read once per script
-- call: the calls of a batch (ledger/batch.rs) run in one atomic step, within a
-- millisecond or so of each other, and all see the instant it began; one `TIME` per call
-- was two of a message's thirteen commands.
local now_text, now_ms
local function server_now()
  if not now_text then
    local t = redis.call('TIME')
    now_text = t[1] .. string.sub('00000' .. t[2], -6, -4)
  end
  return now_text
end

-- The same instant as a number, converted once per script call.
local function server_ms()
  if not now_ms then
    now_ms = tonumber(server_now())
  end
  return now_ms
end
