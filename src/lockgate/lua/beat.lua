-- beat.lua: a worker's liveness beat, sent by its liveness thread (lockgate.liveness)
-- every beat interval, to each partition's liveness hash (see _liveness.lua).
-- KEYS: the liveness hash
-- ARGV: consumer, lease ms (how long the worker counts as alive without another beat; 0
--       on a clean stop: it is no longer alive), gap ms (the longest silence of every
--       worker that this worker's lease tolerates: a longer one was an outage), sweep ms
--       (0: none; else remove the fields of workers lapsed that long ago)
-- Touches: ~since (reset to now after a gap), ~pulse, the consumer's field.
-- Returns: {lapsed, gap}: lapsed = ms by which this worker's own liveness had lapsed
--          before this beat (0: it had not; -1: its first beat); gap = 1 when this beat
--          ended a gap (Redis was away, or no worker beat for that long).
--#include _clock
local now = now_ms()
local key, consumer = KEYS[1], ARGV[1]
local lease, gap, sweep = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local f = redis.call('HMGET', key, '~pulse', consumer)
local pulse, previous = tonumber(f[1]), tonumber(f[2])
local ended_gap = 0
if not pulse or now - pulse > gap then
  redis.call('HSET', key, '~since', now)
  ended_gap = 1
end
redis.call('HSET', key, '~pulse', now, consumer, now + lease)
if sweep > 0 then
  local rows = redis.call('HGETALL', key)
  for i = 1, #rows, 2 do
    local field, value = rows[i], tonumber(rows[i + 1])
    if string.sub(field, 1, 1) ~= '~' and value and value < now - sweep then
      redis.call('HDEL', key, field)
    end
  end
end
local lapsed = -1
if previous then lapsed = math.max(0, now - previous) end
return {lapsed, ended_gap}
