-- reclaim_stream.lua: take over one entry that a worker left pending too long (it died,
-- or hangs without a heartbeat) and report how often it has been delivered.
-- KEYS: the streams, tried in order
-- ARGV: group, consumer, min idle ms, then entry ids this worker is still running or
--       settling (its heartbeats lapsed, e.g. Redis was unreachable): never taken again
-- Touches: XPENDING IDLE (it walks the whole PEL and returns only entries idle that long,
--          so entries that live workers keep heartbeating never hide a dead one, however
--          many there are; XAUTOCLAIM from 0-0 would scan only COUNT * 10 of them per call),
--          then XCLAIM of the first such entry with the same min idle (atomic: a heartbeat
--          that got there first wins). Redis 7 drops entries deleted while pending from the
--          PEL on XCLAIM and returns nothing for them: the next candidate is tried.
--          One at a time: a reclaimed job runs in its own child process.
-- Returns: {key index or 0, entry id, fields, delivery count, deleted ids dropped}
local group, consumer, min_idle = ARGV[1], ARGV[2], ARGV[3]
local mine = {}
for i = 4, #ARGV do mine[ARGV[i]] = true end
local dropped = 0
for k = 1, #KEYS do
  local rows = redis.pcall('XPENDING', KEYS[k], group, 'IDLE', min_idle, '-', '+', 16 + #ARGV)
  if type(rows) == 'table' and rows.err then
    if not string.find(rows.err, 'NOGROUP', 1, true) then return redis.error_reply(rows.err) end
  else
    for _, row in ipairs(rows) do
      local claimed = {}
      if not mine[row[1]] then
        claimed = redis.call('XCLAIM', KEYS[k], group, consumer, min_idle, row[1])
      end
      if #claimed > 0 and claimed[1] then
        local id, fields = claimed[1][1], claimed[1][2]
        local pending = redis.call('XPENDING', KEYS[k], group, id, id, 1)
        local count = 0
        if #pending == 1 then count = pending[1][4] end
        return {k, id, fields, count, dropped}
      end
      dropped = dropped + 1
    end
  end
end
return {0, '', {}, 0, dropped}
