-- ack_sorted.lua: finish jobs of one sorted-backend queue and free their job ids.
-- KEYS: inflight, payloads, ranks, then one job marker per job
-- ARGV: the job ids, in the order of their markers
-- Touches: ZREM inflight, HDEL payloads and ranks, DEL markers.
-- Returns: how many jobs were still in flight.
local done = 0
for i = 1, #ARGV do
  done = done + redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('HDEL', KEYS[3], ARGV[i])
  redis.call('DEL', KEYS[3 + i])
end
return done
