-- stats_sorted.lua: a snapshot of one sorted-backend queue for `lockgate stats`. Read-only.
-- KEYS: waiting, inflight, payloads, delayed
-- ARGV: none
-- Touches: nothing (ZCARD, ZRANGE, HGET, TIME).
-- Returns: {now_ms, waiting, in flight, payload of the next job to run or '', delayed}
--#include _clock
--#include _fair_sorted
local now = now_ms()
local head = redis.call('ZRANGE', KEYS[1], 0, 0)
local payload = ''
if #head == 1 then payload = redis.call('HGET', KEYS[3], head[1]) or '' end
return {now, redis.call('ZCARD', KEYS[1]) + sorted_laned(KEYS[1]), redis.call('ZCARD', KEYS[2]),
        payload,
        redis.call('ZCARD', KEYS[4])}
