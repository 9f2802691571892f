-- reclaim_stream.lua: take over one entry whose worker is known dead (see _liveness.lua)
-- and report how often it has been delivered.
-- KEYS: [1] the partition's liveness set, then the streams, tried in order
-- ARGV: group, consumer, min idle ms, quiet ms, gap ms (see _liveness.lua), then entry ids
--       this worker is still running or settling (its heartbeats lapsed, e.g. Redis was
--       unreachable): never taken again
-- Touches: XPENDING IDLE (it walks the PEL and returns only entries idle that long, so
--          entries that live workers keep heartbeating never hide a dead one, however
--          many there are; XAUTOCLAIM from 0-0 would scan only COUNT * 10 of them per call).
--          An entry idle that long whose worker is alive (its event loop is blocked, or it
--          runs the job in a thread holding up its heartbeats) or whose death is not
--          known yet (Redis was away: every worker gets a full period to check in) is
--          left alone (its idle time is not reset, so it is taken as soon as its worker
--          is known dead). An entry of a dead worker is taken with XCLAIM with the
--          same min idle (atomic: a heartbeat that got there first wins). Redis 7 drops
--          entries deleted while pending from the PEL on XCLAIM and returns nothing for
--          them: the next candidate is tried.
--          An idle entry of the calling worker itself that it does not name as running
--          (a read whose reply was lost, a run it abandoned) is taken back like a dead
--          worker's. One at a time: a reclaimed job runs in its own child process.
-- Returns: {key index or 0, entry id, fields, delivery count, deleted ids dropped}
--#include _clock
--#include _liveness
local alive = KEYS[1]
local group, consumer, min_idle = ARGV[1], ARGV[2], ARGV[3]
local quiet, gap = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local mine = {}
for i = 6, #ARGV do mine[ARGV[i]] = true end
local fate = {}  -- consumer -> dead or not, asked once per call
local dropped = 0
for k = 2, #KEYS do
  -- Room for the idle entries of live workers (blocked loops) ahead of a dead one's.
  local rows = redis.pcall('XPENDING', KEYS[k], group, 'IDLE', min_idle, '-', '+', 256 + #ARGV)
  if type(rows) == 'table' and rows.err then
    if not string.find(rows.err, 'NOGROUP', 1, true) then return redis.error_reply(rows.err) end
  else
    for _, row in ipairs(rows) do
      local id, owner = row[1], row[2]
      if not mine[id] then
        -- This worker's own entry that it neither runs nor settles: a read whose reply
        -- was lost (a timeout), or a run it abandoned. It is not kept for a live owner.
        if owner == consumer then fate[owner] = true end
        if fate[owner] == nil then
          fate[owner] = owner_fate(alive, owner, consumer, now, quiet, gap)[1]
        end
        if fate[owner] then
          local claimed = redis.call('XCLAIM', KEYS[k], group, consumer, min_idle, id)
          if #claimed > 0 and claimed[1] then
            local fields = claimed[1][2]
            local pending = redis.call('XPENDING', KEYS[k], group, id, id, 1)
            local count = 0
            if #pending == 1 then count = pending[1][4] end
            return {k - 1, id, fields, count, dropped}
          end
          dropped = dropped + 1
        end
      end
    end
  end
end
return {0, '', {}, 0, dropped}
