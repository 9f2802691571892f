-- rate_limit.lua: may a task's job start now? GCRA on the server clock (see ratelimit.py).
-- KEYS: [1] the task's limiter: a string holding the theoretical arrival time (TAT, us)
-- ARGV: [1] the emission interval in us, [2] the burst (starts allowed at once, >= 1)
-- Touches: SET PX of the limiter to the next TAT; it expires when the TAT passes (an
--          absent limiter is an idle one), so idle limiters vanish. A refusal reserves
--          the next free start for the caller (the TAT moves on by one interval), so jobs
--          over the limit come back once each, in turn, instead of all at once.
-- Returns: 0 when the caller may start now (the start is recorded), else the ms until
--          its reserved start (rounded up, at least 1): the caller starts then without
--          asking again.
--#include _clock
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = now_us()
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local allowed_at = tat - (burst - 1) * interval
local next_tat = tat + interval
local ttl_ms = math.max(1, math.ceil((next_tat - now) / 1000))
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', ttl_ms)
if now < allowed_at then
  return math.max(1, math.ceil((allowed_at - now) / 1000))
end
return 0
