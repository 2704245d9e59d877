-- The jobs written after a version (cronq_shared::jobs::JobStore::changes), read in one
-- step so the version and the revisions agree.
-- KEYS[1] the store's version, KEYS[2] the change log (list of "VERSION NAME", one per
-- write, the last ones kept), KEYS[3] the current revisions (hash: job -> revision JSON)
-- ARGV[1] the version the reader has
-- Returns {version, "0"} when the log does not reach back to it (read the whole list),
-- else {version, "1", name, revision JSON or "" when deleted, name, ...}.
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local since = tonumber(ARGV[1])
if since > v then
  return {tostring(v), '0'}
end
local out = {tostring(v), '1'}
if since == v then
  return out
end
local n = v - since
local entries = redis.call('LRANGE', KEYS[2], -n, -1)
-- One entry a write, in the order written: short or not starting right after `since`
-- means writes the log does not have (trimmed, or made by a cronq without it).
if #entries < n or tonumber(string.match(entries[1], '^(%d+) ')) ~= since + 1 then
  return {tostring(v), '0'}
end
local seen = {}
for _, e in ipairs(entries) do
  local name = string.match(e, '^%d+ (.*)$')
  if not seen[name] then
    seen[name] = true
    out[#out + 1] = name
    out[#out + 1] = redis.call('HGET', KEYS[3], name) or ''
  end
end
return out
