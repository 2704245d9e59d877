-- Prepended to every script that reads an occurrence record (ns:occ:KEY): claim.lua,
-- complete.lua, settle.lua, cancel.lua, heartbeat.lua, admit_replay.lua, reap.lua,
-- gates.lua and read.lua; before wait.lua, whose wait lists read records too.
--
-- A record is a hash, but for one form: a new record granted held (claim.lua's most
-- common claim, an `allow` job outside any pool) is a string, its fields joined by
-- newlines in this order: state, updated, fence, attempt, job, queue, lease_until, sched,
-- token (last, so that nothing it holds can shift the others). It stands for the hash of
-- those fields with `next` its attempt and `held` 1, and no other field. Made by one SET
-- with its expiry in place of a hash of eleven fields and its PEXPIRE, and ended by
-- complete.lua's most common end (its success) with one GET and one SET in place of an
-- HMGET and an HSET. Any other use of such a record first makes it the hash it stands for
-- (`read_record`), so every other path reads and writes the hash as it always did, and a
-- record, once a hash, stays one. See docs/benchmarks-notebook.md, "a held claim's record
-- as one string".

local HELD_FIELDS = 9
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'

-- A held record's value, from its fields in their order; `fence` a number (INCR's), the
-- others text. (`%d`: a number joined as it is would be written with 14 digits.)
local function held_value(state, updated, fence, attempt, job, queue, lease_until, sched,
    token)
  return state .. '\n' .. updated .. '\n' .. string.format('%d', fence) .. '\n' .. attempt
    .. '\n' .. job .. '\n' .. queue .. '\n' .. lease_until .. '\n' .. sched .. '\n' .. token
end

-- A held record's fields in their order, or nil when `value` is not one.
local function held_fields(value)
  local fields, at = {}, 1
  for i = 1, HELD_FIELDS - 1 do
    local nl = string.find(value, '\n', at, true)
    if not nl then
      return nil
    end
    fields[i] = string.sub(value, at, nl - 1)
    at = nl + 1
  end
  fields[HELD_FIELDS] = string.sub(value, at)
  return fields
end

-- The fields and values (HGETALL's form) of the hash the held string at `key` stands for;
-- nil when `key` holds no string (a hash, or nothing). A string that is not a held record
-- raises WRONGTYPE, as a hash command would.
local function held_hash(key)
  if redis.call('TYPE', key).ok ~= 'string' then
    return nil
  end
  local f = held_fields(redis.call('GET', key))
  if not f then
    error({err = WRONGTYPE})
  end
  return {'state', f[1], 'updated', f[2], 'fence', f[3], 'attempt', f[4], 'next', f[4],
    'job', f[5], 'queue', f[6], 'lease_until', f[7], 'sched', f[8], 'token', f[9],
    'held', '1'}
end

-- HMGET of the record at `key`. A held string is made the hash it stands for first, with
-- the expiry it has; a hash (the common case) costs no command more.
local function read_record(key, ...)
  local rec = redis.pcall('HMGET', key, ...)
  if not rec.err then
    return rec
  end
  local fields = held_hash(key)
  if fields then
    local ttl = redis.call('PTTL', key)
    redis.call('DEL', key)
    redis.call('HSET', key, unpack(fields))
    if ttl > 0 then
      redis.call('PEXPIRE', key, ttl)
    end
  end
  return redis.call('HMGET', key, ...)
end

-- HMGET of the record at `key` for a reader whose records never are held strings (the
-- reaper's have lease entries, the wait lists' and gates' are gated): a key of another
-- type reads as no record, so that a stale entry can never fail its script.
local function hash_fields(key, ...)
  local rec = redis.pcall('HMGET', key, ...)
  if rec.err then
    return {}
  end
  return rec
end

-- Ends the held string at `key` in `state` at `now` (its state and updated rewritten, its
-- expiry kept) while it runs under `token`; false, changing nothing, when the record is
-- anything else (ended, another token's, a hash, a key of another type).
local function end_held(key, token, state, now)
  local value = redis.pcall('GET', key)
  -- `running`, its update time, and after the last newline the token.
  local rest = type(value) == 'string' and string.sub(value, 1, 8) == 'running\n'
    and string.sub(value, -#token - 1) == '\n' .. token
    and string.find(value, '\n', 9, true)
  if not rest then
    return false
  end
  redis.call('SET', key, state .. '\n' .. now .. string.sub(value, rest), 'KEEPTTL')
  return true
end
