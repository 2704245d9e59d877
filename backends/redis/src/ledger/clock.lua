-- Prepended to claim.lua, complete.lua and settle.lua: the server's clock.

-- Now in ms on the Redis server's clock, as a string: TIME's seconds followed by the
-- first 3 of its 6 microsecond digits, joined without turning a number back into text
-- (Lua does that with sprintf, a few thousand instructions each).
local function server_now()
  local t = redis.call('TIME')
  return t[1] .. string.sub('00000' .. t[2], -6, -4)
end
