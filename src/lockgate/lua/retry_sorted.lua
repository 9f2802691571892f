-- retry_sorted.lua: reschedule a failed sorted-backend job as its next attempt.
-- KEYS: inflight, payloads, ranks, delayed, deliveries
-- ARGV: job id, encoded next attempt, delay in ms, boost (us of head start for its level)
-- Touches: ZREM inflight; then the payload and rank (due stamp - boost) are replaced, the
--          delivery count is reset and the job waits in delayed until the server's clock
--          reaches its due time. Nothing happens when the job was no longer in flight.
-- Returns: 1 when rescheduled, 0 when it was not in flight.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local delay = tonumber(ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], string.format('%.0f', now_us + delay * 1000 - tonumber(ARGV[4])))
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('ZADD', KEYS[4], string.format('%.0f', math.floor(now_us / 1000) + delay), ARGV[1])
return 1
