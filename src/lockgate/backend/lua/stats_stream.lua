-- stats_stream.lua: a consistent snapshot of some streams for `lockgate stats`. Read-only.
-- KEYS: the n streams, then their n delayed sets in the same order
-- ARGV: ARGV[1] = group
-- Touches: nothing (XLEN, XINFO GROUPS, XRANGE, ZCARD, ZRANGE, TIME).
-- Keyed jobs (see _fair.lua): a stream's counts include its delivery stream's (its keyed
--          jobs running) and its lanes' streams (its keyed jobs waiting: an XLEN per lane
--          for the first 10,000 lanes, an XRANGE for the oldest among the first 1,000).
-- Returns: {now_ms, rows}: rows = flat {length, pending, consumers, oldest waiting id or '',
--          delayed} per stream; a missing stream or group counts as empty or not yet read.
--#include _clock
--#include _fair
--#include _entry_ids

local function older(a, b)
  if a == '' then return b end
  if b == '' then return a end
  return later(a, b) and b or a
end

-- length, pending, consumers, oldest waiting id of one stream and its group.
local function counts(stream)
  local length, pending, consumers, oldest = 0, 0, 0, ''
  if redis.call('EXISTS', stream) == 1 then
    length = redis.call('XLEN', stream)
    local after = '-'
    for _, group in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      local info = {}
      for i = 1, #group, 2 do info[group[i]] = group[i + 1] end
      if info['name'] == ARGV[1] then
        pending, consumers = info['pending'], info['consumers']
        after = '(' .. info['last-delivered-id']
      end
    end
    local first = redis.call('XRANGE', stream, after, '+', 'COUNT', 1)
    if #first == 1 then oldest = first[1][1] end
  end
  return length, pending, consumers, oldest
end
local now = now_ms()
local n = #KEYS / 2
local rows = {}
for k = 1, n do
  local length, pending, consumers, oldest = counts(KEYS[k])
  local fair_length, fair_pending, fair_consumers = counts(KEYS[k] .. '+')
  length, pending = length + fair_length, pending + fair_pending
  consumers = math.max(consumers, fair_consumers)
  local rotation = rotation_of(KEYS[k])
  for i, key in ipairs(redis.call('ZRANGE', rotation, 0, 9999)) do
    if key ~= '' then
      local jobs = rotation .. ':' .. key
      length = length + redis.call('XLEN', jobs)
      if i <= 1000 then
        local first = redis.call('XRANGE', jobs, '-', '+', 'COUNT', 1)
        if #first == 1 then oldest = older(oldest, first[1][1]) end
      end
    end
  end
  rows[#rows + 1] = length
  rows[#rows + 1] = pending
  rows[#rows + 1] = consumers
  rows[#rows + 1] = oldest
  rows[#rows + 1] = redis.call('ZCARD', KEYS[n + k])
end
return {now, rows}
