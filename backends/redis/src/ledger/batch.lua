-- Prepended to claim.lua and complete.lua: one call of a batch, see ledger/batch.rs.

-- Runs `fn(keys, args, shared)`, one call of a batch, and returns its reply; a call whose own key
-- holds another type answers {"error", why} and leaves the others of its batch to run. Any
-- other error (the node became a replica, out of memory, a fault in the script) returns
-- nil and the error, for the caller to make it the whole script call's error reply, as it
-- would be of a call of its own, so that the connection sees it: a READONLY moves it to
-- the new master (sentinel.rs). redis.call raises an error reply's text: "CODE message".
-- A reply of one field goes back as that field alone, not as a table of one: the most
-- common end ({"1"}) costs the client a value to read instead of two; a reply that is not
-- a table (the fence of claim.lua's most common claim) goes back as it is.
local function run_one(fn, keys, args, shared)
  local ok, reply = pcall(fn, keys, args, shared)
  if ok then
    if type(reply) ~= 'table' then
      return reply
    end
    if #reply == 1 then
      return reply[1]
    end
    return reply
  end
  local err = type(reply) == 'table' and reply.err or tostring(reply)
  if string.sub(err, 1, 10) ~= 'WRONGTYPE ' then
    return nil, err
  end
  return {'error', err}
end
