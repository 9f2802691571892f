-- stats_stream.lua: a consistent snapshot of some streams for `lockgate stats`. Read-only.
-- KEYS: the n streams, then their n delayed sets in the same order
-- ARGV: ARGV[1] = group
-- Touches: nothing (XLEN, XINFO GROUPS, XRANGE, ZCARD, TIME).
-- Returns: {now_ms, rows}: rows = flat {length, pending, consumers, oldest waiting id or '',
--          delayed} per stream; a missing stream or group counts as empty or not yet read.
--#include _clock
local now = now_ms()
local n = #KEYS / 2
local rows = {}
for k = 1, n do
  local length, pending, consumers, oldest = 0, 0, 0, ''
  if redis.call('EXISTS', KEYS[k]) == 1 then
    length = redis.call('XLEN', KEYS[k])
    local after = '-'
    for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[k])) do
      local info = {}
      for i = 1, #group, 2 do info[group[i]] = group[i + 1] end
      if info['name'] == ARGV[1] then
        pending, consumers = info['pending'], info['consumers']
        after = '(' .. info['last-delivered-id']
      end
    end
    local first = redis.call('XRANGE', KEYS[k], after, '+', 'COUNT', 1)
    if #first == 1 then oldest = first[1][1] end
  end
  rows[#rows + 1] = length
  rows[#rows + 1] = pending
  rows[#rows + 1] = consumers
  rows[#rows + 1] = oldest
  rows[#rows + 1] = redis.call('ZCARD', KEYS[n + k])
end
return {now, rows}
