-- flow_release.lua: queue more of a committed flow's first jobs (see flow_commit.lua).
-- KEYS: [1] the flow's record (Keys.flow), [2] the releasing set (Keys.flows_releasing)
-- ARGV: [1] the flow's id, [2] jobs to queue at most in this call
-- Touches: the flow's roots list (LPOP: the jobs queued, see _flow.lua); the
--          releasing set (ZREM once none is left).
-- Returns: how many are left to queue.
--#include _flow
local base = KEYS[1]
local flow = flow_lib()
for _, record in ipairs(redis.call('LPOP', base .. ':roots', ARGV[2]) or {}) do
  flow.queue(record)
end
local left = redis.call('LLEN', base .. ':roots')
if left == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) end
return left
