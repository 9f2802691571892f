-- extend_sorted.lua: heartbeat; push back the lease deadline of jobs a worker still runs.
-- KEYS: inflight, owners
-- ARGV: lease in ms, then job id / owner token pairs
-- Touches: ZADD XX on inflight, only for a job whose owner token is still this take's (a
--          job whose lease lapsed and that another worker took is not extended for it).
-- Returns: how many leases were extended.
--#include _clock
local deadline = string.format('%.0f', now_ms() + tonumber(ARGV[1]))
local extended = 0
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    extended = extended + redis.call('ZADD', KEYS[1], 'XX', 'CH', deadline, ARGV[i])
  end
end
return extended
