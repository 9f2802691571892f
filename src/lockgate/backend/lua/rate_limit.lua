-- rate_limit.lua: may a job start now under its task's limiters? GCRA on the server clock
-- (see ratelimit.py), over one limiter or two (a job's key's key_rate_limit first, then
-- its task's rate_limit).
-- KEYS: the limiters: strings holding each one's theoretical arrival time (TAT, us)
-- ARGV: per limiter, in KEYS' order: the emission interval in us, the burst (starts
--       allowed at once, >= 1)
-- Touches: SET PX of limiters to their next TAT; a limiter expires when its TAT passes
--          (an absent limiter is an idle one), so idle limiters vanish. A refusal reserves
--          the next start for the caller (a TAT moves on by one interval), so jobs over
--          the limit come back once each, in turn, instead of all at once. When the first
--          of two limiters refuses, only it reserves (the caller asks the second when it
--          comes back): a start reserved far ahead in the task's limiter would hold back
--          the task's jobs of every other key until then. Else the start the limiters all
--          allow is recorded in each.
-- Returns: {ms, reserved}: ms = 0 when the caller may start now (the start is recorded
--          in every limiter), else the ms until its reserved start (rounded up, at least
--          1); reserved = how many limiters, from the first, reserved it (all of them: the
--          caller starts then without asking again).
--#include _clock
local now = now_us()
local tats, allowed = {}, {}
for i = 1, #KEYS do
  local interval, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  tats[i], allowed[i] = tat, tat - (burst - 1) * interval
end
local function record(i, start)
  local next_tat = math.max(tats[i], start) + tonumber(ARGV[2 * i - 1])
  local ttl_ms = math.max(1, math.ceil((next_tat - now) / 1000))
  redis.call('SET', KEYS[i], string.format('%.0f', next_tat), 'PX', ttl_ms)
end
local function wait_ms(start)
  return math.max(1, math.ceil((start - now) / 1000))
end
if #KEYS > 1 and allowed[1] > now then
  record(1, allowed[1])
  return {wait_ms(allowed[1]), 1}
end
local start = now
for i = 1, #KEYS do start = math.max(start, allowed[i]) end
for i = 1, #KEYS do record(i, start) end
if now < start then return {wait_ms(start), #KEYS} end
return {0, #KEYS}
