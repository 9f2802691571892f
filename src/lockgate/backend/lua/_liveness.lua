-- _liveness.lua: a fragment, not a script. Included (--#include _liveness) by the scripts
-- that take a job from another worker (reclaim_stream.lua, take_sorted.lua), so that a job
-- is taken from its worker only when that worker is known dead, not merely silent.
-- The liveness set (Keys.liveness, one per partition: a sorted set, so that only commands
-- of the README's ACL list are needed) scores, on the server's clock:
--   <consumer>  the ms until which that worker is known alive (its liveness thread renews
--               it, see beat.lua; a clean stop sets it to the stop's time)
--   ~pulse      the ms of the last beat of any worker
--   ~since      the ms from which beats have come without a gap (no beat for longer than
--               the beating worker's tolerance: Redis was down, restarted from disk, hung,
--               or cut off from every worker, or every worker was down)
-- owner_fate(key, owner, caller, now, quiet, gap) returns {dead, until}: dead is true
-- only when the owner's liveness lapsed while beats have come for at least `quiet` ms
-- without a gap (every live worker had a full period to check in after an outage), the
-- latest beat of any worker is at most `gap` ms old, and the caller's own record is
-- current (a caller whose own beats fail decides nothing: it may be the one cut off).
-- A worker the set never saw (one of an older release) counts as lapsed: its jobs are
-- reclaimed as before, by their idle time alone. until = the server ms from which the
-- owner could be judged dead, when it is not now (its record's end, or the end of the
-- quiet period): a lease kept for it is kept that long, not a lease longer.
local function owner_fate(key, owner, caller, now, quiet, gap)
  local pulse = tonumber(redis.call('ZSCORE', key, '~pulse'))
  local since = tonumber(redis.call('ZSCORE', key, '~since'))
  local alive_until = tonumber(redis.call('ZSCORE', key, owner))
  local mine = tonumber(redis.call('ZSCORE', key, caller))
  if not pulse or not since or now - pulse > gap then return {false, now + quiet} end
  if mine and mine < now then return {false, now + quiet} end
  local judged = math.max(since + quiet, alive_until or 0)
  if judged > now or (alive_until and alive_until >= now) then
    return {false, math.max(judged, now + 1)}
  end
  return {true, now}
end
