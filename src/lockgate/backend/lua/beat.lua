-- beat.lua: a worker's liveness beat, sent by its liveness thread (lockgate.worker.liveness)
-- every beat interval, to each partition's liveness set (see _liveness.lua).
-- KEYS: the liveness set
-- ARGV: consumer, lease ms (how long the worker counts as alive without another beat; 0
--       on a clean stop: it is no longer alive), gap ms (the longest silence of every
--       worker that this worker's lease tolerates: a longer one was an outage), sweep ms
--       (0: none; else remove the members of workers lapsed that long ago)
-- Touches: ~since (reset to now after a gap), ~pulse, the consumer's member (ZADD; a sweep
--          ZREMs at most 100 members).
-- Returns: {lapsed, gap}: lapsed = ms by which this worker's own liveness had lapsed
--          before this beat (0: it had not; -1: its first beat); gap = 1 when this beat
--          ended a gap (Redis was away, or no worker beat for that long).
--#include _clock
local now = now_ms()
local key, consumer = KEYS[1], ARGV[1]
local lease, gap, sweep = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local pulse = tonumber(redis.call('ZSCORE', key, '~pulse'))
local previous = tonumber(redis.call('ZSCORE', key, consumer))
local ended_gap = 0
-- A pulse ahead of now: the server's clock went back (an NTP step, a failover to a node
-- whose clock is behind). Nothing about the past is known: a gap too.
if not pulse or now - pulse > gap or pulse > now then
  redis.call('ZADD', key, now, '~since')
  ended_gap = 1
end
redis.call('ZADD', key, now, '~pulse', now + lease, consumer)
if sweep > 0 then
  local old = redis.call('ZRANGEBYSCORE', key, '-inf', now - sweep, 'LIMIT', 0, 100)
  for _, member in ipairs(old) do
    if string.sub(member, 1, 1) ~= '~' then redis.call('ZREM', key, member) end
  end
end
local lapsed = -1
if previous then lapsed = math.max(0, now - previous) end
return {lapsed, ended_gap}
