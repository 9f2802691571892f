-- extend_sorted.lua: heartbeat; push back the lease deadline of jobs a worker still runs.
-- KEYS: inflight
-- ARGV: lease in ms, then job ids
-- Touches: ZADD XX on inflight (a job no longer in flight is not re-added).
-- Returns: how many leases were extended.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = string.format('%.0f', now + tonumber(ARGV[1]))
local extended = 0
for i = 2, #ARGV do
  extended = extended + redis.call('ZADD', KEYS[1], 'XX', 'CH', deadline, ARGV[i])
end
return extended
