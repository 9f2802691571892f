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
-- owner_dead(key, consumer, now, quiet, gap) is true only when the consumer's liveness
-- lapsed while beats have come for at least `quiet` ms without a gap (every live worker
-- had a full period to check in after an outage) and the caller's own worker beat within
-- `gap` ms (a reclaimer whose own beats stall decides nothing). A consumer the hash never
-- saw (a worker of an older release) counts as lapsed: its jobs are reclaimed as before,
-- by their idle time alone.
local function owner_dead(key, consumer, now, quiet, gap)
  local pulse = tonumber(redis.call('ZSCORE', key, '~pulse'))
  local since = tonumber(redis.call('ZSCORE', key, '~since'))
  local alive_until = tonumber(redis.call('ZSCORE', key, consumer))
  if not pulse or not since then return false end
  if now - pulse > gap or now - since < quiet then return false end
  return not alive_until or alive_until < now
end
