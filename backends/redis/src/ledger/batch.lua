-- Prepended to claim.lua and complete.lua: one call of a batch, see ledger/batch.rs.

-- Runs `fn(keys, args)`, one call of a batch, and returns its reply; a call whose own key
-- holds another type answers {"error", why} and leaves the others of its batch to run. Any
-- other error (the node became a replica, out of memory, a fault in the script) returns
-- nil and the error, for the caller to make it the whole script call's error reply, as it
-- would be of a call of its own, so that the connection sees it: a READONLY moves it to
-- the new master (sentinel.rs). redis.call raises an error reply's text: "CODE message".
local function run_one(fn, keys, args)
  local ok, reply = pcall(fn, keys, args)
  if ok then
    return reply
  end
  local err = type(reply) == 'table' and reply.err or tostring(reply)
  if string.sub(err, 1, 10) ~= 'WRONGTYPE ' then
    return nil, err
  end
  return {'error', err}
end
