-- ack_sorted.lua: finish jobs of one sorted-backend queue and free their job ids.
-- KEYS: inflight, payloads, ranks, deliveries, then one job marker per job
-- ARGV: the job ids, in the order of their markers
-- Touches: ZREM inflight; only when that removed it (the job was still in flight, not
--          already finished by a worker that took it over) HDEL payloads, ranks and
--          deliveries and DEL the marker.
-- Returns: how many jobs were still in flight.
local done = 0
for i = 1, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('HDEL', KEYS[3], ARGV[i])
    redis.call('HDEL', KEYS[4], ARGV[i])
    redis.call('DEL', KEYS[4 + i])
    done = done + 1
  end
end
return done
