-- peek_stream.lua: how many jobs wait in each stream of one partition, for a worker that
-- reads a partitioned namespace: it plans its read over all partitions from these counts
-- (lockgate.backend.partitioned), so it takes no more than its free slots and no lower job while
-- a higher one waits.
-- KEYS: the n streams, then their n delayed sets in the same order, then the partition's
--       paused queues (Keys.paused)
-- ARGV: group, then the queue of each stream (n values)
-- Touches: first moves due delayed jobs into their streams (see _promote.lua); then reads
--          XLEN, and XINFO GROUPS of a stream that is not empty. Acknowledged entries are deleted, so the jobs waiting
--          are the entries not pending in the group (all of them while there is none).
-- Returns: {waiting, next_due_ms}: waiting[k] = jobs waiting in stream k (0 for a paused
--          queue's), and its keyed jobs waiting (those of the first 32 lanes of its
--          rotation, one for each lane after them: see _fair.lua); next_due_ms = ms until the next delayed job is due, -1 when none.
--#include _promote
local group = ARGV[1]
local n = (#KEYS - 1) / 2
local next_due = promote(n)
local paused = {}
for _, queue in ipairs(redis.call('ZRANGE', KEYS[2 * n + 1], 0, -1)) do paused[queue] = true end
local waiting = {}
for k = 1, n do
  local count = 0
  if not paused[ARGV[1 + k]] then count = redis.call('XLEN', KEYS[k]) end
  if count > 0 then
    for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[k])) do
      local fields = {}
      for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
      if fields['name'] == group then count = count - fields['pending'] end
    end
  end
  if not paused[ARGV[1 + k]] then  -- the jobs of the first 32 lanes, one for each other
    local rotation = rotation_of(KEYS[k])
    local first = redis.call('ZRANGE', rotation, 0, 32)
    for _, lane in ipairs(first) do
      if lane ~= '' then count = count + redis.call('XLEN', rotation .. ':' .. lane) end
    end
    count = count + math.max(0, redis.call('ZCARD', rotation) - #first)
  end
  waiting[k] = count
end
return {waiting, next_due}
