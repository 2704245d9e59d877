-- Prepended to claim.lua, complete.lua and settle.lua: the wait list of an exclusive job
-- (overlap queue or replace, or skip behind a later holder). It is a zset of the keys of waiting occurrences, scored by
-- scheduled time (ms); each has a record in state "waiting", its message in its body key,
-- and a due time in the lease zset, so the reaper republishes it if its turn is lost.
-- rec_prefix: ns:occ:   body_prefix: ns:occbody:

-- The earliest (or, with last = true, the latest) waiter whose record still says
-- "waiting", and its score; members whose record moved on are dropped on the way.
local function wait_end(wait, rec_prefix, last)
  while true do
    local found
    if last then
      found = redis.call('ZRANGE', wait, -1, -1, 'WITHSCORES')
    else
      found = redis.call('ZRANGE', wait, 0, 0, 'WITHSCORES')
    end
    if #found == 0 then
      return nil, nil
    end
    if redis.call('HGET', rec_prefix .. found[1], 'state') == 'waiting' then
      return found[1], tonumber(found[2])
    end
    redis.call('ZREM', wait, found[1])
  end
end

-- Gives the earliest waiter its turn: its due time moves `soon` ms ahead (if the message
-- that starts it is lost, the reaper republishes it then) and {key, queue, body} is
-- returned for the caller to publish; nil when no one waits.
local function wake(wait, leases, rec_prefix, body_prefix, now, soon)
  while true do
    local key = wait_end(wait, rec_prefix, false)
    if not key then
      return nil
    end
    local body = redis.call('GET', body_prefix .. key)
    if body then
      redis.call('ZADD', leases, now + soon, key)
      return {key, redis.call('HGET', rec_prefix .. key, 'queue') or '', body}
    end
    redis.call('ZREM', wait, key)
  end
end
